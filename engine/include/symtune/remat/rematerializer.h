#pragma once
// Runs a model's steps under a memory budget, batch by batch (docs/remat.md, "Running under a
// budget"): before each step it chooses which units to recompute for the batch, from the
// batch's shape bucket, the templates' saved bytes and the predictor's fit of the steps before;
// after it, it learns from the step's measured peak. The trainer drives it (the session's
// `remat` block):
//
//   remat::Rematerializer remat(options, buffers);
//   remat::StepPlan plan = remat.prepare(gen, batch.inputs);  // gen: the executor's SyMuGen
//   executor.setPlan(plan.segments);
//   ... the step, held to plan.limitBytes (ScopedCpuBudget) ...
//   remat.observe(plan, peakBytes);           // or, on c10::OutOfMemoryError:
//   plan = remat.backOff(plan);               // and run the step again
//
// Note [Planning per batch]
// A batch's bucket (its inputs' shapes, each dimension rounded up to a power of two, as the
// binder's buckets, and its int inputs rounded up the same way) is met first with a forward that
// counts the templates (grad mode off, the random state and the model's buffers put back): what
// each unit saves for backward and what it costs to run again. A batch of the bucket larger than
// the one counted (more input elements, or a larger int: a bucket spans up to twice the size in
// each dimension) is counted again, so the profile stands for the largest batch seen and the plan
// holds for every batch of the bucket (the branches a later batch takes may differ: the margin and
// the back-off below cover it); where the model's forward runs on shapes alone, each batch is
// counted on its own instead (Note [A profile per batch]). The plain step's peak is the predictor's
// fit at the profile's saved bytes. The budget is bytes: the session's, or its fraction of the
// plain peak — of the larger of the first steps' (they run plain and unenforced to measure it) and
// the batch's own, predicted. The planner (Note [Remat planner]) picks the cheapest units to
// recompute so that the prediction with them fits the budget less a margin. A recomputed block's
// activations live again while its backward runs, so the prediction has a term for the largest of
// them (Note [Memory predictor]): the planner plans again with what that term adds taken off the
// target until the plan fits with it, and plans a second time with every block that holds loops or
// runs of ops left to them (recomputed a trip or a run at a time, they never come back whole),
// keeping the cheaper plan that fits. The plan is kept for the bucket and reused while the plain
// prediction it was made from, and the limit it was made under, hold within 2 % (Note [Plans per
// limit]); a new bucket, a moved prediction or an overrun plans anew.
//
// Note [A profile per batch]
// A bucket's profile is its largest batch's, and a smaller batch of the bucket is planned as if
// it were that one. Transformer-XL's segment and memory lengths (24-48 and 32-64 tokens on the
// `cpu` preset) fall into two buckets whose batches' plain peaks differ by up to half: planned on
// the largest, its smaller batches recomputed more than they needed, and the predictor, fitting
// peaks to the largest batch's kept bytes, erred by a median 9 % (docs/benchmarks.md, "A profile
// per batch"). A counting forward on every batch would cost a forward each; on the meta device
// it costs each op's dispatch (Note [Shapes only] in engine/src/graph/evaluator.h), so each batch
// is counted on its own shapes, once per shape (the counts are kept by the inputs' exact shapes
// and scalars), and planned on them: the bucket keeps its plans, margin and overruns, and takes
// the batch's profile. A model whose forward needs a value to go on (the ResNet's gates on its
// activations, early exit's confident samples, a MoE's routing) refuses on its first batch,
// and every batch after is counted on its bucket's largest as before (RematStats::shapesRefused
// says why); of the zoo, Transformer-XL, the tagger and the tree network run on shapes alone.
//
// Note [Steps the binder settles in]
// A bound step that meets a shape bucket for the first time holds what no later step of the
// bucket holds: the binder runs a new loop-carried rows group as written and notes its inputs,
// and measures the candidates of new sites on the step's own values (outside the budget, but
// what it notes is the step's). Such a step's peak is not the model's: on the tree network the
// bound steps that settled peaked at 4.1 and 3.6 MB where the steady state peaks at 3.1; a fit
// over them had an intercept of 1.35 MB (0.8 without them), so every plan looked 0.5 MB larger
// than it ran, and the plain peak a fraction is of was 8 % high. The trainer tells observe()
// whether the binder settled anything in during the step (Binder::settling()); such a step teaches
// the predictor nothing, and a calibration step of it is not counted (the run calibrates on the
// next; one whose binder settles in on every step, as many as it calibrates on later, on those).
// What the binder notes in a micro-batch is held until it measures them, through the micro-batches
// after it: one after the first that no plan fits, when the binder settled anything in earlier in
// the step, starts the step over (Note [Micro-batches] in trainer.h) rather than splitting it
// further; those buckets are settled the next time round. On the tree network bound under 1.9 MB
// a third micro-batch began with 776 kB held where the gradients are 399 kB, and the run went on
// in four micro-batches where three fit.
//
// Note [Plans per limit]
// A step split into micro-batches holds each micro-batch to what the step's budget leaves
// after the gradients the micro-batches before it hold: the first has the whole budget, the
// others less by a few bytes more or less each step. A bucket keeps a plan per limit met
// (kPlansPerBucket at most) and reuses the one whose limit is within kPlanTolerance of the
// step's, held to the step's own limit; before, the one plan was reused only at the same limit
// to the byte, and a split step planned every micro-batch anew (a counted forward and a search
// each time: on the tagger at two micro-batches 303 plans in 150 steps, none reused).
//
// The predictor learns from every step what it kept, and the largest block it recomputed. The
// first step held to the budget recomputes everything it can (the plan that frees most: per
// top-level unit the block or its loops, whichever holds less with the block coming back), which
// usually fits if anything does and gives the fit a second size. A step that overruns its budget
// raises LibTorch's out-of-memory error inside it; backOff() gives the plan to run it again with
// (the plans that may hold least, in turn: the templates' least, every top-level block, every
// lighter run, the step as written, which on a small model may hold less) and widens the bucket's
// margin, so no step is lost. When none fits, or the prediction says none does before the step, the
// run stops with RematInfeasible, which names the smallest budget that fits.

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

