// The rule language's front end: rules that parse and the types the checker gives them, and a
// table of bad rules with the exact message each must give (line:column, what was found, what was
// expected).

#include "doctest_text.h"

#include <string>

#include "symtune/core/rules.h"

using symtune::rules::Action;
using symtune::rules::parseRules;
using symtune::rules::RuleError;
using symtune::rules::SelectorKind;
using symtune::rules::Type;

// Comparisons of a Type or a SelectorKind are parenthesized: doctest would find their
// symtune::rules::toString by ADL and fail on the char* it returns.

namespace {

struct BadRule {
  const char* name;
  const char* text;
  const char* message;
};
const BadRule kBadRules[] = {
    {"no rule keyword", "gradient_steering { }", "1:1: expected `rule`, found `gradient_steering`"},
    {"missing name", "rule { }", "1:6: expected the rule's name, found `{`"},
    {"unclosed rule", "rule a {\n  skip step\n",
     "3:1: expected `}` closing rule `a`, found the end of the text"},
    {"unknown clause", "rule a { clip grad }",
     "1:10: expected `select`, `when`, `let`, `set`, `skip` or `rewrite`, found `clip`"},
    {"no actions", "rule a { select params \"*\" }",
     "1:1: rule `a` does nothing: add an action (`set`, `skip step` or `rewrite`)"},
    {"only a let", "rule a { let x = loss * 2 }",
     "1:1: rule `a` does nothing: add an action (`set`, `skip step` or `rewrite`)"},
    {"missing expression", "rule a { when step > ) skip step }",
     "1:22: expected an expression, found `)`"},
    {"unknown name", "rule a { select params \"*\"\n  set grad = clamp(gard, -1, 1) }",
     "2:20: unknown name `gard` (did you mean `grad`?)"},
    {"unknown feature", "rule a { when los > 1 skip step }",
     "1:15: unknown name `los` (did you mean `loss`?)"},
    {"unknown function", "rule a { select params \"*\" set grad = clip(grad, 1) }",
     "1:39: unknown function `clip` (did you mean `clamp`?)"},
    {"arity", "rule a { select params \"*\" set grad = clamp(grad, 1) }",
     "1:39: `clamp` takes 3 arguments, found 2"},
    {"reduction of a scalar", "rule a { when mean(loss) > 1 skip step }",
     "1:20: argument 1 of `mean` must be a tensor, found a scalar"},
    // At the argument's start, not at its operator (which said 1:25).
    {"reduction of a sum of scalars", "rule a { when mean(step + 1) > 0 skip step }",
     "1:20: argument 1 of `mean` must be a tensor, found a scalar"},
    {"when not bool", "rule a { when loss + 1 skip step }",
     "1:15: `when` needs a bool, found a scalar"},
    {"when over a mask", "rule a { select params \"*\" when grad > 1 skip step }",
     "1:33: `when` needs a bool, found a mask (reduce it, e.g. `max(abs(grad)) > 1`)"},
    {"grad without params", "rule a { set grad = grad * 0 }",
     "1:10: `set grad` needs a `select params \"...\"` selector"},
    {"grad read without params", "rule a { when max(grad) > 1 skip step }",
     "1:19: `grad` needs a `select params \"...\"` selector"},
    {"lr from a tensor", "rule a { select params \"*\" set lr = grad }",
     "1:37: `set lr` needs a scalar, found a tensor (reduce it, e.g. mean(...))"},
    {"lr per parameter", "rule a { select params \"*\" let g = norm(grad) set lr = lr / g }",
     "1:56: `set lr` sets one learning rate: it cannot depend on `grad` or `param`"},
    {"arithmetic on bool", "rule a { when (loss > 1) + 1 > 0 skip step }",
     "1:26: `+` needs numbers, found a bool and a scalar"},
    {"chained comparison", "rule a { when 0 < loss < 1 skip step }",
     "1:24: comparisons do not chain (write `a < b && b < c`)"},
    {"two whens", "rule a { when loss > 1 when step > 2 skip step }",
     "1:24: rule `a` has two `when` clauses (combine them with &&)"},
    {"let shadows a feature", "rule a { let loss = 1 skip step }",
     "1:10: `loss` is already defined; pick another name"},
    {"function used as a name", "rule a { when sqrt > 1 skip step }",
     "1:15: `sqrt` is a function: call it, e.g. `sqrt(grad)`"},
    {"bad selector", "rule a { select weights \"*\" skip step }",
     "1:17: expected `params`, `modules` or `nodes`, found `weights`"},
    {"selector without quotes", "rule a { select params * skip step }",
     "1:24: expected a quoted name pattern, found `*`"},
    {"empty pattern", "rule a { select params \"\" skip step }",
     "1:17: empty name pattern (use \"*\" for all)"},
    {"unterminated string", "rule a { select params \"layer1\n skip step }",
     "1:24: unterminated string (use \"\"\" for text over several lines)"},
    {"bad escape", "rule a { select params \"a\\q\" skip step }",
     "1:27: unknown escape \\q (known: \\\" \\\\ \\n)"},
    {"bad character", "rule a { when loss > 1 ; skip step }", "1:24: unexpected character `;`"},
    {"number into name", "rule a { when 2loss > 1 skip step }",
     "1:16: a number must not run into a name (found `2l`)"},
    {"set what", "rule a { set momentum = 1 }",
     "1:14: expected `grad` or `lr` after `set`, found `momentum`"},
    {"rewrite with when", "rule a { when step > 1 rewrite \"x\" => \"y\" }",
     "1:15: a rewrite has no `when`: it changes the model's code once, when the rule is "
     "enabled"},
    {"rewrite mixed", "rule a { rewrite \"x\" => \"y\" skip step }",
     "1:29: a rule with `rewrite` only rewrites: put other actions in a rule of their own"},
    {"rewrite without arrow", "rule a { rewrite \"x\" \"y\" }",
     "1:22: expected `=>`, found a string"},
    {"set lr in a per-parameter rule",
     "rule a { select params \"*\" set grad = grad * 2 set lr = lr * 0.5 }",
     "1:48: `set lr` runs once per step: put it in a rule that does not read `grad` or `param` "
     "or set `grad`"},
    {"too large a number", "rule a { when loss > 1e999 skip step }",
     "1:22: `1e999` is out of a double's range (about 1e-308 to 1e308)"},
    {"too small a number", "rule a { when loss > 1e-400 skip step }",
     "1:22: `1e-400` is out of a double's range (about 1e-308 to 1e308)"},
    {"non-ASCII", "rule a { when loss > 1 \xC3\xA9 skip step }",
     "1:24: unexpected character U+00E9"},
    {"not UTF-8", "rule a { when loss > 1 \xE9 skip step }",
     "1:24: unexpected character byte 0xE9"},
    {"when reads a let", "rule a { let x = loss * 2 when x > 1 skip step }",
     "1:32: `x` is read before its `let` (the lets are made in order, and a `when` is "
     "checked before any of them)"},
    {"let before its let", "rule a { let y = x let x = loss skip step }",
     "1:18: `x` is read before its `let` (the lets are made in order, and a `when` is "
     "checked before any of them)"},
    {"let of a literal", "rule a { let true = 1 skip step }",
     "1:10: `true` is already defined; pick another name"},
    {"params on a step rule", "rule a { select params \"x\" when step >= 0 skip step }",
     "1:17: `select params` picks the gradients a rule reads or sets, and this rule uses none: "
     "it runs once per step, whatever the selector says"},
    {"modules on a gradient rule",
     "rule a { select modules \"n.*\", params \"*\" set grad = grad * 0 }",
     "1:17: `select modules` picks what a `rewrite` changes, and this rule rewrites nothing: "
     "pick gradients with `select params \"...\"`"},
    {"duplicate rule", "rule a { skip step }\nrule a { skip step }",
     "2:1: a second rule named `a` (the first is at 1:1)"},
};

}  // namespace

