#include "symtune/rules/rule_engine.h"

#include <algorithm>
#include <stdexcept>

#include "compiled_rule.h"
#include "symtune/rules/rule_registry.h"

namespace symtune::rules {

namespace {

// What a rule threw as it ran (an operation its expression cannot take on this gradient, a
// learning rate it may not set), with the rule and the parameter named: ATen's message alone
// ("max(): Expected reduction dim to be specified for input.numel() == 0") named neither.
struct RuleFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void ruleFailed(const std::string& rule, const std::string* parameter,
                             const std::exception& e) {
  const auto* c10Error = dynamic_cast<const c10::Error*>(&e);
  std::string why = c10Error != nullptr ? c10Error->what_without_backtrace() : e.what();
  why = why.substr(0, why.find('\n'));
  throw RuleFailure("rule `" + rule + "`" +
                    (parameter != nullptr ? " on parameter `" + *parameter + "`" : "") + ": " +
                    why);
}

}  // namespace

RuleSet::RuleSet() = default;
RuleSet::~RuleSet() = default;
RuleSet::RuleSet(RuleSet&&) noexcept = default;
RuleSet& RuleSet::operator=(RuleSet&&) noexcept = default;

void RuleSet::add(const std::vector<Rule>& rules, bool enabled) {
  // All or nothing: every rule is checked against the set and the batch before any is added.
  std::vector<std::string> names = this->names();
  for (const auto& r : rules) {
    checkFree(names, r.name);
    names.push_back(r.name);
    for (const auto& a : r.actions) {
      if (a.kind == Action::Kind::Rewrite)
        throw std::invalid_argument("rule `" + r.name +
                                    "` rewrites the model: it is applied to the model's code when "
                                    "the trainer is built (rule_rewrite.h), not to a step");
    }
  }
  std::vector<std::unique_ptr<CompiledRule>> compiled;
  for (const auto& r : rules) {
    compiled.push_back(std::make_unique<CompiledRule>(r));
    compiled.back()->enabled = enabled;
  }
  for (auto& c : compiled)
    rules_.push_back(std::move(c));
}

void RuleSet::add(const NativeRule& rule, bool enabled) {
  TORCH_CHECK(rule.run, "C++ rule `", rule.name, "` has no body");
  RegistryEntry entry;
  entry.name = rule.name;
  entry.native = std::make_shared<const NativeRule>(rule);
  add(entry, enabled);
}

void RuleSet::add(const RegistryEntry& entry, bool enabled) {
  if (entry.native) {
    checkFree(names(), entry.name);
    rules_.push_back(std::make_unique<CompiledRule>(entry.native));
    rules_.back()->enabled = enabled;
  } else {
    add(std::vector<Rule>{*entry.rule}, enabled);
  }
}

void RuleSet::remove(const std::string& name) {
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    if ((*it)->name() == name) {
      rules_.erase(it);
      return;
    }
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

void RuleSet::checkFree(const std::vector<std::string>& names, const std::string& name) {
  if (std::find(names.begin(), names.end(), name) != names.end())
    throw std::invalid_argument("a rule named `" + name + "` is already in the set");
}

void RuleSet::setEnabled(const std::string& name, bool on) {
  for (auto& r : rules_) {
    if (r->rule().name == name) {
      r->enabled = on;
      return;
    }
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

bool RuleSet::lowered(const std::string& name) const {
  for (const auto& r : rules_) {
    if (r->rule().name == name)
      return r->lowered();
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

bool RuleSet::enabled(const std::string& name) const {
  for (const auto& r : rules_) {
    if (r->rule().name == name)
      return r->enabled;
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

const std::string& RuleSet::source(const std::string& name) const {
  for (const auto& r : rules_) {
    if (r->rule().name == name)
      return r->rule().source;
  }
  throw std::out_of_range("no rule named `" + name + "`");
}

std::vector<std::string> RuleSet::names() const {
  std::vector<std::string> out;
  for (const auto& r : rules_)
    out.push_back(r->rule().name);
  return out;
}

std::vector<std::string> RuleSet::unselected(const std::vector<std::string>& parameters) const {
  std::vector<std::string> out;
  for (const auto& r : rules_) {
    for (const std::string& glob : r->parameterGlobs()) {
      if (std::none_of(parameters.begin(), parameters.end(),
                       [&](const std::string& p) { return globMatch(glob, p); }))
        out.push_back("rule `" + r->name() + "`: params \"" + glob +
                      "\" selects none of the model's " + std::to_string(parameters.size()) +
                      " parameters");
    }
  }
  return out;
}

RuleOutcome RuleSet::apply(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                           const StepFeatures& features, double lr) {
  RuleOutcome outcome;
  detail::Env env;
  env.features = &features;
  env.lr = lr;
  for (const auto& r : rules_) {
    if (!r->enabled)
      continue;
    outcome.inForce.push_back(r->rule().name);
    bool fired = false;
    const std::string& rule = r->rule().name;
    try {
      if (r->isNative()) {
        fired = r->runNative(parameters, features, env.lr, outcome);
        if (outcome.lr)
          env.lr = *outcome.lr;
      } else if (!r->rule().perParameter) {
        env.grad = nullptr;
        env.param = nullptr;
        fired = r->run(env, outcome);
      } else if (r->lowered() && r->runLowered(parameters, outcome, fired)) {
        // done: Note [Lowered rules]
      } else {
        for (const auto& [name, p] : parameters) {
          torch::Tensor grad = p.grad();
          // A parameter of no elements has nothing to transform or test (`max` of none threw).
          if (!grad.defined() || grad.numel() == 0 || !r->selects(name))
            continue;
          env.grad = &grad;
          env.param = &p;
          try {
            fired = r->run(env, outcome) || fired;
          } catch (const std::exception& e) {
            env.grad = nullptr;
            env.param = nullptr;
            ruleFailed(rule, &name, e);
          }
        }
        env.grad = nullptr;
        env.param = nullptr;
      }
    } catch (const RuleFailure&) {
      throw;  // named already, with its parameter
    } catch (const std::exception& e) {
      ruleFailed(rule, nullptr, e);
    }
    if (fired)
      outcome.fired.push_back(r->rule().name);
  }
  return outcome;
}

std::future<void> RuleChanges::push(std::function<void(RuleSet&)> change) {
  TORCH_CHECK(change != nullptr, "RuleChanges::push: no change");
  std::promise<void> done;
  auto future = done.get_future();
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.emplace_back(std::move(change), std::move(done));
  return future;
}

void RuleChanges::applyTo(RuleSet& set) {
  decltype(pending_) changes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    changes.swap(pending_);
  }
  for (auto& [change, done] : changes) {
    try {
      change(set);
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  }
}

}  // namespace symtune::rules
