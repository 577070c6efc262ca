#include "symtune/runtime/trainer.h"

#include "symtune/kernels/fused_optimizers.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/core/binding_table.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/profiling/gpu_activity_tracer.h"
#include "symtune/profiling/nvtx.h"
#include "symtune/rules/rule_registry.h"
#include "symtune/runtime/cpu_memory.h"
#include "symtune/runtime/loss.h"
#include "symtune/zoo/model_zoo.h"

namespace symtune {

namespace {

using Clock = std::chrono::steady_clock;

// The micro-batches a step no plan fits in `k` runs as next: 1, 2, 3, 4, 6, 8, 12, 16, ... (the
// powers of two and three times them), at most the batch's `samples` (Note [Splitting further]).
int nextSplit(int k, int64_t samples) {
  int next = 1;
  while (next <= k)
    next = next == 1 ? 2 : (next & (next - 1)) == 0 ? next / 2 * 3 : next / 3 * 4;
  return static_cast<int>(std::min<int64_t>(next, std::max<int64_t>(samples, k)));
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

torch::Device pickDevice(const std::string& requested) {
  const bool cuda = torch::cuda::is_available();
  if (requested == "cuda" && !cuda) {
    throw SetupError(
        "run.device is \"cuda\" but LibTorch sees no CUDA device here (use \"auto\" to fall back "
        "to the CPU)");
  }
  return (requested == "cuda" || (requested == "auto" && cuda)) ? torch::Device(torch::kCUDA, 0)
                                                                : torch::Device(torch::kCPU);
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const OptimizerSpec& spec,
                                                       std::vector<torch::Tensor> params) {
  if (spec.fused.value_or(false)) {
    if (spec.name == "adam")
      return std::make_unique<optim::FusedAdam>(
          params, torch::optim::AdamOptions(spec.lr).weight_decay(spec.weightDecay));
    if (spec.name == "sgd")
      return std::make_unique<optim::FusedSGD>(
          params,
          torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(spec.weightDecay));
    return std::make_unique<optim::FusedAdamW>(
        params, torch::optim::AdamWOptions(spec.lr).weight_decay(spec.weightDecay));
  }
  if (spec.name == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(spec.lr).weight_decay(spec.weightDecay));
  }
  if (spec.name == "sgd") {
    return std::make_unique<torch::optim::SGD>(
        params,
        torch::optim::SGDOptions(spec.lr).momentum(spec.momentum).weight_decay(spec.weightDecay));
  }
  return std::make_unique<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(spec.lr).weight_decay(spec.weightDecay));
}

}  // namespace

