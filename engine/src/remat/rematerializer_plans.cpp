// The rematerializer's plans (symtune/remat/rematerializer.h): the units a bucket may recompute,
// the plans that hold least, the cheapest plan under a budget, and the back-off after a step ran
// out. The step's side — buckets, measuring, preparing and observing steps — is in
// rematerializer.cpp.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan_cost.h"
#include "symtune/remat/rematerializer.h"

namespace symtune::remat {

namespace {

// An overrun widens the bucket's margin by this share of the budget, up to kMostMargin.
constexpr double kMarginStep = 0.10;
constexpr double kMostMargin = 0.50;

}  // namespace

std::vector<RematUnit> Rematerializer::choosable(const Bucket& bucket) const {
  if (refused_.empty())
    return bucket.units;
  std::map<std::string, std::string> parentOf;
  for (const auto& unit : bucket.units)
    parentOf[unit.name] = unit.parent;
  std::vector<RematUnit> units;
  for (const auto& unit : bucket.units) {
    if (refused_.count(unit.name) != 0)
      continue;
    units.push_back(unit);
    // A unit whose parent is refused (a lighter run's run, a loop's run) lies in what that lies in.
    std::string& parent = units.back().parent;
    while (!parent.empty() && refused_.count(parent) != 0)
      parent = parentOf[parent];
  }
  return units;
}

SegmentPlan Rematerializer::freeingMost(const Bucket& bucket) const {
  const std::vector<RematUnit> units = choosable(bucket);
  std::map<std::string, std::vector<const RematUnit*>> children;
  for (const auto& unit : units) {
    if (!unit.parent.empty())
      children[unit.parent].push_back(&unit);
  }
  // Per unit the unit itself or its children's most, whichever frees more (down the tree).
  std::map<std::string, double> mostOf;
  std::function<double(const RematUnit&)> most = [&](const RematUnit& unit) {
    double kids = 0;
    for (const RematUnit* c : children[unit.name])
      kids += most(*c);
    return mostOf[unit.name] = std::max(unit.freedBytes, kids);
  };
  std::function<void(SegmentPlan&, const RematUnit&)> takeMost = [&](SegmentPlan& plan,
                                                                     const RematUnit& unit) {
    double kids = 0;
    for (const RematUnit* c : children[unit.name])
      kids += mostOf[c->name];
    if (kids > unit.freedBytes) {
      for (const RematUnit* c : children[unit.name])
        takeMost(plan, *c);
    } else if (unit.freedBytes > 0) {
      plan.recompute.insert(unit.name);
    }
  };
  SegmentPlan plan;
  for (const auto& unit : units) {
    if (unit.parent.empty()) {
      most(unit);
      takeMost(plan, unit);
    }
  }
  // The largest unit recomputed comes back whole in its backward (a model that is one block gains
  // nothing): while that unit has children and taking theirs instead keeps less, take them.
  const auto held = [&](const SegmentPlan& p) {
    return keptBytes(bucket, p) + comesBack(bucket, p);
  };
  for (;;) {
    const RematUnit* largest = nullptr;
    for (const auto& unit : units) {
      const auto kids = children.find(unit.name);
      const bool whole = std::find(loops_.begin(), loops_.end(), unit.name) == loops_.end();
      if (plan.recompute.count(unit.name) > 0 && whole && kids != children.end() &&
          !kids->second.empty() && (largest == nullptr || unit.freedBytes > largest->freedBytes))
        largest = &unit;
    }
    if (largest == nullptr)
      break;
    SegmentPlan instead = plan;
    instead.recompute.erase(largest->name);
    for (const RematUnit* c : children[largest->name])
      takeMost(instead, *c);
    if (held(instead) >= held(plan))
      break;
    plan = std::move(instead);
  }
  return plan;
}

SegmentPlan Rematerializer::everyBlock(const Bucket& bucket) const {
  SegmentPlan plan;
  for (const auto& unit : bucket.units) {
    if (unit.parent.empty() && unit.freedBytes > 0)
      plan.recompute.insert(unit.name);
  }
  return plan;
}

SegmentPlan Rematerializer::cheapOps(const Bucket& bucket) const {
  SegmentPlan plan;
  const std::vector<RematUnit> units = choosable(bucket);
  for (const auto& unit : units) {
    // A lighter variant's parent is its run.
    if (std::find(runs_.begin(), runs_.end(), unit.parent) != runs_.end())
      plan.recompute.insert(unit.name);
  }
  return plan;
}

std::vector<SegmentPlan> Rematerializer::leastHolding(const Bucket& bucket) const {
  std::vector<SegmentPlan> plans{freeingMost(bucket)};
  SegmentPlan blocks = everyBlock(bucket);
  if (blocks.recompute != plans.front().recompute) {
    // Which holds less the fit says, once it has seen recomputed blocks.
    const auto fit = predictor_.fit();
    const auto peakOf = [&](const SegmentPlan& p) {
      return fit->slope * keptBytes(bucket, p) + fit->recomputedSlope * comesBack(bucket, p);
    };
    if (fit && fit->recomputedSlope > 0 && peakOf(blocks) < peakOf(plans.front()))
      plans.insert(plans.begin(), std::move(blocks));
    else
      plans.push_back(std::move(blocks));
  }
  // Every lighter run: it keeps a block's large activations and brings back its cheap ones, and
  // with few blocks it can hold less than either above (two conv blocks: 806 kB against 937 for
  // both above; left out, a budget of 824 kB was refused with 937 as the smallest that fits).
  if (SegmentPlan lighter = cheapOps(bucket);
      !lighter.empty() && std::none_of(plans.begin(), plans.end(), [&](const SegmentPlan& p) {
        return p.recompute == lighter.recompute;
      }))
    plans.push_back(std::move(lighter));
  if (writtenFirst_) {
    // Note [Bound to keep little] in rematerializer.h.
    plans.erase(
        std::remove_if(plans.begin(), plans.end(), [](const SegmentPlan& p) { return p.empty(); }),
        plans.end());
    plans.insert(plans.begin(), SegmentPlan{});
    return plans;
  }
  if (std::none_of(plans.begin(), plans.end(), [](const SegmentPlan& p) { return p.empty(); }))
    plans.emplace_back();  // as written: recomputing costs memory too (a span's inputs)
  return plans;
}

StepPlan Rematerializer::planOfSegments(const Bucket& bucket, const std::string& key,
                                        SegmentPlan segments) const {
  StepPlan step;
  step.bucket = key;
  step.segments = std::move(segments);
  step.cost = costOf(bucket.units, step.segments);
  step.keptSavedBytes = keptBytes(bucket, step.segments);
  step.recomputedBytes = comesBack(bucket, step.segments);
  if (const auto fit = predictor_.fit()) {
    step.predictedPlain = fit->intercept + fit->slope * bucket.profile.savedBytes;
    step.predictedPeak = fit->intercept + fit->slope * step.keptSavedBytes +
                         fit->recomputedSlope * step.recomputedBytes;
  }
  step.limitBytes = limitFor(step.predictedPlain.value_or(0));
  return step;
}

StepPlan Rematerializer::mostFreeing(const Bucket& bucket, const std::string& key) const {
  StepPlan step = planOfSegments(bucket, key, leastHolding(bucket).front());
  step.mostFreeing = true;
  return step;
}

double Rematerializer::predictedPeak(const Bucket& bucket, const SegmentPlan& plan,
                                     const MemoryPredictor::Fit& fit) const {
  return fit.intercept + fit.slope * keptBytes(bucket, plan) +
         fit.recomputedSlope * comesBack(bucket, plan);
}

double Rematerializer::predictedPlain(const Bucket& bucket, const MemoryPredictor::Fit& fit) const {
  return std::max(0.0, fit.intercept + fit.slope * bucket.profile.savedBytes);
}

std::pair<SegmentPlan, double> Rematerializer::leastByFit(const Bucket& bucket,
                                                          const MemoryPredictor::Fit& fit) const {
  SegmentPlan least;
  double smallest = std::numeric_limits<double>::infinity();
  std::vector<SegmentPlan> plans = leastHolding(bucket);
  // A plan that overran on this bucket is passed over while another is left (the fit learns
  // only from the steps that fit, so it would predict the same again).
  if (std::any_of(plans.begin(), plans.end(),
                  [&](const SegmentPlan& p) { return bucket.overran.count(p.recompute) == 0; })) {
    plans.erase(std::remove_if(
                    plans.begin(), plans.end(),
                    [&](const SegmentPlan& p) { return bucket.overran.count(p.recompute) != 0; }),
                plans.end());
  }
  for (auto& p : plans) {
    const double peak = predictedPeak(bucket, p, fit);
    if (peak < smallest) {
      smallest = peak;
      least = std::move(p);
    }
  }
  return {least, smallest};
}

StepPlan Rematerializer::planFor(Bucket& bucket, const std::string& key,
                                 const MemoryPredictor::Fit& fit) {
  StepPlan step =
      planUnder(bucket, key, fit, static_cast<double>(*limitFor(predictedPlain(bucket, fit))),
                std::nullopt, static_cast<double>(reserved_));
  ++stats_.plansMade;
  return step;
}

StepPlan Rematerializer::planUnder(const Bucket& bucket, const std::string& key,
                                   const MemoryPredictor::Fit& fit, double budget,
                                   std::optional<double> fraction, double held) const {
  const auto peakOf = [&](const SegmentPlan& plan) { return predictedPeak(bucket, plan, fit); };
  const double plain = predictedPlain(bucket, fit);
  StepPlan step;
  const auto [least, smallest] = leastByFit(bucket, fit);
  if (smallest > budget) {
    // The budget and the smallest that fits are the step's: with what the micro-batches before
    // this one hold (Note [Micro-batches] in trainer.h), not only what is left for this one.
    const double needed = smallest + held;
    std::string what = "remat: the budget of " + formatBytes(budget + held);
    if (!fraction)
      fraction = options_.budgetFraction;
    if (fraction) {
      char share[96];
      std::snprintf(share, sizeof share,
                    " (budget_fraction %.2f of the plain peak %s; at least %.2f fits)", *fraction,
                    formatBytes(fractionOf(plain)).c_str(), needed / fractionOf(plain));
      what += share;
    }
    if (held > 0) {
      throw RematInfeasible(what + ", " + formatBytes(held) +
                                " of it held by the micro-batches before this one, is below what "
                                "any plan fits: even with the plan that holds least the step on " +
                                key + " is predicted to peak " + formatBytes(smallest) +
                                " above them, and the smallest feasible budget is " +
                                formatBytes(needed),
                            needed);
    }
    throw RematInfeasible(what +
                              " is below what any plan fits: even with the plan that holds least "
                              "the step on " +
                              key + " is predicted to peak at " + formatBytes(smallest) +
                              ", the smallest feasible budget",
                          smallest);
  }
  const double target = budget * (1 - bucket.margin);
  // The cheapest plan of `units` whose prediction fits `target`. The recomputed blocks'
  // activations come back in their backward: it plans again with what the largest of them adds
  // taken off the target until the plan fits with it (a few rounds).
  const auto planOf = [&](std::vector<RematUnit> units) {
    for (auto& unit : units) {
      unit.freedBytes *= fit.slope;  // as the peak sees them
      for (double& call : unit.freedByCall)
        call *= fit.slope;
    }
    RematPlan best;
    double back = 0;
    for (int round = 0; round < 4; ++round) {
      best = planUnderBudget(units, plain, std::max(0.0, target - back));
      const double again = fit.recomputedSlope * comesBack(bucket, best.segments);
      if (!best.feasible || peakOf(best.segments) <= target || again <= back)
        break;
      back = again;
    }
    return best;
  };
  // Two tries: every unit as it is, and the blocks that hold loops left to their loops (a block
  // that comes back whole may free less than its loops do).
  const std::vector<RematUnit> units = choosable(bucket);
  std::vector<RematUnit> loopsOnly = units;
  for (auto& unit : loopsOnly) {
    for (const auto& loop : units) {
      if (unit.parent.empty() && loop.parent == unit.name) {
        unit.freedBytes = 0;
        unit.freedByCall.clear();
        unit.costByCall.clear();
      }
    }
  }
  RematPlan chosen = planOf(units);
  const RematPlan other = planOf(loopsOnly);
  const bool fits = peakOf(chosen.segments) <= target;
  const bool otherFits = peakOf(other.segments) <= target;
  if ((otherFits && (!fits || other.cost < chosen.cost)) ||
      (!fits && !otherFits && peakOf(other.segments) < peakOf(chosen.segments)))
    chosen = other;
  step.segments = chosen.segments;
  step.cost = chosen.cost;
  // No plan within the margin, or one that overran here before: the one that holds least, which
  // has the most room under the budget (a plan predicted just under it overruns as often as not).
  if ((peakOf(step.segments) > target && smallest < peakOf(step.segments)) ||
      (bucket.overran.count(step.segments.recompute) != 0 &&
       bucket.overran.count(least.recompute) == 0)) {
    step.segments = least;
    step.cost = costOf(bucket.units, step.segments);
  }
  step.bucket = key;
  step.keptSavedBytes = keptBytes(bucket, step.segments);
  step.recomputedBytes = comesBack(bucket, step.segments);
  step.predictedPeak = peakOf(step.segments);
  step.predictedPlain = plain;
  step.limitBytes = static_cast<int64_t>(std::llround(budget));
  step.mostFreeing = step.segments.recompute == least.recompute;
  return step;
}

StepPlan Rematerializer::backOff(const StepPlan& plan, const std::vector<SegmentPlan>& tried) {
  ++stats_.backOffs;
  auto found = buckets_.find(plan.bucket);
  TORCH_CHECK(found != buckets_.end(), "remat: backOff for a bucket never prepared: ", plan.bucket);
  Bucket& bucket = found->second;
  bucket.margin = std::min(kMostMargin, bucket.margin + kMarginStep);
  bucket.plans.clear();                            // plans anew with the wider margin
  bucket.overran.insert(plan.segments.recompute);  // and not with this plan again
  // The plans that may hold least, in turn: the first this step has not tried.
  const auto wasTried = [&](const SegmentPlan& p) {
    if (p.recompute == plan.segments.recompute)
      return true;
    return std::any_of(tried.begin(), tried.end(),
                       [&](const SegmentPlan& t) { return t.recompute == p.recompute; });
  };
  const std::vector<SegmentPlan> least = leastHolding(bucket);
  const auto next = std::find_if_not(least.begin(), least.end(), wasTried);
  if (next == least.end()) {
    std::string held;
    if (reserved_ > 0)
      held = " (" + formatBytes(static_cast<double>(reserved_)) +
             " of it held by the micro-batches before this one)";
    throw RematInfeasible(
        "remat: the step on " + plan.bucket + " ran out of its budget of " +
            formatBytes(static_cast<double>(plan.limitBytes.value_or(0) + reserved_)) + held +
            " under every plan that may hold least",
        0);
  }
  StepPlan retry = planOfSegments(bucket, plan.bucket, *next);
  retry.limitBytes = plan.limitBytes;
  retry.predictedPlain = plan.predictedPlain;
  retry.backedOff = true;
  retry.mostFreeing = true;
  return retry;
}

}  // namespace symtune::remat
