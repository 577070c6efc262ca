// The rule registry: the built-in pack and C++ rules (SYMTUNE_REGISTER_RULE) side by side, name
// clashes refused naming both origins, C++ rules run on planted gradients (values checked), and
// sessions that enable registered rules and carry their own.

#include "doctest_torch.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "error_of.h"
#include "planted_gradients.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/rules/rule_registry.h"
#include "symtune/runtime/trainer.h"
#include "test_files.h"

// A C++ rule, registered the way users and plugins register theirs: halves every bias gradient.
SYMTUNE_REGISTER_RULE(test_halve_bias_gradients, "*bias", "Halves bias gradients (a test rule)") {
  for (const auto& [name, p] : context.parameters())
    p.grad().mul_(0.5);
  context.gradientsChanged(static_cast<int64_t>(context.parameters().size()));
  return !context.parameters().empty();
}

// Skips every step after the second and sets the learning rate: the context's other actions.
SYMTUNE_REGISTER_RULE(test_freeze_after_two, "*", "Skips steps from step 2 on (a test rule)") {
  if (context.features()[symtune::Feature::Step] < 2)
    return false;
  context.setLr(context.lr() * 0.5);
  context.skipStep();
  return true;
}

namespace {

using Params = std::vector<std::pair<std::string, torch::Tensor>>;
using symtune::rules::Registry;
using symtune::rules::RegistryError;

using symtune::test::withGrad;

using symtune::test::errorOf;

symtune::Session zooSession() {
  symtune::Session s;
  s.name = "registry";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.run.steps = 4;
  return s;
}

// The global registry also reads the user's rule-pack library, and reads it once, when first
// used: every test case points it at an empty library of the suite's own before that happens.
struct EmptyUserLibrary {
  EmptyUserLibrary() {
    static const symtune::test::TempDir library;
    static const bool pointed = ::setenv("SYMTUNE_RULEPACKS", library.path().c_str(), 1) == 0;
    REQUIRE(pointed);
  }
};

}  // namespace

TEST_CASE_FIXTURE(EmptyUserLibrary,
                  "the global registry holds the pack's rules and the C++ rules") {
  const auto entries = Registry::global().entries();
  std::map<std::string, std::string> origin;
  for (const auto& e : entries)
    origin[e.name] = e.origin;
  for (const char* name : {"gradient_steering", "adaptive_gradient_clipping",
                           "global_norm_clipping", "nan_guard", "loss_spike_guard", "tanh_gelu"}) {
    INFO(name);
    CHECK(origin[name] == "pack builtin 1.3.0");
  }
  CHECK(origin["test_halve_bias_gradients"] == "C++ (tst_rule_registry.cpp)");
  const auto bias = Registry::global().get("test_halve_bias_gradients");
  CHECK((bias.native && !bias.rule));
  CHECK(bias.description == "Halves bias gradients (a test rule)");
  CHECK(Registry::global().get("tanh_gelu").isRewrite());
  CHECK(!Registry::global().get("nan_guard").isRewrite());
  CHECK(Registry::global().problems().empty());
}

TEST_CASE_FIXTURE(EmptyUserLibrary, "a C++ rule changes exactly the parameters it selects") {
  symtune::rules::RuleSet set;
  set.add(Registry::global().get("test_halve_bias_gradients"));
  set.add(Registry::global().get("gradient_steering"), /*enabled=*/false);
  Params params{{"fc.weight", withGrad({1, 2}, {4, -6}, {2})},
                {"fc.bias", withGrad({0}, {3}, {1})}};
  symtune::StepFeatures features;
  const auto outcome = set.apply(params, features, 0.1);
  CHECK(params[0].second.grad()[0].item<float>() == doctest::Approx(4.0f));
  CHECK(params[0].second.grad()[1].item<float>() == doctest::Approx(-6.0f));
  CHECK(params[1].second.grad()[0].item<float>() == doctest::Approx(1.5f));
  CHECK(outcome.gradientsChanged == int64_t{1});
  CHECK(outcome.fired == std::vector<std::string>{"test_halve_bias_gradients"});
  CHECK(outcome.inForce == std::vector<std::string>{"test_halve_bias_gradients"});
  CHECK(!outcome.skipStep);
}

TEST_CASE_FIXTURE(EmptyUserLibrary, "a C++ rule skips the step and sets the learning rate") {
  symtune::rules::RuleSet set;
  set.add(Registry::global().get("test_freeze_after_two"));
  Params params{{"w", withGrad({1}, {1}, {1})}};
  symtune::StepFeatures features;
  features[symtune::Feature::Step] = 1;
  auto outcome = set.apply(params, features, 0.1);
  CHECK((!outcome.skipStep && !outcome.lr && outcome.fired.empty()));
  features[symtune::Feature::Step] = 2;
  outcome = set.apply(params, features, 0.1);
  CHECK(outcome.skipStep);
  REQUIRE(outcome.lr);
  CHECK(*outcome.lr == doctest::Approx(0.05));
}

