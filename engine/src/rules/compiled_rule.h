#pragma once
// One rule of a RuleSet (rule_engine.h), compiled: a rule-language rule's trigger and actions as
// closures (rule_compiler.h), or a C++ rule (rule_registry.h).

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "rule_compiler.h"
#include "rule_value.h"
#include "symtune/core/features.h"
#include "symtune/core/rules.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/rules/rule_registry.h"

namespace symtune::rules {

// One rule, compiled: its trigger and actions as closures.
class CompiledRule {
 public:
  explicit CompiledRule(std::shared_ptr<const NativeRule> native);
  explicit CompiledRule(const Rule& rule);

  const Rule& rule() const { return rule_; }
  const std::string& name() const { return rule_.name; }
  bool enabled = true;

  // A C++ rule: runs once per step on its selected parameters that have a gradient.
  bool runNative(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                 const StepFeatures& features, double lr, RuleOutcome& outcome) const;
  bool isNative() const { return native_ != nullptr; }
  bool lowered() const { return rmsClamp_; }  // Note [Lowered rules]

  // The lowered RMS clamp over the selected gradients; false (nothing done) when they are not
  // all dense and on one device, for the interpreter to take.
  bool runLowered(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                  RuleOutcome& outcome, bool& fired) const;

  bool selects(const std::string& parameter) const;
  // The globs over parameter names it selects with: its `params` selectors, a C++ rule's one.
  std::vector<std::string> parameterGlobs() const;

  // Runs the rule once in `env`; true when its trigger held.
  bool run(detail::Env& env, RuleOutcome& outcome) const;

 private:
  // `set grad = grad OP x` and `set grad = clamp(grad, lo, hi)` update the gradient in place:
  // the operands are evaluated first, then one in-place ATen op (no new gradient tensor).
  enum class InPlace { None, Add, Sub, Mul, Div, Clamp };

  struct Step {
    Action::Kind kind = Action::Kind::Let;
    detail::Fn value;
    size_t slot = 0;
    InPlace inPlace = InPlace::None;
    std::vector<detail::Fn> operands;  // the in-place form's operands after `grad`
  };

  static InPlace inPlaceForm(const Expr& e, detail::Compiler& compiler,
                             std::vector<detail::Fn>& operands);
  static void updateInPlace(const Step& s, detail::Env& env);

  Rule rule_;
  bool rmsClamp_ = false;
  std::shared_ptr<const NativeRule> native_;
  detail::Fn trigger_;
  std::vector<Step> steps_;
  std::map<std::string, size_t> letSlots_;
};

}  // namespace symtune::rules
