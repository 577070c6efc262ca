#include "harness.h"

#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/serialize.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "anchor_export.h"
#include "bench_common.h"
#include "symtune/compat/torch_compat.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/remat/memory_predictor.h"
#include "symtune/rules/rule_registry.h"
#include "symtune/rules/rule_rewrite.h"
#include "symtune/telemetry/memory_tracker.h"

namespace symtune::bench {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

void synchronize(const torch::Device& device) {
  if (device.is_cuda())
    torch::cuda::synchronize();
}

// The best time of `fn` over a few rounds, each long enough to be timed reliably.
double bestSeconds(const torch::Device& device, const std::function<void()>& fn) {
  fn();  // warm-up
  synchronize(device);
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    int reps = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
      fn();
      ++reps;
      synchronize(device);
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < 0.2);
    best = std::min(best, elapsed / reps);
  }
  return best;
}

struct ModeRecord {
  std::vector<double> losses;                // every step, warm-up included
  std::vector<double> allPeaks, savedBytes;  // every step: its peak; the templates' saved bytes
  std::vector<double> stepSeconds, samplesPerSecond, data, forward, backward, optimizer, peakBytes;
  std::vector<double> decide;            // the online controller's choice, where it chose
  std::vector<int64_t> measurements;     // binder measurements per step, warm-up included
  std::vector<int> microbatches;         // every step: how many micro-batches it ran as
  std::vector<std::string> splitNotes;   // why a step was split further, where one was
  std::vector<StepResult::Remat> remat;  // every step under a budget, warm-up included
  std::string refused;            // why the session refused the mode's configuration (SetupError)
  std::string infeasible;         // why the mode stopped: its budget is below what any plan fits
  std::string infeasibleBinding;  // and what its trainer said of its binding by then
  double smallestFeasible = 0;
};

// What the rematerializer did over a mode's steps: its plans, their predictions against the
// measured peaks (steps after the first `settle`), and whether any step went over its budget.
json rematSummary(const remat::Rematerializer& remat, const ModeRecord& rec, size_t settle) {
  std::vector<double> errors, recomputed;
  int64_t over = 0, retried = 0;
  json steps = json::array();
  for (size_t i = 0; i < rec.remat.size(); ++i) {
    const auto& r = rec.remat[i];
    const auto& plan = r.plan;
    if (plan.limitBytes && r.peakBytes > static_cast<double>(*plan.limitBytes))
      ++over;
    retried += r.attempts > 1;
    recomputed.push_back(static_cast<double>(plan.segments.recompute.size()));
    json step = {
        {"recomputed", plan.segments.recompute},
        {"peak_bytes", r.peakBytes},
        {"limit_bytes", plan.limitBytes ? json(*plan.limitBytes) : json(nullptr)},
        {"predicted_bytes", plan.predictedPeak ? json(*plan.predictedPeak) : json(nullptr)},
        {"predicted_plain_bytes", plan.predictedPlain ? json(*plan.predictedPlain) : json(nullptr)},
        // What the predictor reads of the plan (Note [Memory predictor]).
        {"kept_bytes", plan.keptSavedBytes},
        {"comes_back_bytes", plan.recomputedBytes},
        {"cached", plan.cached},
        {"attempts", r.attempts}};
    if (plan.predictedPeak && i >= settle && r.peakBytes > 0) {
      errors.push_back(std::abs(*plan.predictedPeak - r.peakBytes) / r.peakBytes);
      step["error"] = errors.back();
    }
    steps.push_back(std::move(step));
  }
  const auto& stats = remat.stats();
  return {
      {"buckets", stats.buckets},
      {"plans_made", stats.plansMade},
      {"cache_hits", stats.cacheHits},
      {"back_offs", stats.backOffs},
      {"profiles", stats.profiles},
      {"shape_profiles", stats.shapeProfiles},
      {"shapes_refused", stats.shapesRefused.empty() ? json(nullptr) : json(stats.shapesRefused)},
      {"steps_over_budget", over},
      {"steps_run_again", retried},
      {"recomputed_units", summary(recomputed)},
      {"prediction_median_error", errors.empty() ? json(nullptr) : json(median(errors))},
      {"prediction_max_error",
       errors.empty() ? json(nullptr) : json(*std::max_element(errors.begin(), errors.end()))},
      {"steps", steps}};
}