std::string oneLine(const c10::Error& error) {
  std::string text = error.what_without_backtrace();
  const auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

std::string oneLine(const std::exception& error) {
  if (const auto* c10Error = dynamic_cast<const c10::Error*>(&error))
    return oneLine(*c10Error);
  // TorchScript's compile and interpreter errors end with the underlying error's line.
  const std::string text = error.what();
  const auto end = text.find_last_not_of("\n ");
  if (end == std::string::npos)
    return text;
  const auto nl = text.rfind('\n', end);
  const size_t start = nl == std::string::npos ? 0 : nl + 1;
  return text.substr(start, end + 1 - start);
}

Trainer::Trainer(const Session& session) : session_(session) {
  if (session_.run.cpuMemory == "retain")
    keepFreedCpuMemory();  // Note [Freed memory kept]
  if (session_.run.threads > 0) {
    at::set_num_threads(session_.run.threads);
  }
  threadsAtStart_ = at::get_num_threads();
  device_ = pickDevice(session_.run.device);
  if (!session_.optimizer.fused)
    session_.optimizer.fused = device_.is_cuda();
  torch::manual_seed(session_.data.seed);
  if (session_.run.nvtx) {
    try {
      nvtx::setEnabled(true);
    } catch (const std::exception& e) {
      throw SetupError(std::string("run.nvtx: ") + e.what());
    }
  }
  if (device_.is_cuda()) {
    if (!session_.run.gpuTrace)
      gpuTraceNote_ = "GPU activity tracing is off (run.gpu_trace is false)";
    else if (auto why = GpuActivityTracer::unavailableReason())
      gpuTraceNote_ = "GPU activity tracing is unavailable: " + *why;
  }

  if (session_.model.isZoo()) {
    try {
      ZooModel zoo = buildZooModel(
          session_.model.zoo, {session_.model.preset, session_.data.seed, session_.data.batchSize});
      executor_ = std::make_unique<ScriptModuleExecutor>(std::move(zoo.module), session_.name);
      data_ = std::move(zoo.data);
      description_ = session_.model.zoo + " (" + session_.model.preset + "): " + zoo.description;
    } catch (const c10::Error& e) {
      throw SetupError("cannot build zoo model " + session_.model.zoo + ": " + oneLine(e));
    } catch (const std::exception& e) {  // torch::jit::ErrorReport: a TorchScript compile error
      throw SetupError("cannot compile zoo model " + session_.model.zoo + ": " + oneLine(e));
    }
  } else {
    const auto& file = session_.model.file;
    if (std::filesystem::is_directory(file))
      throw SetupError(file.string() +
                       ": is a folder, not a model file (torch.jit.save's archive)");
    if (!std::filesystem::is_regular_file(file)) {
      throw SetupError(file.string() + ": no such model file");
    }
    try {
      executor_ =
          std::make_unique<ScriptModuleExecutor>(torch::jit::load(file.string()), session_.name);
    } catch (const c10::Error& e) {
      throw SetupError(file.string() + ": not a loadable TorchScript archive: " + oneLine(e));
    }
    executor_->setOutput(session_.model.output);
    description_ = file.filename().string();
    setUpFileData();
  }

  setUpRules();
  executor_->to(device_);
  std::vector<torch::Tensor> params;
  for (auto& p : executor_->parameters()) {
    if (p.requires_grad()) {
      params.push_back(p);
      parameterCount_ += p.numel();
    }
  }
  if (params.empty()) {
    throw SetupError(description_ + ": the model has no trainable parameters");
  }

  if (!session_.model.isZoo())
    checkModelOnData();
  setUpBinding();
  setUpRemat();
  executor_->setTraining(true);
  trainable_ = params;
  optimizer_ = std::make_unique<MetaOptimizer>(makeOptimizer(session_.optimizer, params));
  namedParameters_ = executor_->namedParameters();
  if (!rules_.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, p] : namedParameters_)
      names.push_back(name);
    unselectedRules_ = rules_.unselected(names);
  }
  broker_ = std::make_unique<MetaInfoBroker>(namedParameters_);
  optimizer_->setUpdateGate([this](const torch::Tensor& loss) { return applyRules(loss); });
  setUpControl();
}

void Trainer::setUpBinding() {
  torch::jit::Module* module = executor_->scriptModule();
  if (!session_.binding.enabled || module == nullptr)
    return;
  if (session_.remat.enabled && !session_.remat.bind) {
    // Binding and a remat budget do mix (the binder measures outside the budget; remat.bind),
    // but not as a default: a bound step that first meets a shape bucket holds what the binder
    // notes for its measurements inside the budget, and a fraction of the bound plain peak can
    // leave no plan that fits (docs/remat.md, "With the binder").
    bindingNote_ =
        "binding off: the session's remat block holds each step to a budget (remat.bind "
        "binds under it)";
    return;
  }
  auto segments = std::make_unique<SegmentExecutor>(*module, session_.name);
  if (const auto node = segments->symugen()->unrunnable()) {
    // Its step would fail in the evaluator: TorchScript's executor runs it, unbound.
    bindingNote_ =
        "binding off: SyMuGen's evaluator, which binding runs the model through, does "
        "not run its " +
        *node;
    return;
  }
  binding::BinderOptions options;
  options.repetitions = session_.binding.repetitions;
  options.exact = session_.binding.exact;
  options.memorySlack = session_.binding.memorySlack;
  options.budget = session_.binding.budget.value_or(-1);
  auto binder = std::make_shared<binding::Binder>(segments->symugen()->staticGraph(),
                                                  binding::currentMachine(device_), options);
  const std::filesystem::path path = bindingTablePath(session_);
  if (!path.empty() && std::filesystem::exists(path)) {
    // The table is a cache of measurements: one that cannot be used is measured anew.
    try {
      if (auto why = binder->adopt(BindingTable::load(path.string())))
        bindingNote_ = path.string() + " not used: " + *why;
      else
        bindingNote_ = "bindings from " + path.string();
    } catch (const std::exception& e) {
      bindingNote_ = std::string("binding table not used: ") + e.what();
    }
  }
  segments->setBinder(std::move(binder));
  segments->setOutput(session_.model.output);
  segments->to(device_);
  executor_ = std::move(segments);
}