#include "symtune/graph/symugen.h"
#include "symtune/remat/memory_predictor.h"
#include "symtune/remat/planner.h"

namespace symtune::remat {

enum class Strategy {
  Plan,        // the planner's cheapest units under the budget
  Checkpoint,  // every top-level block recomputed (full activation checkpointing)
  // Every run of ops without its closing op (selective recomputation: the matmuls and
  // convolutions keep their forward; Note [Runs without their closing op]).
  Selective,
};

// The session's word for it (remat.strategy): "plan", "checkpoint" or "selective".
const char* strategyName(Strategy strategy);

struct RematOptions {
  // The step's peak above what is live when it begins, enforced (ScopedCpuBudget on the CPU).
  std::optional<int64_t> budgetBytes;
  // Or: this share of the plain peak, in (0, 1]: of the larger of the first `calibrationSteps`
  // steps' largest peak (they run plain and unenforced to measure it) and the step's own plain
  // peak as its bucket's profile predicts it (a larger batch is allowed more).
  std::optional<double> budgetFraction;
  int calibrationSteps = 1;
  // With budgetFraction: a plain peak known beforehand (a longer plain run's largest); the
  // fraction is then of the larger of it, the calibration's and the step's own.
  std::optional<int64_t> plainPeakBytes;
  Strategy strategy = Strategy::Plan;
  double margin = 0.05;  // plans aim this share under the budget
  // What running a unit again costs: seconds per FLOP and per byte moved, and per execution of
  // one of its spans (an autograd function whose backward runs a nested backward). 0: measured on
  // the batch's device at the first step (a matmul, a copy, and such a function on one element).
  double secondsPerFlop = 0, secondsPerByte = 0, secondsPerSpan = 0;
  // Each batch counted on its own shapes, on the meta device, where the model's forward allows it
  // (Note [A profile per batch]); false: every batch of a bucket planned on its largest batch's.
  bool profilePerBatch = true;
  // The share of a step's time a profile per batch may take before the run goes back to a
  // profile per bucket (Note [What a profile per batch may cost] in
  // rematerializer_profile.cpp); 1: never.
  double profileShare = 0.05;
};

// The budget cannot be met: even with every unit recomputed the step needs more.
class RematInfeasible : public std::runtime_error {
 public:
  RematInfeasible(const std::string& what, double smallestBytes)
      : std::runtime_error(what), smallestBytes_(smallestBytes) {}
  double smallestFeasibleBytes() const { return smallestBytes_; }

