#pragma once
// auto_tune: an offline search of the configuration space for the fastest configuration
// (docs/control.md, "auto_tune"). `symtune tune SESSION --budget-steps N` runs it on a session
// (symtune::tuneSession in runtime/tuning.h); here is the search, which knows nothing of
// training: it is handed what measures a configuration and what estimates one.
//
//   control::AutoTuner tuner(trainer.configSpace(), {.evaluations = 12});
//   control::TuneResult r = tuner.run(measure, estimate);
//   r.evaluations[*r.best].configuration
//
// Note [auto_tune]
// Monte-Carlo tree search over the space, one tree level per knob (a node fixes the knobs above
// it; a leaf is a configuration). Before each measured evaluation it runs `simulations` descents:
// UCT picks the child whose mean reward plus exploration bonus is largest (an unvisited child
// first), and below the node it reaches a rollout completes the configuration at random. The
// rollout's reward is the leaf's estimate: its measured speed when it was measured, otherwise the
// cost model's estimate times what the measurements say of each knob value — the additive model
// (Note [Posterior of the terms]) fitted to the measured leaves' error against the cost model,
// drawn from its posterior (Thompson), so a leaf whose knob values are untried is estimated
// widely and gets visited. Rewards are relative to the best measured so far. The leaf measured next
// is reached from the root through the most visited children that still hold an unmeasured
// configuration. Constraints prune: a configuration the estimate says cannot run (a remat budget
// the predictor says no plan fits) is never visited, nor a node with nothing feasible below it,
// and one whose measurement failed is pruned with its reason; one that ran out of memory prunes
// every configuration with no more micro-batches and no larger remat budget (whatever its
// threads), which needs at least as much memory; a remat budget below the knob's largest, with
// its twin at the largest feasible, is dominated and pruned before the search begins (Note [A
// smaller remat budget is never faster] in auto_tune.cpp). The first evaluation is the
// configuration the space is at (the run as configured: what the search must beat). When it runs
// out of memory, the second is it split into the fewest micro-batches more that may run, its
// other knobs as they are (its budget raised to the knob's largest where the split at its own is
// dominated): what the run would do by itself (Note [Splitting further] in
// trainer.h), and the configuration nearest to it that may fit. Without it, on the tree network
// under 0.6 of its plain peak (which no plan fits whole), the search spent its evaluations on
// eight to sixty-four micro-batches and tighter budgets and never measured two micro-batches at
// the full budget, the grid's best (docs/benchmarks.md, "auto_tune beside the grid"). The search
// stops when the evaluations are spent, every feasible configuration is measured, or no
// unmeasured configuration is still likely (stopProbability) to beat the best by `enough`.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "symtune/control/config_space.h"

namespace symtune::control {

struct TuneOptions {
  int evaluations = 12;      // measured evaluations at most, the first included
  int simulations = 1024;    // tree descents before each evaluation
  double exploration = 0.3;  // UCT's constant, on rewards relative to the best measured
  // The additive model's prior: how far (log seconds per sample, variance) a knob value may move
  // the time from the cost model's estimate before it is measured, and the noise's variance.
  double priorVariance = 0.1;
  double priorNoise = 0.003;
  // Stops early when no unmeasured configuration is predicted, with at least stopProbability, to
  // be faster than the best measured by `enough` (a share).
  double enough = 0.01;
  double stopProbability = 0.05;
  uint64_t seed = 0;
};

// What the cost model says of a configuration before it is measured.
struct Estimate {
  std::optional<std::string> infeasible;  // it cannot run, and why: pruned
  // Its seconds per sample relative to the first evaluation's configuration (1: no different).
  // Not finite, or not above 0: no estimate, the configuration estimated as the first is.
  double relativeSeconds = 1;
};

// What measuring a configuration gave.
struct Measurement {
  double samplesPerSecond = 0;
  int64_t steps = 0;   // training steps it took
  std::string failed;  // non-empty: it could not run, and why
  // It failed for want of memory under its remat budget (or of the device's, where there is no
  // budget knob): no configuration with as few micro-batches and as tight a budget can run either.
  bool outOfMemory = false;
};

struct Evaluation {
  Configuration configuration;
  // The search's mean estimate before it was measured (0 while nothing was measured).
  double predictedSamplesPerSecond = 0;
  double samplesPerSecond = 0;
  int64_t steps = 0;
  double seconds = 0;  // wall time of the measuring
  std::string failed;
};

struct TuneResult {
  std::vector<Evaluation> evaluations;   // in the order run
  std::optional<size_t> best, runnerUp;  // into evaluations: the fastest measured two
  std::vector<std::pair<Configuration, std::string>> pruned;  // by the estimate, with why
  int64_t configurations = 0;                                 // in the space
  int64_t simulations = 0;
  int64_t steps = 0;    // training steps the evaluations took
  std::string stopped;  // why the search ended
  double seconds = 0;   // wall time of the whole search
};

class AutoTuner {
 public:
  using Evaluator = std::function<Measurement(const Configuration&)>;
  // Asked of every configuration once, after the first evaluation (a cost model may learn from
  // what it ran). Absent: every configuration is estimated alike and only measurements tell them
  // apart.
  using Estimator = std::function<Estimate(const Configuration&)>;

  // Throws std::invalid_argument for an empty space, options out of range, or a knob whose
  // current value is not one of its values (the first evaluation is the space's configuration).
  explicit AutoTuner(ConfigSpace space, TuneOptions options = {});

  // `evaluate` may throw: the configuration counts as evaluated and failed, with the message.
  // `progress`, when given, hears of each evaluation as it ends.
  TuneResult run(const Evaluator& evaluate, const Estimator& estimate = {},
                 const std::function<void(const Evaluation&)>& progress = {});

 private:
  ConfigSpace space_;
  TuneOptions options_;
};

}  // namespace symtune::control
