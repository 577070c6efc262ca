#include "batch_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>
#include <ostream>
#include <utility>

#include <sys/resource.h>

#include "symtune/attach/run_controller.h"
#include "symtune/binding/binder.h"
#include "symtune/compat/torch_compat.h"
#include "symtune/core/atomic_file.h"
#include "symtune/core/version.h"
#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/op_tracer.h"

namespace symtune {

namespace {

// Note [Attached step graph]
// The graph an attached run publishes first is the static one: the forward IR, no shapes, no
// autograd nodes. Its second step (the first is TorchScript's profiling run) goes through
// SyMuGen's step capture instead — it trains like any other step — and the captured graph,
// with shapes, branches taken, loop trips and the autograd graph linked to the forward ops,
// replaces it. Forward node ids are the static graph's, so per-node figures still apply. A model
// the capture cannot run takes a plain step and keeps its static graph.
StepResult captureForStudio(Trainer& trainer, attach::RunController& attached) {
  StepResult r;
  Graph graph;
  try {
    graph = trainer.captureStep(&r);
  } catch (const std::exception&) {
    return trainer.step();
  }
  attached.publishGraph(graph);
  return r;
}

using Clock = std::chrono::steady_clock;

std::string isoNowUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t peakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string clock(double seconds) {
  // Past 100 000 hours (a run of billions of steps) the figure says nothing; lround's range ends
  // not much further.
  const double kLongest = 1e5 * 3600;
  if (!(seconds < kLongest))
    return seconds > 0 ? ">100000:00:00" : "0:00";
  const auto s = static_cast<long>(std::lround(std::max(0.0, seconds)));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  }
  return buf;
}

// The samples a step trained: its batch as it held them (the batch_size feature), the session's
// batch size where the step did not say.
int64_t samplesOf(const StepResult& r, int64_t batchSize) {
  const double n = r.features[Feature::BatchSize];
  return std::isfinite(n) && n > 0 ? static_cast<int64_t>(n) : batchSize;
}

// Progress at a steady rate: samples/s over the steps since the previous line.
class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream* out, double interval, int64_t steps, int64_t batch)
      : out_(out), interval_(interval), steps_(steps), batch_(batch) {}

  void onStep(const StepResult& r, double trainSeconds) {
    windowSeconds_ += r.seconds;
    windowSamples_ += samplesOf(r, batch_);
    const auto now = Clock::now();
    const bool last = r.step + 1 == steps_, first = std::exchange(first_, false);
    if (out_ == nullptr ||
        !(first || last || std::chrono::duration<double>(now - lastLine_).count() >= interval_)) {
      return;
    }
    const double rate =
        windowSeconds_ > 0 ? static_cast<double>(windowSamples_) / windowSeconds_ : 0.0;
    const double perStep = trainSeconds / static_cast<double>(r.step + 1);
    char line[160];
    std::snprintf(line, sizeof line, "step %*lld/%lld  loss %.4f  %.1f samples/s  eta %s",
                  static_cast<int>(std::to_string(steps_).size()),
                  static_cast<long long>(r.step + 1), static_cast<long long>(steps_), r.loss, rate,
                  clock(perStep * static_cast<double>(steps_ - r.step - 1)).c_str());
    *out_ << line << std::endl;
    lastLine_ = now;
    windowSeconds_ = 0;
    windowSamples_ = 0;
  }

 private:
  std::ostream* out_;
  double interval_;
  int64_t steps_, batch_;
  Clock::time_point lastLine_ = Clock::now();
  bool first_ = true;
  double windowSeconds_ = 0;
  int64_t windowSamples_ = 0;
};

// What a resumed run's report takes over from its checkpoint's: the records of the steps before.
void carryOver(RunReport& into, const RunReport& from) {
  into.startedAt = from.startedAt;
  into.wallSeconds = from.wallSeconds;  // the whole run's: this process adds its own
  into.resumedAt = from.resumedAt;
  into.loss = from.loss;
  into.stepSeconds = from.stepSeconds;
  into.trainSeconds = from.trainSeconds;
  into.samples = from.samples;  // with trainSeconds: the throughput is of the whole run
  into.rulesFired = from.rulesFired;
  into.rulesInForce = from.rulesInForce;  // a resume that takes no step keeps the last step's
  into.features = from.features;
  into.stepsSkipped = from.stepsSkipped;
  if (from.remat)
    into.remat = from.remat;
  into.microbatches = from.microbatches;
  into.splits = from.splits;
  into.optimizeRequired = from.optimizeRequired;
  into.decisions = from.decisions;
  into.validation = from.validation;
  into.bindingMeasurements = from.bindingMeasurements;
}