binding::Binder* Trainer::binder() {
  auto* segments = dynamic_cast<SegmentExecutor*>(executor_.get());
  return segments != nullptr ? segments->binder() : nullptr;
}

std::optional<std::string> Trainer::saveBindingTable() {
  const binding::Binder* b = binder();
  const std::filesystem::path path = bindingTablePath(session_);
  if (b == nullptr || path.empty() || !session_.binding.save)
    return std::nullopt;
  b->table().save(path.string());
  return path.string();
}

void Trainer::setUpRules() {
  const auto& spec = session_.rules;
  if (spec.empty())
    return;
  // The session's file is the caller's to name (`symtune check` says "FILE: rules: ...").
  std::vector<rules::Rule> rewrites;
  auto take = [&](const rules::RegistryEntry& entry) {
    if (entry.isRewrite())
      rewrites.push_back(*entry.rule);
    else
      rules_.add(entry);
  };
  auto& registry = rules::Registry::global();
  try {
    for (const auto& name : spec.enable)
      take(registry.get(name));
    if (!spec.source.empty()) {
      for (auto& rule : rules::parseRules(spec.source)) {
        rules::validateRewrites(rule);
        rules::RegistryEntry entry;
        entry.name = rule.name;
        entry.origin = "the session";
        entry.rule = std::move(rule);
        take(entry);
      }
    }
  } catch (const rules::RuleError& e) {
    throw SetupError(std::string("rules.source: ") + e.what());
  } catch (const std::exception& e) {
    throw SetupError(std::string("rules: ") + e.what());
  }
  if (rewrites.empty())
    return;
  torch::jit::Module* module = executor_->scriptModule();
  if (module == nullptr)
    throw SetupError("rules: rewrite rules need a TorchScript model");
  try {
    rewrites_ = rules::applyRewrites(*module, rewrites);
  } catch (const std::exception& e) {
    throw SetupError("rules: " + oneLine(e));
  }
}

void Trainer::setTelemetry(Telemetry level, OpTracerOptions ops) {
  broker_->setEnabled(level != Telemetry::Off);
  if (level == Telemetry::PerNode) {
    staticGraph();
    if (device_.is_cuda()) {  // Note [Device time]
      ops.gpuActivity = !gpuTraceNote_.has_value();
      ops.deviceTime = !ops.gpuActivity;
    }
    if (!tracer_)
      tracer_ = std::make_unique<OpTracer>();
    tracer_->stop();
    try {
      tracer_->start(ops);
    } catch (const std::runtime_error& e) {
      if (!ops.gpuActivity)
        throw;
      // CUPTI refused (another profiler holds its buffers): CUDA events, and say why.
      gpuTraceNote_ = e.what();
      ops.gpuActivity = false;
      ops.deviceTime = true;
      tracer_->start(ops);
    }
    tracer_->pause();  // until a step (Note [A paused tracer lets go] in op_tracer.cpp)
  } else if (tracer_) {
    tracer_->stop();
  }
  telemetry_ = level;
}

StepResult Trainer::step() {
  return runStep(nullptr);
}

bool Trainer::applyRules(const torch::Tensor& loss) {
  lastRules_ = rules::RuleOutcome{};
  if (rules_.empty())
    return true;
  // With telemetry off the broker sees no gradients and counts no steps: rules would read stale
  // values (a NaN guard firing forever, `when step == N` holding every step).
  TORCH_CHECK(
      telemetry_ != Telemetry::Off,
      "rules read the step's features: turn telemetry on (Features or PerNode) to use them");
  auto& groups = optimizer_->inner().param_groups();
  const double lr = groups.front().options().get_lr();
  const StepFeatures features = broker_->featuresSoFar(loss.item<double>(), lr);
  lastRules_ = rules_.apply(namedParameters_, features, lr);
  if (lastRules_.lr) {
    for (auto& group : groups)
      group.options().set_lr(*lastRules_.lr);
  }
  return !lastRules_.skipStep;
}

