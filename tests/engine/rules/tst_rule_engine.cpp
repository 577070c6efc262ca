// Rules on a step: each kind of rule changes exactly what it should on planted gradients (values
// checked by hand), and on a trainer a NaN guard keeps every parameter bit-identical across a
// poisoned step, `set lr` changes the optimizer, and each step records the rules in force.

#include "doctest_torch.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "error_of.h"
#include "planted_gradients.h"
#include "symtune/core/rule_pack.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/runtime/trainer.h"

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

TEST_CASE("gradient steering clamps each gradient to its own RMS") {
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
  CHECK(outcome.gradientsChanged == int64_t{2});
  CHECK(outcome.fired == std::vector<std::string>{"gradient_steering"});
  CHECK(!outcome.skipStep);
}

// Note [Lowered rules]: gradient_steering's exact shape runs as symtune::rms_clamp_ over all
// the gradients it selects; the same rule written another way runs in the interpreter. Both
// give the same gradients, counts and firing; an unselected gradient stays as it was.
TEST_CASE("gradient steering runs as the fused clamp and matches the interpreter") {
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
  CHECK(lowered.lowered("s"));
  CHECK(!interpreted.lowered("s"));
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
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(torch::allclose(a[i].second.grad(), b[i].second.grad(), 1e-6, 1e-6));
  }
  CHECK(torch::equal(a.back().second.grad(), unselected));
  // The heavy tail was clamped: the largest magnitude is now the RMS (the kernel's, summed in
  // double, a rounding away from this float one).
  const double rms = first.pow(2).mean().sqrt().item<double>();
  CHECK(first.abs().max().item<double>() > rms);
  const double largest = a.front().second.grad().abs().max().item<double>();
  INFO("largest - rms = ", largest - rms);
  CHECK(std::abs(largest - rms) <= 1e-6 * rms);
  CHECK(oa.gradientsChanged == int64_t{5});
  CHECK(oa.gradientsChanged == ob.gradientsChanged);
  CHECK(oa.fired == ob.fired);
}

// A gradient holding a NaN: the fused clamp and the interpreter both make it all NaN (its RMS is
// NaN, as torch::clamp's bounds); a gradient holding an infinity is left as it is by both. Before,
// the fused clamp left the NaN gradient's finite entries unclamped.
TEST_CASE("gradient steering's two paths agree on gradients that are not finite") {
  const char* lowered = R"(rule s {
      select params "*"
      let t = sqrt(mean(grad^2))
      set grad = clamp(grad, -t, t)
    })";
  const char* interpreted = R"(rule s {
      select params "*"
      let t = sqrt(mean(grad * grad))
      set grad = clamp(grad, -t, t)
    })";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<Params> runs;
  for (const char* text : {lowered, interpreted}) {
    Params p{{"poisoned", withGrad({0, 0, 0}, {1, nan, 30}, {3})},
             {"overflowed", withGrad({0, 0, 0}, {1, inf, -30}, {3})}};
    auto set = ruleSet(text);
    set.apply(p, {}, 1e-3);
    runs.push_back(std::move(p));
  }
  for (const Params& p : runs) {
    CHECK(p[0].second.grad().isnan().all().item<bool>());
    CHECK(torch::equal(p[1].second.grad(), torch::tensor({1.0f, inf, -30.0f})));
  }
}

// Half gradients read in float (Note [Rules in float]): interpreted (a `when` keeps it from being
// lowered), the RMS clamp clamps the outliers of a half gradient as the fused kernel does. In
// half, grad^2 overflowed for |grad| >= 256, the RMS was infinite and nothing was clamped.
TEST_CASE("gradient steering clamps half gradients the same interpreted as lowered") {
  const std::string body = R"(
      let t = sqrt(mean(grad^2))
      set grad = clamp(grad, -t, t)
    })";
  std::vector<torch::Tensor> grads;
  for (const std::string& rule : {"rule s { select params \"*\"" + body,
                                  "rule s { select params \"*\" when step >= 0" + body}) {
    auto p = torch::zeros({3}, torch::kHalf).requires_grad_();
    p.mutable_grad() = torch::tensor({100.0f, 400.0f, 900.0f}).to(torch::kHalf);
    auto set = ruleSet(rule);
    CHECK(set.lowered("s") == (rule.find("when") == std::string::npos));
    set.apply({{"h", p}}, {}, 1e-3);
    CHECK((p.grad().scalar_type() == torch::kHalf));  // not decomposed: c10::toString clashes
    grads.push_back(p.grad().to(torch::kFloat));
  }
  // sqrt((100^2 + 400^2 + 900^2) / 3) = 571.55, in half 571.5
  expectValues(grads[0], {100.0f, 400.0f, 571.5f});
  expectValues(grads[1], {100.0f, 400.0f, 571.5f});
}