// Resumes `trainer` from the session's checkpoint, the report with it.
void resumeRun(Trainer& trainer, const Session& session, RunReport& report,
               std::ostream* progress) {
  const std::filesystem::path& file = session.run.checkpoint;
  if (file.empty())
    throw SetupError("--resume needs run.checkpoint in the session, the file it resumes from");
  const Trainer::Resumed resumed = trainer.resume(file);
  // More steps than the session asks for: "40/30 steps" would be said of a completed run. As
  // many (a run killed after its last checkpoint) is the completed run again: its report as it
  // was, no resume noted.
  if (resumed.steps > session.run.steps)
    throw SetupError(file.string() + ": it holds " + std::to_string(resumed.steps) +
                     " steps, more than run.steps " + std::to_string(session.run.steps) +
                     " asks for (raise run.steps to train on)");
  RunReport before;
  try {
    before = reportFromJson(resumed.report);
  } catch (const std::exception& e) {
    throw SetupError(file.string() + ": " + e.what());
  }
  if (before.stepsCompleted() != resumed.steps)
    throw SetupError(file.string() + ": its report holds " +
                     std::to_string(before.stepsCompleted()) + " steps, its state " +
                     std::to_string(resumed.steps));
  carryOver(report, before);
  if (resumed.steps < session.run.steps)
    report.resumedAt.push_back(resumed.steps);
  if (progress != nullptr) {
    *progress << "resumed from " << file.string() << " after step " << resumed.steps << std::endl;
    for (const auto& note : resumed.notes)
      *progress << "resume: " << note << std::endl;
  }
}

}  // namespace