void Trainer::setExecutor(std::unique_ptr<Executor> executor) {
  TORCH_CHECK(executor != nullptr, "Trainer::setExecutor: no executor");
  auto mine = executor_->parameters(), theirs = executor->parameters();
  bool same = mine.size() == theirs.size();
  for (size_t i = 0; same && i < mine.size(); ++i)
    same = mine[i].is_same(theirs[i]);
  TORCH_CHECK(same, "Trainer::setExecutor: the executor must run the trainer's own parameters");
  executor->to(device_);
  executor->setOutput(session_.model.output);
  executor_ = std::move(executor);
}

Batch Trainer::batch(int64_t index) {
  Batch b = data_->batch(index);
  inputsTo(b.inputs, device_, false);
  b.target = b.target.to(device_);
  return b;
}

namespace {

// `whole` as `parts` micro-batches, each with its loss weight, where the batch is (the CPU).
std::vector<std::pair<Batch, double>> splitBatch(const DataSource& data, const LossSpec& loss,
                                                 const Batch& whole, int parts) {
  std::vector<std::pair<Batch, double>> out;
  if (parts <= 1) {
    out.emplace_back(whole, 1.0);
    return out;
  }
  std::vector<Batch> split = data.split(whole, parts);
  const auto counted = static_cast<double>(countedTargets(loss, whole.target));
  for (Batch& b : split) {
    if (counted == 0) {  // nothing counts: as the batch, whose mean loss is of nothing
      out.emplace_back(std::move(b), 1.0 / static_cast<double>(split.size()));
      continue;
    }
    // A micro-batch none of whose targets counts adds nothing (its mean loss would be 0/0).
    const auto own = static_cast<double>(countedTargets(loss, b.target));
    if (own > 0)
      out.emplace_back(std::move(b), own / counted);
  }
  return out;
}

void partsTo(std::vector<std::pair<Batch, double>>& parts, const torch::Device& device) {
  for (auto& [b, weight] : parts) {
    inputsTo(b.inputs, device, /*nonBlocking=*/true);
    b.target = b.target.to(device, /*non_blocking=*/true);
  }
}

}  // namespace

std::vector<std::pair<Batch, double>> Trainer::microBatches(const Batch& whole, int parts) {
  std::vector<std::pair<Batch, double>> out = splitBatch(*data_, session_.loss, whole, parts);
  partsTo(out, device_);
  return out;
}

const Graph& Trainer::staticGraph() {
  return graphOfModel().staticGraph();
}

SyMuGen& Trainer::graphOfModel() {
  SyMuGen* gen = executor_->symugen();
  TORCH_CHECK(gen != nullptr, "the ", executor_->name(),
              " executor runs a model without IR: no graph, capture or per-node telemetry");
  return *gen;
}

Graph Trainer::captureStep(StepResult* result) {
  graphOfModel();
  Graph graph;
  const StepResult r = runStep(&graph);
  if (result != nullptr)
    *result = r;
  return graph;
}

std::future<void> Trainer::changeRules(std::function<void(rules::RuleSet&)> change) {
  return ruleChanges_.push(std::move(change));
}

void Trainer::applyRuleChanges() {
  ruleChanges_.applyTo(rules_);
}