// A misspelt glob made its rule do nothing, without a word: each parameter selector (a C++
// rule's too) that selects none of the model's parameters is said.
TEST_CASE("a parameter selector that selects no parameter is said") {
  auto set = ruleSet(R"(rule r { select params "enc*"  select params "w"  set grad = grad * 1 }
      rule s { select params "*"  set grad = grad * 1 }
      rule t { when step > 1  skip step })");
  CHECK(set.unselected({"w", "b"}) ==
        std::vector<std::string>{
            "rule `r`: params \"enc*\" selects none of the model's 2 parameters"});
  CHECK(set.unselected({"enc.w", "w"}).empty());

  symtune::Session s = zooSession();
  s.rules.source = "rule typo { select params \"layer9.*\"  set grad = grad * 0.5 }";
  symtune::Trainer trainer(s);
  REQUIRE(trainer.unselectedRules().size() == size_t{1});
  CHECK(trainer.unselectedRules()[0].rfind(
            "rule `typo`: params \"layer9.*\" selects none of the model's ", 0) == 0);
}

// A rule's numbers beside a half gradient are float too: made in half, 1e-8 was 0, and a zero
// gradient over max(its norm, 1e-8) was 0 / 0; 70000 was infinite.
TEST_CASE("numbers beside a half gradient are not rounded to half") {
  auto zero = torch::zeros({3}, torch::kHalf).requires_grad_();
  zero.mutable_grad() = torch::zeros({3}, torch::kHalf);
  auto big = torch::zeros({2}, torch::kHalf).requires_grad_();
  big.mutable_grad() = torch::tensor({1.0f, -2.0f}).to(torch::kHalf);
  auto set = ruleSet(R"(rule r {
      select params "z"
      set grad = grad / max(norm(grad), 1e-8)
    }
    rule s {
      select params "b"
      set grad = where(grad > 0, min(grad * 0 + 1e5, 70000) / 1e4, grad)
    })");
  set.apply({{"z", zero}, {"b", big}}, {}, 1e-3);
  CHECK((zero.grad().scalar_type() == torch::kHalf));
  expectValues(zero.grad().to(torch::kFloat), {0, 0, 0});
  expectValues(big.grad().to(torch::kFloat), {7, -2});  // 10 where 70000 was infinite
}

// A tensor-valued `where` on a plain bool that picks its number stands for a tensor of the
// gradient's shape: reductions of it count every element (sum 1 over one element, std NaN).
TEST_CASE("a where on a bool that picks a number reduces as a tensor of the gradient's shape") {
  auto p = withGrad({0, 0, 0}, {1, 2, 3}, {3});
  auto set = ruleSet(R"(rule r {
      select params "*"
      let s = sum(where(step > 5, grad, 1))
      let n = numel(where(step > 5, grad, 1))
      set grad = grad * 0 + s * 10 + n
    })");
  set.apply({{"w", p}}, {}, 1e-3);  // step 0: the number
  expectValues(p.grad(), {33, 33, 33});
}

// std as torch.std (n - 1 in the denominator), of one element 0: normalising a one-element
// gradient by it made it NaN, and the whole model with it.
TEST_CASE("std of one element is 0, of more torch's") {
  auto one = withGrad({0}, {5}, {1});
  auto three = withGrad({0, 0, 0}, {1, 2, 3}, {3});
  auto set = ruleSet(R"(rule r {
      select params "*"
      set grad = (grad - mean(grad)) / (std(grad) + 1)
    })");
  set.apply({{"one", one}, {"three", three}}, {}, 1e-3);
  expectValues(one.grad(), {0});
  expectValues(three.grad(), {-0.5f, 0, 0.5f});  // std([1, 2, 3]) = 1
}

