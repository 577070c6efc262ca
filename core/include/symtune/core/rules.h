#pragma once
// The symbolic rule language's front end (docs/rules.md): the AST, the parser and the type
// checker. Part of symtune::core — the studio's rule editor checks rules without LibTorch; the
// engine compiles checked rules into tensor operations.
//
//   auto rules = symtune::rules::parseRules(R"(
//     rule gradient_steering {
//       select params "*"
//       let t = sqrt(mean(grad^2))
//       set grad = clamp(grad, -t, t)
//     })");                                  // throws symtune::rules::RuleError
//   rules[0].actions[1].value->type          // Type::Tensor

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace symtune::rules {

struct SourcePos {
  int line = 1, column = 1;  // 1-based
};

// Scalar and Bool are single values; Tensor is a float tensor of the selected parameter's shape;
// Mask is a tensor of booleans (a comparison of tensors).
enum class Type { Scalar, Bool, Tensor, Mask };
const char* toString(Type type);

struct Expr {
  enum class Kind { Number, Boolean, Name, Unary, Binary, Call };
  Kind kind = Kind::Number;
  SourcePos pos;
  double number = 0;     // Number
  bool boolean = false;  // Boolean
  // Name: the variable; Call: the function; Unary and Binary: the operator ("-", "!", "+", "&&",
  // "<=", "^", ...).
  std::string name;
  std::vector<std::shared_ptr<Expr>> args;  // operands or arguments
  Type type = Type::Scalar;                 // set by the checker
  int depth = 1;  // of the expression tree below and including it (bounded by the parser)
};
using ExprPtr = std::shared_ptr<Expr>;

enum class SelectorKind { Params, Modules, Nodes };
const char* toString(SelectorKind kind);

// What a rule applies to: parameters by dotted name, modules by path, or graph nodes by op kind,
// each a glob (`*` any run of characters, `?` one character).
struct Selector {
  SelectorKind kind = SelectorKind::Params;
  std::string glob;
  SourcePos pos;
};

struct Action {
  enum class Kind {
    Let,       // let NAME = EXPR: a named value for the actions after it
    SetGrad,   // set grad = EXPR: replaces each selected parameter's gradient
    SetLr,     // set lr = EXPR: the learning rate from this step on
    SkipStep,  // skip step: no parameter changes this step
    Rewrite,   // rewrite "PATTERN" => "REPLACEMENT": TorchScript IR subgraph rewrite
  };
  Kind kind = Kind::Let;
  SourcePos pos;
  std::string name;                  // Let
  ExprPtr value;                     // Let, SetGrad, SetLr
  std::string pattern, replacement;  // Rewrite
};

struct Rule {
  std::string name;
  SourcePos pos;
  std::vector<Selector> selectors;
  ExprPtr trigger;  // `when`: a Bool; null means every step
  std::vector<Action> actions;
  std::string source;  // the rule's text, `rule` to its closing brace
  // True when a name only defined per parameter (grad, param) is used: the rule is evaluated once
  // per selected parameter rather than once per step.
  bool perParameter = false;
};

// A rule that does not parse or type-check. what() is "LINE:COLUMN: message".
class RuleError : public std::runtime_error {
 public:
  RuleError(SourcePos pos, const std::string& message);
  SourcePos pos() const { return pos_; }
  const std::string& message() const { return message_; }

 private:
  SourcePos pos_;
  std::string message_;
};

// Parses and type-checks every rule of `text`. Throws RuleError for the first problem.
std::vector<Rule> parseRules(const std::string& text);

// The checker alone, on a parsed rule (sets each expression's type). Throws RuleError.
void checkRule(Rule& rule);

// " (did you mean `x`?)" for the name of `known` closest to `name` (at most two edits away), or "".
std::string didYouMean(const std::string& name, const std::vector<std::string>& known);

// Whether `text` matches `glob` (`*` any run, `?` one character).
bool globMatch(const std::string& glob, const std::string& text);

}  // namespace symtune::rules