// The forward's activation bytes saved for backward by SyMuGen's templates, on `inputs` with the
// parameters as they are (grad mode off; the random state put back).
double templateSavedBytes(SyMuGen& gen, const std::vector<c10::IValue>& inputs) {
  auto generator = at::detail::getDefaultCPUGenerator();
  const at::Tensor state = generator.get_state();
  torch::NoGradGuard noGrad;
  ForwardOptions options;
  options.countCost = true;
  const double saved = gen.forward(inputs, options).cost.savedBytes;
  generator.set_state(state);
  return saved;
}

// Each step's peak predicted by a MemoryPredictor fed the steps before it; the errors of the
// steps after the first `settle`, relative to the measured peak.
json memoryPredictionSummary(const ModeRecord& rec, const std::string& mode, size_t settle) {
  remat::MemoryPredictor predictor;
  json steps = json::array();
  std::vector<double> errors;
  for (size_t i = 0; i < rec.allPeaks.size(); ++i) {
    const auto predicted = predictor.predict(rec.savedBytes[i]);
    json step = {{"saved_bytes", rec.savedBytes[i]},
                 {"peak_bytes", rec.allPeaks[i]},
                 {"predicted_bytes", predicted ? json(*predicted) : json(nullptr)}};
    if (predicted && i >= settle && rec.allPeaks[i] > 0) {
      errors.push_back(std::abs(*predicted - rec.allPeaks[i]) / rec.allPeaks[i]);
      step["error"] = errors.back();
    }
    steps.push_back(std::move(step));
    predictor.observe(rec.savedBytes[i], rec.allPeaks[i]);
  }
  const double worst = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  return {{"mode", mode},
          {"settle_steps", settle},
          {"median_error", errors.empty() ? json(nullptr) : json(median(errors))},
          {"max_error", errors.empty() ? json(nullptr) : json(worst)},
          {"steps", steps}};
}

// What the binder did in a mode's run: measurements per step, the sites and the table.
json bindingSummary(const binding::Binder& binder, const ModeRecord& rec, int warmup) {
  int64_t afterWarmup = 0;
  for (size_t i = static_cast<size_t>(warmup); i < rec.measurements.size(); ++i)
    afterWarmup += rec.measurements[i];
  int64_t bound = 0;
  for (const auto& b : binder.table().bindings)
    bound += b.winner != binding::kAten ? 1 : 0;
  return {{"sites", binder.sites().size()},
          {"measurements_per_step", rec.measurements},
          {"measurements_after_warmup", afterWarmup},
          {"predicted", binder.predictions()},
          {"bound_executions", binder.boundExecutions()},
          {"buckets_bound_away_from_aten", bound},
          {"table", json::parse(binder.table().toJson())}};
}

json lossAgreement(const std::vector<double>& losses, const std::vector<double>& baseline) {
  const size_t n = std::min(losses.size(), baseline.size());
  if (n == 0)
    return nullptr;
  double worst = 0;
  size_t within = 0, nonfinite = 0;
  for (size_t i = 0; i < n; ++i) {
    const double dev = std::abs(losses[i] - baseline[i]) / std::max(std::abs(baseline[i]), 1e-12);
    // A NaN loss on either side is no agreement: std::max would drop it, and a diverged mode
    // would show a small deviation.
    if (!std::isfinite(dev)) {
      ++nonfinite;
      worst = std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, dev);
    within += dev <= 0.01;
  }
  // max_rel_dev is null (JSON has no infinity) when a step's loss is not finite on either side.
  return {{"max_rel_dev", std::isfinite(worst) ? json(worst) : json(nullptr)},
          {"within_1pct", static_cast<double>(within) / n},
          {"nonfinite_steps", nonfinite}};
}

}  // namespace

