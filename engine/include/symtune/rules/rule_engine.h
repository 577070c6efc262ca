#pragma once
// Running checked rules (rules.h) on a training step: each rule's expressions are compiled once
// into closures over ATen operations, then applied after backward and before the optimizer update
// (docs/rules.md, "When rules run").
//
//   symtune::rules::RuleSet rules;
//   rules.add(symtune::rules::parseRules(text));
//   auto outcome = rules.apply(namedParameters, features, optimizer);   // after backward
//   if (!outcome.skipStep) optimizer.step();

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include "symtune/core/features.h"
#include "symtune/core/rules.h"

namespace symtune::rules {

// What applying the rules did to one step.
struct RuleOutcome {
  bool skipStep = false;             // a `skip step` fired: no update this step
  std::optional<double> lr;          // the learning rate a `set lr` set
  int64_t gradientsChanged = 0;      // parameters whose gradient a `set grad` replaced
  std::vector<std::string> fired;    // rules whose `when` held (or that have none), in order
  std::vector<std::string> inForce;  // the enabled rules, in order
};

class CompiledRule;
struct NativeRule;
struct RegistryEntry;

class RuleSet {
 public:
  RuleSet();
  ~RuleSet();
  RuleSet(RuleSet&&) noexcept;
  RuleSet& operator=(RuleSet&&) noexcept;

  // Adds checked rules, enabled unless `enabled` is false. Throws std::invalid_argument for a
  // rule whose name is taken, and for rewrites (they change the model, not a step: the engine
  // applies them to the model's graph, not here).
  void add(const std::vector<Rule>& rules, bool enabled = true);
  // A C++ rule (rule_registry.h). Throws std::invalid_argument for a taken name.
  void add(const NativeRule& rule, bool enabled = true);
  // A registered rule of either kind, as add() above.
  void add(const RegistryEntry& entry, bool enabled = true);
  void remove(const std::string& name);               // throws std::out_of_range when unknown
  void setEnabled(const std::string& name, bool on);  // throws std::out_of_range when unknown
  bool enabled(const std::string& name) const;
  // Whether the rule runs as a fused kernel instead of the interpreter (Note [Lowered rules]:
  // the RMS clamp of gradient_steering). Throws std::out_of_range when unknown.
  bool lowered(const std::string& name) const;
  std::vector<std::string> names() const;
  // A rule-language rule's text (`rule NAME { ... }`); empty for a C++ rule. Throws
  // std::out_of_range when unknown.
  const std::string& source(const std::string& name) const;
  bool empty() const { return rules_.empty(); }

  // Each `params "GLOB"` selector (a C++ rule's select glob too) that matches none of
  // `parameters` (the model's parameter names), as "rule `NAME`: params \"GLOB\" selects none
  // of the model's N parameters": a misspelt glob made its rule do nothing, without a word.
  std::vector<std::string> unselected(const std::vector<std::string>& parameters) const;

  // Runs every enabled rule, in order, on the parameters' gradients: `features` are what `when`
  // and expressions read (the caller fills in this step's loss and gradient statistics), `lr` the
  // current learning rate. Sets gradients in place; does not step or change the optimizer
  // (the caller applies outcome.lr and skips the update on outcome.skipStep).
  RuleOutcome apply(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                    const StepFeatures& features, double lr);

 private:
  static void checkFree(const std::vector<std::string>& names, const std::string& name);

  std::vector<std::unique_ptr<CompiledRule>> rules_;
};

// Changes to a RuleSet queued from any thread and applied by the thread that owns the set, at a
// point of its choosing (a trainer: its step boundaries). Each change's future becomes ready when
// it has run, holding what it threw.
class RuleChanges {
 public:
  std::future<void> push(std::function<void(RuleSet&)> change);
  void applyTo(RuleSet& set);

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::function<void(RuleSet&)>, std::promise<void>>> pending_;
};

}  // namespace symtune::rules
