// The rule language's front end: rules that parse and the types the checker gives them, and a
// table of bad rules with the exact message each must give (line:column, what was found, what was
// expected).

#include "symtune/core/rules.h"
#include "test_main.h"

using symtune::rules::Action;
using symtune::rules::parseRules;
using symtune::rules::RuleError;
using symtune::rules::SelectorKind;
using symtune::rules::Type;

class TestRules : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void gradientSteeringParsesWithTypes() {
    const auto rules = parseRules(R"(
# the paper's rule
rule gradient_steering {
  select params "*"
  let t = sqrt(mean(grad^2))
  set grad = clamp(grad, -t, t)
}
)");
    QCOMPARE(rules.size(), size_t{1});
    const auto& r = rules[0];
    QCOMPARE(r.name, std::string("gradient_steering"));
    QCOMPARE(r.pos.line, 3);
    QCOMPARE(r.selectors.size(), size_t{1});
    QCOMPARE(r.selectors[0].kind, SelectorKind::Params);
    QCOMPARE(r.selectors[0].glob, std::string("*"));
    QVERIFY(!r.trigger);
    QCOMPARE(r.actions.size(), size_t{2});
    QCOMPARE(r.actions[0].kind, Action::Kind::Let);
    QCOMPARE(r.actions[0].value->type, Type::Scalar);
    QCOMPARE(r.actions[1].kind, Action::Kind::SetGrad);
    QCOMPARE(r.actions[1].value->type, Type::Tensor);
    QVERIFY(r.perParameter);
    QVERIFY(r.source.rfind("rule gradient_steering {", 0) == 0);
    QVERIFY(r.source.back() == '}');
  }

  void precedence() {
    // -x^2 is -(x^2); * binds tighter than +; && tighter than ||.
    const auto rules =
        parseRules("rule p { when -loss^2 + 2 * step > 0 || step > 1 && !(loss < 0)  skip step }");
    const auto& w = *rules[0].trigger;
    QCOMPARE(w.name, std::string("||"));
    QCOMPARE(w.args[1]->name, std::string("&&"));
    const auto& sum = *w.args[0]->args[0];
    QCOMPARE(sum.name, std::string("+"));
    QCOMPARE(sum.args[0]->name, std::string("-"));
    QCOMPARE(sum.args[0]->kind, symtune::rules::Expr::Kind::Unary);
    QCOMPARE(sum.args[0]->args[0]->name, std::string("^"));
    QCOMPARE(sum.args[1]->name, std::string("*"));
    QCOMPARE(w.type, Type::Bool);
  }

  void builtinShapesOfRules() {
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
    QCOMPARE(rules.size(), size_t{5});
    QCOMPARE(rules[0].selectors.size(), size_t{2});
    QCOMPARE(rules[0].actions[0].value->type, Type::Tensor);  // unit_norm: per output unit
    QCOMPARE(rules[0].actions[2].value->args[0]->type, Type::Mask);
    QCOMPARE(rules[0].actions[2].value->type, Type::Tensor);
    QVERIFY(!rules[1].perParameter);
    QCOMPARE(rules[1].actions[0].kind, Action::Kind::SkipStep);
    QCOMPARE(rules[3].actions[0].kind, Action::Kind::SetLr);
    QCOMPARE(rules[4].actions[0].kind, Action::Kind::Rewrite);
    QVERIFY(rules[4].actions[0].pattern.find("aten::gelu(%x, %a)") != std::string::npos);
    QVERIFY(rules[4].actions[0].replacement.find("value=\"tanh\"") != std::string::npos);
    QVERIFY(rules[2].source ==
            "rule loss_spike { when step > 10 && loss > 3 * loss_ema  skip step }");
  }

  void errors_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("message");
    auto row = [](const char* name, const char* text, const char* message) {
      QTest::newRow(name) << QString(text) << QString(message);
    };
    row("no rule keyword", "gradient_steering { }",
        "1:1: expected `rule`, found `gradient_steering`");
    row("missing name", "rule { }", "1:6: expected the rule's name, found `{`");
    row("unclosed rule", "rule a {\n  skip step\n",
        "3:1: expected `}` closing rule `a`, found the end of the text");
    row("unknown clause", "rule a { clip grad }",
        "1:10: expected `select`, `when`, `let`, `set`, `skip` or `rewrite`, found `clip`");
    row("no actions", "rule a { select params \"*\" }",
        "1:1: rule `a` does nothing: add an action (`set`, `skip step` or `rewrite`)");
    row("missing expression", "rule a { when step > ) skip step }",
        "1:22: expected an expression, found `)`");
    row("unknown name", "rule a { select params \"*\"\n  set grad = clamp(gard, -1, 1) }",
        "2:20: unknown name `gard` (did you mean `grad`?)");
    row("unknown feature", "rule a { when los > 1 skip step }",
        "1:15: unknown name `los` (did you mean `loss`?)");
    row("unknown function", "rule a { select params \"*\" set grad = clip(grad, 1) }",
        "1:39: unknown function `clip` (did you mean `clamp`?)");
    row("arity", "rule a { select params \"*\" set grad = clamp(grad, 1) }",
        "1:39: `clamp` takes 3 arguments, found 2");
    row("reduction of a scalar", "rule a { when mean(loss) > 1 skip step }",
        "1:20: argument 1 of `mean` must be a tensor, found a scalar");
    row("when not bool", "rule a { when loss + 1 skip step }",
        "1:15: `when` needs a bool, found a scalar");
    row("when over a mask", "rule a { select params \"*\" when grad > 1 skip step }",
        "1:33: `when` needs a bool, found a mask (reduce it, e.g. `max(abs(grad)) > 1`)");
    row("grad without params", "rule a { set grad = grad * 0 }",
        "1:10: `set grad` needs a `select params \"...\"` selector");
    row("grad read without params", "rule a { when max(grad) > 1 skip step }",
        "1:19: `grad` needs a `select params \"...\"` selector");
    row("lr from a tensor", "rule a { select params \"*\" set lr = grad }",
        "1:37: `set lr` needs a scalar, found a tensor (reduce it, e.g. mean(...))");
    row("lr per parameter", "rule a { select params \"*\" let g = norm(grad) set lr = lr / g }",
        "1:56: `set lr` sets one learning rate: it cannot depend on `grad` or `param`");
    row("arithmetic on bool", "rule a { when (loss > 1) + 1 > 0 skip step }",
        "1:26: `+` needs numbers, found a bool and a scalar");
    row("chained comparison", "rule a { when 0 < loss < 1 skip step }",
        "1:24: comparisons do not chain (write `a < b && b < c`)");
    row("two whens", "rule a { when loss > 1 when step > 2 skip step }",
        "1:24: rule `a` has two `when` clauses (combine them with &&)");
    row("let shadows a feature", "rule a { let loss = 1 skip step }",
        "1:10: `loss` is already defined; pick another name");
    row("function used as a name", "rule a { when sqrt > 1 skip step }",
        "1:15: `sqrt` is a function: call it, e.g. `sqrt(grad)`");
    row("bad selector", "rule a { select weights \"*\" skip step }",
        "1:17: expected `params`, `modules` or `nodes`, found `weights`");
    row("selector without quotes", "rule a { select params * skip step }",
        "1:24: expected a quoted name pattern, found `*`");
    row("empty pattern", "rule a { select params \"\" skip step }",
        "1:17: empty name pattern (use \"*\" for all)");
    row("unterminated string", "rule a { select params \"layer1\n skip step }",
        "1:24: unterminated string (use \"\"\" for text over several lines)");
    row("bad escape", "rule a { select params \"a\\q\" skip step }",
        "1:27: unknown escape \\q (known: \\\" \\\\ \\n)");
    row("bad character", "rule a { when loss > 1 ; skip step }", "1:24: unexpected character `;`");
    row("number into name", "rule a { when 2loss > 1 skip step }",
        "1:16: a number must not run into a name (found `2l`)");
    row("set what", "rule a { set momentum = 1 }",
        "1:14: expected `grad` or `lr` after `set`, found `momentum`");
    row("rewrite with when", "rule a { when step > 1 rewrite \"x\" => \"y\" }",
        "1:15: a rewrite has no `when`: it changes the model's code once, when the rule is "
        "enabled");
    row("rewrite mixed", "rule a { rewrite \"x\" => \"y\" skip step }",
        "1:29: a rule with `rewrite` only rewrites: put other actions in a rule of their own");
    row("rewrite without arrow", "rule a { rewrite \"x\" \"y\" }",
        "1:22: expected `=>`, found a string");
    row("set lr in a per-parameter rule",
        "rule a { select params \"*\" set grad = grad * 2 set lr = lr * 0.5 }",
        "1:48: `set lr` runs once per step: put it in a rule that does not read `grad` or `param` "
        "or set `grad`");
    row("not a finite number", "rule a { when loss > 1e999 skip step }",
        "1:22: `1e999` is not a finite number");
    row("duplicate rule", "rule a { skip step }\nrule a { skip step }",
        "2:1: a second rule named `a` (the first is at 1:1)");
  }

  void errors() {
    QFETCH(QString, text);
    QFETCH(QString, message);
    try {
      parseRules(text.toStdString());
      QFAIL("the rule parsed");
    } catch (const RuleError& e) {
      QCOMPARE(QString::fromStdString(e.what()), message);
    }
  }

  // Found by the fuzzer: deep nesting must be an error, not a stack overflow.
  void deepExpressionsAreRefused() {
    const std::string parens = "rule a { when " + std::string(5000, '(') + "loss" +
                               std::string(5000, ')') + " > 1 skip step }";
    QVERIFY_THROWS_EXCEPTION(RuleError, parseRules(parens));
    std::string chain = "rule a { when loss";
    for (int i = 0; i < 5000; ++i)
      chain += " + loss";
    chain += " > 1 skip step }";
    try {
      parseRules(chain);
      QFAIL("a 5000-term chain parsed");
    } catch (const RuleError& e) {
      QVERIFY(std::string(e.what()).find(
                  "nested more than 200 levels deep (split it with `let`)") != std::string::npos);
    }
    std::string powers = "rule a { when ";
    for (int i = 0; i < 5000; ++i)
      powers += "1^";
    powers += "1 > 0 skip step }";
    QVERIFY_THROWS_EXCEPTION(RuleError, parseRules(powers));
    const std::string nots = "rule a { when " + std::string(5000, '!') + "true skip step }";
    QVERIFY_THROWS_EXCEPTION(RuleError, parseRules(nots));
    // 150 levels are fine.
    const std::string ok = "rule a { when " + std::string(150, '(') + "loss" +
                           std::string(150, ')') + " > 1 skip step }";
    QCOMPARE(parseRules(ok).size(), size_t{1});
  }

  void globs() {
    using symtune::rules::globMatch;
    QVERIFY(globMatch("*", "layer1.0.conv1.weight"));
    QVERIFY(globMatch("layer*.weight", "layer1.0.conv1.weight"));
    QVERIFY(!globMatch("layer*.weight", "layer1.0.conv1.bias"));
    QVERIFY(globMatch("layer?.0.*", "layer3.0.body"));
    QVERIFY(!globMatch("layer?.0.*", "layer10.0.body"));
    QVERIFY(globMatch("aten::*", "aten::gelu"));
    QVERIFY(globMatch("a*b*c", "aXbYbZc"));
    QVERIFY(!globMatch("a*b*c", "aXbYbZ"));
    QVERIFY(globMatch("", ""));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestRules)
#include "tst_rules.moc"