RunReport runBatch(const Session& session, const BatchOptions& options) {
  const auto start = Clock::now();
  RunReport report;
  report.startedAt = isoNowUtc();
  report.symtuneVersion = kVersion;
  report.torchVersion = TORCH_VERSION;
#ifdef SYMTUNE_HAVE_TORCH_CUDA
  report.cudaCompiled = true;
#endif
  report.cudaAvailable = torch::cuda::is_available();
  report.sessionName = session.name;
  report.sessionPath = session.path;
  report.model = session.model.isZoo() ? session.model.zoo : session.model.file.string();
  report.preset = session.model.preset;
  report.stepsPlanned = session.run.steps;

  Trainer trainer(session);  // SetupError propagates: nothing has run yet
  report.parameterCount = trainer.parameterCount();
  report.device = trainer.device().str();
  report.optimizer = trainer.session().optimizer.name;
  report.optimizerFused = trainer.session().optimizer.fused.value_or(false);
  report.threads = at::get_num_threads();
  report.batchSize = trainer.batchSize();
  for (const auto& rewrite : trainer.rewrites())
    report.rewrites.emplace_back(rewrite.rule, rewrite.sites);
  report.rulesUnselected = trainer.unselectedRules();
  const bool cuda = trainer.device().is_cuda();
  if (cuda)
    compat::cudaResetPeakStats(trainer.device().index());

  if (options.progress != nullptr) {
    *options.progress << "symtune " << kVersion << ": " << session.name << " — "
                      << trainer.modelDescription() << ", " << report.parameterCount
                      << " parameters, batch " << report.batchSize << ", " << report.device << " ("
                      << report.threads << " threads)" << std::endl;
    if (!trainer.dataDescription().empty())
      *options.progress << "data: " << trainer.dataDescription() << std::endl;
    for (const auto& rewrite : trainer.rewrites())
      *options.progress << "rewrite " << rewrite.rule << ": " << rewrite.sites << " sites"
                        << std::endl;
    for (const auto& unselected : trainer.unselectedRules())
      *options.progress << "warning: " << unselected << ": the rule does nothing to gradients"
                        << std::endl;
    if (!trainer.rules().empty()) {
      *options.progress << "rules:";
      for (const auto& name : trainer.rules().names())
        *options.progress << " " << name;
      *options.progress << std::endl;
    }
    if (session.control.enabled) {
      // How the steps are configured (docs/control.md).
      *options.progress << "control: ";
      if (const control::OnlineController* controller = trainer.controller()) {
        *options.progress << "the online controller over " << controller->space().grid().size()
                          << " configurations, from " << trainer.configuration().text();
      } else {
        *options.progress << session.control.mode << ", " << trainer.configuration().text();
        if (const auto& t = session.control.tuned; t && t->startSamplesPerSecond > 0) {
          char measured[160];
          std::snprintf(measured, sizeof measured,
                        " (auto_tune measured %.1f samples/s, %.3fx the configuration it began "
                        "from)",
                        t->samplesPerSecond, t->samplesPerSecond / t->startSamplesPerSecond);
          *options.progress << measured;
        }
      }
      *options.progress << std::endl;
    }
    if (trainer.gpuTraceNote())
      *options.progress << *trainer.gpuTraceNote() << "; nodes are timed with CUDA events"
                        << std::endl;
    if (trainer.bindingNote())
      *options.progress << *trainer.bindingNote() << std::endl;
  }
  if (options.resume)
    resumeRun(trainer, session, report, options.progress);
  std::unique_ptr<attach::RunController> attached;
  if (options.listen) {
    try {
      attached =
          std::make_unique<attach::RunController>(trainer, *options.listen, options.progress);
    } catch (const std::exception& e) {
      throw SetupError(e.what());
    }
  }
  ProgressPrinter progress(options.progress, options.progressIntervalSeconds, session.run.steps,
                           report.batchSize);
  // traceSteps steps are traced from step 1 (step 0 runs TorchScript's profiling pass, not a
  // typical step), or from the first a resumed run takes.
  std::vector<CounterSample> counters;
  std::optional<StepFeatures> last;  // the report keeps the last step's features
  // Validation on the held-out samples (data.validate_every, and after the last step).
  const auto validate = [&] {
    const std::optional<Validation> v = trainer.validate();
    if (!v)
      return;
    report.validation.push_back({v->step, v->samples, v->loss, v->top1, v->top5});
    if (attached)
      attached->afterValidation(*v);
    if (options.progress != nullptr) {
      char line[160];
      int n = std::snprintf(line, sizeof line, "validation after step %lld: loss %.4f",
                            static_cast<long long>(v->step), v->loss);
      if (v->top1)
        n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), ", top-1 %.1f%%",
                           100 * *v->top1);
      if (v->top5)
        std::snprintf(line + n, sizeof line - static_cast<size_t>(n), ", top-5 %.1f%%",
                      100 * *v->top5);
      *options.progress << line << " (" << v->samples << " samples)" << std::endl;
    }
  };
  const int64_t firstStep = trainer.stepsDone();
  const int64_t traceFrom = std::max<int64_t>(1, firstStep);
  auto traced = [&](int64_t step) {
    return options.trace && step >= traceFrom && step < traceFrom + options.traceSteps;
  };
  // The last step's features, in the report (and in a checkpoint's copy of it, which a resume of
  // the completed run hands back as it was).
  const auto keepFeatures = [&] {
    if (!last)
      return;
    report.features.clear();
    for (int f = 0; f < kFeatureCount; ++f)
      report.features.emplace_back(featureName(static_cast<Feature>(f)), last->values[f]);
  };
  int64_t peakReset = 0;  // the highest device peak a step's remat side reset
  try {
    const std::filesystem::path& checkpointFile = session.run.checkpoint;
    const auto checkpoint = [&] {
      keepFeatures();
      // The wall time so far, this process's included: a resume adds its own to it.
      RunReport sofar = report;
      sofar.wallSeconds += std::chrono::duration<double>(Clock::now() - start).count();
      trainer.saveCheckpoint(checkpointFile, toJson(sofar));
    };
    for (int64_t i = trainer.stepsDone(); i < session.run.steps; ++i) {
      if ((options.stop != nullptr && options.stop->load()) ||
          (attached && !attached->beforeStep(options.stop, options.lingerSeconds))) {
        report.status = RunReport::Status::Interrupted;
        break;
      }
      const bool sampled = attached && !traced(i) && attached->sampleStep(i);
      if (sampled)
        trainer.setTelemetry(Telemetry::PerNode);
      if (traced(i) && trainer.telemetry() != Telemetry::PerNode) {
        OpTracerOptions ops;
        ops.shapes = true;
        trainer.setTelemetry(Telemetry::PerNode, ops);
        trainer.setKeepEvents(true);
      }
      StepResult r;
      const int64_t measuredBefore =
          trainer.binder() != nullptr ? trainer.binder()->measurements() : 0;
      if (attached && i == 1 && !sampled && !traced(i)) {
        // Note [Attached step graph]: the studio gets the autograd graph of a real step.
        r = captureForStudio(trainer, *attached);
      } else {
        r = trainer.step();
      }
      if (sampled)
        trainer.setTelemetry(Telemetry::Features);
      if (cuda && r.peakBeforeResets)  // the remat side reset the device's peak in the step
        peakReset = std::max(peakReset, *r.peakBeforeResets);
      if (attached)
        attached->afterStep(r);
      if (traced(i)) {
        const int64_t now = OpTracer::nowNs();
        counters.push_back({"peak_memory_bytes", now, r.features[Feature::PeakMemory]});
        counters.push_back({"live_memory_bytes", now, r.features[Feature::LiveMemory]});
        if (!traced(i + 1))
          trainer.setTelemetry(Telemetry::Features);
      }
      report.loss.push_back(r.loss);
      if (trainer.binder() != nullptr)
        report.bindingMeasurements.push_back(trainer.binder()->measurements() - measuredBefore);
      if (r.remat) {
        if (!report.remat)
          report.remat.emplace();
        const auto& plan = r.remat->plan;
        report.remat->steps.push_back({plan.limitBytes, r.remat->peakBytes,
                                       static_cast<int64_t>(plan.segments.recompute.size()),
                                       r.remat->attempts});
      }
      report.microbatches.push_back(r.microbatches);
      if (!r.splitNote.empty()) {
        report.splits.emplace_back(r.step, r.splitNote);
        if (options.progress != nullptr)
          *options.progress << "step " << r.step << ": " << r.splitNote << std::endl;
      }
      if (r.optimizeRequired)
        report.optimizeRequired.emplace_back(r.step, r.optimizeRequired->reasons);
      if (r.decision) {
        RunReport::Decision d;
        d.step = r.step;
        d.chosen = r.decision->chosen.text();
        d.predictedSamplesPerSecond = r.decision->predictedSamplesPerSecond;
        d.samplesPerSecond = r.decision->samplesPerSecond.value_or(0);
        d.explored = r.decision->explored;
        d.levelMoved = r.decision->levelMoved;
        for (const auto& [configuration, predicted] : r.decision->alternatives)
          d.alternatives.emplace_back(configuration.text(), predicted);
        d.batchSignals = r.decision->batchSignals;
        for (const auto& driver : r.decision->drivers)
          d.drivers.emplace_back(driver.what, driver.factor);
        d.violation = r.decision->violation;
        d.heldBack = r.decision->heldBack;
        d.idle = r.decision->idle;
        if (!d.violation.empty() && options.progress != nullptr)
          *options.progress << "step " << r.step << ": " << d.violation << std::endl;
        report.decisions.push_back(std::move(d));
      }
      report.stepSeconds.push_back(r.seconds);
      report.trainSeconds += r.seconds;
      report.samples += samplesOf(r, report.batchSize);
      report.rulesInForce = r.rulesInForce;
      for (const auto& name : r.rulesFired) {
        auto it = std::find_if(report.rulesFired.begin(), report.rulesFired.end(),
                               [&](const auto& f) { return f.first == name; });
        if (it == report.rulesFired.end())
          report.rulesFired.emplace_back(name, 1);
        else
          ++it->second;
      }
      report.stepsSkipped += r.skipped;
      progress.onStep(r, report.trainSeconds);
      last = r.features;
      const int64_t every = session.data.files.validateEvery, done = i + 1;
      if (done == session.run.steps || (every > 0 && done % every == 0))
        validate();
      if (!session.run.save.empty() && session.run.saveEvery > 0 &&
          done % session.run.saveEvery == 0 && done != session.run.steps)
        trainer.saveModel(session.run.save);
      if (!checkpointFile.empty() && session.run.checkpointEvery > 0 &&
          done % session.run.checkpointEvery == 0 && done != session.run.steps)
        checkpoint();
    }
    // A run stopped before its first step (a signal while the data loaded) has nothing of its own
    // to keep: an earlier checkpoint or saved model stays as it was.
    const bool stepped = trainer.stepsDone() > firstStep;
    if (!checkpointFile.empty() && stepped) {  // the last: at the end, or where the run stopped
      checkpoint();
      if (options.progress != nullptr)
        *options.progress << "checkpoint after step " << trainer.stepsDone() << ": "
                          << checkpointFile.string() << std::endl;
    }
    // A run killed after its last checkpoint and before its model was saved resumes with no step
    // to take: its model is saved from the checkpoint's parameters where the file is missing or
    // older than the checkpoint (until 2026-12-07 it was not, and the run read as completed).
    const auto savedBefore = [&] {
      std::error_code ec;
      const auto saved = std::filesystem::last_write_time(session.run.save, ec);
      return !ec && !(saved < std::filesystem::last_write_time(checkpointFile, ec)) && !ec;
    };
    const bool unsaved = options.resume && !checkpointFile.empty() && !savedBefore();
    if (!session.run.save.empty() && (stepped || unsaved)) {  // also from an interrupted run
      trainer.saveModel(session.run.save);
      if (options.progress != nullptr)
        *options.progress << "saved the trained model to " << session.run.save.string()
                          << std::endl;
    }
  } catch (const std::exception& e) {  // c10::Error and TorchScript's errors alike
    report.status = RunReport::Status::Failed;
    report.error = "step " + std::to_string(report.stepsCompleted()) + ": " + oneLine(e);
  }
  trainer.setTelemetry(Telemetry::Features);
  if (attached && report.status == RunReport::Status::Completed && options.serveAfterLastStep)
    attached->serveUntilStopped(options.stop, options.lingerSeconds);
  attached.reset();
  keepFeatures();
  if (options.trace) {
    const GpuRecords gpuRecords = trainer.takeGpuRecords();
    try {
      writeFileAtomically(*options.trace, chromeTrace(trainer.takeEvents(), counters,
                                                      &trainer.staticGraph(), &gpuRecords));
    } catch (const std::exception& e) {
      report.status = RunReport::Status::Failed;
      report.error = std::string("cannot write the trace: ") + e.what();
    }
  }
  if (cuda) {
    // The run's: a budgeted step resets the device's peak per attempt and micro-batch, and the
    // peak after the last step was that step's last attempt's (the calibration steps' went).
    report.peakCudaAllocatedBytes = compat::cudaPeakAllocatedBytes(trainer.device().index());
    if (report.peakCudaAllocatedBytes)
      report.peakCudaAllocatedBytes = std::max(*report.peakCudaAllocatedBytes, peakReset);
    // After the steps: CUPTI may have refused when a per-node step first asked for it.
    report.deviceTiming = trainer.gpuTraceNote().value_or("cupti");
  }
  if (const binding::Binder* binder = trainer.binder()) {
    report.bindings = binder->table();
    report.bindingNote = trainer.bindingNote().value_or("");
    // The table is a cache: one that cannot be written costs the next run its measurements, not
    // this run its result.
    try {
      if (auto file = trainer.saveBindingTable())
        report.bindingTableFile = *file;
    } catch (const std::exception& e) {
      report.bindingNote = std::string("binding table not saved: ") + e.what();
      if (options.progress != nullptr)
        *options.progress << report.bindingNote << std::endl;
    }
  }
  if (const remat::Rematerializer* remat = trainer.rematerializer()) {
    if (!report.remat)
      report.remat.emplace();
    const auto& stats = remat->stats();
    report.remat->buckets = stats.buckets;
    report.remat->plansMade = stats.plansMade;
    report.remat->cacheHits = stats.cacheHits;
    report.remat->backOffs = stats.backOffs;
    report.remat->profiles = stats.profiles;
    report.remat->shapeProfiles = stats.shapeProfiles;
    report.remat->shapesRefused = stats.shapesRefused;
  }
  report.peakRssBytes = peakRssBytes();
  report.wallSeconds += std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace symtune
