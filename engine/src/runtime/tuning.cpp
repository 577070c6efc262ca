#include "symtune/runtime/tuning.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include <ATen/Parallel.h>

#include "symtune/binding/binder.h"
#include "symtune/remat/rematerializer.h"

namespace symtune {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Puts LibTorch's intra-op thread count back as it was: a configuration's threads belong to the
// process, not to the trainer that measured it.
class KeepThreads {
 public:
  KeepThreads() : threads_(at::get_num_threads()) {}
  ~KeepThreads() {
    if (at::get_num_threads() != threads_)
      at::set_num_threads(threads_);
  }
  KeepThreads(const KeepThreads&) = delete;
  KeepThreads& operator=(const KeepThreads&) = delete;

 private:
  int threads_;
};

// Note [One binding table for the search]: the table each trainer begins from and leaves.
class SharedBindings {
 public:
  // Starts `trainer`'s binder from the table so far (one this process measured for this model:
  // a binder refuses it only when the slack differs, and then measures its own).
  void lend(Trainer& trainer) const {
    if (binding::Binder* b = trainer.binder(); b != nullptr && table_)
      b->adopt(*table_);
  }
  // Takes the table `trainer`'s binder holds now, with what the table so far has that it lacks
  // (the side by side's two trainers start from one table and each adds to it); kept as it was
  // when the trainer has no binder. A binder whose slack widened (remat.bind) re-chose its
  // winners: its table alone.
  void take(Trainer& trainer) {
    const binding::Binder* b = trainer.binder();
    if (b == nullptr)
      return;
    BindingTable next = b->table();
    if (table_ && table_->memorySlack == next.memorySlack && table_->model == next.model) {
      for (const Binding& kept : table_->bindings) {
        if (next.find(kept.site, kept.bucket) == nullptr)
          next.put(kept);
      }
    }
    table_ = std::move(next);
  }
  const std::optional<BindingTable>& table() const { return table_; }

 private:
  std::optional<BindingTable> table_;
};

// What `trainer`'s binder has measured and noted so far (0 without one).
int64_t settlingOf(Trainer& trainer) {
  const binding::Binder* b = trainer.binder();
  return b != nullptr ? b->settling() : 0;
}

// An evaluation's measured steps, those in which the binder measured or noted something apart
// (Note [One binding table for the search]).
class MeasuredSteps {
 public:
  void add(double seconds, bool settling) { (settling ? settling_ : steady_).push_back(seconds); }
  bool empty() const { return steady_.empty() && settling_.empty(); }
  // The median of the steps in which the binder settled nothing, or of them all when it settled
  // something in every one.
  double steadyMedian() const { return median(steady_.empty() ? settling_ : steady_); }

 private:
  std::vector<double> steady_, settling_;
};

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Note [Side by side at the end]: `first` and `second` on a fresh trainer each, a step of each in
// turn (the first to go alternating), `warmup` steps and then `measured` ones whose median seconds
// per sample is each one's measure. A step that fails stops that one; the other goes on.
SideBySide measureSideBySide(const Session& session, const control::Configuration& first,
                             const control::Configuration& second, int warmup, int measured,
                             Telemetry telemetry, int threadsAtStart, SharedBindings& bindings) {
  SideBySide out;
  out.first = first;
  out.second = second;
  const auto started = std::chrono::steady_clock::now();
  const std::array<const control::Configuration*, 2> configurations = {&first, &second};
  std::array<std::unique_ptr<Trainer>, 2> trainers;
  std::array<MeasuredSteps, 2> perSample;
  std::array<std::string, 2> failed;
  for (size_t k = 0; k < 2; ++k) {
    // A trainer begins with the threads the process began with (its space's knob keeps them).
    at::set_num_threads(threadsAtStart);
    try {
      trainers[k] = std::make_unique<Trainer>(session);
      trainers[k]->setTelemetry(telemetry);
      bindings.lend(*trainers[k]);
    } catch (const std::exception& e) {
      failed[k] = oneLine(e);
    }
  }
  for (int i = 0; i < warmup + measured; ++i) {
    for (size_t turn = 0; turn < 2; ++turn) {
      const size_t k = (static_cast<size_t>(i) + turn) % 2;
      if (!failed[k].empty())
        continue;
      try {
        // The threads are the process's: each step sets its own configuration's.
        trainers[k]->configure(*configurations[k]);
        const int64_t settled = settlingOf(*trainers[k]);
        const StepResult r = trainers[k]->step();
        ++out.steps;
        if (i >= warmup)
          perSample[k].add(
              (r.seconds - r.timings.data) / static_cast<double>(trainers[k]->batchSize()),
              settlingOf(*trainers[k]) != settled);
      } catch (const std::exception& e) {
        ++out.steps;  // it ran, as far as it got
        failed[k] = oneLine(e);
      }
    }
  }
  const auto measure = [&](size_t k) {
    return failed[k].empty() && !perSample[k].empty() ? 1 / perSample[k].steadyMedian() : 0.0;
  };
  for (auto& trainer : trainers) {
    if (trainer != nullptr)
      bindings.take(*trainer);
  }
  out.firstSamplesPerSecond = measure(0);
  out.secondSamplesPerSecond = measure(1);
  for (size_t k = 0; k < 2; ++k) {
    if (!failed[k].empty())
      out.failed += (out.failed.empty() ? "" : "; ") + configurations[k]->text() + ": " + failed[k];
  }
  out.seconds = secondsSince(started);
  return out;
}

// Note [Side by side at the end]: each one's search figure and its figure side by side together
// (their geometric mean: two trainers' measures); one that failed side by side is out.
bool runnerUpFaster(const SideBySide& side, double searchFirst, double searchSecond) {
  const auto together = [](double search, double there) {
    return there > 0 ? std::sqrt(search * there) : 0.0;
  };
  return together(searchSecond, side.secondSamplesPerSecond) >
         together(searchFirst, side.firstSamplesPerSecond);
}

}  // namespace

