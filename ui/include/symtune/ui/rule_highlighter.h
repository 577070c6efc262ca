#pragma once
// Syntax highlighting for the rule language (docs/rules.md): keywords, numbers, strings (`"…"` and
// `"""…"""` over several lines), comments, the language's functions and the step features. The
// colours come from a palette, so they read on light and dark themes.
//
//   auto* highlighter = new RuleHighlighter(editor->document());
//   highlighter->setPalette(editor->palette());  // again when the palette changes

#include <QPalette>
#include <QSyntaxHighlighter>
#include <QTextCharFormat>

#include <array>

namespace symtune::ui {

class RuleHighlighter : public QSyntaxHighlighter {
  Q_OBJECT

 public:
  enum class Kind { Keyword, Number, String, Comment, Function, Feature };
  static constexpr int kKindCount = 6;

  // Colours from the application's palette until setPalette.
  explicit RuleHighlighter(QTextDocument* document);

  void setPalette(const QPalette& palette);  // re-highlights
  QTextCharFormat format(Kind kind) const;

  static bool isKeyword(const QString& word);
  static bool isFunction(const QString& word);

 protected:
  void highlightBlock(const QString& text) override;

 private:
  // Block states: a block that ends inside a `"""` string hands it on to the next one.
  enum BlockState { Normal = -1, InLongString = 1 };

  // From `from` (just after an opening quote) to just after the closing one, or -1 when the
  // string runs past the block's end.
  static int stringEnd(const QString& text, int from, bool isLong);

  std::array<QTextCharFormat, kKindCount> formats_;
};

}  // namespace symtune::ui
