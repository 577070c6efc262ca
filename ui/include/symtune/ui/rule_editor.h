#pragma once
// The Rules dock's editor: rule-language text, highlighted, checked by the rule checker
// (symtune::rules::parseRules) 300 ms after the last edit and on checkNow(). The first error is
// underlined in place, from its line and column to the end of the word there, and said as
// "LINE:COLUMN: message".
//
//   RuleEditor editor;
//   editor.setPlainText("rule a { when los > 1 skip step }");
//   editor.checkNow();      // false; errorMessage() == "1:15: unknown name `los` (did you ...)"

#include <QPlainTextEdit>
#include <QString>

class QTimer;

namespace symtune::ui {

class RuleHighlighter;

class RuleEditor : public QPlainTextEdit {
  Q_OBJECT

 public:
  static constexpr int kCheckDelayMs = 300;

  explicit RuleEditor(QWidget* parent = nullptr);

  // Checks the text now (a check waiting for the edit delay is dropped). Empty text is OK, with
  // no rules.
  bool checkNow();

  // Shows an error found elsewhere (e.g. the run's answer to this text) like the checker's own.
  // 1-based line and column; the column counts UTF-8 bytes, as the checker's do.
  void showError(int line, int column, const QString& message);

  bool isOk() const { return errorLine_ == 0; }
  QString errorMessage() const { return errorMessage_; }  // "LINE:COLUMN: message", or ""
  int errorLine() const { return errorLine_; }            // 1-based; 0 when none
  int errorColumn() const { return errorColumn_; }        // 1-based; 0 when none
  int ruleCount() const { return ruleCount_; }            // after a good check; else 0
  QTextCursor errorRange() const;                         // the underlined text; null when none

  RuleHighlighter* highlighter() const { return highlighter_; }

 Q_SIGNALS:
  // After each check: whether the text is good, and "N rules" or the error message.
  void checked(bool ok, const QString& message);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void clearError();

  RuleHighlighter* highlighter_;
  QTimer* checkTimer_;
  int errorLine_ = 0, errorColumn_ = 0, ruleCount_ = 0;
  QString errorMessage_;
};

}  // namespace symtune::ui
