#include "symtune/ui/rule_highlighter.h"

#include <QGuiApplication>
#include <QSet>

#include "symtune/core/features.h"

namespace symtune::ui {

namespace {

const QSet<QString>& keywords() {
  static const QSet<QString> words{"rule",  "select", "when",    "let",    "set",
                                   "skip",  "step",   "rewrite", "params", "modules",
                                   "nodes", "grad",   "lr",      "true",   "false"};
  return words;
}

// The rule language's functions (docs/rules.md, "Functions").
const QSet<QString>& functions() {
  static const QSet<QString> words{"mean", "sum", "norm",  "std",   "numel",
                                   "max",  "min", "abs",   "sqrt",  "sign",
                                   "exp",  "log", "clamp", "where", "unit_norm"};
  return words;
}

bool isWordStart(QChar c) {
  return c.isLetter() || c == u'_';
}
bool isWordChar(QChar c) {
  return c.isLetterOrNumber() || c == u'_';
}

// A NUMBER from `i`: digits, an optional fraction and an optional exponent. Returns its end.
int numberEnd(const QString& text, int i) {
  const int n = static_cast<int>(text.size());
  while (i < n && text[i].isDigit())
    ++i;
  if (i < n && text[i] == u'.') {
    ++i;
    while (i < n && text[i].isDigit())
      ++i;
  }
  if (i < n && (text[i] == u'e' || text[i] == u'E')) {
    int j = i + 1;
    if (j < n && (text[j] == u'+' || text[j] == u'-'))
      ++j;
    if (j < n && text[j].isDigit()) {
      while (j < n && text[j].isDigit())
        ++j;
      i = j;
    }
  }
  return i;
}

}  // namespace

RuleHighlighter::RuleHighlighter(QTextDocument* document) : QSyntaxHighlighter(document) {
  setPalette(QGuiApplication::palette());
}

void RuleHighlighter::setPalette(const QPalette& palette) {
  // Colours a theme does not provide are picked by the base's lightness: dark text on a light
  // base, light text on a dark one.
  const bool dark = palette.color(QPalette::Base).lightness() < 128;
  auto pick = [dark](const char* onLight, const char* onDark) {
    return QColor(dark ? onDark : onLight);
  };

  QTextCharFormat keyword;
  keyword.setForeground(palette.color(QPalette::Link));
  keyword.setFontWeight(QFont::Bold);
  formats_[static_cast<int>(Kind::Keyword)] = keyword;

  QTextCharFormat number;
  number.setForeground(pick("#a35200", "#f0a860"));
  formats_[static_cast<int>(Kind::Number)] = number;

  QTextCharFormat string;
  string.setForeground(pick("#1a7f37", "#8fd18f"));
  formats_[static_cast<int>(Kind::String)] = string;

  QTextCharFormat comment;
  comment.setForeground(palette.color(QPalette::PlaceholderText));
  comment.setFontItalic(true);
  formats_[static_cast<int>(Kind::Comment)] = comment;

  QTextCharFormat function;
  function.setForeground(pick("#6f42c1", "#c8a2ff"));
  formats_[static_cast<int>(Kind::Function)] = function;

  QTextCharFormat feature;
  feature.setForeground(pick("#0b6f7d", "#7fd4e0"));
  formats_[static_cast<int>(Kind::Feature)] = feature;

  rehighlight();
}

QTextCharFormat RuleHighlighter::format(Kind kind) const {
  return formats_[static_cast<int>(kind)];
}

bool RuleHighlighter::isKeyword(const QString& word) {
  return keywords().contains(word);
}

bool RuleHighlighter::isFunction(const QString& word) {
  return functions().contains(word);
}

int RuleHighlighter::stringEnd(const QString& text, int from, bool isLong) {
  const int n = static_cast<int>(text.size());
  for (int i = from; i < n; ++i) {
    if (text[i] == u'\\') {
      ++i;  // an escape: \" does not close
      continue;
    }
    if (text[i] != u'"')
      continue;
    if (!isLong)
      return i + 1;
    if (i + 2 < n && text[i + 1] == u'"' && text[i + 2] == u'"')
      return i + 3;
  }
  return -1;
}

void RuleHighlighter::highlightBlock(const QString& text) {
  const QTextCharFormat& stringFormat = formats_[static_cast<int>(Kind::String)];
  const int n = static_cast<int>(text.size());
  setCurrentBlockState(Normal);
  int i = 0;
  if (previousBlockState() == InLongString) {
    const int end = stringEnd(text, 0, true);
    if (end < 0) {
      setFormat(0, n, stringFormat);
      setCurrentBlockState(InLongString);
      return;
    }
    setFormat(0, end, stringFormat);
    i = end;
  }

  while (i < n) {
    const QChar c = text[i];
    if (c == u'#') {
      setFormat(i, n - i, format(Kind::Comment));
      return;
    }
    if (c == u'"') {
      const bool isLong = i + 2 < n && text[i + 1] == u'"' && text[i + 2] == u'"';
      const int end = stringEnd(text, i + (isLong ? 3 : 1), isLong);
      if (end < 0) {
        // An unterminated `"…"` ends with the line (the checker reports it); a `"""` goes on.
        setFormat(i, n - i, stringFormat);
        if (isLong)
          setCurrentBlockState(InLongString);
        return;
      }
      setFormat(i, end - i, stringFormat);
      i = end;
      continue;
    }
    if (c.isDigit() || (c == u'.' && i + 1 < n && text[i + 1].isDigit())) {
      const int end = numberEnd(text, i);
      setFormat(i, end - i, format(Kind::Number));
      i = end;
      continue;
    }
    if (isWordStart(c)) {
      int end = i + 1;
      while (end < n && isWordChar(text[end]))
        ++end;
      const QString word = text.mid(i, end - i);
      int next = end;
      while (next < n && text[next].isSpace())
        ++next;
      const bool isCall = next < n && text[next] == u'(';
      if (isKeyword(word))
        setFormat(i, end - i, format(Kind::Keyword));
      else if (isCall && isFunction(word))
        setFormat(i, end - i, format(Kind::Function));
      else if (featureNamed(word.toStdString()))
        setFormat(i, end - i, format(Kind::Feature));
      i = end;
      continue;
    }
    ++i;
  }
}

}  // namespace symtune::ui