StepPeak::StepPeak(const torch::Device& device) : device_(device) {
  if (device_.is_cuda()) {
    compat::cudaResetPeakStats(device_.index());
    live_ = compat::cudaPeakAllocatedBytes(device_.index()).value_or(0);  // the peak just reset
  } else if (CpuAllocationCounter::active()) {
    CpuAllocationCounter::resetPeak();
    live_ = CpuAllocationCounter::counters().current;
  }
}

double StepPeak::bytes(std::optional<int64_t> beforeResets) const {
  int64_t peak = live_;
  if (device_.is_cuda())
    peak = compat::cudaPeakAllocatedBytes(device_.index()).value_or(live_);
  else if (CpuAllocationCounter::active())
    peak = CpuAllocationCounter::counters().peak;
  peak = std::max(peak, beforeResets.value_or(peak));
  return static_cast<double>(std::max<int64_t>(peak - live_, 0));
}

// A mode's setup that runs the model through SyMuGen's evaluator under the plan `planOf` makes.
std::function<void(Trainer&)> recomputing(const char* name,
                                          std::function<SegmentPlan(SegmentExecutor&)> planOf) {
  return [name, planOf = std::move(planOf)](Trainer& trainer) {
    torch::jit::Module* module = trainer.executor().scriptModule();
    TORCH_CHECK(module != nullptr, name, " needs a TorchScript model");
    auto executor = std::make_unique<SegmentExecutor>(*module, name);
    executor->setPlan(planOf(*executor));
    trainer.setExecutor(std::move(executor));
  };
}

const std::vector<Mode>& baselineModes() {
  static const std::vector<Mode> modes = {
      {"script", "TorchScript's default (profiling) executor", {}, {}, {}},
      {"script-noopt",
       "TorchScript with graph optimization off (closest to eager)",
       {},
       [] { torch::jit::setGraphExecutorOptimize(false); },
       [] { torch::jit::setGraphExecutorOptimize(true); }},
      {"eager",
       "the model run op by op as LibTorch eager would: SyMuGen's evaluator, nothing recomputed "
       "(the C++ counterpart of PyTorch eager)",
       [](Trainer& trainer) {
         torch::jit::Module* module = trainer.executor().scriptModule();
         TORCH_CHECK(module != nullptr, "eager runs a TorchScript model's graph op by op");
         trainer.setExecutor(std::make_unique<SegmentExecutor>(*module, "eager"));
       },
       {},
       {}},
      {"bind",
       "DynaCompiler: the evaluator with every op site bound, per shape bucket, to the fastest "
       "candidate that agrees with the ATen op (measured on the first batches that meet it)",
       {},
       {},
       {},
       [](Session& session) { session.binding.enabled = true; }},
      {"checkpoint",
       "full activation checkpointing of every top-level block",
       recomputing("checkpoint", [](SegmentExecutor& e) { return e.recomputeAll(); }),
       {},
       {}},
      {"selective",
       "selective recomputation: every run of cheap ops recomputed without the matmul or "
       "convolution that closes it, whose saved input is freed until its backward",
       recomputing("selective", [](SegmentExecutor& e) { return e.recomputeCheapOps(); }),
       {},
       {}},
      {"per-node",
       "per-node telemetry on every step: what measuring each op costs in time and memory",
       {},
       {},
       {},
       {},
       Telemetry::PerNode},
      {"tanh-gelu",
       "the built-in tanh_gelu rewrite: exact GELU to its tanh approximation",
       [](Trainer& trainer) {
         torch::jit::Module* module = trainer.executor().scriptModule();
         TORCH_CHECK(module != nullptr, "the tanh_gelu rewrite needs a TorchScript model");
         // The trainer has not run yet: its methods have no executor to keep the old code.
         const auto rule = *rules::Registry::global().get("tanh_gelu").rule;
         const auto reports = rules::applyRewrites(*module, {rule});
         std::cerr << "  tanh-gelu: " << reports.front().sites << " sites rewritten\n";
       },
       {},
       {}},
      {"fused-optim",
       "the session's optimizer with symtune::optim's fused step (kernels/)",
       {},
       {},
       {},
       [](Session& session) { session.optimizer.fused = true; }},
      {"fused",
       "kernels/ end to end: the fused optimizer step and the built-in pack's fusion rewrites "
       "(fused_bias_gelu, fused_bias_dropout_add)",
       [](Trainer& trainer) {
         for (const auto& report : trainer.rewrites())
           std::cerr << "  fused: " << report.rule << ", " << report.sites << " sites rewritten\n";
       },
       {},
       {},
       [](Session& session) {
         session.optimizer.fused = true;
         for (const char* rule : {"fused_bias_gelu", "fused_bias_dropout_add"})
           session.rules.enable.push_back(rule);
       }},
      {"bind+fused",
       "DynaCompiler's binding and kernels/ end to end: the fusion rewrites applied to the graph "
       "first (their sites leave the binder nothing to choose), the fused optimizer step",
       [](Trainer& trainer) {
         for (const auto& report : trainer.rewrites()) {
           std::cerr << "  bind+fused: " << report.rule << ", " << report.sites
                     << " sites rewritten\n";
         }
       },
       {},
       {},
       [](Session& session) {
         session.binding.enabled = true;
         session.optimizer.fused = true;
         for (const char* rule : {"fused_bias_gelu", "fused_bias_dropout_add"})
           session.rules.enable.push_back(rule);
       }},
  };
  return modes;
}