// A parameter without elements is passed over; a rule that fails as it runs names itself and
// the parameter (before, ATen's message named neither).
TEST_CASE("a rule that fails names itself and the parameter; empty parameters are passed over") {
  auto empty = torch::zeros({0}).requires_grad_();
  empty.mutable_grad() = torch::zeros({0});
  auto w = withGrad({0, 0}, {1, 200}, {2});
  auto guard = ruleSet(R"(rule big { select params "*" when max(abs(grad)) > 100 skip step })");
  CHECK(guard.apply({{"empty", empty}, {"w", w}}, {}, 1e-3).skipStep);
  // A gradient of two elements against a mask of three: ATen refuses the shapes.
  auto wrong = ruleSet(R"(rule wrong {
      select params "w"
      set grad = where(grad > 0, grad, param)
    })");
  auto mismatched = torch::zeros({3}).requires_grad_();
  mismatched.mutable_grad() = torch::ones({2});
  const std::string error = symtune::test::errorOf([&] {
    wrong.apply({{"w", mismatched}}, {}, 1e-3);
  });
  CHECK(error.rfind("rule `wrong` on parameter `w`: ", 0) == 0);
}

// Scalars as torch gives them: a NaN argument of max, min or clamp is the result, on either side.
TEST_CASE("max, min and clamp of a NaN number are NaN whichever side it is on") {
  for (const char* when : {"max(0/0, 1) > 0", "max(1, 0/0) > 0", "min(0/0, 1) < 2",
                           "min(1, 0/0) < 2", "clamp(0/0, 0, 1) >= 0", "clamp(0.5, 0/0, 1) >= 0"}) {
    INFO(when);
    auto rules = ruleSet(std::string("rule r { when ") + when + " skip step }");
    CHECK(!rules.apply({}, {}, 0.01).skipStep);  // NaN compares false
  }
}

// `set lr` to a rate that would wreck the run stops it, naming the rule, as a C++ rule's setLr.
TEST_CASE("set lr to a negative, NaN or infinite rate is an error naming the rule") {
  for (const char* value : {"lr - 1", "0/0", "1/0"}) {
    INFO(value);
    auto rules = ruleSet(std::string("rule wreck { set lr = ") + value + " }");
    const std::string error = symtune::test::errorOf([&] { rules.apply({}, {}, 0.01); });
    CHECK(error.find("rule `wreck`: set the learning rate to ") != std::string::npos);
    CHECK(error.find(": it must be finite and not negative") != std::string::npos);
  }
}

// The built-in pack's own rules (resources/rulepacks/builtin.json) on planted gradients.
TEST_CASE("the built-in pack's rules run on planted gradients") {
  const auto pack =
      symtune::rules::loadRulePack(SYMTUNE_SOURCE_DIR "/resources/rulepacks/builtin.json");
  symtune::rules::RuleSet rules;
  for (const auto& r : pack.rules) {
    auto parsed = symtune::rules::parseRules(r.source);
    if (parsed[0].actions[0].kind != Action::Kind::Rewrite)
      rules.add(parsed, r.name == "gradient_steering" || r.name == "nan_guard");
  }
  CHECK(rules.names().size() == size_t{5});  // all but the rewrite
  auto a = withGrad({0, 0, 0, 0}, {1, -2, 3, 10}, {4});
  symtune::StepFeatures f;
  auto outcome = rules.apply({{"a", a}}, f, 1e-3);
  expectValues(a.grad(), {1, -2, 3, std::sqrt(28.5f)});
  CHECK(!outcome.skipStep);
  f[symtune::Feature::GradNanCount] = 1;
  CHECK(rules.apply({{"a", a}}, f, 1e-3).skipStep);
  rules.setEnabled("global_norm_clipping", true);
  f[symtune::Feature::GradNanCount] = 0;
  f[symtune::Feature::GradGlobalNorm] = 2;
  auto b = withGrad({0, 0}, {0.5f, -0.5f}, {2});
  rules.apply({{"b", b}}, f, 1e-3);
  expectValues(b.grad(), {0.25f, -0.25f});  // steering leaves it, global clipping halves it
}