TunedSession tuneSession(const Session& given, const TuneSessionOptions& options) {
  if (options.warmupSteps < 0 || options.measuredSteps < 1)
    throw SetupError("auto_tune: each evaluation needs at least one measured step");
  // The steps that calibrate a remat budget_fraction (plain, on the CPU whole) are no
  // configuration's: they are warm-up whatever the options say.
  const int warmup = std::max(options.warmupSteps, given.remat.enabled && given.remat.budgetFraction
                                                       ? given.remat.calibrationSteps
                                                       : 0);
  const int perEvaluation = warmup + options.measuredSteps;
  if (options.budgetSteps < perEvaluation)
    throw SetupError("auto_tune: a budget of " + std::to_string(options.budgetSteps) +
                     " steps buys no evaluation (each takes " + std::to_string(perEvaluation) +
                     ": " + std::to_string(warmup) + " warm-up and " +
                     std::to_string(options.measuredSteps) + " measured)");
  const KeepThreads keep;
  const int threadsAtStart = at::get_num_threads();
  // Each configuration measured as itself: in fixed mode (the online controller would choose
  // its own), and a step that does not fit fails rather than splitting into more micro-batches
  // than the configuration says.
  Session session = given;
  session.control.mode = "fixed";
  session.control.splitOnOverrun = false;

  // The first trainer: the session's space, and, once it has run, the cost model.
  auto first = std::make_unique<Trainer>(session);
  const control::ConfigSpace space = first->configSpace();
  double firstStepSeconds = 0;  // its median step, without building the batch

  // Note [One binding table for the search]: the first trainer's binder starts from the
  // session's table file as a run would; each later one from what the evaluations before it left.
  SharedBindings bindings;
  const auto measure = [&](Trainer& trainer, const control::Configuration& c, double* stepSeconds) {
    control::Measurement m;
    MeasuredSteps perSample, steps;
    // A step that throws ran, as far as it got: counted as the side by side counts it (a failed
    // evaluation reported one step fewer than it ran).
    bool stepping = false;
    const auto failedWith = [&](std::string why) {
      m.failed = std::move(why);
      m.steps += stepping ? 1 : 0;
    };
    try {
      trainer.setTelemetry(options.telemetry);
      trainer.configure(c);
      for (int i = 0; i < perEvaluation; ++i) {
        const int64_t settled = settlingOf(trainer);
        stepping = true;
        const StepResult r = trainer.step();
        stepping = false;
        ++m.steps;
        if (i < warmup)
          continue;
        const double seconds = r.seconds - r.timings.data;
        const bool settling = settlingOf(trainer) != settled;
        steps.add(seconds, settling);
        perSample.add(seconds / static_cast<double>(trainer.batchSize()), settling);
      }
    } catch (const remat::RematInfeasible& e) {
      failedWith(e.what());  // the steps it ran count
      m.outOfMemory = true;
      return m;
    } catch (const c10::OutOfMemoryError& e) {
      // The device's memory: with no remat budget in the space, fewer micro-batches need more.
      // (Under a budget a tighter one needs less of the device: nothing follows.)
      failedWith(oneLine(e));
      m.outOfMemory = !session.remat.enabled;
      return m;
    } catch (const std::exception& e) {
      failedWith(e.what());
      return m;
    }
    m.samplesPerSecond = 1 / perSample.steadyMedian();
    if (stepSeconds != nullptr)
      *stepSeconds = steps.steadyMedian();
    return m;
  };

  // The cost model: what the first trainer's remat planner forecasts for each budget (its
  // recompute cost, added to the step; or that no plan fits the whole batch), taken once the
  // first evaluation ran, before the trainer goes (its weights and memory are no other
  // evaluation's). Micro-batches and threads it has no figure for: the search learns them by
  // measuring.
  std::map<double, remat::Forecast> forecasts;
  double ownCost = 0;
  const auto takeForecasts = [&] {
    remat::Rematerializer* remat = first->rematerializer();
    const control::Knob* budget = space.knob("remat_budget");
    if (remat == nullptr || budget == nullptr)
      return;
    for (double v : budget->values)
      forecasts[v] = remat->forecast(v);
    const auto own = forecasts.find(budget->current);
    if (own != forecasts.end())
      ownCost = own->second.costSeconds.value_or(0);
  };

  bool firstRun = false;
  const control::AutoTuner::Evaluator evaluate = [&](const control::Configuration& c) {
    if (!firstRun) {
      firstRun = true;
      const control::Measurement m = measure(*first, c, &firstStepSeconds);
      bindings.take(*first);  // whatever became of the evaluation
      takeForecasts();
      first.reset();
      return m;
    }
    // A trainer begins with the threads the process began with (its space's knob keeps them).
    at::set_num_threads(threadsAtStart);
    std::unique_ptr<Trainer> trainer;
    try {
      trainer = std::make_unique<Trainer>(session);
    } catch (const std::exception& e) {
      return control::Measurement{0, 0, e.what()};
    }
    bindings.lend(*trainer);
    const control::Measurement m = measure(*trainer, c, nullptr);
    bindings.take(*trainer);
    return m;
  };

  const control::AutoTuner::Estimator estimate = [&](const control::Configuration& c) {
    control::Estimate e;
    const control::Knob* budget = space.knob("remat_budget");
    if (budget == nullptr)
      return e;
    const auto found = forecasts.find(control::valueOf(c, *budget));
    if (found == forecasts.end())
      return e;
    const remat::Forecast& f = found->second;
    if (f.infeasible && c.microbatches == 1) {
      e.infeasible = *f.infeasible;
    } else if (f.costSeconds && firstStepSeconds > ownCost) {
      const double base = firstStepSeconds - ownCost;
      e.relativeSeconds = (base + *f.costSeconds) / firstStepSeconds;
    }
    return e;
  };

  // Note [Side by side at the end]: of four evaluations or more, the last two settle the fastest
  // two.
  const int evaluations = options.budgetSteps / perEvaluation;
  const bool settle = options.sideBySide && evaluations >= 4;
  control::TuneOptions search = options.search;
  search.evaluations = settle ? evaluations - 2 : evaluations;
  control::AutoTuner tuner(space, search);
  TunedSession out{tuner.run(evaluate, estimate, options.progress), space, given, std::nullopt,
                   std::nullopt};

  control::TuneResult& r = out.search;
  if (!r.best)
    throw SetupError("auto_tune: no configuration ran; the first: " +
                     (r.evaluations.empty() ? std::string("none") : r.evaluations.front().failed));
  if (settle && r.runnerUp) {
    out.sideBySide = measureSideBySide(
        session, r.evaluations[*r.best].configuration, r.evaluations[*r.runnerUp].configuration,
        warmup, options.measuredSteps, options.telemetry, threadsAtStart, bindings);
    out.sideBySide->reversed =
        runnerUpFaster(*out.sideBySide, r.evaluations[*r.best].samplesPerSecond,
                       r.evaluations[*r.runnerUp].samplesPerSecond);
    if (out.sideBySide->reversed)
      std::swap(r.best, r.runnerUp);
  }
  ControlSpec& control = out.session.control;
  control.enabled = true;
  control.mode = "tuned";
  const control::Configuration& best = r.evaluations[*r.best].configuration;
  control.microbatches = best.microbatches;
  control.threads = best.threads;
  control.rematBudget = best.rematBudget;
  control.bindingExplore = best.bindingExplore;
  ControlSpec::Tuned t;
  t.evaluations = static_cast<int64_t>(r.evaluations.size());
  t.configurations = r.configurations;
  t.steps = r.steps;
  t.seconds = r.seconds;
  t.samplesPerSecond = r.evaluations[*r.best].samplesPerSecond;
  t.start = r.evaluations.front().configuration.text();
  t.startSamplesPerSecond = r.evaluations.front().samplesPerSecond;
  if (r.runnerUp) {
    t.runnerUp = r.evaluations[*r.runnerUp].configuration.text();
    t.runnerUpSamplesPerSecond = r.evaluations[*r.runnerUp].samplesPerSecond;
  }
  t.stopped = r.stopped;
  if (const auto& s = out.sideBySide) {
    // Their figures side by side are the session's: measured under the same conditions.
    t.evaluations += 2;
    t.steps += s->steps;
    t.seconds += s->seconds;
    if (s->firstSamplesPerSecond > 0 || s->secondSamplesPerSecond > 0) {
      t.samplesPerSecond = s->reversed ? s->secondSamplesPerSecond : s->firstSamplesPerSecond;
      t.runnerUpSamplesPerSecond =
          s->reversed ? s->firstSamplesPerSecond : s->secondSamplesPerSecond;
    }
    t.stopped += "; then its fastest two side by side" +
                 std::string(s->reversed ? ", which reversed them" : "") +
                 (s->failed.empty() ? "" : " (failed there: " + s->failed + ")");
  }
  control.tuned = t;
  out.bindings = bindings.table();
  return out;
}

}  // namespace symtune
