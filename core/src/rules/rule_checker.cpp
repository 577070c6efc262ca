// The rule language's type checker (docs/rules.md, "Types"): every expression gets one of four
// types, and a rule's clauses are checked against what they need.

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "symtune/core/features.h"
#include "symtune/core/rules.h"

namespace symtune::rules {

const char* toString(Type type) {
  switch (type) {
    case Type::Scalar:
      return "scalar";
    case Type::Bool:
      return "bool";
    case Type::Tensor:
      return "tensor";
    case Type::Mask:
      return "mask";
  }
  return "?";
}

namespace {

bool numeric(Type t) {
  return t == Type::Scalar || t == Type::Tensor;
}
bool logical(Type t) {
  return t == Type::Bool || t == Type::Mask;
}

// Scalar with Scalar stays Scalar; a Tensor anywhere makes a Tensor (broadcast).
Type join(std::initializer_list<Type> types) {
  for (Type t : types) {
    if (t == Type::Tensor)
      return Type::Tensor;
  }
  return Type::Scalar;
}

// Where an expression starts in the text: its leftmost token (a binary operator's position is the
// operator's own).
SourcePos startOf(const Expr& e) {
  return e.kind == Expr::Kind::Binary ? startOf(*e.args[0]) : e.pos;
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string didYouMean(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  size_t bestDistance = 3;  // at most two edits
  for (const auto& k : known) {
    const size_t d = editDistance(name, k);
    if (d < bestDistance) {
      bestDistance = d;
      best = k;
    }
  }
  return best.empty() ? "" : " (did you mean `" + best + "`?)";
}

namespace {

const std::vector<std::string>& functionNames() {
  static const std::vector<std::string> names = {"mean", "sum",   "norm",  "std",   "max",
                                                 "min",  "abs",   "sqrt",  "sign",  "exp",
                                                 "log",  "clamp", "where", "numel", "unit_norm"};
  return names;
}

class Checker {
 public:
  explicit Checker(Rule& rule) : rule_(rule) {
    for (const auto& s : rule.selectors)
      hasParams_ = hasParams_ || s.kind == SelectorKind::Params;
  }

  void check() {
    const bool acts = std::any_of(rule_.actions.begin(), rule_.actions.end(),
                                  [](auto& a) { return a.kind != Action::Kind::Let; });
    if (!acts)
      throw RuleError(rule_.pos, "rule `" + rule_.name +
                                     "` does nothing: add an action (`set`, `skip step` or "
                                     "`rewrite`)");
    const bool rewrites = std::any_of(rule_.actions.begin(), rule_.actions.end(),
                                      [](auto& a) { return a.kind == Action::Kind::Rewrite; });
    if (rewrites)
      checkRewriteRule();
    if (rule_.trigger) {
      const Type t = type(*rule_.trigger);
      if (t != Type::Bool) {
        throw RuleError(startOf(*rule_.trigger),
                        std::string("`when` needs a bool, found a ") + toString(t) +
                            (t == Type::Mask ? " (reduce it, e.g. `max(abs(grad)) > 1`)" : ""));
      }
    }
    for (auto& a : rule_.actions)
      action(a);
    rule_.perParameter = perParameter_;
    if (!rewrites)
      checkSelectorsUsed();
    for (const auto& a : rule_.actions) {
      if (a.kind == Action::Kind::SetLr && perParameter_)
        throw RuleError(a.pos,
                        "`set lr` runs once per step: put it in a rule that does not read "
                        "`grad` or `param` or set `grad`");
    }
  }

 private:
  // A selector that picks nothing a rule uses would look like a limit and be none.
  void checkSelectorsUsed() const {
    for (const auto& s : rule_.selectors) {
      if (s.kind != SelectorKind::Params)
        throw RuleError(s.pos, std::string("`select ") +
                                   (s.kind == SelectorKind::Modules ? "modules" : "nodes") +
                                   "` picks what a `rewrite` changes, and this rule rewrites "
                                   "nothing: pick gradients with `select params \"...\"`");
      if (!perParameter_)
        throw RuleError(s.pos,
                        "`select params` picks the gradients a rule reads or sets, and this rule "
                        "uses none: it runs once per step, whatever the selector says");
    }
  }

  void checkRewriteRule() {
    for (const auto& a : rule_.actions) {
      if (a.kind != Action::Kind::Rewrite)
        throw RuleError(a.pos,
                        "a rule with `rewrite` only rewrites: put other actions in a rule "
                        "of their own");
      if (a.pattern.find_first_not_of(" \n\t") == std::string::npos)
        throw RuleError(a.pos, "empty IR pattern");
      if (a.replacement.find_first_not_of(" \n\t") == std::string::npos)
        throw RuleError(a.pos, "empty replacement IR");
    }
    if (rule_.trigger)
      throw RuleError(startOf(*rule_.trigger),
                      "a rewrite has no `when`: it changes the model's code "
                      "once, when the rule is enabled");
    for (const auto& s : rule_.selectors) {
      if (s.kind == SelectorKind::Params)
        throw RuleError(s.pos, "a rewrite selects `modules` or `nodes`, not `params`");
    }
  }

  void action(Action& a) {
    switch (a.kind) {
      case Action::Kind::Let: {
        if (isBuiltinName(a.name) || lets_.count(a.name))
          throw RuleError(a.pos, "`" + a.name + "` is already defined; pick another name");
        usesParameter_ = false;
        const Type t = type(*a.value);
        lets_[a.name] = {t, usesParameter_};
        break;
      }
      case Action::Kind::SetGrad: {
        if (!hasParams_)
          throw RuleError(a.pos, "`set grad` needs a `select params \"...\"` selector");
        const Type t = type(*a.value);
        if (!numeric(t))
          throw RuleError(startOf(*a.value),
                          std::string("`set grad` needs a tensor or scalar, found a ") +
                              toString(t) + " (use where(...) to pick values)");
        perParameter_ = true;
        break;
      }
      case Action::Kind::SetLr: {
        usesParameter_ = false;
        const Type t = type(*a.value);
        if (t != Type::Scalar)
          throw RuleError(startOf(*a.value),
                          std::string("`set lr` needs a scalar, found a ") + toString(t) +
                              (t == Type::Tensor ? " (reduce it, e.g. mean(...))" : ""));
        if (usesParameter_)
          throw RuleError(startOf(*a.value),
                          "`set lr` sets one learning rate: it cannot depend on "
                          "`grad` or `param`");
        break;
      }
      case Action::Kind::SkipStep:
      case Action::Kind::Rewrite:
        break;
    }
  }

  bool isBuiltinName(const std::string& name) const {
    return featureNamed(name).has_value() || name == "grad" || name == "param" || name == "lr" ||
           name == "true" || name == "false" ||
           std::find(functionNames().begin(), functionNames().end(), name) != functionNames().end();
  }

  std::vector<std::string> knownNames() const {
    std::vector<std::string> names{"grad", "param", "lr"};
    for (int f = 0; f < kFeatureCount; ++f)
      names.emplace_back(featureName(static_cast<Feature>(f)));
    for (const auto& [n, t] : lets_)
      names.push_back(n);
    return names;
  }

  Type type(Expr& e) {
    e.type = infer(e);
    return e.type;
  }

  Type infer(Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Number:
        return Type::Scalar;
      case Expr::Kind::Boolean:
        return Type::Bool;
      case Expr::Kind::Name:
        return name(e);
      case Expr::Kind::Unary:
        return unaryOp(e);
      case Expr::Kind::Binary:
        return binaryOp(e);
      case Expr::Kind::Call:
        return call(e);
    }
    return Type::Scalar;
  }

  Type name(const Expr& e) {
    if (e.name == "grad" || e.name == "param") {
      if (!hasParams_)
        throw RuleError(e.pos, "`" + e.name + "` needs a `select params \"...\"` selector");
      perParameter_ = true;
      usesParameter_ = true;
      return Type::Tensor;
    }
    if (e.name == "lr" || featureNamed(e.name))
      return Type::Scalar;
    auto let = lets_.find(e.name);
    if (let != lets_.end()) {
      usesParameter_ = usesParameter_ || let->second.perParameter;
      return let->second.type;
    }
    if (std::find(functionNames().begin(), functionNames().end(), e.name) != functionNames().end())
      throw RuleError(e.pos,
                      "`" + e.name + "` is a function: call it, e.g. `" + e.name + "(grad)`");
    const bool letLater = std::any_of(rule_.actions.begin(), rule_.actions.end(), [&](auto& a) {
      return a.kind == Action::Kind::Let && a.name == e.name;
    });
    if (letLater)
      throw RuleError(e.pos,
                      "`" + e.name +
                          "` is read before its `let` (the lets are made in order, and a `when` is "
                          "checked before any of them)");
    throw RuleError(e.pos, "unknown name `" + e.name + "`" + didYouMean(e.name, knownNames()));
  }

  Type unaryOp(Expr& e) {
    const Type a = type(*e.args[0]);
    if (e.name == "!") {
      if (!logical(a))
        throw RuleError(e.pos, std::string("`!` needs a bool or mask, found a ") + toString(a));
      return a;
    }
    if (!numeric(a))
      throw RuleError(e.pos, std::string("`-` needs a number, found a ") + toString(a));
    return a;
  }

  Type binaryOp(Expr& e) {
    const Type a = type(*e.args[0]);
    const Type b = type(*e.args[1]);
    const std::string& op = e.name;
    auto mismatch = [&](const char* needs) {
      throw RuleError(e.pos, "`" + op + "` needs " + needs + ", found a " + toString(a) +
                                 " and a " + toString(b));
    };
    if (op == "&&" || op == "||") {
      if (!logical(a) || !logical(b))
        mismatch("bools or masks");
      return a == Type::Mask || b == Type::Mask ? Type::Mask : Type::Bool;
    }
    if (!numeric(a) || !numeric(b))
      mismatch("numbers");
    if (op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" || op == "!=")
      return join({a, b}) == Type::Tensor ? Type::Mask : Type::Bool;
    return join({a, b});
  }

  Type call(Expr& e) {
    const std::string& f = e.name;
    std::vector<Type> args;
    for (auto& arg : e.args)
      args.push_back(type(*arg));
    auto arity = [&](size_t n) {
      if (args.size() != n)
        throw RuleError(e.pos, "`" + f + "` takes " + std::to_string(n) + " argument" +
                                   (n == 1 ? "" : "s") + ", found " + std::to_string(args.size()));
    };
    auto need = [&](size_t i, bool ok, const char* what) {
      if (!ok)
        throw RuleError(startOf(*e.args[i]), "argument " + std::to_string(i + 1) + " of `" + f +
                                                 "` must be " + what + ", found a " +
                                                 toString(args[i]));
    };
    if (f == "mean" || f == "sum" || f == "norm" || f == "std" || f == "numel" ||
        ((f == "max" || f == "min") && args.size() == 1)) {
      arity(1);
      need(0, args[0] == Type::Tensor, "a tensor");
      return Type::Scalar;
    }
    if (f == "max" || f == "min") {
      arity(2);
      need(0, numeric(args[0]), "a number");
      need(1, numeric(args[1]), "a number");
      return join({args[0], args[1]});
    }
    if (f == "abs" || f == "sqrt" || f == "sign" || f == "exp" || f == "log") {
      arity(1);
      need(0, numeric(args[0]), "a number");
      return args[0];
    }
    if (f == "unit_norm") {
      arity(1);
      need(0, args[0] == Type::Tensor, "a tensor");
      return Type::Tensor;
    }
    if (f == "clamp") {
      arity(3);
      for (size_t i = 0; i < 3; ++i)
        need(i, numeric(args[i]), "a number");
      return join({args[0], args[1], args[2]});
    }
    if (f == "where") {
      arity(3);
      need(0, logical(args[0]), "a bool or mask");
      need(1, numeric(args[1]), "a number");
      need(2, numeric(args[2]), "a number");
      return args[0] == Type::Mask ? Type::Tensor : join({args[1], args[2]});
    }
    throw RuleError(e.pos, "unknown function `" + f + "`" + didYouMean(f, functionNames()));
  }

  Rule& rule_;
  bool hasParams_ = false;
  bool perParameter_ = false;
  bool usesParameter_ = false;  // the expression being checked reads grad or param
  struct Let {
    Type type;
    bool perParameter;  // its value reads grad or param
  };
  std::map<std::string, Let> lets_;
};

}  // namespace

void checkRule(Rule& rule) {
  Checker(rule).check();
}

}  // namespace symtune::rules
