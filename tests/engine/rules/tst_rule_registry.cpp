// The rule registry: the built-in pack and C++ rules (SYMTUNE_REGISTER_RULE) side by side, name
// clashes refused naming both origins, C++ rules run on planted gradients (values checked), and
// sessions that enable registered rules and carry their own.

#include <chrono>
#include <future>
#include <thread>

#include <QTemporaryDir>

#include "error_of.h"
#include "planted_gradients.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/rules/rule_registry.h"
#include "symtune/runtime/trainer.h"
#include "test_main.h"

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

}  // namespace

class TestRuleRegistry : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    // The global registry also reads the user's library: point it at an empty one.
    QVERIFY(library_.isValid());
    qputenv("SYMTUNE_RULEPACKS", library_.path().toUtf8());
  }

  void globalRegistryHoldsPackAndCppRules() {
    const auto entries = Registry::global().entries();
    std::map<std::string, std::string> origin;
    for (const auto& e : entries)
      origin[e.name] = e.origin;
    for (const char* name : {"gradient_steering", "adaptive_gradient_clipping",
                             "global_norm_clipping", "nan_guard", "loss_spike_guard", "tanh_gelu"})
      QCOMPARE(origin[name], std::string("pack builtin 1.3.0"));
    QCOMPARE(origin["test_halve_bias_gradients"], std::string("C++ (tst_rule_registry.cpp)"));
    const auto bias = Registry::global().get("test_halve_bias_gradients");
    QVERIFY(bias.native && !bias.rule);
    QCOMPARE(bias.description, std::string("Halves bias gradients (a test rule)"));
    QVERIFY(Registry::global().get("tanh_gelu").isRewrite());
    QVERIFY(!Registry::global().get("nan_guard").isRewrite());
    QVERIFY(Registry::global().problems().empty());
  }

  void cppRuleChangesExactlyItsParameters() {
    symtune::rules::RuleSet set;
    set.add(Registry::global().get("test_halve_bias_gradients"));
    set.add(Registry::global().get("gradient_steering"), /*enabled=*/false);
    Params params{{"fc.weight", withGrad({1, 2}, {4, -6}, {2})},
                  {"fc.bias", withGrad({0}, {3}, {1})}};
    symtune::StepFeatures features;
    const auto outcome = set.apply(params, features, 0.1);
    QCOMPARE(params[0].second.grad()[0].item<float>(), 4.0f);
    QCOMPARE(params[0].second.grad()[1].item<float>(), -6.0f);
    QCOMPARE(params[1].second.grad()[0].item<float>(), 1.5f);
    QCOMPARE(outcome.gradientsChanged, int64_t{1});
    QCOMPARE(outcome.fired, std::vector<std::string>{"test_halve_bias_gradients"});
    QCOMPARE(outcome.inForce, std::vector<std::string>{"test_halve_bias_gradients"});
    QVERIFY(!outcome.skipStep);
  }

  void cppRuleSkipsAndSetsLr() {
    symtune::rules::RuleSet set;
    set.add(Registry::global().get("test_freeze_after_two"));
    Params params{{"w", withGrad({1}, {1}, {1})}};
    symtune::StepFeatures features;
    features[symtune::Feature::Step] = 1;
    auto outcome = set.apply(params, features, 0.1);
    QVERIFY(!outcome.skipStep && !outcome.lr && outcome.fired.empty());
    features[symtune::Feature::Step] = 2;
    outcome = set.apply(params, features, 0.1);
    QVERIFY(outcome.skipStep);
    QVERIFY(outcome.lr);
    QCOMPARE(*outcome.lr, 0.05);
  }

  void takenNamesAreRefusedNamingBothOrigins() {
    Registry registry;
    registry.addRules(symtune::rules::parseRules("rule nan_guard { skip step }"), "pack a 1.0.0");
    QCOMPARE(errorOf([&] {
               registry.addRules(symtune::rules::parseRules("rule ok { skip step }\n"
                                                            "rule nan_guard { skip step }"),
                                 "pack b 2.0.0");
             }),
             std::string("rule `nan_guard` of pack b 2.0.0 is already registered by pack a 1.0.0"));
    QVERIFY(!registry.find("ok"));  // all or nothing
    symtune::rules::NativeRule native{"nan_guard", "*", "", [](auto&) { return false; }};
    QCOMPARE(errorOf([&] { registry.addNative(native, "C++ (x.cpp)"); }),
             std::string("rule `nan_guard` of C++ (x.cpp) is already registered by pack a 1.0.0"));
    QCOMPARE(errorOf([&] { (void)registry.get("nan_gaurd"); }),
             std::string("no rule named `nan_gaurd` is registered (did you mean `nan_guard`?)"));
    // A rule set refuses a second rule of the same name, whatever its kind.
    symtune::rules::RuleSet set;
    set.add(*registry.find("nan_guard"));
    QCOMPARE(errorOf([&] { set.add(native); }),
             std::string("a rule named `nan_guard` is already in the set"));
  }

  void rewritesAreValidatedWhenRegistered() {
    Registry registry;
    QCOMPARE(errorOf([&] {
               registry.addRules(symtune::rules::parseRules(
                                     "rule r {\n  rewrite \"graph(%x):\\n  return (%x)\" => "
                                     "\"graph(%x, %y):\\n  return (%x)\"\n}"),
                                 "the test");
             }),
             std::string("rule `r` of the test: 2:3: the pattern has no operation to match (only "
                         "constants)"));
  }

  void sessionEnablesRegisteredAndOwnRules() {
    auto session = zooSession();
    session.rules.enable = {"test_halve_bias_gradients", "nan_guard"};
    session.rules.source = "rule mine { when step == 1  set lr = lr * 0.5 }";
    symtune::Trainer trainer(session);
    QCOMPARE(trainer.rules().names(),
             (std::vector<std::string>{"test_halve_bias_gradients", "nan_guard", "mine"}));
    trainer.step();
    const auto second = trainer.step();
    QCOMPARE(second.rulesInForce,
             (std::vector<std::string>{"test_halve_bias_gradients", "nan_guard", "mine"}));
    QCOMPARE(second.rulesFired, (std::vector<std::string>{"test_halve_bias_gradients", "mine"}));
    QCOMPARE(trainer.optimizer().inner().param_groups().front().options().get_lr(), 5e-4);
    QVERIFY(trainer.rewrites().empty());
  }

  void changesFromAnotherThreadApplyAtTheNextStep() {
    auto session = zooSession();
    session.rules.enable = {"nan_guard"};
    symtune::Trainer trainer(session);
    trainer.step();
    std::future<void> disable, add, bad;
    std::thread other([&] {
      disable = trainer.changeRules([](auto& set) { set.setEnabled("nan_guard", false); });
      add = trainer.changeRules(
          [](auto& set) { set.add(Registry::global().get("loss_spike_guard")); });
      bad = trainer.changeRules([](auto& set) { set.setEnabled("nope", true); });
    });
    other.join();
    // Nothing changes until the next step begins.
    QVERIFY(trainer.rules().enabled("nan_guard"));
    QCOMPARE(trainer.rules().names(), std::vector<std::string>{"nan_guard"});
    QCOMPARE(disable.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
    const auto r = trainer.step();
    QCOMPARE(r.rulesInForce, std::vector<std::string>{"loss_spike_guard"});
    disable.get();
    add.get();
    QCOMPARE(errorOf([&] { bad.get(); }), std::string("no rule named `nope`"));
    QCOMPARE(trainer.rules().names(), (std::vector<std::string>{"nan_guard", "loss_spike_guard"}));
  }

  void sessionWithUnknownRuleIsASetupError() {
    auto session = zooSession();
    session.rules.enable = {"nan_gaurd"};
    QCOMPARE(errorOf([&] { symtune::Trainer trainer(session); }),
             std::string("rules: no rule named `nan_gaurd` is registered (did you mean "
                         "`nan_guard`?)"));
    session.rules.enable = {"nan_guard"};
    session.rules.source = "rule nan_guard { skip step }";
    QCOMPARE(errorOf([&] { symtune::Trainer trainer(session); }),
             std::string("rules: a rule named `nan_guard` is already in the set"));
  }

  void sessionFileRules() {
    const std::string base = R"({"format": "symtune-session", "version": 1, "name": "s",
      "model": {"zoo": "dynamic_resnet", "preset": "ci"}, )";
    const auto s = symtune::parseSession(
        base +
            R"("rules": {"enable": ["nan_guard", "tanh_gelu"], "source": "rule a { skip step }"}})",
        "s.json");
    QCOMPARE(s.rules.enable, (std::vector<std::string>{"nan_guard", "tanh_gelu"}));
    QCOMPARE(s.rules.source, std::string("rule a { skip step }"));
    auto sessionError = [&](const std::string& rules) {
      try {
        symtune::parseSession(base + R"("rules": )" + rules + "}", "s.json");
      } catch (const symtune::SessionError& e) {
        return std::string(e.what());
      }
      return std::string("(no error)");
    };
    QCOMPARE(sessionError(R"({"enable": "nan_guard"})"),
             std::string("s.json: rules.enable: expected an array of rule names, found a string"));
    QCOMPARE(sessionError(R"({"enable": ["a", "a"]})"),
             std::string("s.json: rules.enable[1]: rule \"a\" is listed twice"));
    QCOMPARE(sessionError(R"({"source": "rule a { set gard = 1 }"})"),
             std::string("s.json: rules.source: 1:14: expected `grad` or `lr` after `set`, found "
                         "`gard`"));
    QCOMPARE(sessionError(R"({"enabled": []})"),
             std::string("s.json: rules.enabled: unknown field (known here: enable, source)"));
  }

 private:
  QTemporaryDir library_;
};

SYMTUNE_TEST_MAIN_CORE(TestRuleRegistry)
#include "tst_rule_registry.moc"
