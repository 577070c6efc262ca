#pragma once
// The remat planner (docs/remat.md, "The planner"): given what each recomputable unit of a model
// frees at the step's peak and what recomputing it costs, the cheapest set of units to recompute
// that brings the predicted peak under a budget — or, when none does, the smallest budget any
// plan meets.
//
// Note [Remat planner]
// A unit is what a SegmentPlan can name: a top-level block, a loop whose body is recomputed trip by
// trip (SyMuGen::loopSpans()), or a run of ops inside either (SyMuGen::opRuns()). The units form a
// tree: a loop inside a block is that block's child, a run its block's or its loop's. Recomputing a
// unit recomputes its children with it, so a plan takes a unit or some of its children (and
// theirs), never both. Recomputing a unit frees (about) the activations it saves for its backward
// that nothing else keeps — counted on the batch in the measure of the forward's total (Note
// [Counting a run's saved bytes]), times the predictor's slope, bytes of peak per counted byte —
// and costs its forward once more. The planner minimises the total cost of the units it recomputes
// subject to the freed bytes covering what the predicted peak exceeds the budget by: a covering
// knapsack, solved by dynamic programming over the needed bytes cut into 512 equal parts, once
// with each unit's bytes rounded down to whole parts and once rounded up to the parts they begin;
// a cover of the second is kept only when its bytes cover the need, so a plan it returns never
// frees less than needed. Per unit the choice is the unit itself or the cheapest sum of its
// children's covers, each child choosing the same way; across the top-level units the covers add
// up. Units that free nothing are never chosen. A top-level block called several times in a step
// may also be recomputed on its first k calls only (Note [A block's first calls] in
// symtune/graph/symugen.h): each k is one more choice for the block itself, freeing and costing
// what those calls do.

#include <optional>
#include <string>
#include <vector>

#include "symtune/graph/symugen.h"

namespace symtune::remat {

struct RematUnit {
  std::string name;       // as a SegmentPlan names it
  std::string parent;     // the unit it lies in ("": a top-level block, or a loop in none)
  double freedBytes = 0;  // what recomputing it frees at the step's peak
  double cost = 0;        // what recomputing it costs (seconds, or FLOPs: one scale for all)
  // Its spans run in a step (a block's calls): a recomputed block brings back what one call
  // saved, about freedBytes / executions, at a time.
  int64_t executions = 1;
  // A top-level block called more than once: what each call frees and costs, in order (they add
  // up to freedBytes and cost); empty otherwise.
  std::vector<double> freedByCall{}, costByCall{};
};

// What recomputing a plan's name frees, costs, and brings back in its backward.
struct UnitShare {
  double freedBytes = 0;
  double cost = 0;
  // The most one recomputed call brings back beyond what the calls after it keep (they are freed
  // before it is recomputed): for a whole unit the average call's freed bytes.
  double comesBack = 0;
};

// The share of `name`, a unit of `units` or the first calls of one (SegmentPlan::firstCallsName);
// nothing for a name that is neither, or first calls the unit was not called as often as.
std::optional<UnitShare> shareOf(const std::vector<RematUnit>& units, const std::string& name);

struct RematPlan {
  SegmentPlan segments;      // the units to recompute
  double freedBytes = 0;     // what they free together
  double cost = 0;           // what they cost together
  double predictedPeak = 0;  // the peak predicted with the plan
  bool feasible = true;      // false: no plan meets the budget (segments: recompute everything)
  double smallestFeasibleBudget = 0;  // the peak predicted with every unit that frees most
};

// A model's units (SyMuGen::recomputableUnits()) priced from a counted forward (ForwardOptions::
// countCost; ForwardCost::units): each frees `bytesPerSavedByte` times the bytes its ops save for
// backward (the predictor's slope: bytes of peak per counted byte) and costs its forward once
// more, `secondsPerFlop` a FLOP and `secondsPerByte` a byte moved, and `secondsPerSpan` each time
// one of its spans runs (a checkpointed span's own work: its autograd function and the nested
// backward that runs it again — what makes a loop recomputed trip by trip dearer than the block
// around it, whose FLOPs are the same). A unit the forward did not
// run frees nothing.
std::vector<RematUnit> rematUnits(SyMuGen& gen, const ForwardCost& cost, double bytesPerSavedByte,
                                  double secondsPerFlop, double secondsPerByte,
                                  double secondsPerSpan = 0);

// The cheapest plan that brings `predictedPeak` (the plain step's) to at most `budget` bytes.
// Throws for negative sizes or costs, for a unit whose parent is not a unit, and for parents that
// go round in a circle.
RematPlan planUnderBudget(const std::vector<RematUnit>& units, double predictedPeak, double budget);

}  // namespace symtune::remat