Lockstep::Lockstep(const std::string& folder) : folder_(folder) {
  // The anchor opens turn.anchor first too: each open waits for the other end.
  toAnchor_.open(fs::path(folder) / "turn.anchor");
  fromAnchor_.open(fs::path(folder) / "turn.engine");
  if (!toAnchor_ || !fromAnchor_)
    throw std::runtime_error("--lockstep " + folder + ": cannot open turn.anchor and turn.engine");
}

void Lockstep::pass(const std::string& model, int step, size_t slot, size_t slots) {
  const std::string turn =
      model + " " + std::to_string(step) + " " + std::to_string(slot) + " " + std::to_string(slots);
  toAnchor_ << turn << std::endl;
  std::string answer;
  if (!std::getline(fromAnchor_, answer))
    throw std::runtime_error("--lockstep " + folder_ + ": the anchor stopped before " + turn);
  if (answer != turn)
    throw std::runtime_error("--lockstep " + folder_ + ": the anchor answered \"" + answer +
                             "\" to \"" + turn + "\"");
}

void Lockstep::finish() {
  toAnchor_ << "done" << std::endl;
}

Telemetry parseTelemetry(const std::string& name) {
  if (name == "off")
    return Telemetry::Off;
  if (name == "features")
    return Telemetry::Features;
  if (name == "per-node")
    return Telemetry::PerNode;
  throw std::invalid_argument("--telemetry is off, features or per-node, not \"" + name + "\"");
}

std::string telemetryName(Telemetry level) {
  switch (level) {
    case Telemetry::Off:
      return "off";
    case Telemetry::Features:
      return "features";
    case Telemetry::PerNode:
      return "per-node";
  }
  return "?";
}

const Mode* findMode(const std::string& name) {
  for (const auto& m : baselineModes()) {
    if (m.name == name)
      return &m;
  }
  return configuredMode(name);
}

Probes probeMachine(const torch::Device& device) {
  torch::NoGradGuard noGrad;
  Probes p;
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  auto a = torch::randn({n, n}, torch::TensorOptions(device));
  auto b = torch::randn({n, n}, torch::TensorOptions(device));
  auto c = torch::empty({n, n}, torch::TensorOptions(device));
  const double mm = bestSeconds(device, [&] { torch::mm_out(c, a, b); });
  p.matmulFlopsPerSecond = 2.0 * static_cast<double>(n) * n * n / mm;
  const int64_t elements = device.is_cuda() ? (int64_t{1} << 28) : (int64_t{1} << 26);
  auto src = torch::ones({elements}, torch::TensorOptions(device));
  auto dst = torch::empty({elements}, torch::TensorOptions(device));
  const double copy = bestSeconds(device, [&] { dst.copy_(src); });
  p.memoryBytesPerSecond = 2.0 * static_cast<double>(elements) * sizeof(float) / copy;
  return p;
}

