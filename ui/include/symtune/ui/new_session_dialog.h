#pragma once
// File ▸ New Session: a zoo model and preset, or a TorchScript file with its input shape; the
// steps and optimizer; the rules to enable (every rule the runner's registry holds, read with
// `symtune-runner rules list`). The dialog builds the session JSON (docs/session-format.md) and
// checks it with the session parser before it closes; the studio then starts it.

#include <QDialog>
#include <QJsonObject>
#include <QString>
#include <QStringList>

class QButtonGroup;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QSpinBox;

namespace symtune::ui {

class NewSessionDialog : public QDialog {
  Q_OBJECT

 public:
  explicit NewSessionDialog(QWidget* parent = nullptr);

  // The session as chosen (no check).
  QJsonObject session() const;
  // Checks session() with the session parser: "" or the problem ("model.inputs: …").
  QString check() const;

  // The rules offered, from `symtune-runner rules list` (loadRules runs it) or given directly.
  void setAvailableRules(const QJsonArray& rules);
  void loadRules();
  // Per-node statistics every N steps once attached (0: off).
  int samplingEvery() const;

  // For tests and scripts: choose without clicking.
  void chooseZoo(const QString& model, const QString& preset);
  void chooseFile(const QString& path, const QString& inputShape, int classes);
  void setSteps(int steps);
  void setName(const QString& name);
  void enableRules(const QStringList& names);

  void accept() override;  // only when check() passes; the problem is shown otherwise

 private:
  QLineEdit* name_;
  QButtonGroup* source_;
  QComboBox *zoo_, *preset_, *optimizer_;
  QLineEdit *file_, *inputShape_;
  QSpinBox *classes_, *steps_, *batch_, *sampling_;
  QDoubleSpinBox* lr_;
  QListWidget* rules_;
  QLabel* problem_;
};

}  // namespace symtune::ui
