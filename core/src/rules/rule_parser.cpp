// The rule language's lexer and recursive-descent parser (docs/rules.md has the grammar).

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "symtune/core/rules.h"

namespace symtune::rules {

RuleError::RuleError(SourcePos pos, const std::string& message)
    : std::runtime_error(std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " +
                         message),
      pos_(pos),
      message_(message) {
}

const char* toString(SelectorKind kind) {
  switch (kind) {
    case SelectorKind::Params:
      return "params";
    case SelectorKind::Modules:
      return "modules";
    case SelectorKind::Nodes:
      return "nodes";
  }
  return "?";
}

bool globMatch(const std::string& glob, const std::string& text) {
  // Iterative wildcard matching with backtracking to the last `*`.
  size_t g = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (g < glob.size() && (glob[g] == '?' || glob[g] == text[t])) {
      ++g;
      ++t;
    } else if (g < glob.size() && glob[g] == '*') {
      star = g++;
      mark = t;
    } else if (star != std::string::npos) {
      g = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*')
    ++g;
  return g == glob.size();
}

namespace {

enum class Tok { Ident, Number, String, Op, End };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // identifier, operator, or the string's contents
  double number = 0;
  SourcePos pos;
  size_t offset = 0;  // in the source text
};

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::Ident:
      return "`" + t.text + "`";
    case Tok::Number:
      return "the number " + t.text;
    case Tok::String:
      return "a string";
    case Tok::Op:
      return "`" + t.text + "`";
    case Tok::End:
      return "the end of the text";
  }
  return "?";
}

class Lexer {
 public:
  explicit Lexer(const std::string& text) : s_(text) {}

