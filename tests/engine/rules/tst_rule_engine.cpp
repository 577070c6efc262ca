// Rules on a step: each kind of rule changes exactly what it should on planted gradients (values
// checked by hand), and on a trainer a NaN guard keeps every parameter bit-identical across a
// poisoned step, `set lr` changes the optimizer, and each step records the rules in force.

#include <cmath>
#include <cstring>
#include <limits>

#include "planted_gradients.h"
#include "symtune/core/rule_pack.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/runtime/trainer.h"
#include "test_main.h"

namespace {

using Params = std::vector<std::pair<std::string, torch::Tensor>>;
using symtune::rules::Action;
using symtune::test::expectValues;
using symtune::test::withGrad;

symtune::rules::RuleSet ruleSet(const std::string& text) {
  symtune::rules::RuleSet set;
  set.add(symtune::rules::parseRules(text));
  return set;
}

// Every byte of every parameter.
std::vector<std::vector<char>> snapshot(const Params& params) {
  std::vector<std::vector<char>> out;
  for (const auto& [name, p] : params) {
    const auto c = p.detach().contiguous();
    std::vector<char> bytes(c.nbytes());
    std::memcpy(bytes.data(), c.data_ptr(), c.nbytes());
    out.push_back(std::move(bytes));
  }
  return out;
}

symtune::Session zooSession() {
  symtune::Session s;
  s.name = "rules";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.optimizer.lr = 3e-3;
  s.run.steps = 10;
  return s;
}

}  // namespace