StepResult Trainer::runStep(Graph* capture) {
  applyRuleChanges();
  const bool measured = telemetry_ != Telemetry::Off;
  const bool perNode = telemetry_ == Telemetry::PerNode;
  std::unique_ptr<c10::DebugInfoGuard> active;
  if (measured)
    active = broker_->beginStep(perNode);  // memory from here to the end of the step
  std::optional<OpTracer::Recording> recording;
  if (perNode) {
    // Recording from here to the step's end only (paused below, or when it throws): what runs
    // between steps is not the step's (another trainer's steps paid the callbacks' cost).
    recording.emplace(*tracer_);
    if (tracer_->gpuRefused() && !gpuTraceNote_)
      gpuTraceNote_ = tracer_->gpuRefused();
    tracer_->takeEvents();  // ops since it was set up belong to no step
    tracer_->markStep(optimizer_->stepCount());
  }
  const auto t0 = Clock::now();
  std::optional<nvtx::Range> stepRange;
  if (nvtx::enabled())
    stepRange.emplace("step " + std::to_string(optimizer_->stepCount()));
  const Batch whole = data_->batch(optimizer_->stepCount());  // on the CPU
  // The data phase: building the batch, and moving its parts to the device; the online
  // controller's decision and the split between the two are the step's.
  const double built = secondsSince(t0);
  const auto tDecide = Clock::now();
  std::optional<control::Decision> decision = decide(whole);
  const double decideSeconds = secondsSince(tDecide);
  const control::Configuration configured = configuration();
  // Held for the step: a step no remat plan fits may put another binder in its place
  // (runPlanned), and this one's counts are read after it.
  std::shared_ptr<const binding::Binder> stepBinder;
  if (auto* segments = dynamic_cast<SegmentExecutor*>(executor_.get()))
    stepBinder = segments->sharedBinder();
  const int64_t measuredBefore = stepBinder != nullptr ? stepBinder->measurements() : 0;
  const int64_t unsettledBefore = stepBinder != nullptr ? stepBinder->unsettledMet() : 0;
  // A step calibrating the remat budget on the CPU runs the batch whole: the fraction is of the
  // whole batch's plain peak, whatever the micro-batches (Note [Micro-batches]). On a GPU the
  // whole batch may not fit the device: it calibrates as configured. Splitting it is the step's
  // (a configuration's cost, until 2026-12-07 counted as data and left out of benchmarks' step
  // times); moving it to the device is data's, as the Python anchor leaves its move out.
  const bool calibrating = remat_ && remat_->calibrating();
  // Fewer samples than micro-batches (an epoch's short last batch): one micro-batch per sample.
  const int fitting =
      static_cast<int>(std::min<int64_t>(microbatches_, std::max<int64_t>(1, whole.size)));
  // Asked for: `parts` leaves out a micro-batch none of whose targets count, and a split counted
  // from the parts kept could ask for as many again, for ever (until 2026-12-07).
  int asked = calibrating && device_.is_cpu() ? 1 : fitting;
  std::vector<std::pair<Batch, double>> parts = splitBatch(*data_, session_.loss, whole, asked);
  const auto tMove = Clock::now();
  partsTo(parts, device_);
  const double dataSeconds = built + secondsSince(tMove);
  // What the optimizers plan for (Note [Guards]): each forward's bucket, the budget, the device.
  const auto factsOf = [&](const std::vector<std::pair<Batch, double>>& forwards) {
    control::BatchFacts facts;
    for (const auto& [part, weight] : forwards)
      facts.shapeBuckets.push_back(binding::inputsBucketKey(part.inputs));
    if (remat_ && (session_.remat.budgetMb || session_.remat.budgetFraction)) {
      char budget[64];
      if (session_.remat.budgetMb)
        std::snprintf(budget, sizeof budget, "budget_mb %g", *session_.remat.budgetMb);
      else
        std::snprintf(budget, sizeof budget, "budget_fraction %g",
                      rematBudget_.value_or(*session_.remat.budgetFraction));
      facts.budget = budget;
    }
    facts.device = device_.str();
    return facts;
  };
  const control::BatchFacts facts = factsOf(parts);
  StepTimings timings;
  timings.data = dataSeconds;
  timings.decide = decideSeconds;
  const bool updateRatio = measured && broker_->wantsUpdateRatio();
  SequenceOwners owners;
  std::vector<std::vector<RegionId>> patterns;  // each forward's branches, when the executor sees

  ForwardRequest request;  // Note [The execution seam]
  request.attributeOps = perNode;
  std::optional<StepResult::Remat> rematStep;
  std::string splitNote;
  int attemptsBefore = 0;  // of the tries before the step was split again
  // One micro-batch's forward, loss and backward (the whole batch's when it runs whole); an
  // attempt that overruns its budget runs it again, so each attempt times itself.
  double forwardSeconds = 0, backwardSeconds = 0;
  std::optional<std::vector<RegionId>> branches;
  const auto passOf = [&](const Batch& part, double weight, bool first) {
    const auto tf = Clock::now();
    torch::Tensor loss;
    {
      nvtx::Range range("forward");
      request.record = first ? capture : nullptr;  // a capture records the first micro-batch
      ForwardResult forward = executor_->run(part.inputs, request);
      // The binder asked each time: a step under a remat budget may turn binding off between
      // attempts.
      loss = sessionLoss(forward, part.target, binder(), true);
      if (weight != 1.0)
        loss = loss * weight;
      if (request.record != nullptr)
        graphOfModel().joinBackward(*capture, loss, forward.owners);
      owners.merge(forward.owners);
      branches = std::move(forward.branches);
    }
    forwardSeconds = secondsSince(tf);
    const auto tb = Clock::now();
    {
      nvtx::Range range("backward");
      loss.backward();
    }
    backwardSeconds = secondsSince(tb);
    return loss;
  };
  // The micro-batches in turn, their gradients adding up (Note [Micro-batches]).
  const auto runParts = [&] {
    torch::Tensor total;
    for (size_t j = 0; j < parts.size(); ++j) {
      const Batch& part = parts[j].first;
      const double weight = parts[j].second;
      std::optional<StepResult::Remat> partRemat;
      const auto pass = [&, first = j == 0] { return passOf(part, weight, first); };
      partIndex_ = j;
      torch::Tensor loss = remat_ ? runRemat(part.inputs, pass, partRemat) : pass();
      timings.forward += forwardSeconds;
      timings.backward += backwardSeconds;
      if (branches)
        patterns.push_back(std::move(*branches));
      if (parts.size() == 1) {
        rematStep = std::move(partRemat);
        return loss;
      }
      total = total.defined() ? total + loss.detach() : loss.detach();
      if (partRemat) {
        // The step's record is its micro-batch that came closest to the budget; attempts add up.
        const int attempts = (rematStep ? rematStep->attempts : 1) + partRemat->attempts - 1;
        const auto share = [](const StepResult::Remat& m) {
          return m.plan.limitBytes && *m.plan.limitBytes > 0
                     ? m.peakBytes / static_cast<double>(*m.plan.limitBytes)
                     : m.peakBytes;
        };
        if (!rematStep || share(*partRemat) > share(*rematStep)) {
          const std::string note = rematStep ? rematStep->note : std::string();
          rematStep = std::move(partRemat);
          if (rematStep->note.empty())
            rematStep->note = note;
        }
        rematStep->attempts = attempts;
      }
    }
    return total;
  };
  // Under an enforced budget no plan fits the step as it is split: it runs again from the start
  // in more micro-batches (Note [Splitting further]), and the run goes on so split.
  const bool splits = remat_ && session_.control.enabled && session_.control.splitOnOverrun &&
                      !unsplittable().has_value();
  const int microbatchesBefore = microbatches_;
  struct Reset {  // whatever ends the step
    Trainer& self;
    bool completed = false;
    int microbatches;
    ~Reset() {
      self.splitting_ = false;
      self.stepLive_.reset();
      if (!completed)
        self.microbatches_ = microbatches;  // a step that failed split nothing
    }
  } reset{*this, false, microbatchesBefore};
  stepHighest_ = 0;
  preparing_ = 0;
  if (remat_)
    remat_->beginStep();
  const MetaStepStats stats = optimizer_->step(
      [&] {
        std::optional<at::Tensor> rngState;
        std::vector<at::Tensor> buffers, kept;
        // A split, or a micro-batch after the first that overran, starts the step over from here.
        if (remat_ && (splits || parts.size() > 1)) {
          rngState = at::globalContext().defaultGenerator(device_).get_state();
          torch::NoGradGuard noGrad;
          for (const auto& b : executor_->scriptModule()->buffers()) {
            buffers.push_back(b);
            kept.push_back(b.clone());
          }
        }
        torch::Tensor loss;
        const auto putBack = [&] {
          optimizer_->inner().zero_grad();
          auto generator = at::globalContext().defaultGenerator(device_);
          generator.set_state(*rngState);
          torch::NoGradGuard noGrad;
          for (size_t i = 0; i < buffers.size(); ++i)
            buffers[i].copy_(kept[i]);
          timings.forward = timings.backward = 0;
          owners = SequenceOwners{};
          patterns.clear();
          if (rematStep)
            attemptsBefore += rematStep->attempts;
          rematStep.reset();
        };
        int restarts = 0;
        for (;;) {
          // A calibrating step is unenforced: it never splits.
          const int more = nextSplit(asked, whole.size);
          splitting_ = splits && !calibrating && more > asked;
          stepLive_.reset();
          if (remat_ && parts.size() > 1)
            stepLive_ = liveNow();
          settlingBefore_ = binder() != nullptr ? binder()->settling() : 0;
          try {
            try {
              loss = runParts();
              break;
            } catch (const StartOver&) {
              // A micro-batch after the first overran (Note [Micro-batches]): the step again,
              // or, past kMostRestarts, as for a budget no plan fits (split further, or stop).
              if (++restarts <= kMostRestarts) {
                putBack();  // the step's attempts count the one that overran
                continue;
              }
              throw remat::RematInfeasible(
                  "remat: a micro-batch after the first ran out of its budget in " +
                      std::to_string(restarts) + " attempts of the step",
                  0);
            }
          } catch (const remat::RematInfeasible& e) {
            if (!splitting_)
              throw;
            std::vector<std::pair<Batch, double>> smaller;
            try {
              smaller = microBatches(whole, more);
            } catch (const SplitError&) {
              if (!rematBefore_)
                throw e;  // what the user needs to know is the budget
              // A budget set on the running job that the step neither fits nor splits further
              // into: the step again under the budget before it, as Trainer::runRemat does for a
              // step that may not split.
              startOverNote_ = backToBudgetBefore(e.what());
              putBack();
              continue;
            }
            putBack();
            splitNote += (splitNote.empty() ? "" : "; ") + std::string(e.what()) + ": split into " +
                         std::to_string(more) + " micro-batches";
            microbatches_ = asked = more;
            parts = std::move(smaller);
            optimizer_->noteFacts(factsOf(parts));
            restarts = 0;
          }
        }
        if (rematStep)
          rematStep->attempts += attemptsBefore;
        if (measured)
          broker_->afterBackward(/*accumulated=*/parts.size() > 1);
        for (const auto& pattern : patterns) {
          optimizer_->noteBranches(pattern, [this](RegionId id) {
            const Graph& graph = staticGraph();
            const GraphRegion& region = graph.region(id);
            const GraphNode& owner = graph.node(region.owner);
            return std::string(region.kind == RegionKind::IfThen ? "then" : "else") +
                   " of the if at " +
                   (owner.modulePath.empty() ? std::string("the root") : owner.modulePath) +
                   (owner.source.known() ? ":" + std::to_string(owner.source.line) : "");
          });
        }
        if (updateRatio)
          broker_->beforeUpdate();  // the closure ends right before the update
        return loss;
      },
      facts);
  reset.completed = true;
  if (remat_)
    remat_->endStep();

  StepResult r;
  if (stepHighest_ > 0)
    r.peakBeforeResets = stepHighest_;
  r.step = stats.step;
  r.skipped = stats.skipped;
  r.rulesInForce = std::move(lastRules_.inForce);
  r.rulesFired = std::move(lastRules_.fired);
  r.remat = std::move(rematStep);
  r.microbatches = static_cast<int>(parts.size());
  if (session_.control.enabled)
    r.configuration = configured;
  r.splitNote = std::move(splitNote);
  r.optimizeRequired = stats.optimizeRequired;
  r.loss = stats.loss.item<double>();  // synchronises with the device: step time is real
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  // The update ratio's measuring (a norm read back per parameter, every tenth step) is
  // telemetry's, not the step's: the step time, and the online controller's reward, leave it out.
  if (updateRatio)
    broker_->afterUpdate();
  ++stepsRun_;
  if (decision) {
    // Rewarded by the step without building its batch. One of the first two this trainer runs
    // (TorchScript's executor profiles the first and optimizes on the second: Transformer-XL's
    // second step ran at half the speed of the steps after it, and learnt from, it made the whole
    // batch look slower than two micro-batches), one that calibrates remat (plain, perhaps whole)
    // or one in which the binder measured (binding_explore pays for what every later step gains)
    // is logged, not learnt from: its one-off costs are no configuration's.
    //
    // Note [A new bucket's step, learnt from]
    // A step that met something new (a shape bucket, a branch pattern) was not learnt from
    // either, until 2026-12-04; but a micro-batch count the controller tries for the first time
    // is a new bucket, so each count it explored ran twice — once unlearnt, once learnt — and the
    // second step of sixteen micro-batches took the MoE's run as long as four ordinary ones. Under
    // a remat budget, what a new bucket costs the step is the plan's preparation (the counting
    // forward and the planner), which the trainer times (preparing_): the step is learnt from
    // with that time taken off. What is left unmeasured (a kernel's first call on a new shape)
    // the model's weighing of steps far off its prediction covers (Note [Steps at half speed] in
    // additive_model.h). Without remat the new bucket's costs are TorchScript's, unmeasured: such
    // a step is still not learnt from.
    const double seconds = r.seconds - timings.data;
    const bool rebound = stepBinder.get() != binder();  // the new binder measured
    const bool measuredBindings =
        rebound || (stepBinder != nullptr && stepBinder->measurements() != measuredBefore);
    const bool oneOff = stepsRun_ <= 2 || calibrating || measuredBindings;
    // Note [A new bucket's step, learnt from].
    const bool unplanned = r.optimizeRequired.has_value() && r.remat == std::nullopt;
    const double learnt = oneOff || unplanned
                              ? 0.0
                              : std::max(seconds - (r.optimizeRequired ? preparing_ : 0.0), 0.0);
    // Note [Predicted not to fit] in controller.h: a step split further than chosen.
    if (!r.splitNote.empty())
      controller_->notFit(*decision, r.splitNote, microbatches_);  // the split's count
    controller_->observe(*decision, learnt, whole.size, r.loss);
    r.decision = controller_->log().back();
    moveController();  // the budget the step went back to, if it did
    // Note [A knob that changes nothing] in controller.h (a binder the step let go or replaced
    // tells nothing of the next).
    if (stepBinder != nullptr && !rebound)
      nothingToExplore_[decision->bucket] = stepBinder->unsettledMet() == unsettledBefore;
  }
  r.closureSeconds = stats.closureSeconds;
  r.updateSeconds = stats.updateSeconds;
  timings.optimizer = stats.updateSeconds;
  timings.total = r.seconds;
  r.timings = timings;
  if (!measured)
    return r;
  const int64_t sequence = whole.sequenceLength();
  const double lr = optimizer_->inner().param_groups().front().options().get_lr();
  if (perNode) {
    std::vector<OpEvent> events = tracer_->takeEvents();
    tracer_->pause();
    auto profile = std::make_shared<NodeProfile>(attributeOps(events, owners));
    profile->step = r.step;
    if (tracer_->options().gpuActivity) {
      GpuRecords gpu = tracer_->takeGpuRecords();
      attributeGpu(events, gpu, *profile);
      if (keepEvents_) {
        keptGpu_.activities.insert(keptGpu_.activities.end(),
                                   std::make_move_iterator(gpu.activities.begin()),
                                   std::make_move_iterator(gpu.activities.end()));
        keptGpu_.links.insert(keptGpu_.links.end(), gpu.links.begin(), gpu.links.end());
        keptGpu_.dropped += gpu.dropped;
      }
    }
    if (keepEvents_) {
      keptEvents_.insert(keptEvents_.end(), std::make_move_iterator(events.begin()),
                         std::make_move_iterator(events.end()));
    }
    r.nodes = profile;
  }
  r.features =
      broker_->endStep(timings, r.loss, lr, whole.size, sequence, r.peakBeforeResets, r.skipped);
  return r;
}

}  // namespace symtune