 private:
  double smallestBytes_;
};

// How one step runs.
struct StepPlan {
  SegmentPlan segments;                  // the units it recomputes
  std::optional<int64_t> limitBytes;     // the budget to hold it to; none: unenforced
  std::optional<double> predictedPeak;   // with the plan; none before the predictor saw a step
  std::optional<double> predictedPlain;  // the plain step's
  std::string bucket;
  bool cached = false;       // the bucket's plan, reused
  bool mostFreeing = false;  // one of the plans that hold least (Rematerializer::backOff)
  bool backedOff = false;    // the retry of a step that overran
  bool calibrating = false;  // a plain step measuring the peak budgetFraction is of
  // What the predictor learns from (template bytes): what the step keeps for backward, and the
  // largest recomputed block's saved bytes of one call, which live again while its backward runs.
  double keptSavedBytes = 0, recomputedBytes = 0;
  double cost = 0;  // the plan's recompute cost (seconds, by the templates)
};

// What a budget would cost, by the predictor and the templates, before any step runs under it
// (Rematerializer::forecast).
struct Forecast {
  std::optional<double> costSeconds;      // the recompute cost of its plan, on the costliest bucket
  std::optional<std::string> infeasible;  // no plan fits it on a bucket met so far, and why
  std::string note;                       // why there is no forecast (nothing measured yet)
};

struct RematStats {
  int64_t steps = 0, buckets = 0, plansMade = 0, cacheHits = 0, backOffs = 0;
  int64_t profiles = 0;  // counting forwards: one per bucket, and one per larger batch in it
  // Counting forwards on shapes alone (Note [A profile per batch]): one per batch shape met.
  int64_t shapeProfiles = 0;
  std::string shapesRefused;  // why the model's forward cannot run on shapes alone ("": it can)
};

class Rematerializer {
 public:
  // `buffers`: the model's buffers (batch norm statistics), which the counting forward of a new
  // bucket must leave as they were. Throws c10::Error for options without a budget under the
  // planning strategy, or with both or a fraction outside (0, 1].
  Rematerializer(RematOptions options, std::vector<at::Tensor> buffers);

  // The plan for the step on `inputs`. `gen` is the executor's graph of the model. `reserved`:
  // bytes the step's budget already holds when this forward begins (the gradients of the
  // micro-batches before it, Note [Micro-batches] in trainer.h), planned for and held to the
  // budget less them until the next prepare(). Throws RematInfeasible when the predicted smallest
  // feasible peak is above the budget.
  StepPlan prepare(SyMuGen& gen, const std::vector<c10::IValue>& inputs, int64_t reserved = 0);
  // The step ran under `plan`; `peakBytes` its peak above what was live when it began, `reserved`
  // what it held before (prepare()): a calibration step's plain peak is the two together.
  // `settled` false: the binder settled in during the step (Note [Steps the binder settles in]),
  // which is then neither learnt from nor counted as a calibration step.
  void observe(const StepPlan& plan, double peakBytes, double reserved = 0, bool settled = true);
  // Between beginStep() and endStep() every forward observed belongs to one training step (its
  // micro-batches): calibration counts steps. Without them, each observe() is a step.
  void beginStep() { stepwise_ = true; }
  void endStep();
  // The step overran its budget under `plan`, having tried `tried` before it: the plan to run
  // it again with — the first untried of the plans that may hold least (per top-level unit the
  // block or its loops; every block; the step as written, which on a small model may hold less).
  // Throws RematInfeasible (smallestFeasibleBytes() 0: unknown) when all were tried.
  StepPlan backOff(const StepPlan& plan, const std::vector<SegmentPlan>& tried = {});

  // Changes the budget from the next step on (the studio's set_budget, docs/protocol.md): bytes,
  // or a fraction of the plain peak — of the peak as predicted when no plain step was measured
  // (the run began with bytes), as soon as the predictor has seen a step. Plans made for the old
  // budget go. Throws c10::Error for a budget the options refuse (both, neither, a fraction out of
  // (0, 1], a fraction under the checkpoint strategy) and, when `check`, RematInfeasible when the
  // predictor says the plans that hold least go over it on a bucket met so far; either way the
  // budget stays as it was.
  void setBudget(std::optional<int64_t> bytes, std::optional<double> fraction, bool check = true);

  // What a budget of `fraction` of the plain peak would cost on the buckets met so far: the
  // plan the planner would make under it (its recompute cost, by the templates), or that none
  // fits. Changes nothing.
  Forecast forecast(double fraction) const;

  // Whether the next step calibrates: runs plain and unenforced to measure the peak
  // budgetFraction is of.
  bool calibrating() const {
    return options_.strategy == Strategy::Plan && options_.budgetFraction &&
           plainSteps_ < static_cast<size_t>(options_.calibrationSteps);
  }

