#pragma once
// The Rules dock's contents: the attached run's rules (RuleListModel: toggles, Remove), an editor
// for new rules checked as they are typed (RuleEditor) with the checker's or the run's message
// under it, "Apply to run" (Ctrl+Return) and "Export pack…". The dock talks to no connection: it
// asks through signals, and the owner reports the run's answers (setRules on model(),
// commandFinished).
//
//   auto* rules = new RulesDock;
//   connect(rules, &RulesDock::applyRequested, connection, ...);  // add_rule {source}
//   rules->setRunAttached(true);

#include <QString>
#include <QStringList>
#include <QWidget>

class QLabel;
class QPushButton;
class QTreeView;

namespace symtune::ui {

class RuleEditor;
class RuleListModel;

class RulesDock : public QWidget {
  Q_OBJECT

 public:
  explicit RulesDock(QWidget* parent = nullptr);

  RuleListModel* model() const { return model_; }
  RuleEditor* editor() const { return editor_; }
  QTreeView* view() const { return view_; }
  QPushButton* applyButton() const { return applyButton_; }
  QPushButton* removeButton() const { return removeButton_; }
  QPushButton* exportButton() const { return exportButton_; }
  QString statusText() const;  // the line under the editor

  // Whether a run is attached: Apply, Remove and the toggles need one.
  void setRunAttached(bool attached);
  bool isRunAttached() const { return runAttached_; }

  // Writes the editor's rules to `path` as a rule pack (the comment lines above a rule describe
  // it). Returns "" on success, otherwise what went wrong ("2:5: …" for a rule that does not
  // check, or the file's error).
  QString exportPack(const QString& path, const QString& name, const QString& version);

 public Q_SLOTS:
  // The run's answer to a command (toggle_rule, add_rule, remove_rule) about `rule` (toggle_rule,
  // remove_rule): shown under the editor. An add_rule error with a position, for the text still in
  // the editor, is underlined there; a refused toggle puts back its row (every row when `rule` is
  // empty), the other toggles still waiting for their answers. The ack's `warnings` (a rule added
  // whose selector selects nothing) follow the message, shown as an error is.
  void commandFinished(const QString& command, bool ok, const QString& message,
                       const QString& rule = {}, const QStringList& warnings = {});
  // Checks the editor's text and, when it holds rules and a run is attached, asks to apply it.
  void apply();
  // Asks to remove the selected rule from the run.
  void removeSelected();

 Q_SIGNALS:
  void applyRequested(const QString& source);
  void toggleRequested(const QString& name, bool enabled);
  void removeRequested(const QString& name);

 private:
  void showStatus(const QString& text, bool error);
  void updateButtons();
  void exportWithDialog();

  RuleListModel* model_;
  QTreeView* view_;
  QPushButton* removeButton_;
  RuleEditor* editor_;
  QLabel* status_;
  QPushButton* applyButton_;
  QPushButton* exportButton_;
  bool runAttached_ = false;
  QString appliedSource_;  // the text of the last applyRequested
};

}  // namespace symtune::ui
