#pragma once
// auto_tune on a session: `symtune tune SESSION --budget-steps N` (docs/control.md, "auto_tune").
// The search (control::AutoTuner) measures each configuration it chooses on a trainer of its own,
// built from the session as it stands (the same weights, the same batches), and estimates the rest
// with the cost model the first trainer built: the remat planner's plan for each budget, its
// recompute cost by the templates, and whether any plan fits.

#include <functional>
#include <string>

#include "symtune/control/auto_tune.h"
#include "symtune/core/session.h"
#include "symtune/runtime/trainer.h"

namespace symtune {

struct TuneSessionOptions {
  // Training steps the search may spend, every evaluation's together: each evaluation takes
  // warmupSteps + measuredSteps, so the budget buys budgetSteps / (warmup + measured) of them.
  int budgetSteps = 60;
  // A new trainer's first steps: compiling, measuring, planning (at least remat's calibration
  // steps under a budget_fraction).
  int warmupSteps = 2;
  int measuredSteps = 3;                      // their median seconds per sample is the evaluation's
  Telemetry telemetry = Telemetry::Features;  // as the session runs
  control::TuneOptions search;                // its `evaluations` is set from the budget
  std::function<void(const control::Evaluation&)> progress;
};

struct TunedSession {
  control::TuneResult search;
  control::ConfigSpace space;  // the session's, as its first trainer saw it
  // The session with its control block set to the fastest configuration measured (mode "tuned",
  // the search's figures in control.tuned): the one it began with when nothing beat it.
  Session session;
};

// Throws SetupError for a session that cannot be built, a budget that buys no evaluation, or a
// search in which no configuration ran; a configuration that fails is recorded as failed and the
// search goes on.
TunedSession tuneSession(const Session& session, const TuneSessionOptions& options);

}  // namespace symtune