  // What it has measured (checkpoints; Note [Checkpoints] in trainer.h): the calibration (plain
  // steps seen, the largest plain peak), whether a step held to the budget was seen, and the
  // predictor's steps. restore() on a resumed run's rematerializer goes on from there rather than
  // calibrating again; the buckets' profiles and plans are made anew as their batches come.
  struct Measurements {
    int64_t plainSteps = 0;
    double plainPeak = 0;
    bool budgetedSeen = false;
    std::vector<std::array<double, 3>> steps;  // MemoryPredictor::observed()
  };
  Measurements measurements() const;
  void restore(const Measurements& measured);

  const RematOptions& options() const { return options_; }
  const RematStats& stats() const { return stats_; }
  // The budget in bytes of a step whose plain peak is predicted at `predictedPlain`: budgetBytes,
  // or budgetFraction of the largest of that, the calibrated plain peak and plainPeakBytes;
  // nullopt while calibrating or without a budget.
  std::optional<int64_t> budgetFor(double predictedPlain) const;
  const MemoryPredictor& predictor() const { return predictor_; }
  // The units as the profile of `bucket` prices them (freed bytes: template bytes saved); null
  // for a bucket never prepared.
  const std::vector<RematUnit>* unitsOf(const std::string& bucket) const;
  // The loops and runs of ops plans may not name; none by default. Plans that named one go; a unit
  // that lies in a refused one lies in what that lies in.
  //
  // Note [Bound plans keep to blocks and loops]
  // A bound step can recompute runs of ops and loops with the binder on where the binder's sites
  // allow it (Note [Runs recomputed bound] in symtune/binding/binder.h;
  // SegmentExecutor::refusedUnits()), but the trainer refuses every run to a bound run's plans, as
  // before that was possible. Planning with the runs the sites allow, and refusing the loops they
  // do not, was measured side by side with the build before (docs/benchmarks.md, "Runs and loops
  // recomputed bound", 2026-12-05): the tagger under half its bound peak ran 1.31x faster (its
  // first plan no longer named its loop, which runs the step unbound and out of its budget), but
  // under 69.9 MB its first planned steps recomputed the GRU block, the predictor's fit of them
  // read the block's returning activations as kept bytes and planned the block on every step
  // after (0.79x), and Transformer-XL under 69.9 MB retried four steps that ran out under their
  // first plan (0.95x). Until the predictor tells what comes back from what is kept with fewer
  // steps, bound plans keep to blocks and loops.
  void setRefusedUnits(std::set<std::string> refused);
  // Note [Bound to keep little]
  // A binder with a memory slack (docs/binding.md, "Memory slack") binds regions that keep little
  // for the backward — early exit's stages run again in theirs — and a recomputed block that
  // splits such a region makes it run as written: on early exit the plan that recomputes every
  // unit held more than the budget of 11.67 MB (half `script`'s peak) where the step as written,
  // bound, holds 10.0. So for such a run (the trainer says so before each step) the step as
  // written comes first among the plans that may hold least: the first step held to the budget,
  // and the first plan a back-off tries.
  void setWrittenFirst(bool first) { writtenFirst_ = first; }
  // What the steps so far taught the predictor, and the plans and margins made from it, let go:
  // what a step keeps changed under them (the binder widened its memory slack, Note [A budget
  // widens the slack] in symtune/binding/binder.h). The next step held to the budget is again
  // the first; the calibration and the buckets' profiles stay.
  void forgetPeaks();