// `let` binds a value: a later in-place `set grad` does not change what it holds.
TEST_CASE("a let keeps the gradient it saw") {
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
TEST_CASE("plain bools mixed with tensor masks behave as tensors") {
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

TEST_CASE("adding rules to a set is all or nothing") {
  symtune::rules::RuleSet rules;
  CHECK_THROWS_AS(rules.add(symtune::rules::parseRules(
                      R"(rule a { skip step } rule r { rewrite "x" => "y" })")),
                  std::invalid_argument);
  CHECK(rules.names().empty());
}

// A gradient taken over from a `let` does not change the `let` when updated in place later.
TEST_CASE("a gradient taken over from a let does not alias it") {
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

TEST_CASE("selectors pick parameters by glob") {
  auto w = withGrad({0, 0}, {1, 2}, {2});
  auto bias = withGrad({0, 0}, {1, 2}, {2});
  auto rules = ruleSet(R"(rule zero_weights { select params "*.weight" set grad = 0 })");
  rules.apply({{"layer1.weight", w}, {"layer1.bias", bias}}, {}, 1e-3);
  expectValues(w.grad(), {0, 0});
  expectValues(bias.grad(), {1, 2});
}

TEST_CASE("adaptive clipping works unit by unit") {
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

TEST_CASE("global norm clipping reads the gradient's global norm feature") {
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
  CHECK(outcome.fired.empty());
}

TEST_CASE("step rules skip the step and set the learning rate") {
  auto rules = ruleSet(R"(
      rule loss_spike { when step > 10 && loss > 3 * loss_ema  skip step }
      rule halve_lr { when step == 100  set lr = lr * 0.5 }
    )");
  symtune::StepFeatures f;
  f[symtune::Feature::Step] = 20;
  f[symtune::Feature::Loss] = 10;
  f[symtune::Feature::LossEma] = 1;
  auto outcome = rules.apply({}, f, 0.01);
  CHECK(outcome.skipStep);
  CHECK(!outcome.lr);
  CHECK(outcome.fired == std::vector<std::string>{"loss_spike"});
  f[symtune::Feature::Step] = 100;
  f[symtune::Feature::Loss] = 1;
  outcome = rules.apply({}, f, 0.01);
  CHECK(!outcome.skipStep);
  CHECK(outcome.lr.value_or(0) == doctest::Approx(0.005));
  rules.setEnabled("halve_lr", false);
  outcome = rules.apply({}, f, 0.01);
  CHECK(!outcome.lr);
  CHECK(outcome.inForce == std::vector<std::string>{"loss_spike"});
}

TEST_CASE("a rule set refuses duplicate names, rewrites and unknown rules") {
  auto rules = ruleSet("rule a { skip step }");
  CHECK_THROWS_AS(rules.add(symtune::rules::parseRules("rule a { skip step }")),
                  std::invalid_argument);
  CHECK_THROWS_AS(rules.add(symtune::rules::parseRules(R"(rule r { rewrite "x" => "y" })")),
                  std::invalid_argument);
  CHECK_THROWS_AS(rules.setEnabled("b", true), std::out_of_range);
}

TEST_CASE("a NaN guard keeps every parameter bit-identical across a poisoned step") {
  symtune::Trainer trainer(zooSession());
  trainer.rules().add(symtune::rules::parseRules(R"(rule nan_guard {
      when grad_nan_count + grad_inf_count > 0
      skip step
    })"));
  const auto first = trainer.step();
  CHECK(!first.skipped);
  CHECK(first.rulesInForce == std::vector<std::string>{"nan_guard"});
  CHECK(first.rulesFired.empty());

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
  CHECK(bad.skipped);
  CHECK(bad.rulesFired == std::vector<std::string>{"nan_guard"});
  CHECK(std::isnan(bad.loss));
  {
    INFO("every parameter byte is as before the poisoned step");
    CHECK(snapshot(params) == before);
  }

  {
    torch::NoGradGuard noGrad;
    poisoned.flatten()[0] = kept;
  }
  const auto after = trainer.step();
  CHECK(!after.skipped);
  CHECK(std::isfinite(after.loss));
}

TEST_CASE("without the guard a poisoned step spreads to the parameters") {
  symtune::Trainer trainer(zooSession());
  trainer.step();
  auto params = trainer.executor().namedParameters();
  {
    torch::NoGradGuard noGrad;
    params[1].second.flatten()[0] = std::numeric_limits<float>::quiet_NaN();
  }
  const auto before = snapshot(params);
  CHECK(!trainer.step().skipped);
  CHECK(snapshot(params) != before);
}

TEST_CASE("set lr changes the optimizer's learning rate") {
  symtune::Trainer trainer(zooSession());
  trainer.rules().add(symtune::rules::parseRules("rule h { when step == 1  set lr = lr * 0.5 }"));
  auto lr = [&] { return trainer.optimizer().inner().param_groups().front().options().get_lr(); };
  trainer.step();
  CHECK(lr() == doctest::Approx(3e-3));
  const auto r = trainer.step();
  CHECK(r.rulesFired == std::vector<std::string>{"h"});
  CHECK(lr() == doctest::Approx(1.5e-3));
}
