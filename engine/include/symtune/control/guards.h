#pragma once
// Guards: what the optimizers assumed of the batches so far, and the batch that breaks it
// (docs/control.md, "Guards and OptimizeRequired").
//
//   control::Guards guards;
//   auto broken = guards.admit({{bucket}, "budget_mb 40", "cpu"});  // empty: every assumption
//   holds
//   ... run the step ...
//   auto more = guards.admitBranches(forward.branches);
//
// Note [Guards]
// The binder measures each (site, shape bucket) the first time it meets it and the remat planner
// plans each bucket the first time it meets it; a plan made for one budget, device or branch
// pattern says nothing of another. A guard records one such assumption — the shape buckets met,
// the branch patterns met (the set of `if` branches a forward ran), the memory budget, the
// device — and a batch that breaks it raises OptimizeRequired once: the optimizers re-plan for
// what is new (a bucket's bindings and remat plan, the plans for a new budget), and from then on
// the new bucket or pattern is assumed too, so the same batch shape does not raise it again. The
// first batch assumes and breaks nothing.

#include <cstdint>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "symtune/core/ids.h"

namespace symtune::control {

// What a batch is, as far as the optimizers' plans depend on it.
struct BatchFacts {
  // binding::inputsBucketKey of the inputs of each forward the batch runs as (one; or one per
  // micro-batch, whose buckets are what the binder and the planner meet).
  std::vector<std::string> shapeBuckets;
  std::string budget;  // the memory budget it runs under ("budget_fraction 0.6"); empty: none
  std::string device;  // "cpu", "cuda:0"
};

// A batch broke what the optimizers assumed: they re-planned for it. `reasons` says what was new,
// one line each ("a new shape bucket: int64 [<=8,<=32] nograd <=8 <=16 (3 met before)").
struct OptimizeRequired {
  int64_t step = 0;
  std::vector<std::string> reasons;
};

// MetaOptimizer::step's way of raising OptimizeRequired (MetaOptimizerOptions::
// raiseOptimizeRequired).
class OptimizeRequiredError : public std::runtime_error {
 public:
  explicit OptimizeRequiredError(OptimizeRequired required);
  const OptimizeRequired& required() const { return required_; }

 private:
  OptimizeRequired required_;
};

class Guards {
 public:
  // The assumptions `facts` breaks, one line each; from now on they are assumed too (a new bucket
  // joins those met, a new budget or device replaces the old).
  std::vector<std::string> admit(const BatchFacts& facts);
  // The same for the branch pattern a forward ran (ForwardResult::branches); `name` names a
  // branch in the reason (its id when not given).
  std::vector<std::string> admitBranches(const std::vector<RegionId>& taken,
                                         const std::function<std::string(RegionId)>& name = {});

  const std::set<std::string>& shapeBuckets() const { return buckets_; }
  size_t branchPatterns() const { return patterns_.size(); }

 private:
  bool started_ = false;
  std::set<std::string> buckets_;
  std::set<std::vector<RegionId>> patterns_;
  std::string budget_;
  std::string device_;
};

}  // namespace symtune::control
