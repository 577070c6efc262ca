#include "symtune/remat/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <c10/util/Exception.h>

namespace symtune::remat {

namespace {

// The needed bytes cut into this many parts.
constexpr int kSteps = 512;
constexpr double kNever = std::numeric_limits<double>::infinity();

// A cover table: for each j in [0, kSteps], the least cost of freeing at least j parts, and
// the units that do it.
struct Covers {
  std::vector<double> cost = std::vector<double>(kSteps + 1, kNever);
  std::vector<std::vector<const RematUnit*>> chosen =
      std::vector<std::vector<const RematUnit*>>(kSteps + 1);
  Covers() { cost[0] = 0; }
};

// How many whole parts `bytes` covers (rounded down: a plan never counts more than it frees).
int partsOf(double bytes, double part) {
  return static_cast<int>(std::min<double>(kSteps, std::floor(bytes / part)));
}

// `table` with one more unit that may be taken (0/1 knapsack, covering).
void addItem(Covers& table, const RematUnit& unit, double part) {
  const int w = partsOf(unit.freedBytes, part);
  if (w <= 0)
    return;
  for (int j = kSteps; j >= 1; --j) {
    const int from = std::max(0, j - w);
    if (table.cost[from] + unit.cost < table.cost[j]) {
      table.cost[j] = table.cost[from] + unit.cost;
      table.chosen[j] = table.chosen[from];
      table.chosen[j].push_back(&unit);
    }
  }
}

// Covering: the least cost of at least j is the least over all j' >= j.
void makeMonotone(Covers& table) {
  for (int j = kSteps - 1; j >= 0; --j) {
    if (table.cost[j + 1] < table.cost[j]) {
      table.cost[j] = table.cost[j + 1];
      table.chosen[j] = table.chosen[j + 1];
    }
  }
}

}  // namespace

std::vector<RematUnit> rematUnits(SyMuGen& gen, const ForwardCost& cost, double bytesPerSavedByte,
                                  double secondsPerFlop, double secondsPerByte) {
  std::vector<RematUnit> units;
  for (const auto& u : gen.recomputableUnits()) {
    RematUnit unit{u.name, u.parent, 0, 0};
    const auto counted = cost.units.find(u.name);
    if (counted != cost.units.end()) {
      unit.freedBytes = bytesPerSavedByte * counted->second.savedBytes;
      unit.cost = secondsPerFlop * counted->second.flops + secondsPerByte * counted->second.bytes;
    }
    units.push_back(std::move(unit));
  }
  return units;
}

RematPlan planUnderBudget(const std::vector<RematUnit>& units, double predictedPeak,
                          double budget) {
  TORCH_CHECK(predictedPeak >= 0 && budget >= 0,
              "planUnderBudget: the predicted peak and the budget cannot be negative, got ",
              predictedPeak, " and ", budget);
  std::map<std::string, const RematUnit*> byName;
  for (const auto& u : units) {
    TORCH_CHECK(u.freedBytes >= 0 && u.cost >= 0, "planUnderBudget: unit \"", u.name,
                "\" has negative freed bytes or cost");
    TORCH_CHECK(byName.emplace(u.name, &u).second, "planUnderBudget: unit \"", u.name,
                "\" is listed twice");
  }
  // Groups: each top-level unit with its children.
  std::map<std::string, std::vector<const RematUnit*>> children;
  for (const auto& u : units) {
    if (u.parent.empty())
      continue;
    const auto parent = byName.find(u.parent);
    TORCH_CHECK(parent != byName.end() && parent->second->parent.empty(),
                "planUnderBudget: unit \"", u.name, "\" lies in \"", u.parent,
                "\", which is not a top-level unit");
    children[u.parent].push_back(&u);
  }

  // What a block's children free together, and the most a plan frees: per group the block or
  // all its children, whichever frees more.
  std::map<std::string, double> kidsFree;
  double most = 0;
  for (const auto& u : units) {
    if (!u.parent.empty())
      continue;
    double& kids = kidsFree[u.name];
    for (const RematUnit* c : children[u.name])
      kids += c->freedBytes;
    most += std::max(u.freedBytes, kids);
  }
  RematPlan plan;
  plan.predictedPeak = predictedPeak;
  plan.smallestFeasibleBudget = std::max(0.0, predictedPeak - most);
  const double need = predictedPeak - budget;
  if (need <= 0)
    return plan;  // fits as it is
  // The plan that frees the most: per group the block or all its children, whichever frees more.
  const auto takeMost = [&] {
    plan.segments.recompute.clear();
    plan.freedBytes = plan.cost = 0;
    for (const auto& u : units) {
      if (!u.parent.empty())
        continue;
      std::vector<const RematUnit*> taken;
      if (kidsFree[u.name] > u.freedBytes)
        taken = children[u.name];
      else if (u.freedBytes > 0)
        taken = {&u};
      for (const RematUnit* t : taken) {
        plan.segments.recompute.insert(t->name);
        plan.freedBytes += t->freedBytes;
        plan.cost += t->cost;
      }
    }
  };
  if (most < need) {
    plan.feasible = false;
    takeMost();
    plan.predictedPeak = predictedPeak - plan.freedBytes;
    return plan;
  }

  const double part = need / kSteps;
  // Per group (a top-level unit and its children), the cheapest cover of each j: the block alone
  // or a cover among its children, whichever is cheaper. Across groups the covers add: `best`
  // holds the least cost of covering j with the groups so far, `from` which j each group took.
  std::vector<Covers> groups;
  std::vector<std::vector<int>> from;  // per group, per j: the parts that group covered
  std::vector<double> best(kSteps + 1, kNever);
  best[0] = 0;
  for (const auto& u : units) {
    if (!u.parent.empty())
      continue;
    Covers kids, alone;
    for (const RematUnit* c : children[u.name])
      addItem(kids, *c, part);
    addItem(alone, u, part);
    makeMonotone(kids);
    makeMonotone(alone);
    Covers group;
    for (int j = 0; j <= kSteps; ++j) {
      const bool block = alone.cost[j] < kids.cost[j];
      group.cost[j] = block ? alone.cost[j] : kids.cost[j];
      group.chosen[j] = block ? alone.chosen[j] : kids.chosen[j];
    }
    std::vector<double> next(kSteps + 1, kNever);
    std::vector<int> took(kSteps + 1, 0);
    for (int a = 0; a <= kSteps; ++a) {
      if (best[a] == kNever)
        continue;
      for (int b = 0; b <= kSteps; ++b) {
        if (group.cost[b] == kNever)
          continue;
        const int j = std::min(kSteps, a + b);
        if (best[a] + group.cost[b] < next[j]) {
          next[j] = best[a] + group.cost[b];
          took[j] = b;
        }
      }
    }
    // Covering: at least j parts, so a cheaper cover of more parts serves j too.
    for (int j = kSteps - 1; j >= 0; --j) {
      if (next[j + 1] < next[j]) {
        next[j] = next[j + 1];
        took[j] = -(j + 1) - 1;  // "as for j + 1", which covers j too
      }
    }
    groups.push_back(std::move(group));
    from.push_back(std::move(took));
    best = std::move(next);
  }
  if (best[kSteps] != kNever) {
    // Back from the last group: each took b parts of the j left (or did as for a larger j).
    int j = kSteps;
    for (size_t g = groups.size(); g-- > 0;) {
      int at = j;
      while (from[g][at] < 0)
        at = -from[g][at] - 1;
      const int b = from[g][at];
      for (const RematUnit* u : groups[g].chosen[b]) {
        plan.segments.recompute.insert(u->name);
        plan.freedBytes += u->freedBytes;
        plan.cost += u->cost;
      }
      j = std::max(0, at - b);
    }
  } else {
    // Rounding each unit down to whole parts lost every cover (one exists, within a part per unit
    // of the need): the plan that frees the most, which covers it.
    takeMost();
  }
  plan.predictedPeak = predictedPeak - plan.freedBytes;
  return plan;
}

}  // namespace symtune::remat
