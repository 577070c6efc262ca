#include "symtune/control/config_space.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace symtune::control {

namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// The value configuration `c` gives knob `name`; nullopt when it leaves the knob as the session
// has it (remat_budget or binding_explore unset, threads 0).
std::optional<double> valueOf(const Configuration& c, const std::string& name) {
  if (name == "microbatches")
    return c.microbatches;
  if (name == "threads")
    return c.threads > 0 ? std::optional<double>(c.threads) : std::nullopt;
  if (name == "remat_budget")
    return c.rematBudget;
  if (name == "binding_explore" && c.bindingExplore)
    return *c.bindingExplore ? 1.0 : 0.0;
  return std::nullopt;
}

bool allows(const Knob& knob, double v) {
  return std::any_of(knob.values.begin(), knob.values.end(),
                     [&](double allowed) { return sameValue(allowed, v); });
}

}  // namespace

double valueOf(const Configuration& c, const Knob& knob) {
  return valueOf(c, knob.name).value_or(knob.current);
}

void setValue(Configuration& c, const std::string& name, double v) {
  if (name == "microbatches")
    c.microbatches = static_cast<int>(v);
  else if (name == "threads")
    c.threads = static_cast<int>(v);
  else if (name == "remat_budget")
    c.rematBudget = v;
  else if (name == "binding_explore")
    c.bindingExplore = v > 0.5;
}

std::string Configuration::text() const {
  std::string out = "microbatches " + std::to_string(microbatches);
  out += ", threads " + (threads > 0 ? std::to_string(threads) : std::string("as begun"));
  out += ", remat_budget " + (rematBudget ? number(*rematBudget) : std::string("as the session"));
  if (bindingExplore)
    out += std::string(", binding_explore ") + (*bindingExplore ? "1" : "0");
  return out;
}

const Knob* ConfigSpace::knob(const std::string& name) const {
  auto it =
      std::find_if(knobs_.begin(), knobs_.end(), [&](const Knob& k) { return k.name == name; });
  return it == knobs_.end() ? nullptr : &*it;
}

std::optional<std::string> ConfigSpace::outside(const Configuration& c) const {
  for (const char* name : {"microbatches", "threads", "remat_budget", "binding_explore"}) {
    const std::optional<double> v = valueOf(c, name);
    const Knob* k = knob(name);
    if (!v || (k == nullptr && std::string(name) == "microbatches" && *v == 1))
      continue;
    if (k == nullptr)
      return std::string(name) + " " + number(*v) + ": this run has no such knob";
    if (!allows(*k, *v)) {
      std::string values;
      for (double allowed : k->values)
        values += (values.empty() ? "" : ", ") + number(allowed);
      return std::string(name) + " " + number(*v) + " is not one of " + values +
             (k->constraint.empty() ? "" : " (" + k->constraint + ")");
    }
  }
  return std::nullopt;
}

std::vector<Configuration> ConfigSpace::grid() const {
  std::vector<Configuration> all;
  Configuration c;
  std::function<void(size_t)> extend = [&](size_t i) {
    if (i == knobs_.size()) {
      all.push_back(c);
      return;
    }
    for (double v : knobs_[i].values) {
      setValue(c, knobs_[i].name, v);
      extend(i + 1);
    }
  };
  extend(0);
  return all;
}

Configuration ConfigSpace::current() const {
  Configuration c;
  for (const Knob& k : knobs_)
    setValue(c, k.name, k.current);
  return c;
}

}  // namespace symtune::control