 private:
  struct Bucket {
    ForwardCost profile;
    std::vector<RematUnit> units;  // freed bytes in template bytes
    // The plans made for the budgets met, the latest last: a micro-batch after the first has
    // less of the budget left than the first (what those before it hold), so a split step meets
    // one limit per micro-batch position, each with its plan (Note [Plans per limit]).
    std::vector<StepPlan> plans;
    double margin = 0;
    std::set<std::set<std::string>> overran;  // plans that ran out of the budget here
    int64_t inputElements = 0;       // of the batch the profile was counted on: the largest seen
    std::vector<int64_t> inputInts;  // its int inputs: each the largest seen
  };
  Bucket& bucketOf(SyMuGen& gen, const std::vector<c10::IValue>& inputs, const std::string& key);
  // The bucket's units a plan may name (all but those refused).
  std::vector<RematUnit> choosable(const Bucket& bucket) const;
  // The plan that holds least by the templates: per unit the unit or its children, down the tree.
  SegmentPlan freeingMost(const Bucket& bucket) const;
  // Every top-level unit: full checkpointing.
  SegmentPlan everyBlock(const Bucket& bucket) const;
  // Every run's lighter variant (Strategy::Selective) among the units a plan may name.
  SegmentPlan cheapOps(const Bucket& bucket) const;
  // The plans that may hold least, the likeliest first (by the fit, once it knows what a
  // recomputed block adds): freeingMost, everyBlock, cheapOps, the step as written (first,
  // under setWrittenFirst).
  std::vector<SegmentPlan> leastHolding(const Bucket& bucket) const;
  StepPlan planOfSegments(const Bucket& bucket, const std::string& key, SegmentPlan segments) const;
  StepPlan mostFreeing(const Bucket& bucket, const std::string& key) const;
  StepPlan planFor(Bucket& bucket, const std::string& key, const MemoryPredictor::Fit& fit);
  // The cheapest plan predicted to keep the bucket's step under `budget` bytes; throws
  // RematInfeasible (naming `fraction`, or the options', as the budget's share) when none does.
  // `held`: what the step's budget holds besides `budget` (reserved_), named in the message and
  // added to the smallest feasible budget it reports.
  StepPlan planUnder(const Bucket& bucket, const std::string& key, const MemoryPredictor::Fit& fit,
                     double budget, std::optional<double> fraction = std::nullopt,
                     double held = 0) const;
  // The peak the fit predicts for the bucket's step under `plan`; the plain step's.
  double predictedPeak(const Bucket& bucket, const SegmentPlan& plan,
                       const MemoryPredictor::Fit& fit) const;
  double predictedPlain(const Bucket& bucket, const MemoryPredictor::Fit& fit) const;
  // What budgetFraction is of for a step whose plain peak is predicted at `plain`.
  double fractionOf(double plain) const;
  // Of the plans that may hold least, the one the fit says holds least, and its peak.
  std::pair<SegmentPlan, double> leastByFit(const Bucket& bucket,
                                            const MemoryPredictor::Fit& fit) const;
  // The largest recomputed block's template bytes of one call (a block called in a loop comes
  // back a call at a time); what the plan keeps.
  double comesBack(const Bucket& bucket, const SegmentPlan& plan) const;
  double keptBytes(const Bucket& bucket, const SegmentPlan& plan) const;
  void measureRates(const std::vector<c10::IValue>& inputs);

  // The batch's profile counted on its shapes alone (Note [A profile per batch]); false when the
  // model's forward refuses, or the option is off.
  bool countShapes(SyMuGen& gen, const std::vector<c10::IValue>& inputs, Bucket& bucket);
  StepPlan prepareStep(SyMuGen& gen, const std::vector<c10::IValue>& inputs, int64_t reserved);

  RematOptions options_;
  std::vector<at::Tensor> buffers_;
  // Note [A profile per batch]: the counts by the inputs' exact shapes, and whether the model's
  // forward runs on shapes alone (unknown until its first batch).
  std::map<std::string, std::pair<ForwardCost, std::vector<RematUnit>>> shapeCounts_;
  std::optional<bool> shapesRun_;
  // Note [What a profile per batch may cost]: seconds from one prepare() to the next, and each
  // prepare()'s own while it profiles per batch.
  std::optional<std::chrono::steady_clock::time_point> lastPrepare_;
  std::deque<double> intervals_, preparing_;
  MemoryPredictor predictor_;
  std::map<std::string, Bucket> buckets_;
  // The units that never come back whole: loops (recomputed a trip at a time) and runs of ops.
  std::vector<std::string> loops_;
  std::vector<std::string> runs_;  // the runs of ops
  std::set<std::string> refused_;
  bool writtenFirst_ = false;  // setWrittenFirst
  RematStats stats_;
  size_t plainSteps_ = 0;      // calibration steps observed
  size_t unsettledPlain_ = 0;  // calibration steps passed over (Note [Steps the binder settles in])
  bool stepwise_ = false;      // beginStep() was called: endStep() counts them
  bool calibratedThisStep_ = false;
  int64_t reserved_ = 0;  // prepare()'s
  // budgetFor() less what the step's budget already holds (reserved_).
  std::optional<int64_t> limitFor(double predictedPlain) const;
  bool budgetedSeen_ = false;   // a step held to the budget observed
  double calibratedPlain_ = 0;  // the largest peak among them
};

// "1.5 MB", "230 kB": bytes for a message.
std::string formatBytes(double bytes);

}  // namespace symtune::remat
