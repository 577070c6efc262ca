#include "symtune/ui/rule_editor.h"

#include <QEvent>
#include <QFontDatabase>
#include <QTextBlock>
#include <QTimer>

#include <algorithm>

#include "symtune/core/rules.h"
#include "symtune/ui/rule_highlighter.h"

namespace symtune::ui {

namespace {

// The character offset in `text` of the checker's 1-based column, which counts UTF-8 bytes.
int offsetOfColumn(const QString& text, int column) {
  const QByteArray utf8 = text.toUtf8();
  const int bytes = std::clamp(column - 1, 0, static_cast<int>(utf8.size()));
  return static_cast<int>(QString::fromUtf8(utf8.left(bytes)).size());
}

bool isWordChar(QChar c) {
  return c.isLetterOrNumber() || c == u'_';
}

}  // namespace

RuleEditor::RuleEditor(QWidget* parent)
    : QPlainTextEdit(parent),
      highlighter_(new RuleHighlighter(document())),
      checkTimer_(new QTimer(this)) {
  setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  setLineWrapMode(QPlainTextEdit::NoWrap);
  setTabChangesFocus(false);
  setPlaceholderText(tr("rule name {\n  when loss > 3 * loss_ema\n  skip step\n}"));
  highlighter_->setPalette(palette());
  checkTimer_->setSingleShot(true);
  checkTimer_->setInterval(kCheckDelayMs);
  connect(checkTimer_, &QTimer::timeout, this, &RuleEditor::checkNow);
  connect(this, &QPlainTextEdit::textChanged, checkTimer_, qOverload<>(&QTimer::start));
}

bool RuleEditor::checkNow() {
  checkTimer_->stop();
  try {
    const auto rules = rules::parseRules(toPlainText().toStdString());
    clearError();
    ruleCount_ = static_cast<int>(rules.size());
    Q_EMIT checked(true, ruleCount_ == 0   ? tr("No rules")
                         : ruleCount_ == 1 ? tr("1 rule OK")
                                           : tr("%1 rules OK").arg(ruleCount_));
    return true;
  } catch (const rules::RuleError& e) {
    showError(e.pos().line, e.pos().column, QString::fromStdString(e.message()));
    return false;
  }
}

void RuleEditor::showError(int line, int column, const QString& message) {
  checkTimer_->stop();
  ruleCount_ = 0;
  errorLine_ = std::max(line, 1);
  errorColumn_ = std::max(column, 1);
  errorMessage_ = QString("%1:%2: %3").arg(errorLine_).arg(errorColumn_).arg(message);

  QTextEdit::ExtraSelection underline;
  underline.cursor = errorRange();
  underline.format.setUnderlineStyle(QTextCharFormat::WaveUnderline);
  underline.format.setUnderlineColor(Qt::red);
  underline.format.setToolTip(errorMessage_);
  setExtraSelections({underline});
  Q_EMIT checked(false, errorMessage_);
}

// Note [Error underline]: the checker points at a token's first character. The underline runs
// to the end of the word there (a name, a keyword, a number), or covers the one character there
// (a brace, an operator, a quote); an error past the end of the text ("found the end of the
// text") underlines the text's last visible character, so there is always something to see.
QTextCursor RuleEditor::errorRange() const {
  if (errorLine_ == 0)
    return {};
  QTextDocument* doc = document();
  QTextBlock block = doc->findBlockByNumber(errorLine_ - 1);
  if (!block.isValid())
    block = doc->lastBlock();
  const QString text = block.text();
  int start = block.position() + offsetOfColumn(text, errorColumn_);
  int end = start;
  const int blockEnd = block.position() + static_cast<int>(text.size());
  while (end < blockEnd && isWordChar(doc->characterAt(end)))
    ++end;
  if (end == start)
    end = start + 1;
  const int last = doc->characterCount() - 1;  // the final paragraph separator is not text
  if (end > last) {
    start = last;
    while (start > 0 && doc->characterAt(start - 1).isSpace())
      --start;
    start = std::max(0, start - 1);
    end = std::min(start + 1, last);
  }
  QTextCursor cursor(doc);
  cursor.setPosition(start);
  cursor.setPosition(end, QTextCursor::KeepAnchor);
  return cursor;
}

void RuleEditor::clearError() {
  errorLine_ = errorColumn_ = 0;
  errorMessage_.clear();
  setExtraSelections({});
}

void RuleEditor::changeEvent(QEvent* event) {
  QPlainTextEdit::changeEvent(event);
  if (event->type() == QEvent::PaletteChange)
    highlighter_->setPalette(palette());
}

}  // namespace symtune::ui