TEST_CASE_FIXTURE(EmptyUserLibrary, "a taken name is refused, naming both origins") {
  Registry registry;
  registry.addRules(symtune::rules::parseRules("rule nan_guard { skip step }"), "pack a 1.0.0");
  CHECK(errorOf([&] {
          registry.addRules(symtune::rules::parseRules("rule ok { skip step }\n"
                                                       "rule nan_guard { skip step }"),
                            "pack b 2.0.0");
        }) == "rule `nan_guard` of pack b 2.0.0 is already registered by pack a 1.0.0");
  CHECK(!registry.find("ok"));  // all or nothing
  symtune::rules::NativeRule native{"nan_guard", "*", "", [](auto&) { return false; }};
  CHECK(errorOf([&] { registry.addNative(native, "C++ (x.cpp)"); }) ==
        "rule `nan_guard` of C++ (x.cpp) is already registered by pack a 1.0.0");
  CHECK(errorOf([&] { (void)registry.get("nan_gaurd"); }) ==
        "no rule named `nan_gaurd` is registered (did you mean `nan_guard`?)");
  // A rule set refuses a second rule of the same name, whatever its kind.
  symtune::rules::RuleSet set;
  const auto taken = registry.find("nan_guard");
  REQUIRE(taken);
  set.add(*taken);
  CHECK(errorOf([&] { set.add(native); }) == "a rule named `nan_guard` is already in the set");
}

TEST_CASE_FIXTURE(EmptyUserLibrary, "a rewrite is validated when it is registered") {
  Registry registry;
  CHECK(errorOf([&] {
          registry.addRules(
              symtune::rules::parseRules("rule r {\n  rewrite \"graph(%x):\\n  return (%x)\" => "
                                         "\"graph(%x, %y):\\n  return (%x)\"\n}"),
              "the test");
        }) == "rule `r` of the test: 2:3: the pattern has no operation to match (only constants)");
}

TEST_CASE_FIXTURE(EmptyUserLibrary, "a session enables registered rules and carries its own") {
  auto session = zooSession();
  session.rules.enable = {"test_halve_bias_gradients", "nan_guard"};
  session.rules.source = "rule mine { when step == 1  set lr = lr * 0.5 }";
  symtune::Trainer trainer(session);
  CHECK(trainer.rules().names() ==
        std::vector<std::string>{"test_halve_bias_gradients", "nan_guard", "mine"});
  trainer.step();
  const auto second = trainer.step();
  CHECK(second.rulesInForce ==
        std::vector<std::string>{"test_halve_bias_gradients", "nan_guard", "mine"});
  CHECK(second.rulesFired == std::vector<std::string>{"test_halve_bias_gradients", "mine"});
  CHECK(trainer.optimizer().inner().param_groups().front().options().get_lr() ==
        doctest::Approx(5e-4));
  CHECK(trainer.rewrites().empty());
}

TEST_CASE_FIXTURE(EmptyUserLibrary,
                  "rule changes from another thread apply when the next step begins") {
  auto session = zooSession();
  session.rules.enable = {"nan_guard"};
  symtune::Trainer trainer(session);
  trainer.step();
  std::future<void> disable, add, bad;
  std::thread other([&] {
    disable = trainer.changeRules([](auto& set) { set.setEnabled("nan_guard", false); });
    add =
        trainer.changeRules([](auto& set) { set.add(Registry::global().get("loss_spike_guard")); });
    bad = trainer.changeRules([](auto& set) { set.setEnabled("nope", true); });
  });
  other.join();
  // Nothing changes until the next step begins.
  CHECK(trainer.rules().enabled("nan_guard"));
  CHECK(trainer.rules().names() == std::vector<std::string>{"nan_guard"});
  CHECK(disable.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  const auto r = trainer.step();
  CHECK(r.rulesInForce == std::vector<std::string>{"loss_spike_guard"});
  disable.get();
  add.get();
  CHECK(errorOf([&] { bad.get(); }) == "no rule named `nope`");
  CHECK(trainer.rules().names() == std::vector<std::string>{"nan_guard", "loss_spike_guard"});
}

TEST_CASE_FIXTURE(EmptyUserLibrary, "a session enabling an unknown rule is a setup error") {
  auto session = zooSession();
  session.rules.enable = {"nan_gaurd"};
  CHECK(errorOf([&] { symtune::Trainer trainer(session); }) ==
        "rules: no rule named `nan_gaurd` is registered (did you mean `nan_guard`?)");
  session.rules.enable = {"nan_guard"};
  session.rules.source = "rule nan_guard { skip step }";
  CHECK(errorOf([&] { symtune::Trainer trainer(session); }) ==
        "rules: a rule named `nan_guard` is already in the set");
}

TEST_CASE_FIXTURE(EmptyUserLibrary, "a session file's rules are read and checked") {
  const std::string base = R"({"format": "symtune-session", "version": 1, "name": "s",
      "model": {"zoo": "dynamic_resnet", "preset": "ci"}, )";
  const auto s = symtune::parseSession(
      base +
          R"("rules": {"enable": ["nan_guard", "tanh_gelu"], "source": "rule a { skip step }"}})",
      "s.json");
  CHECK(s.rules.enable == std::vector<std::string>{"nan_guard", "tanh_gelu"});
  CHECK(s.rules.source == "rule a { skip step }");
  auto sessionError = [&](const std::string& rules) {
    try {
      symtune::parseSession(base + R"("rules": )" + rules + "}", "s.json");
    } catch (const symtune::SessionError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(sessionError(R"({"enable": "nan_guard"})") ==
        "s.json: rules.enable: expected an array of rule names, found a string");
  CHECK(sessionError(R"({"enable": ["a", "a"]})") ==
        "s.json: rules.enable[1]: rule \"a\" is listed twice");
  CHECK(sessionError(R"({"source": "rule a { set gard = 1 }"})") ==
        "s.json: rules.source: 1:14: expected `grad` or `lr` after `set`, found `gard`");
  CHECK(sessionError(R"({"enabled": []})") ==
        "s.json: rules.enabled: unknown field (known here: enable, source)");
}