std::string defaultSessionsDir() {
  if (fs::is_directory("resources/sessions"))
    return "resources/sessions";
  return SYMTUNE_SOURCE_SESSIONS_DIR;
}

Session benchSession(const std::string& model, const RunConfig& config) {
  const std::string dir = config.sessionsDir.empty() ? defaultSessionsDir() : config.sessionsDir;
  Session session;
  bool found = false;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (looksLikeSessionFile(entry.path()))
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    Session s = loadSession(file);
    if (s.model.isZoo() && s.model.zoo == model) {
      session = s;
      found = true;
      break;
    }
  }
  if (!found)
    throw std::runtime_error("no session in " + dir + " trains zoo model " + model +
                             " (the benchmark takes its optimizer settings from it)");
  session.name = model + " benchmark";
  session.model.preset = config.preset;
  session.data.seed = config.seed;
  session.data.batchSize.reset();
  session.run.device = config.device;
  session.run.threads = config.threads;
  session.run.cpuMemory = config.cpuMemory;
  session.run.steps = config.warmup + config.steps;
  // Each mode says how the model runs: binding only where the mode asks for it, and measured
  // afresh in every run (no table file read or written).
  session.binding.enabled = false;
  session.binding.useTable = false;
  return session;
}

json machineInfo(const torch::Device& device) {
  return {{"cpu", cpuModel()},
          {"cores", std::thread::hardware_concurrency()},
          {"threads", at::get_num_threads()},
          {"gpu", device.is_cuda() ? compat::cudaDeviceName(device.index()) : ""},
          {"torch", TORCH_VERSION},
          {"device", device.is_cuda() ? "cuda" : "cpu"},
          {"runner", "symtune"}};
}