TEST_CASE("the gradient_steering rule parses, with the types the checker gives it") {
  const auto rules = parseRules(R"(
# the paper's rule
rule gradient_steering {
  select params "*"
  let t = sqrt(mean(grad^2))
  set grad = clamp(grad, -t, t)
}
)");
  REQUIRE(rules.size() == 1);
  const auto& r = rules[0];
  CHECK(r.name == "gradient_steering");
  CHECK(r.pos.line == 3);
  REQUIRE(r.selectors.size() == 1);
  CHECK((r.selectors[0].kind == SelectorKind::Params));
  CHECK(r.selectors[0].glob == "*");
  CHECK(!r.trigger);
  REQUIRE(r.actions.size() == 2);
  CHECK(r.actions[0].kind == Action::Kind::Let);
  CHECK((r.actions[0].value->type == Type::Scalar));
  CHECK(r.actions[1].kind == Action::Kind::SetGrad);
  CHECK((r.actions[1].value->type == Type::Tensor));
  CHECK(r.perParameter);
  CHECK(r.source.rfind("rule gradient_steering {", 0) == 0);
  CHECK(r.source.back() == '}');
}

TEST_CASE("operators bind by precedence: ^ above unary minus, * above +, && above ||") {
  // -x^2 is -(x^2); * binds tighter than +; && tighter than ||.
  const auto rules =
      parseRules("rule p { when -loss^2 + 2 * step > 0 || step > 1 && !(loss < 0)  skip step }");
  REQUIRE(rules.size() == 1);
  REQUIRE(rules[0].trigger.get() != nullptr);
  const auto& w = *rules[0].trigger;
  CHECK(w.name == "||");
  CHECK(w.args[1]->name == "&&");
  const auto& sum = *w.args[0]->args[0];
  CHECK(sum.name == "+");
  CHECK(sum.args[0]->name == "-");
  CHECK(sum.args[0]->kind == symtune::rules::Expr::Kind::Unary);
  CHECK(sum.args[0]->args[0]->name == "^");
  CHECK(sum.args[1]->name == "*");
  CHECK((w.type == Type::Bool));
}

