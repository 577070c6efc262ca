#pragma once
// auto_tune on a session: `symtune tune SESSION --budget-steps N` (docs/control.md, "auto_tune").
// The search (control::AutoTuner) measures each configuration it chooses on a trainer of its own,
// built from the session as it stands (the same weights, the same batches), and estimates the rest
// with the cost model the first trainer built: the remat planner's plan for each budget, its
// recompute cost by the templates, and whether any plan fits.
//
// Note [Side by side at the end]
// Each evaluation runs alone, one after another; what else the machine does moves a
// configuration's speed from one minute to the next by more than what sets the fastest two apart
// (on this project's 2-vCPU machine the grid's own rounds differ by up to 1.4x, and auto_tune's
// choice on Transformer-XL, measured alone, was 0.85-0.91 of the grid's best measured beside it,
// docs/benchmarks.md). So when the budget buys four evaluations or more, the search spends all but
// two, and the last two's steps measure its fastest two again, each on a fresh trainer, side by
// side: a step of each in turn, alternating which goes first (as the harness compares modes), so
// that whatever moves the machine's speed moves both. Each one's two figures, the search's and
// this one's, are taken together (their geometric mean) and the faster so is the choice: two
// trainers of one configuration differ by as much as the configurations the search has to tell
// apart (on the tagger one configuration ran at 155, 117 and 142 samples/s on three trainers of
// one round, and the side by side alone reversed two choices of twelve, both for the worse,
// docs/benchmarks.md "Side by side at the end"), so a configuration's two trainers together say
// more than either. The figures side by side are the session's (control.tuned);
// TunedSession::sideBySide keeps them, with the search's own.
//
// Note [One binding table for the search]
// A bound session's binder measures each (site, shape bucket) it meets once, and a configuration
// that does not measure (binding_explore 0) binds from its table and runs the ATen op elsewhere.
// With a table per trainer, the first configuration paid for measuring the model inside its
// measured steps and one with binding_explore 0 ran the ATen ops throughout, so the search's
// figures compared a one-time cost with a configuration that never binds: on the demo session
// (a fresh machine, no table yet) `symtune tune --budget-steps 12` chose threads 1 and
// binding_explore 0 at "1.237x" the session's, and the tuned session then ran its steps in
// 12.1 ms where the session's own ran in 10.2 ms. So the trainers share one table: each begins
// from the table the evaluations before it left (the session's own table file, when there is one,
// grown by what they measured), a measured step in which the binder measured or noted something
// is left out of the evaluation's median when a step that did not remains (what it costs, a
// long run pays once), and the table goes with the tuned session (TunedSession::bindings), so a
// tuned run binds from its first step whatever its binding_explore.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "symtune/control/auto_tune.h"
#include "symtune/core/binding_table.h"
#include "symtune/core/session.h"
#include "symtune/runtime/trainer.h"

namespace symtune {

struct TuneSessionOptions {
  // Training steps the search may spend, every evaluation's together: each evaluation takes
  // warmupSteps + measuredSteps, so the budget buys budgetSteps / (warmup + measured) of them;
  // of four or more, the last two measure the search's fastest two side by side (Note [Side by
  // side at the end]; sideBySide false: the search spends them all).
  int budgetSteps = 60;
  bool sideBySide = true;
  // A new trainer's first steps: compiling, measuring, planning (at least remat's calibration
  // steps under a budget_fraction).
  int warmupSteps = 2;
  int measuredSteps = 3;                      // their median seconds per sample is the evaluation's
  Telemetry telemetry = Telemetry::Features;  // as the session runs
  control::TuneOptions search;                // its `evaluations` is set from the budget
  std::function<void(const control::Evaluation&)> progress;
};

// Note [Side by side at the end]: the search's fastest two measured again, a step of each in turn.
struct SideBySide {
  control::Configuration first, second;                          // the search's best and runner-up
  double firstSamplesPerSecond = 0, secondSamplesPerSecond = 0;  // there (0: failed)
  std::string failed;  // why one of them could not run there, if one could not
  int64_t steps = 0;   // training steps, both together
  double seconds = 0;
  bool reversed = false;  // the runner-up the faster, with its search figure: it is the choice
};

struct TunedSession {
  // The search; where the side-by-side measure reversed its two fastest, best and runnerUp are
  // swapped to say so (the evaluations keep what the search measured).
  control::TuneResult search;
  control::ConfigSpace space;  // the session's, as its first trainer saw it
  // The session with its control block set to the fastest configuration measured (mode "tuned",
  // the search's figures in control.tuned): the one it began with when nothing beat it.
  Session session;
  std::optional<SideBySide> sideBySide;
  // Note [One binding table for the search]: the table its trainers shared, with what each added
  // (nullopt: the session does not run bound).
  std::optional<BindingTable> bindings;
};

// Throws SetupError for a session that cannot be built, a budget that buys no evaluation, or a
// search in which no configuration ran; a configuration that fails is recorded as failed and the
// search goes on.
TunedSession tuneSession(const Session& session, const TuneSessionOptions& options);

}  // namespace symtune