  std::vector<Token> tokens() {
    std::vector<Token> out;
    for (;;) {
      skipSpaceAndComments();
      Token t;
      t.pos = pos_;
      t.offset = i_;
      if (i_ >= s_.size()) {
        out.push_back(t);
        return out;
      }
      const char c = s_[i_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        t.kind = Tok::Ident;
        while (i_ < s_.size() &&
               (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_'))
          t.text += advance();
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '.' && i_ + 1 < s_.size() &&
                  std::isdigit(static_cast<unsigned char>(s_[i_ + 1])))) {
        number(t);
      } else if (c == '"') {
        string(t);
      } else {
        op(t);
      }
      out.push_back(std::move(t));
    }
  }

 private:
  char advance() {
    const char c = s_[i_++];
    if (c == '\n') {
      ++pos_.line;
      pos_.column = 1;
    } else {
      ++pos_.column;
    }
    return c;
  }

  void skipSpaceAndComments() {
    while (i_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[i_]))) {
        advance();
      } else if (s_[i_] == '#') {
        while (i_ < s_.size() && s_[i_] != '\n')
          advance();
      } else {
        return;
      }
    }
  }

  // DIGITS [. DIGITS] [(e|E) [+|-] DIGITS], or . DIGITS ...: parsed with std::from_chars, which
  // ignores the locale (a comma decimal point must not change what a rule means).
  void number(Token& t) {
    t.kind = Tok::Number;
    auto digits = [&] {
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
        t.text += advance();
    };
    digits();
    if (i_ < s_.size() && s_[i_] == '.') {
      t.text += advance();
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      size_t k = i_ + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-'))
        ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        while (i_ < k)
          t.text += advance();
        digits();
      }  // else not an exponent: reported below as a number running into a name
    }
    const auto [end, error] =
        std::from_chars(t.text.data(), t.text.data() + t.text.size(), t.number);
    // Echoed up to 40 characters: the text may be a line long.
    const std::string shown = t.text.size() <= 40 ? t.text : t.text.substr(0, 37) + "...";
    if (error == std::errc::result_out_of_range)
      throw RuleError(t.pos, "`" + shown + "` is out of a double's range (about 1e-308 to 1e308)");
    if (error != std::errc() || end != t.text.data() + t.text.size() || !std::isfinite(t.number))
      throw RuleError(t.pos, "`" + shown + "` is not a finite number");
    if (i_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_'))
      throw RuleError(pos_, "a number must not run into a name (found `" + t.text + s_[i_] + "`)");
  }

  // The character at byte `at`, for an error: `c` when printable ASCII, else its code point
  // (U+00E9, decoded from UTF-8) or its byte (0xE9) where it is not UTF-8.
  std::string described(size_t at) const {
    const auto c = static_cast<unsigned char>(s_[at]);
    char text[16];
    if (c >= 0x20 && c < 0x7F)
      return std::string("`") + static_cast<char>(c) + "`";
    const size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    uint32_t code = n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    bool ok = n > 0 && at + n <= s_.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const auto d = static_cast<unsigned char>(s_[at + k]);
      ok = (d & 0xC0) == 0x80;
      code = (code << 6) | (d & 0x3F);
    }
    if (ok)
      std::snprintf(text, sizeof text, "U+%04X", static_cast<unsigned>(code));
    else
      std::snprintf(text, sizeof text, "byte 0x%02X", static_cast<unsigned>(c));
    return text;
  }

  // "text" on one line, or """text""" over several (IR patterns). Escapes: \" \\ \n.
  void string(Token& t) {
    t.kind = Tok::String;
    const bool triple = s_.compare(i_, 3, "\"\"\"") == 0;
    for (int k = 0; k < (triple ? 3 : 1); ++k)
      advance();
    for (;;) {
      if (i_ >= s_.size())
        throw RuleError(t.pos, "unterminated string");
      if (triple ? s_.compare(i_, 3, "\"\"\"") == 0 : s_[i_] == '"') {
        for (int k = 0; k < (triple ? 3 : 1); ++k)
          advance();
        return;
      }
      if (!triple && s_[i_] == '\n')
        throw RuleError(t.pos, "unterminated string (use \"\"\" for text over several lines)");
      char c = advance();
      if (c == '\\' && i_ < s_.size()) {
        const SourcePos at = pos_;
        const char e = advance();
        if (e == 'n')
          c = '\n';
        else if (e == '"' || e == '\\')
          c = e;
        else
          throw RuleError(at, std::string("unknown escape \\") + e + " (known: \\\" \\\\ \\n)");
      }
      t.text += c;
    }
  }

  void op(Token& t) {
    t.kind = Tok::Op;
    static const char* const twoChar[] = {"==", "!=", "<=", ">=", "&&", "||", "=>"};
    for (const char* o : twoChar) {
      if (s_.compare(i_, 2, o) == 0) {
        t.text = o;
        advance();
        advance();
        return;
      }
    }
    const char c = s_[i_];
    if (std::string("+-*/^()<>=!{},").find(c) == std::string::npos)
      throw RuleError(pos_, "unexpected character " + described(i_));
    t.text = std::string(1, advance());
  }

  const std::string& s_;
  size_t i_ = 0;
  SourcePos pos_;
};