TEST_CASE("the built-in rules' shapes parse: agc, nan_guard, loss_spike, halve_lr, tanh_gelu") {
  const auto rules = parseRules(R"RULES(
rule agc {                                  # unit-wise adaptive clipping (NFNets)
  select params "layer*.weight", params "fc_w"
  let limit = 0.01 * max(unit_norm(param), 0.001)
  let n = max(unit_norm(grad), 0.000001)
  set grad = where(n > limit, grad * (limit / n), grad)
}
rule nan_guard {
  when grad_nan_count + grad_inf_count > 0
  skip step
}
rule loss_spike { when step > 10 && loss > 3 * loss_ema  skip step }
rule halve_lr { when step == 100  set lr = lr * 0.5 }
rule tanh_gelu {
  select nodes "aten::gelu"
  rewrite """graph(%x, %a):
  %y = aten::gelu(%x, %a)
  return (%y)""" => """graph(%x, %a):
  %t : str = prim::Constant[value="tanh"]()
  %y = aten::gelu(%x, %t)
  return (%y)"""
}
)RULES");
  REQUIRE(rules.size() == 5);
  REQUIRE(rules[0].selectors.size() == 2);
  CHECK((rules[0].actions[0].value->type == Type::Tensor));  // unit_norm: per output unit
  CHECK((rules[0].actions[2].value->args[0]->type == Type::Mask));
  CHECK((rules[0].actions[2].value->type == Type::Tensor));
  CHECK(!rules[1].perParameter);
  CHECK(rules[1].actions[0].kind == Action::Kind::SkipStep);
  CHECK(rules[3].actions[0].kind == Action::Kind::SetLr);
  CHECK(rules[4].actions[0].kind == Action::Kind::Rewrite);
  CHECK(rules[4].actions[0].pattern.find("aten::gelu(%x, %a)") != std::string::npos);
  CHECK(rules[4].actions[0].replacement.find("value=\"tanh\"") != std::string::npos);
  CHECK(rules[2].source == "rule loss_spike { when step > 10 && loss > 3 * loss_ema  skip step }");
}

TEST_CASE("each bad rule gives its exact message") {
  for (const BadRule& row : kBadRules) {
    INFO(row.name);
    try {
      parseRules(row.text);
      FAIL("the rule parsed");
    } catch (const RuleError& e) {
      CHECK(std::string(e.what()) == row.message);
    }
  }
}

// Found by the fuzzer: deep nesting must be an error, not a stack overflow.
TEST_CASE("deeply nested expressions are refused, not a stack overflow") {
  const std::string parens = "rule a { when " + std::string(5000, '(') + "loss" +
                             std::string(5000, ')') + " > 1 skip step }";
  CHECK_THROWS_AS(parseRules(parens), RuleError);
  std::string chain = "rule a { when loss";
  for (int i = 0; i < 5000; ++i)
    chain += " + loss";
  chain += " > 1 skip step }";
  try {
    parseRules(chain);
    FAIL("a 5000-term chain parsed");
  } catch (const RuleError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("nested more than 200 levels deep (split it with `let`)") !=
          std::string::npos);
  }
  std::string powers = "rule a { when ";
  for (int i = 0; i < 5000; ++i)
    powers += "1^";
  powers += "1 > 0 skip step }";
  CHECK_THROWS_AS(parseRules(powers), RuleError);
  const std::string nots = "rule a { when " + std::string(5000, '!') + "true skip step }";
  CHECK_THROWS_AS(parseRules(nots), RuleError);
  // 150 levels are fine.
  const std::string ok = "rule a { when " + std::string(150, '(') + "loss" + std::string(150, ')') +
                         " > 1 skip step }";
  CHECK(parseRules(ok).size() == 1);
}

TEST_CASE("name patterns match with * and ?") {
  using symtune::rules::globMatch;
  CHECK(globMatch("*", "layer1.0.conv1.weight"));
  CHECK(globMatch("layer*.weight", "layer1.0.conv1.weight"));
  CHECK(!globMatch("layer*.weight", "layer1.0.conv1.bias"));
  CHECK(globMatch("layer?.0.*", "layer3.0.body"));
  CHECK(!globMatch("layer?.0.*", "layer10.0.body"));
  CHECK(globMatch("aten::*", "aten::gelu"));
  CHECK(globMatch("a*b*c", "aXbYbZc"));
  CHECK(!globMatch("a*b*c", "aXbYbZ"));
  CHECK(globMatch("", ""));
}
