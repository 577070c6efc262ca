#include "symtune/remat/planner.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>

#include <c10/util/Exception.h>

namespace symtune::remat {

namespace {

// The needed bytes cut into this many parts.
constexpr int kSteps = 512;
constexpr double kNever = std::numeric_limits<double>::infinity();
// The most choices of first calls a block is given, and one more: k = n/16, 2n/16, … 15n/16 of its
// n calls, rounded up (every k below n when n <= 16).
constexpr size_t kMostFirstCalls = 16;

// A cover table: for each j in [0, kSteps], the least cost of freeing at least j parts, and
// the units that do it.
struct Covers {
  std::vector<double> cost = std::vector<double>(kSteps + 1, kNever);
  std::vector<std::vector<const RematUnit*>> chosen =
      std::vector<std::vector<const RematUnit*>>(kSteps + 1);
  Covers() { cost[0] = 0; }
};

// How many parts `bytes` counts as: whole parts (rounded down: a cover then never frees less
// than it counts), or parts begun (rounded up: a cover may free less, and is checked).
int partsOf(double bytes, double part, bool roundUp) {
  const double parts = bytes / part;
  return static_cast<int>(std::min<double>(kSteps, roundUp ? std::ceil(parts) : std::floor(parts)));
}

// `table` with one more unit that may be taken (0/1 knapsack, covering).
void addItem(Covers& table, const RematUnit& unit, double part, bool roundUp) {
  const int w = partsOf(unit.freedBytes, part, roundUp);
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

// The least cost of covering each j with a cover from `a` and one from `b` together.
Covers addUp(const Covers& a, const Covers& b) {
  Covers sum;
  std::vector<std::pair<int, int>> from(kSteps + 1, {0, 0});
  for (int i = 0; i <= kSteps; ++i) {
    if (a.cost[i] == kNever)
      continue;
    for (int k = 0; k <= kSteps; ++k) {
      if (b.cost[k] == kNever)
        continue;
      const int j = std::min(kSteps, i + k);
      if (a.cost[i] + b.cost[k] < sum.cost[j]) {
        sum.cost[j] = a.cost[i] + b.cost[k];
        from[j] = {i, k};
      }
    }
  }
  for (int j = 0; j <= kSteps; ++j) {
    if (sum.cost[j] == kNever)
      continue;
    sum.chosen[j] = a.chosen[static_cast<size_t>(from[j].first)];
    const auto& more = b.chosen[static_cast<size_t>(from[j].second)];
    sum.chosen[j].insert(sum.chosen[j].end(), more.begin(), more.end());
  }
  makeMonotone(sum);
  return sum;
}

}  // namespace

std::vector<RematUnit> rematUnits(SyMuGen& gen, const ForwardCost& cost, double bytesPerSavedByte,
                                  double secondsPerFlop, double secondsPerByte,
                                  double secondsPerSpan) {
  std::vector<RematUnit> units;
  const std::vector<std::string> blocks = gen.segmentBlocks();
  for (const auto& u : gen.recomputableUnits()) {
    RematUnit unit{u.name, u.parent, 0, 0};
    const auto counted = cost.units.find(u.name);
    if (counted != cost.units.end()) {
      unit.freedBytes = bytesPerSavedByte * counted->second.savedBytes;
      unit.cost = secondsPerFlop * counted->second.flops + secondsPerByte * counted->second.bytes;
      unit.executions = std::max<int64_t>(1, counted->second.executions);
      unit.cost += secondsPerSpan * static_cast<double>(counted->second.executions);
      const auto& calls = counted->second;
      if (unit.parent.empty() && calls.executions > 1 &&
          calls.savedByCall.size() == static_cast<size_t>(calls.executions) &&
          std::find(blocks.begin(), blocks.end(), unit.name) != blocks.end()) {
        for (size_t i = 0; i < calls.savedByCall.size(); ++i) {
          const auto at = [&](const std::vector<double>& v) { return i < v.size() ? v[i] : 0.0; };
          unit.freedByCall.push_back(bytesPerSavedByte * calls.savedByCall[i]);
          unit.costByCall.push_back(secondsPerFlop * at(calls.flopsByCall) +
                                    secondsPerByte * at(calls.bytesByCall) + secondsPerSpan);
        }
      }
    }
    units.push_back(std::move(unit));
  }
  return units;
}

std::optional<UnitShare> shareOf(const std::vector<RematUnit>& units, const std::string& name) {
  const auto first = SegmentPlan::splitFirstCalls(name);
  const std::string& unitName = first ? first->first : name;
  const auto unit = std::find_if(units.begin(), units.end(),
                                 [&](const RematUnit& u) { return u.name == unitName; });
  if (unit == units.end())
    return std::nullopt;
  UnitShare share;
  if (!first) {
    share.freedBytes = unit->freedBytes;
    share.cost = unit->cost;
    share.comesBack =
        unit->freedBytes / static_cast<double>(std::max<int64_t>(1, unit->executions));
    return share;
  }
  const auto k = static_cast<size_t>(first->second);
  if (k > unit->freedByCall.size() || k > unit->costByCall.size())
    return std::nullopt;
  double most = 0, keptAfter = 0;
  for (size_t i = 0; i < unit->freedByCall.size(); ++i) {
    if (i < k) {
      share.freedBytes += unit->freedByCall[i];
      share.cost += unit->costByCall[i];
      most = std::max(most, unit->freedByCall[i]);
    } else {
      keptAfter += unit->freedByCall[i];
    }
  }
  share.comesBack = std::max(0.0, most - keptAfter);
  return share;
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
  // The tree: each unit's children (a block's loops and runs, a loop's runs).
  std::map<std::string, std::vector<const RematUnit*>> children;
  std::vector<const RematUnit*> roots;
  for (const auto& u : units) {
    if (u.parent.empty()) {
      roots.push_back(&u);
      continue;
    }
    TORCH_CHECK(byName.count(u.parent) > 0, "planUnderBudget: unit \"", u.name, "\" lies in \"",
                u.parent, "\", which is not a unit");
    // Up the parents to a top-level unit, in fewer steps than there are units.
    const RematUnit* up = &u;
    for (size_t steps = 0; !up->parent.empty(); ++steps) {
      TORCH_CHECK(steps < units.size(), "planUnderBudget: unit \"", u.name,
                  "\" lies in itself through its parents");
      const auto parent = byName.find(up->parent);
      TORCH_CHECK(parent != byName.end(), "planUnderBudget: unit \"", up->name, "\" lies in \"",
                  up->parent, "\", which is not a unit");
      up = parent->second;
    }
    children[u.parent].push_back(&u);
  }

  // The most each unit's subtree frees: the unit, or the most of each child, whichever is more.
  std::map<std::string, double> mostOf;
  std::function<double(const RematUnit&)> most = [&](const RematUnit& u) {
    double kids = 0;
    for (const RematUnit* c : children[u.name])
      kids += most(*c);
    return mostOf[u.name] = std::max(u.freedBytes, kids);
  };
  double mostOfAll = 0;
  for (const RematUnit* r : roots)
    mostOfAll += most(*r);
  RematPlan plan;
  plan.predictedPeak = predictedPeak;
  plan.smallestFeasibleBudget = std::max(0.0, predictedPeak - mostOfAll);
  const double need = predictedPeak - budget;
  if (need <= 0)
    return plan;  // fits as it is
  const auto take = [&](const RematUnit& u) {
    plan.segments.recompute.insert(u.name);
    plan.freedBytes += u.freedBytes;
    plan.cost += u.cost;
  };
  // The plan that frees the most: per unit the unit itself or its children's, whichever frees more.
  std::function<void(const RematUnit&)> takeMost = [&](const RematUnit& u) {
    double kids = 0;
    for (const RematUnit* c : children[u.name])
      kids += mostOf[c->name];
    if (kids > u.freedBytes) {
      for (const RematUnit* c : children[u.name])
        takeMost(*c);
    } else if (u.freedBytes > 0) {
      take(u);
    }
  };
  const auto takeMostOfAll = [&] {
    plan.segments.recompute.clear();
    plan.freedBytes = plan.cost = 0;
    for (const RematUnit* r : roots)
      takeMost(*r);
  };
  if (mostOfAll < need) {
    plan.feasible = false;
    takeMostOfAll();
    plan.predictedPeak = predictedPeak - plan.freedBytes;
    return plan;
  }

  // Per unit, the cheapest cover of each j: the unit alone or a cover among its children, whose
  // covers add up (each child's the same choice, down the tree); across the top-level units the
  // covers add up too.
  const double part = need / kSteps;
  std::deque<RematUnit> firstCalls;  // the choices of recomputing a block's first calls
  std::function<Covers(const RematUnit&, bool)> coverOf = [&](const RematUnit& u, bool up) {
    Covers alone, kids;
    addItem(alone, u, part, up);
    makeMonotone(alone);
    // Its first k calls, each k a choice of its own (at most kMostFirstCalls of them).
    const size_t calls = std::min(u.freedByCall.size(), u.costByCall.size());
    for (size_t step = 1; calls > 1 && step < kMostFirstCalls; ++step) {
      const size_t k = (step * calls + kMostFirstCalls - 1) / kMostFirstCalls;
      if (k >= calls)
        break;
      if (step > 1 && k == (((step - 1) * calls + kMostFirstCalls - 1) / kMostFirstCalls))
        continue;
      const std::string name = SegmentPlan::firstCallsName(u.name, static_cast<int64_t>(k));
      const auto share = shareOf(units, name);
      if (!share)
        continue;
      RematUnit& first = firstCalls.emplace_back();
      first.name = name;
      first.parent = u.parent;
      first.freedBytes = share->freedBytes;
      first.cost = share->cost;
      Covers one;
      addItem(one, first, part, up);
      makeMonotone(one);
      for (int j = 0; j <= kSteps; ++j) {
        if (one.cost[j] < alone.cost[j]) {
          alone.cost[j] = one.cost[j];
          alone.chosen[j] = std::move(one.chosen[j]);
        }
      }
    }
    for (const RematUnit* c : children[u.name]) {
      if (const auto grand = children.find(c->name);
          grand == children.end() || grand->second.empty())
        addItem(kids, *c, part, up);
      else
        kids = addUp(kids, coverOf(*c, up));
    }
    makeMonotone(kids);
    for (int j = 0; j <= kSteps; ++j) {
      if (kids.cost[j] < alone.cost[j]) {
        alone.cost[j] = kids.cost[j];
        alone.chosen[j] = std::move(kids.chosen[j]);
      }
    }
    return alone;
  };
  // Solved twice: each unit rounded down to whole parts, whose cover always frees enough, and
  // rounded up, which finds the covers that rounding down loses (three units of a third of the
  // need and a bit more count 170 parts each, 510 of 512, rounded down) and is kept only when its
  // real bytes cover the need. The cheaper of the two that cover it.
  const std::vector<const RematUnit*>* best = nullptr;
  double bestCost = kNever;
  Covers solved[2];
  for (const bool up : {false, true}) {
    Covers& all = solved[up ? 1 : 0];
    for (const RematUnit* r : roots)
      all = addUp(all, coverOf(*r, up));
    if (all.cost[kSteps] == kNever || all.cost[kSteps] >= bestCost)
      continue;
    double freed = 0;
    for (const RematUnit* u : all.chosen[kSteps])
      freed += u->freedBytes;
    if (freed >= need) {
      best = &all.chosen[kSteps];
      bestCost = all.cost[kSteps];
    }
  }
  if (best != nullptr) {
    for (const RematUnit* u : *best)
      take(*u);
  } else {
    // Rounding lost every cover (one exists, within a part per unit of the need): the plan that
    // frees the most, which covers it.
    takeMostOfAll();
  }
  plan.predictedPeak = predictedPeak - plan.freedBytes;
  return plan;
}

}  // namespace symtune::remat