// Deeper expressions are refused: the parser, the checker and the compiler all recurse over the
// expression tree, and a rule nested this deep is a mistake, not a rule.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  Parser(const std::string& text, std::vector<Token> tokens) : text_(text), t_(std::move(tokens)) {}

  std::vector<Rule> rules() {
    std::vector<Rule> out;
    while (peek().kind != Tok::End)
      out.push_back(rule());
    return out;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(k_ + ahead, t_.size() - 1)]; }
  Token next() { return t_[k_ < t_.size() - 1 ? k_++ : k_]; }
  bool isOp(const char* op) const { return peek().kind == Tok::Op && peek().text == op; }
  bool isWord(const char* word) const { return peek().kind == Tok::Ident && peek().text == word; }

  [[noreturn]] void expected(const std::string& what) const {
    throw RuleError(peek().pos, "expected " + what + ", found " + describe(peek()));
  }
  void expectOp(const char* op) {
    if (!isOp(op))
      expected(std::string("`") + op + "`");
    next();
  }
  void expectWord(const char* word) {
    if (!isWord(word))
      expected(std::string("`") + word + "`");
    next();
  }
  std::string name(const char* what) {
    if (peek().kind != Tok::Ident)
      expected(what);
    return next().text;
  }
  std::string stringLiteral(const char* what) {
    if (peek().kind != Tok::String)
      expected(what);
    return next().text;
  }

  Rule rule() {
    Rule r;
    r.pos = peek().pos;
    const size_t begin = peek().offset;
    expectWord("rule");
    r.name = name("the rule's name");
    expectOp("{");
    while (!isOp("}")) {
      if (peek().kind == Tok::End)
        expected("`}` closing rule `" + r.name + "`");
      item(r);
    }
    const size_t end = peek().offset + 1;
    next();
    r.source = text_.substr(begin, end - begin);
    return r;
  }

  void item(Rule& r) {
    const Token t = peek();
    if (t.kind != Tok::Ident)
      expected("`select`, `when`, `let`, `set`, `skip` or `rewrite`");
    if (t.text == "select") {
      next();
      do {
        r.selectors.push_back(selector());
      } while (isOp(",") && (next(), true));
    } else if (t.text == "when") {
      if (r.trigger)
        throw RuleError(t.pos,
                        "rule `" + r.name + "` has two `when` clauses (combine them with &&)");
      next();
      r.trigger = expr();
    } else if (t.text == "let") {
      next();
      Action a;
      a.kind = Action::Kind::Let;
      a.pos = t.pos;
      a.name = name("a name after `let`");
      expectOp("=");
      a.value = expr();
      r.actions.push_back(std::move(a));
    } else if (t.text == "set") {
      next();
      Action a;
      a.pos = t.pos;
      const Token target = peek();
      if (target.kind == Tok::Ident && target.text == "grad")
        a.kind = Action::Kind::SetGrad;
      else if (target.kind == Tok::Ident && target.text == "lr")
        a.kind = Action::Kind::SetLr;
      else
        expected("`grad` or `lr` after `set`");
      next();
      expectOp("=");
      a.value = expr();
      r.actions.push_back(std::move(a));
    } else if (t.text == "skip") {
      next();
      expectWord("step");
      Action a;
      a.kind = Action::Kind::SkipStep;
      a.pos = t.pos;
      r.actions.push_back(std::move(a));
    } else if (t.text == "rewrite") {
      next();
      Action a;
      a.kind = Action::Kind::Rewrite;
      a.pos = t.pos;
      a.pattern = stringLiteral("the IR pattern (a string) after `rewrite`");
      expectOp("=>");
      a.replacement = stringLiteral("the replacement IR (a string) after `=>`");
      r.actions.push_back(std::move(a));
    } else {
      expected("`select`, `when`, `let`, `set`, `skip` or `rewrite`");
    }
  }

  Selector selector() {
    Selector s;
    s.pos = peek().pos;
    const std::string kind = peek().kind == Tok::Ident ? peek().text : "";
    if (kind == "params")
      s.kind = SelectorKind::Params;
    else if (kind == "modules")
      s.kind = SelectorKind::Modules;
    else if (kind == "nodes")
      s.kind = SelectorKind::Nodes;
    else
      expected("`params`, `modules` or `nodes`");
    next();
    s.glob = stringLiteral("a quoted name pattern");
    if (s.glob.empty())
      throw RuleError(s.pos, "empty name pattern (use \"*\" for all)");
    return s;
  }

  // Counts the parser's own recursion (parentheses, arguments, prefix operators).
  struct Nesting {
    Nesting(Parser& p, SourcePos pos) : parser(p) {
      if (++parser.nesting_ > kMaxDepth)
        throw RuleError(
            pos, "expression nested more than " + std::to_string(kMaxDepth) + " levels deep");
    }
    ~Nesting() { --parser.nesting_; }
    Parser& parser;
  };

  // An expression tree deeper than kMaxDepth (a long chain of operators) is refused too.
  static ExprPtr limited(ExprPtr e) {
    int depth = 0;
    for (const auto& a : e->args)
      depth = std::max(depth, a->depth);
    e->depth = depth + 1;
    if (e->depth > kMaxDepth)
      throw RuleError(e->pos, "expression nested more than " + std::to_string(kMaxDepth) +
                                  " levels deep (split it with `let`)");
    return e;
  }

  // Precedence, loosest first: || && ! comparisons + - * / unary-minus ^.
  ExprPtr expr() {
    Nesting n(*this, peek().pos);
    return orExpr();
  }

  ExprPtr binary(const Token& op, ExprPtr a, ExprPtr b) {
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::Binary;
    e->pos = op.pos;
    e->name = op.text;
    e->args = {std::move(a), std::move(b)};
    return limited(e);
  }

  ExprPtr unary(const Token& op, ExprPtr a) {
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::Unary;
    e->pos = op.pos;
    e->name = op.text;
    e->args = {std::move(a)};
    return limited(e);
  }

  ExprPtr orExpr() {
    ExprPtr e = andExpr();
    while (isOp("||")) {
      const Token op = next();
      e = binary(op, e, andExpr());
    }
    return e;
  }

  ExprPtr andExpr() {
    ExprPtr e = notExpr();
    while (isOp("&&")) {
      const Token op = next();
      e = binary(op, e, notExpr());
    }
    return e;
  }

  ExprPtr notExpr() {
    if (isOp("!")) {
      Nesting n(*this, peek().pos);
      const Token op = next();
      return unary(op, notExpr());
    }
    return comparison();
  }

  ExprPtr comparison() {
    ExprPtr e = additive();
    for (const char* op : {"<", "<=", ">", ">=", "==", "!="}) {
      if (isOp(op)) {
        const Token t = next();
        e = binary(t, e, additive());
        for (const char* again : {"<", "<=", ">", ">=", "==", "!="}) {
          if (isOp(again))
            throw RuleError(peek().pos, "comparisons do not chain (write `a < b && b < c`)");
        }
        break;
      }
    }
    return e;
  }

  ExprPtr additive() {
    ExprPtr e = multiplicative();
    while (isOp("+") || isOp("-")) {
      const Token op = next();
      e = binary(op, e, multiplicative());
    }
    return e;
  }

  ExprPtr multiplicative() {
    ExprPtr e = negation();
    while (isOp("*") || isOp("/")) {
      const Token op = next();
      e = binary(op, e, negation());
    }
    return e;
  }

  ExprPtr negation() {
    if (isOp("-")) {
      Nesting n(*this, peek().pos);
      const Token op = next();
      return unary(op, negation());
    }
    return power();
  }

  // `^` binds tighter than unary minus and associates to the right: -x^2 is -(x^2).
  ExprPtr power() {
    ExprPtr e = primary();
    if (isOp("^")) {
      Nesting n(*this, peek().pos);
      const Token op = next();
      e = binary(op, e, negation());
    }
    return e;
  }

  ExprPtr primary() {
    const Token t = peek();
    auto e = std::make_shared<Expr>();
    e->pos = t.pos;
    if (t.kind == Tok::Number) {
      next();
      e->kind = Expr::Kind::Number;
      e->number = t.number;
      return e;
    }
    if (t.kind == Tok::Ident) {
      next();
      if (t.text == "true" || t.text == "false") {
        e->kind = Expr::Kind::Boolean;
        e->boolean = t.text == "true";
        return e;
      }
      e->name = t.text;
      if (!isOp("(")) {
        e->kind = Expr::Kind::Name;
        return e;
      }
      next();
      e->kind = Expr::Kind::Call;
      if (!isOp(")")) {
        do {
          e->args.push_back(expr());
        } while (isOp(",") && (next(), true));
      }
      expectOp(")");
      return limited(e);
    }
    if (isOp("(")) {
      next();
      ExprPtr inner = expr();
      expectOp(")");
      return inner;
    }
    expected("an expression");
  }

  const std::string& text_;
  std::vector<Token> t_;
  size_t k_ = 0;
  int nesting_ = 0;
};

}  // namespace

std::vector<Rule> parseRules(const std::string& text) {
  Parser parser(text, Lexer(text).tokens());
  std::vector<Rule> rules = parser.rules();
  std::unordered_map<std::string, size_t> first;  // name → the index of its first rule
  for (size_t i = 0; i < rules.size(); ++i) {
    const auto [at, fresh] = first.emplace(rules[i].name, i);
    if (!fresh) {
      const Rule& earlier = rules[at->second];
      throw RuleError(rules[i].pos, "a second rule named `" + rules[i].name +
                                        "` (the first is at " + std::to_string(earlier.pos.line) +
                                        ":" + std::to_string(earlier.pos.column) + ")");
    }
    checkRule(rules[i]);
  }
  return rules;
}

}  // namespace symtune::rules
