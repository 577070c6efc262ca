#include "symtune/rules/rule_registry.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "embedded_rule_packs.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/rules/rule_rewrite.h"

namespace symtune::rules {

namespace {

// C++ rules registered by static initializers (SYMTUNE_REGISTER_RULE), in load order, not yet
// taken by a registry. A function-local static: registrations run before main, in any order.
struct StaticRegistrations {
  std::mutex mutex;
  std::vector<std::pair<NativeRule, std::string>> pending;
};

StaticRegistrations& staticRegistrations() {
  static StaticRegistrations registrations;
  return registrations;
}

}  // namespace

NativeRuleRegistration::NativeRuleRegistration(NativeRule rule, const char* file) {
  auto& r = staticRegistrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pending.emplace_back(
      std::move(rule),
      std::string("C++ (") + std::filesystem::path(file).filename().string() + ")");
}

std::vector<std::pair<NativeRule, std::string>> Registry::takeStaticRegistrations() {
  auto& r = staticRegistrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  return std::exchange(r.pending, {});
}

RuleContext::RuleContext(const StepFeatures& features, double lr,
                         std::vector<std::pair<std::string, torch::Tensor>> parameters,
                         RuleOutcome& outcome)
    : features_(features), lr_(lr), parameters_(std::move(parameters)), outcome_(outcome) {
}

void RuleContext::setLr(double lr) {
  // RuleSet::apply names the rule.
  TORCH_CHECK(std::isfinite(lr) && lr >= 0, "set the learning rate to ", lr,
              ": it must be finite and not negative");
  outcome_.lr = lr;
  lr_ = lr;
}

void RuleContext::skipStep() {
  outcome_.skipStep = true;
}

void RuleContext::gradientsChanged(int64_t parameters) {
  outcome_.gradientsChanged += parameters;
}

bool RegistryEntry::isRewrite() const {
  return rule && std::any_of(rule->actions.begin(), rule->actions.end(),
                             [](const Action& a) { return a.kind == Action::Kind::Rewrite; });
}

Registry& Registry::global() {
  static Registry* registry = [] {
    auto* r = new Registry;  // never destroyed: C++ rules of plugins live as long as the process
    const RulePack builtin = parseRulePack(embeddedRulePack("builtin.json"), "builtin.json");
    r->addPack(builtin, "pack builtin " + builtin.version);
    const auto library = defaultLibrary();
    std::error_code ec;
    std::vector<std::filesystem::path> packs;
    for (const auto& file : std::filesystem::directory_iterator(library, ec)) {
      if (file.path().extension() == ".json")
        packs.push_back(file.path());
    }
    std::sort(packs.begin(), packs.end());
    for (const auto& path : packs) {
      try {
        const RulePack pack = loadRulePack(path);
        r->addPack(pack, "pack " + pack.name + " " + pack.version + " (" + path.string() + ")");
      } catch (const std::exception& e) {
        r->addProblem(path.string() + ": skipped: " + e.what());
      }
    }
    return r;
  }();
  registry->syncStatic();
  return *registry;
}

void Registry::syncStatic() {
  for (auto& [rule, origin] : takeStaticRegistrations()) {
    try {
      addNative(rule, origin);
    } catch (const RegistryError& e) {
      addProblem(e.what());
    }
  }
}

void Registry::checkFree(const std::string& name, const std::string& origin) const {
  for (const auto& e : entries_) {
    if (e.name == name)
      throw RegistryError("rule `" + name + "` of " + origin + " is already registered by " +
                          e.origin);
  }
}

void Registry::addRules(const std::vector<Rule>& rules, const std::string& origin,
                        const std::vector<std::string>& descriptions) {
  std::vector<RegistryEntry> added;
  for (size_t i = 0; i < rules.size(); ++i) {
    const Rule& rule = rules[i];
    try {
      validateRewrites(rule);
    } catch (const RuleError& e) {
      throw RegistryError("rule `" + rule.name + "` of " + origin + ": " + e.what());
    }
    RegistryEntry entry;
    entry.name = rule.name;
    entry.description = i < descriptions.size() ? descriptions[i] : "";
    entry.origin = origin;
    entry.rule = rule;
    added.push_back(std::move(entry));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < added.size(); ++i) {
    checkFree(added[i].name, origin);
    for (size_t j = 0; j < i; ++j) {
      if (added[j].name == added[i].name)
        throw RegistryError(origin + " defines rule `" + added[i].name + "` twice");
    }
  }
  for (auto& e : added)
    entries_.push_back(std::move(e));
}

void Registry::addPack(const RulePack& pack, const std::string& origin) {
  std::vector<Rule> rules;
  std::vector<std::string> descriptions;
  for (const auto& packed : pack.rules) {
    auto parsed = parseRules(packed.source);  // parseRulePack checked it holds exactly one rule
    rules.push_back(std::move(parsed.front()));
    descriptions.push_back(packed.description);
  }
  addRules(rules, origin, descriptions);
}

void Registry::addNative(const NativeRule& rule, const std::string& origin) {
  if (!rule.run)
    throw RegistryError("C++ rule `" + rule.name + "` of " + origin + " has no body");
  RegistryEntry entry;
  entry.name = rule.name;
  entry.description = rule.description;
  entry.origin = origin;
  entry.native = std::make_shared<const NativeRule>(rule);
  std::lock_guard<std::mutex> lock(mutex_);
  checkFree(rule.name, origin);
  entries_.push_back(std::move(entry));
}

void Registry::merge(Registry& other) {
  std::scoped_lock lock(mutex_, other.mutex_);
  for (const auto& e : other.entries_)
    checkFree(e.name, e.origin);
  for (auto& e : other.entries_)
    entries_.push_back(std::move(e));
  other.entries_.clear();
  for (auto& p : other.problems_)
    problems_.push_back(std::move(p));
  other.problems_.clear();
}

std::optional<RegistryEntry> Registry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& e : entries_) {
    if (e.name == name)
      return e;
  }
  return std::nullopt;
}

RegistryEntry Registry::get(const std::string& name) const {
  if (auto e = find(name))
    return *e;
  std::vector<std::string> names;
  for (const auto& e : entries())
    names.push_back(e.name);
  throw RegistryError("no rule named `" + name + "` is registered" + didYouMean(name, names));
}

std::vector<RegistryEntry> Registry::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_;
}

std::vector<std::string> Registry::problems() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return problems_;
}

void Registry::addProblem(std::string problem) {
  std::lock_guard<std::mutex> lock(mutex_);
  problems_.push_back(std::move(problem));
}

}  // namespace symtune::rules