class TestRuleEngine : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void gradientSteeringClampsToTheGradientsRms() {
    auto a = withGrad({0, 0, 0, 0}, {1, -2, 3, 10}, {4});
    auto b = withGrad({0, 0}, {0.5, -0.5}, {2});
    auto rules = ruleSet(R"(rule gradient_steering {
      select params "*"
      let t = sqrt(mean(grad^2))
      set grad = clamp(grad, -t, t)
    })");
    const auto outcome = rules.apply({{"a", a}, {"b", b}}, {}, 1e-3);
    const float t = std::sqrt((1 + 4 + 9 + 100) / 4.0f);  // 5.3385
    expectValues(a.grad(), {1, -2, 3, t});
    expectValues(b.grad(), {0.5, -0.5});  // |g| equals its RMS: unchanged
    QCOMPARE(outcome.gradientsChanged, int64_t{2});
    QCOMPARE(outcome.fired, std::vector<std::string>{"gradient_steering"});
    QVERIFY(!outcome.skipStep);
  }

  // Note [Lowered rules]: gradient_steering's exact shape runs as symtune::rms_clamp_ over all
  // the gradients it selects; the same rule written another way runs in the interpreter. Both
  // give the same gradients, counts and firing; an unselected gradient stays as it was.
  void gradientSteeringRunsAsTheFusedClamp() {
    auto lowered = ruleSet(R"(rule s {
      select params "w*"
      let t = sqrt(mean(grad^2))
      set grad = clamp(grad, -t, t)
    })");
    auto interpreted = ruleSet(R"(rule s {
      select params "w*"
      let t = sqrt(mean(grad * grad))
      set grad = clamp(grad, -t, t)
    })");
    QVERIFY(lowered.lowered("s"));
    QVERIFY(!interpreted.lowered("s"));
    torch::manual_seed(3);
    Params a, b;
    const std::vector<std::vector<int64_t>> shapes{{64, 33}, {7}, {1}, {3, 5, 9}, {40000}};
    for (size_t i = 0; i <= shapes.size(); ++i) {
      const auto shape = i < shapes.size() ? shapes[i] : std::vector<int64_t>{5};
      const auto g = torch::randn(shape) * torch::rand(shape).pow(4) * 10;  // heavy-tailed
      const std::string name = i < shapes.size() ? "w" + std::to_string(i) : "bias";
      for (Params* params : {&a, &b}) {
        auto p = torch::zeros(shape).requires_grad_(true);
        p.mutable_grad() = g.clone();
        params->emplace_back(name, p);
      }
    }
    const auto unselected = a.back().second.grad().clone();
    const auto first = a.front().second.grad().clone();
    const auto oa = lowered.apply(a, {}, 1e-3), ob = interpreted.apply(b, {}, 1e-3);
    for (size_t i = 0; i < a.size(); ++i)
      QVERIFY2(torch::allclose(a[i].second.grad(), b[i].second.grad(), 1e-6, 1e-6),
               a[i].first.c_str());
    QVERIFY(torch::equal(a.back().second.grad(), unselected));
    // The heavy tail was clamped: the largest magnitude is now the RMS (the kernel's, summed in
    // double, a rounding away from this float one).
    const double rms = first.pow(2).mean().sqrt().item<double>();
    QVERIFY(first.abs().max().item<double>() > rms);
    const double largest = a.front().second.grad().abs().max().item<double>();
    QVERIFY2(std::abs(largest - rms) <= 1e-6 * rms, qPrintable(QString::number(largest - rms)));
    QCOMPARE(oa.gradientsChanged, int64_t{5});
    QCOMPARE(oa.gradientsChanged, ob.gradientsChanged);
    QCOMPARE(oa.fired, ob.fired);
  }

  // The built-in pack's own rules (resources/rulepacks/builtin.json) on planted gradients.
  void builtinPackRulesRun() {
    const auto pack =
        symtune::rules::loadRulePack(SYMTUNE_SOURCE_DIR "/resources/rulepacks/builtin.json");
    symtune::rules::RuleSet rules;
    for (const auto& r : pack.rules) {
      auto parsed = symtune::rules::parseRules(r.source);
      if (parsed[0].actions[0].kind != Action::Kind::Rewrite)
        rules.add(parsed, r.name == "gradient_steering" || r.name == "nan_guard");
    }
    QCOMPARE(rules.names().size(), size_t{5});  // all but the rewrite
    auto a = withGrad({0, 0, 0, 0}, {1, -2, 3, 10}, {4});
    symtune::StepFeatures f;
    auto outcome = rules.apply({{"a", a}}, f, 1e-3);
    expectValues(a.grad(), {1, -2, 3, std::sqrt(28.5f)});
    QVERIFY(!outcome.skipStep);
    f[symtune::Feature::GradNanCount] = 1;
    QVERIFY(rules.apply({{"a", a}}, f, 1e-3).skipStep);
    rules.setEnabled("global_norm_clipping", true);
    f[symtune::Feature::GradNanCount] = 0;
    f[symtune::Feature::GradGlobalNorm] = 2;
    auto b = withGrad({0, 0}, {0.5f, -0.5f}, {2});
    rules.apply({{"b", b}}, f, 1e-3);
    expectValues(b.grad(), {0.25f, -0.25f});  // steering leaves it, global clipping halves it
  }

  // `let` binds a value: a later in-place `set grad` does not change what it holds.
  void letKeepsTheGradientItSaw() {
    auto a = withGrad({0, 0}, {1, 2}, {2});
    auto rules = ruleSet(R"(rule r {
      select params "*"
      let before = grad
      set grad = grad * 10
      set grad = grad + before
    })");
    rules.apply({{"a", a}}, {}, 1e-3);
    expectValues(a.grad(), {11, 22});
  }

  // A mask built from a plain bool and a tensor comparison, and a `where` on a bool picking a
  // number, still behave as tensors.
  void mixedBoolsAndMasks() {
    auto a = withGrad({0, 0}, {-1, 2}, {2});
    auto rules = ruleSet(R"(rule r {
      select params "*"
      let g = where(step > 100, grad, 0)
      set grad = where(step > 10 && grad > 0, grad, grad + norm(g))
    })");
    symtune::StepFeatures f;
    f[symtune::Feature::Step] = 5;
    rules.apply({{"a", a}}, f, 1e-3);
    expectValues(a.grad(), {-1, 2});  // step 5: the mask is all false, norm(g) = 0
  }

  void addIsAllOrNothing() {
    symtune::rules::RuleSet rules;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             rules.add(symtune::rules::parseRules(
                                 R"(rule a { skip step } rule r { rewrite "x" => "y" })")));
    QVERIFY(rules.names().empty());
  }

  // A gradient taken over from a `let` does not change the `let` when updated in place later.
  void takenOverGradientDoesNotAliasALet() {
    auto a = withGrad({0, 0}, {1, 2}, {2});
    auto rules = ruleSet(R"(rule r {
      select params "*"
      let s = grad * 2
      set grad = s
      set grad = grad * 0.5
      set grad = grad + s
    })");
    rules.apply({{"a", a}}, {}, 1e-3);
    expectValues(a.grad(), {3, 6});
  }

  void selectorsPickParametersByGlob() {
    auto w = withGrad({0, 0}, {1, 2}, {2});
    auto bias = withGrad({0, 0}, {1, 2}, {2});
    auto rules = ruleSet(R"(rule zero_weights { select params "*.weight" set grad = 0 })");
    rules.apply({{"layer1.weight", w}, {"layer1.bias", bias}}, {}, 1e-3);
    expectValues(w.grad(), {0, 0});
    expectValues(bias.grad(), {1, 2});
  }

  void adaptiveClippingIsUnitWise() {
    // Row 0: |w| = 5, limit 0.05, |g| = 50 -> scaled by 0.001. Row 1: |g| = 0.001 < limit 0.01.
    auto w = withGrad({3, 4, 0, 1}, {30, 40, 0, 0.001f}, {2, 2});
    auto rules = ruleSet(R"(rule agc {
      select params "*"
      let limit = 0.01 * max(unit_norm(param), 0.001)
      let n = max(unit_norm(grad), 0.000001)
      set grad = where(n > limit, grad * (limit / n), grad)
    })");
    rules.apply({{"w", w}}, {}, 1e-3);
    expectValues(w.grad(), {0.03f, 0.04f, 0, 0.001f});
    expectValues(w, {3, 4, 0, 1});  // the parameter itself is untouched
  }

  void globalNormClippingReadsTheFeature() {
    auto a = withGrad({0, 0}, {3, 4}, {2});
    symtune::StepFeatures f;
    f[symtune::Feature::GradGlobalNorm] = 5;
    auto rules = ruleSet(R"(rule clip_global {
      select params "*"
      when grad_global_norm > 1
      set grad = grad / grad_global_norm
    })");
    rules.apply({{"a", a}}, f, 1e-3);
    expectValues(a.grad(), {0.6f, 0.8f});
    f[symtune::Feature::GradGlobalNorm] = 0.5;
    auto c = withGrad({0, 0}, {0.3f, 0.4f}, {2});
    const auto outcome = rules.apply({{"c", c}}, f, 1e-3);
    expectValues(c.grad(), {0.3f, 0.4f});  // under the threshold: untouched
    QVERIFY(outcome.fired.empty());
  }

  void stepRulesSkipAndSetTheLearningRate() {
    auto rules = ruleSet(R"(
      rule loss_spike { when step > 10 && loss > 3 * loss_ema  skip step }
      rule halve_lr { when step == 100  set lr = lr * 0.5 }
    )");
    symtune::StepFeatures f;
    f[symtune::Feature::Step] = 20;
    f[symtune::Feature::Loss] = 10;
    f[symtune::Feature::LossEma] = 1;
    auto outcome = rules.apply({}, f, 0.01);
    QVERIFY(outcome.skipStep);
    QVERIFY(!outcome.lr);
    QCOMPARE(outcome.fired, std::vector<std::string>{"loss_spike"});
    f[symtune::Feature::Step] = 100;
    f[symtune::Feature::Loss] = 1;
    outcome = rules.apply({}, f, 0.01);
    QVERIFY(!outcome.skipStep);
    QCOMPARE(outcome.lr.value_or(0), 0.005);
    rules.setEnabled("halve_lr", false);
    outcome = rules.apply({}, f, 0.01);
    QVERIFY(!outcome.lr);
    QCOMPARE(outcome.inForce, std::vector<std::string>{"loss_spike"});
  }

  void setRejectsDuplicatesAndRewrites() {
    auto rules = ruleSet("rule a { skip step }");
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             rules.add(symtune::rules::parseRules("rule a { skip step }")));
    QVERIFY_THROWS_EXCEPTION(
        std::invalid_argument,
        rules.add(symtune::rules::parseRules(R"(rule r { rewrite "x" => "y" })")));
    QVERIFY_THROWS_EXCEPTION(std::out_of_range, rules.setEnabled("b", true));
  }

  void nanGuardKeepsParametersBitIdenticalAcrossAPoisonedStep() {
    symtune::Trainer trainer(zooSession());
    trainer.rules().add(symtune::rules::parseRules(R"(rule nan_guard {
      when grad_nan_count + grad_inf_count > 0
      skip step
    })"));
    const auto first = trainer.step();
    QVERIFY(!first.skipped);
    QCOMPARE(first.rulesInForce, std::vector<std::string>{"nan_guard"});
    QVERIFY(first.rulesFired.empty());

    // Poison one weight: the forward, the loss and every gradient behind it become NaN.
    auto params = trainer.executor().namedParameters();
    torch::Tensor poisoned = params[1].second;
    const float kept = poisoned.flatten()[0].item<float>();
    {
      torch::NoGradGuard noGrad;
      poisoned.flatten()[0] = std::numeric_limits<float>::quiet_NaN();
    }
    const auto before = snapshot(params);
    const auto bad = trainer.step();
    QVERIFY(bad.skipped);
    QCOMPARE(bad.rulesFired, std::vector<std::string>{"nan_guard"});
    QVERIFY(std::isnan(bad.loss));
    QVERIFY2(snapshot(params) == before, "every parameter byte is as before the poisoned step");

    {
      torch::NoGradGuard noGrad;
      poisoned.flatten()[0] = kept;
    }
    const auto after = trainer.step();
    QVERIFY(!after.skipped);
    QVERIFY(std::isfinite(after.loss));
  }

  void withoutTheGuardAPoisonedStepSpreads() {
    symtune::Trainer trainer(zooSession());
    trainer.step();
    auto params = trainer.executor().namedParameters();
    {
      torch::NoGradGuard noGrad;
      params[1].second.flatten()[0] = std::numeric_limits<float>::quiet_NaN();
    }
    const auto before = snapshot(params);
    QVERIFY(!trainer.step().skipped);
    QVERIFY(snapshot(params) != before);
  }

  void setLrChangesTheOptimizer() {
    symtune::Trainer trainer(zooSession());
    trainer.rules().add(symtune::rules::parseRules("rule h { when step == 1  set lr = lr * 0.5 }"));
    auto lr = [&] { return trainer.optimizer().inner().param_groups().front().options().get_lr(); };
    trainer.step();
    QCOMPARE(lr(), 3e-3);
    const auto r = trainer.step();
    QCOMPARE(r.rulesFired, std::vector<std::string>{"h"});
    QCOMPARE(lr(), 1.5e-3);
  }
};

SYMTUNE_TEST_MAIN_CORE(TestRuleEngine)
#include "tst_rule_engine.moc"
