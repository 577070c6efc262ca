#pragma once
// The rule registry (docs/rules.md, "The registry"): every rule a session or the studio can enable,
// by name — rules written in the rule language (the built-in pack, packs installed in the user's
// library, plugins' rules) and C++ rules, which register with SYMTUNE_REGISTER_RULE:
//
//   SYMTUNE_REGISTER_RULE(gradient_centralization, "*.weight",
//                         "Subtracts each output unit's mean from its gradient") {
//     for (const auto& [name, p] : context.parameters()) { ... p.mutable_grad() ... }
//     return true;  // fired
//   }
//
//   auto& registry = symtune::rules::Registry::global();
//   trainer.rules().add(registry.get("gradient_centralization"));

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "symtune/core/features.h"
#include "symtune/core/rule_pack.h"
#include "symtune/core/rules.h"

namespace symtune::rules {

struct RuleOutcome;

// What a C++ rule sees and does, once per step, after backward and before the update (the same
// moment as a rule-language rule). Gradients change in place under NoGradGuard.
class RuleContext {
 public:
  RuleContext(const StepFeatures& features, double lr,
              std::vector<std::pair<std::string, torch::Tensor>> parameters, RuleOutcome& outcome);

  const StepFeatures& features() const { return features_; }
  double lr() const { return lr_; }
  // The parameters the rule selects that have a gradient this step: (dotted name, parameter).
  const std::vector<std::pair<std::string, torch::Tensor>>& parameters() const {
    return parameters_;
  }
  void setLr(double lr);                          // from this step on, like `set lr`
  void skipStep();                                // like `skip step`
  void gradientsChanged(int64_t parameters = 1);  // counted in RuleOutcome::gradientsChanged

 private:
  const StepFeatures& features_;
  double lr_;
  std::vector<std::pair<std::string, torch::Tensor>> parameters_;
  RuleOutcome& outcome_;
};

// A rule written in C++. `run` returns whether it fired (did something this step).
struct NativeRule {
  std::string name;
  std::string select = "*";  // glob over parameter names (as `select params`)
  std::string description;
  std::function<bool(RuleContext&)> run;
};

// A rule or a C++ rule that cannot be registered (bad rule, taken name, ...). what() names it.
class RegistryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RegistryEntry {
  std::string name;
  std::string description;
  // Where it came from: "pack builtin 1.0.0", "pack mine 1.2.0 (/path/mine.json)",
  // "C++ (file.cpp)", "plugin /path/libx.so", or what the caller named.
  std::string origin;
  std::optional<Rule> rule;                  // a rule-language rule, checked (rewrites validated)
  std::shared_ptr<const NativeRule> native;  // or a C++ rule
  bool isRewrite() const;
};

class Registry {
 public:
  // The process's registry: the built-in pack, every C++ rule registered with
  // SYMTUNE_REGISTER_RULE, and the packs installed in the user's library (defaultLibrary()).
  // Library packs that cannot be used are skipped and listed in problems(). Plugins are loaded
  // explicitly (plugin_loader.h).
  static Registry& global();

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Each add is all or nothing. Throws RegistryError (a name already registered: both origins
  // named; a rewrite whose IR does not parse or whose sides do not match).
  void addRules(const std::vector<Rule>& rules, const std::string& origin,
                const std::vector<std::string>& descriptions = {});
  void addPack(const RulePack& pack, const std::string& origin);
  void addNative(const NativeRule& rule, const std::string& origin);
  // Moves every entry of `other` into this registry, all or nothing.
  void merge(Registry& other);

  std::optional<RegistryEntry> find(const std::string& name) const;
  RegistryEntry get(const std::string& name) const;  // throws RegistryError ("did you mean")
  std::vector<RegistryEntry> entries() const;        // in registration order
  std::vector<std::string> problems() const;
  void addProblem(std::string problem);

  // C++ rules registered with SYMTUNE_REGISTER_RULE since the last call (in load order); the
  // global registry takes them when it is built, the plugin loader takes a plugin's own.
  static std::vector<std::pair<NativeRule, std::string>> takeStaticRegistrations();

 private:
  void checkFree(const std::string& name, const std::string& origin) const;  // mutex_ held
  void syncStatic();

  mutable std::mutex mutex_;
  std::vector<RegistryEntry> entries_;
  std::vector<std::string> problems_;
};

// What SYMTUNE_REGISTER_RULE expands to: a static object that queues the rule for the registry.
struct NativeRuleRegistration {
  NativeRuleRegistration(NativeRule rule, const char* file);
};

}  // namespace symtune::rules

// Registers a C++ rule NAME (an identifier) over the parameters matching SELECT, followed by its
// body: a function of `symtune::rules::RuleContext& context` returning whether it fired.
#define SYMTUNE_REGISTER_RULE(NAME, SELECT, DESCRIPTION)                                         \
  static bool symtune_rule_##NAME(::symtune::rules::RuleContext& context);                       \
  static const ::symtune::rules::NativeRuleRegistration symtune_rule_registration_##NAME{        \
      ::symtune::rules::NativeRule{#NAME, SELECT, DESCRIPTION, &symtune_rule_##NAME}, __FILE__}; \
  static bool symtune_rule_##NAME(::symtune::rules::RuleContext& context)