json runModel(const std::string& model, const RunConfig& config, const Probes& probes) {
  const Session session = benchSession(model, config);
  std::vector<std::string> names = config.modes, grid;
  double gridBudget = 0;
  if (config.grid) {
    grid = gridModes(model, config, &gridBudget);
    std::cerr << "  the grid: " << grid.size() << " configurations under " << *config.grid
              << " of the plain peak (" << gridBudget / 1e6 << " MB)\n";
    for (const auto& name : grid) {
      if (std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    }
  }
  std::vector<const Mode*> modes;
  size_t baseline = names.size();
  for (const auto& name : names) {
    const Mode* mode = findMode(name);
    if (mode == nullptr)
      throw std::runtime_error("unknown mode \"" + name + "\"");
    if (name == config.baseline)
      baseline = modes.size();
    modes.push_back(mode);
  }
  if (baseline == modes.size())
    throw std::runtime_error("the baseline mode \"" + config.baseline + "\" is not among --modes");

  std::vector<std::unique_ptr<Trainer>> trainers;
  std::vector<ModeRecord> records(modes.size());
  for (size_t k = 0; k < modes.size(); ++k) {
    const Mode* mode = modes[k];
    Session own = session;
    if (mode->configure)
      mode->configure(own);
    // A budget fraction is of the plain peak of the warm-up steps, which are not measured.
    if (own.remat.enabled && own.remat.budgetFraction)
      own.remat.calibrationSteps = std::max(1, config.warmup);
    try {
      trainers.push_back(std::make_unique<Trainer>(own));
    } catch (const SetupError& e) {
      // A configuration the model does not allow (micro-batches of a model with batch norm): the
      // mode runs no step, the others go on.
      if (k == baseline)
        throw;
      records[k].refused = e.what();
      trainers.push_back(nullptr);
      std::cerr << "  " << mode->name << ": refused: " << e.what() << "\n";
      continue;
    }
    if (mode->setup)
      mode->setup(*trainers.back());
    trainers.back()->setTelemetry(mode->telemetry.value_or(config.telemetry));
  }
  // Note [One table for the run's bound modes] (harness.h): each bound mode's binder given the
  // run's table of its memory slack, or why not.
  std::vector<std::string> tableNotes(modes.size());
  json sharedTables = json::array();
  if (config.sharedTables) {
    std::set<std::string> listed;
    for (size_t m = 0; m < modes.size(); ++m) {
      if (trainers[m] == nullptr)
        continue;
      auto* segments = dynamic_cast<SegmentExecutor*>(&trainers[m]->executor());
      const std::shared_ptr<binding::Binder> binder =
          segments != nullptr ? segments->sharedBinder() : nullptr;
      if (binder == nullptr)
        continue;
      const double slack = binder->options().memorySlack;
      const SharedTables::Table& shared = config.sharedTables->of(model, slack, config);
      const std::optional<std::string> why = binder->adopt(shared.table);
      tableNotes[m] = why ? "the run's shared table not used: " + *why : "the run's shared table";
      if (listed.insert(shared.path).second)
        sharedTables.push_back({{"memory_slack", slack},
                                {"steps", shared.steps},
                                {"measurements", shared.measurements},
                                {"bindings", shared.table.bindings.size()},
                                {"seconds", shared.seconds}});
    }
  }
  if (!config.exportDir.empty())
    exportForAnchor(model, *trainers[baseline], session, config);

  // Interleaved: every step of every mode in turn, in an order drawn anew each round (Note [The
  // order of a round]).
  //
  // Note [The order of a round]
  // Until 2026-12-05 the order rotated (A B C, B C A, …), which gives every mode the same mode
  // before it in every round but the first of each: what one step leaves behind (the allocator's
  // free lists, the caches) is the next one's start, and a mode's figure was partly its
  // predecessor's. On the MoE under a budget, whichever mode stepped right after two
  // micro-batches of the same model ran its forward about 1 ms (4-5 %) slower than it did after
  // the whole batch or TorchScript's run, steadily over 150 steps; the online controller, on the
  // same configuration and remat plan as the fixed trainer, came out 0.97 of it when it was the
  // one stepping after two micro-batches and 1.01 when the fixed trainer was. Each round's order
  // is now a shuffle from a generator seeded with the run's seed, so each mode follows each other
  // about equally often and a run repeats its order.
  std::vector<size_t> order(modes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 shuffler(static_cast<uint64_t>(config.seed));
  std::unique_ptr<SyMuGen> costed;  // the baseline's model, for its steps' template costs
  if (config.memoryPrediction)
    costed = std::make_unique<SyMuGen>(*trainers[baseline]->executor().scriptModule(), model);
  const int total = config.warmup + config.steps;
  for (int i = 0; i < total; ++i) {
    std::shuffle(order.begin(), order.end(), shuffler);
    for (const size_t m : order) {
      if (!records[m].infeasible.empty() || !records[m].refused.empty()) {
        if (config.lockstep)
          config.lockstep->pass(model, i, m, modes.size());
        continue;
      }
      // Held for the step: under a remat budget the trainer may put another binder in its place,
      // or none (Note [A budget widens the slack] in symtune/binding/binder.h).
      const auto* segments = dynamic_cast<const SegmentExecutor*>(&trainers[m]->executor());
      const std::shared_ptr<binding::Binder> binder =
          segments != nullptr ? segments->sharedBinder() : nullptr;
      const int64_t measuredBefore = binder != nullptr ? binder->measurements() : 0;
      if (modes[m]->enter)
        modes[m]->enter();
      if (costed != nullptr && m == baseline) {
        records[m].savedBytes.push_back(templateSavedBytes(*costed, trainers[m]->batch(i).inputs));
        synchronize(trainers[m]->device());  // its kernels finish outside the step's timing
      }
      const StepPeak peak(trainers[m]->device());
      StepResult r;
      double stepCall = 0;
      try {
        const auto called = std::chrono::steady_clock::now();
        r = trainers[m]->step();
        stepCall = std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count();
      } catch (const remat::RematInfeasible& e) {
        // A budget below what any plan fits: the mode stops, the others go on.
        if (m == baseline)
          throw;
        records[m].infeasible = e.what();
        records[m].infeasibleBinding = trainers[m]->bindingNote().value_or("");
        records[m].smallestFeasible = e.smallestFeasibleBytes();
        std::cerr << "  " << modes[m]->name << ": " << e.what() << "\n";
        if (modes[m]->leave)
          modes[m]->leave();
        if (config.lockstep)
          config.lockstep->pass(model, i, m, modes.size());
        continue;
      }
      const double peakBytes = peak.bytes(r.peakBeforeResets);
      records[m].allPeaks.push_back(peakBytes);
      if (modes[m]->leave)
        modes[m]->leave();
      if (config.lockstep)
        config.lockstep->pass(model, i, m, modes.size());
      ModeRecord& rec = records[m];
      rec.losses.push_back(r.loss);
      rec.microbatches.push_back(r.microbatches);
      if (!r.splitNote.empty())
        rec.splitNotes.push_back("step " + std::to_string(i) + ": " + r.splitNote);
      if (r.remat)
        rec.remat.push_back(*r.remat);
      if (const binding::Binder* now = trainers[m]->binder(); binder != nullptr || now != nullptr) {
        // Another binder's measurements are all the step's: it was made in it.
        rec.measurements.push_back(now == binder.get() ? now->measurements() - measuredBefore
                                   : now != nullptr    ? now->measurements()
                                                       : binder->measurements() - measuredBefore);
      }
      if (i < config.warmup)
        continue;
      // The call of step() less its data phase (building the synthetic batch, which the Python
      // anchor reads from the export, and moving it to the device, which the anchor leaves out
      // too), reported apart. Timed here, not by the trainer's clock: that stops at the loss,
      // before what per-node telemetry and the online controller do with the step, which the
      // modes that measure or decide pay for too.
      const double seconds = stepCall - r.timings.data;
      rec.stepSeconds.push_back(seconds);
      rec.samplesPerSecond.push_back(static_cast<double>(trainers[m]->batchSize()) / seconds);
      rec.data.push_back(r.timings.data);
      rec.forward.push_back(r.timings.forward);
      rec.backward.push_back(r.timings.backward);
      rec.optimizer.push_back(r.timings.optimizer);
      if (r.decision)
        rec.decide.push_back(r.timings.decide);
      rec.peakBytes.push_back(peakBytes);
    }
  }

  // FLOPs and bytes from SyMuGen's templates, on the measured batches (a few of them), forward
  // only; a training step is taken as three forwards (backward ≈ twice the forward).
  ForwardCost cost;
  int counted = 0;
  {
    torch::NoGradGuard noGrad;
    SyMuGen gen(*trainers[baseline]->executor().scriptModule(), model);
    for (int i = config.warmup; i < total && counted < 5; ++i, ++counted) {
      ForwardOptions options;
      options.countCost = true;
      const ForwardCost c = gen.forward(trainers[baseline]->batch(i).inputs, options).cost;
      cost.flops += c.flops;
      cost.bytes += c.bytes;
      cost.opsWithoutCost += c.opsWithoutCost;
    }
  }
  const double flopsPerStep = counted ? 3 * cost.flops / counted : 0;
  const double bytesPerStep = counted ? 3 * cost.bytes / counted : 0;

  const ModeRecord& base = records[baseline];
  json modeResults = json::array();
  for (size_t m = 0; m < modes.size(); ++m) {
    const ModeRecord& rec = records[m];
    if (!rec.refused.empty()) {
      modeResults.push_back({{"mode", modes[m]->name},
                             {"description", modes[m]->description},
                             {"refused", rec.refused},
                             {"steps_run", 0}});
      continue;
    }
    if (!rec.infeasible.empty()) {
      modeResults.push_back({{"mode", modes[m]->name},
                             {"description", modes[m]->description},
                             {"infeasible", rec.infeasible},
                             {"smallest_feasible_bytes", rec.smallestFeasible},
                             {"binding_note", rec.infeasibleBinding},
                             {"steps_run", rec.losses.size()}});
      if (!tableNotes[m].empty())
        modeResults.back()["binding_table"] = tableNotes[m];
      continue;
    }
    const double stepMedian = median(rec.stepSeconds);
    json roofline = nullptr;
    if (flopsPerStep > 0 && stepMedian > 0) {
      roofline = {{"flops_per_s", flopsPerStep / stepMedian},
                  {"flop_share", flopsPerStep / stepMedian / probes.matmulFlopsPerSecond},
                  {"bytes_per_s", bytesPerStep / stepMedian},
                  {"bandwidth_share", bytesPerStep / stepMedian / probes.memoryBytesPerSecond}};
    }
    const double basePeak = median(base.peakBytes);
    modeResults.push_back(
        {{"mode", modes[m]->name},
         {"description", modes[m]->description},
         {"samples_per_s", summary(rec.samplesPerSecond)},
         {"samples_per_s_steps", rec.samplesPerSecond},  // each measured step's, in order
         {"step_s", summary(rec.stepSeconds)},
         {"telemetry", telemetryName(trainers[m]->telemetry())},
         {"data_s", summary(rec.data)},
         {"forward_s", summary(rec.forward)},
         {"backward_s", summary(rec.backward)},
         {"optimizer_s", summary(rec.optimizer)},
         {"decide_s", rec.decide.empty() ? json(nullptr) : summary(rec.decide)},
         {"peak_bytes", summary(rec.peakBytes)},
         {"losses", rec.losses},
         {"final_loss", rec.losses.back()},
         {"ratio",
          {{"samples_per_s", median(rec.samplesPerSecond) / median(base.samplesPerSecond)},
           {"peak_bytes", basePeak > 0 ? json(median(rec.peakBytes) / basePeak) : json(nullptr)}}},
         {"loss_agreement", lossAgreement(rec.losses, base.losses)},
         {"roofline", roofline}});
    if (std::any_of(rec.microbatches.begin(), rec.microbatches.end(), [](int k) { return k > 1; }))
      modeResults.back()["microbatches_steps"] = rec.microbatches;  // warm-up included
    if (!rec.splitNotes.empty())
      modeResults.back()["split_notes"] = rec.splitNotes;
    if (const auto& note = trainers[m]->bindingNote())
      modeResults.back()["binding_note"] = *note;
    if (const binding::Binder* binder = trainers[m]->binder())
      modeResults.back()["binding"] = bindingSummary(*binder, rec, config.warmup);
    if (!tableNotes[m].empty())
      modeResults.back()["binding_table"] = tableNotes[m];
    if (const remat::Rematerializer* remat = trainers[m]->rematerializer())
      modeResults.back()["remat"] = rematSummary(*remat, rec, static_cast<size_t>(config.warmup));
    if (const control::OnlineController* controller = trainers[m]->controller())
      modeResults.back()["controller"] = controllerSummary(*controller, rec.samplesPerSecond);
  }
  json result = {{"model", model},
                 {"description", trainers[baseline]->modelDescription()},
                 {"parameters", trainers[baseline]->parameterCount()},
                 {"batch_size", trainers[baseline]->batchSize()},
                 {"flops_per_step", flopsPerStep > 0 ? json(flopsPerStep) : json(nullptr)},
                 {"bytes_per_step", bytesPerStep > 0 ? json(bytesPerStep) : json(nullptr)},
                 {"ops_without_cost", counted ? cost.opsWithoutCost / counted : 0},
                 {"modes", modeResults}};
  if (config.sharedTables)
    result["shared_tables"] = sharedTables;
  if (config.grid) {
    std::cerr << "  auto_tune beside the grid\n";
    json summary = gridSummary(modeResults, grid, *config.grid, gridBudget,
                               tuneBesideGrid(model, config, grid.size() - 1, gridBudget));
    if (summary["best"].is_object() && summary["tune"].is_object() &&
        summary["tune"].contains("mode") && summary["tune"]["mode"] != summary["best"]["mode"]) {
      summary["head_to_head"] =
          headToHead(model, config, probes, summary["best"]["mode"].get<std::string>(),
                     summary["tune"]["mode"].get<std::string>());
    }
    result["grid"] = summary;
  }
  if (costed != nullptr)
    result["memory_prediction"] =
        memoryPredictionSummary(records[baseline], modes[baseline]->name, 3);
  return result;
}

}  // namespace symtune::bench
