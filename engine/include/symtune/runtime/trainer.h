#pragma once
// The trainer a session describes: model (zoo or a user's TorchScript file), synthetic data, and a
// loop that drives the optimizer through MetaOptimizer. The model runs behind an Executor.

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "symtune/control/config_space.h"
#include "symtune/control/controller.h"
#include "symtune/control/guards.h"
#include "symtune/core/session.h"
#include "symtune/data/data_source.h"
#include "symtune/exec/executor.h"
#include "symtune/graph/symugen.h"
#include "symtune/remat/rematerializer.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/rules/rule_rewrite.h"
#include "symtune/runtime/meta_optimizer.h"
#include "symtune/telemetry/meta_info_broker.h"
#include "symtune/telemetry/op_tracer.h"

namespace symtune {

namespace binding {
class Binder;
}

// The session cannot be turned into a trainer (model file unreadable, wrong output shape, no CUDA
// device...). what() is one line.
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How much the trainer measures (Note [Telemetry levels]).
enum class Telemetry {
  Off,       // nothing: the baseline the overhead benchmark compares against
  Features,  // the 24 step features (the default)
  PerNode,   // the features plus every op's time and memory, attributed to graph nodes
};

// Note [Telemetry levels]
// Features costs a step two clock reads per phase, one memory report per allocation (atomics)
// and one grad_stats pass per gradient. PerNode adds a RecordFunction callback on every op and
// asks the executor to run each op inside its graph node's scope (ForwardRequest::attributeOps,
// Note [The execution seam]): that is what ties an ATen op to its node without any lookup by
// name (node_context.h). bench/telemetry_overhead measures both against Off; symtune-bench's
// "per-node" mode compares a step's time and peak memory with and without it.

// The model on the held-out samples (data.validation_fraction), after `step` steps.
struct Validation {
  int64_t step = 0;
  int64_t samples = 0;
  double loss = 0;  // the session's loss, the mean over the target entries it counts
  // Under a class-index loss: the share of counted targets the model's first choice (or, with
  // more than five classes, one of its first five) is right about.
  std::optional<double> top1, top5;
};

struct StepResult {
  int64_t step = 0;  // 0-based
  double loss = 0;
  double seconds = 0;  // wall time of the whole step (data, forward, backward, update)
  double closureSeconds = 0, updateSeconds = 0;
  // The step's phases (seconds), measured whatever the telemetry: `data` is building the batch
  // and moving it to the device; `total` equals `seconds`.
  StepTimings timings;
  StepFeatures features;  // MetaInfoBroker's feature vector of the step (zeros when Off)
  std::shared_ptr<const NodeProfile> nodes;  // per-node telemetry: the step's profile
  // Rules (docs/rules.md): the rules in force during the step, those that fired, and whether a
  // `skip step` held the update back.
  std::vector<std::string> rulesInForce, rulesFired;
  bool skipped = false;
  // Under a memory budget (the session's `remat` block): the plan the step ran with (the retry's,
  // when it overran and ran again) and its peak above what was live when its forward began.
  struct Remat {
    remat::StepPlan plan;
    double peakBytes = 0;
    int attempts = 1;
    std::string note;  // a budget set on the running job that no plan met, and what ran instead
  };
  std::optional<Remat> remat;
  // Note [A step's peak across resets]
  // Under a remat budget the trainer resets the allocation counter's peak before each attempt and
  // micro-batch (each is held to the budget above what was live as it began), so a caller that
  // reset it before the step and reads it after sees only the last micro-batch's. This is the
  // highest peak those resets cleared, in the counter's own terms (CpuAllocationCounter's
  // `peak`, or the CUDA caching allocator's peak of allocated bytes): the step's peak is the
  // larger of it and the counter's peak after the step, above what was live before it. Before
  // this, symtune-bench reported the last micro-batch's peak for a split step (the tree network
  // bound in four micro-batches: 1.3 MB, 1.5 MB with the micro-batches before the last).
  // nullopt: nothing reset.
  std::optional<int64_t> peakBeforeResets;
  // How many micro-batches the batch ran as (Note [Micro-batches]), and, when the step was split
  // further because no remat plan fitted its budget whole, why.
  int microbatches = 1;
  std::string splitNote;
  // The guards the batch broke (a new shape bucket or branch pattern, a new budget): what the
  // optimizers re-planned for (Note [Guards]).
  std::optional<control::OptimizeRequired> optimizeRequired;
  // Under the online controller (the session's control.mode "online"): its decision for the
  // step, with what the step measured.
  std::optional<control::Decision> decision;
  // With a control block: the configuration the step was set to run with (its micro-batches as
  // configured; `microbatches` above is how many it ran as).
  std::optional<control::Configuration> configuration;
};

// Note [Checkpoints]
// A checkpoint holds what the steps after it depend on, so a run resumed from it computes what
// the uninterrupted run would have: the parameters and buffers, the optimizer's state, the step
// count (the data's position: step i trains on batch i, whatever came before — FileDataSource
// and the synthetic sources draw batch i from the seed and i alone), the CPU's and the CUDA
// devices' random generators (dropout), the configuration the next step runs with, the binder's
// table (the kernels each site is bound to), the online controller's state (what it learnt of the
// configurations' times, its random generator, pins and exclusions), the rematerializer's
// measurements (a budget_fraction's calibration, the memory predictor's steps) and the caller's
// report of the steps so far. On the CPU with a fixed thread count the resumed run's parameters
// equal the uninterrupted run's bit for bit (tests/engine/runtime/tst_checkpoint.cpp). What is
// not carried over is made again as the batches come (the remat buckets' profiles and plans) or
// said in Resumed::notes (state the run cannot use: another space's controller, a table measured
// elsewhere). It is written to a temporary file beside the path, then renamed over it: a run
// killed while writing leaves the previous one.

// Note [Micro-batches]
// A batch can run as k micro-batches of consecutive samples (DataSource::split), each forward,
// loss and backward in turn, whose gradients add up to the batch's: each micro-batch's loss is
// weighted by its share of the batch's counted targets (those not -100), so the sum of the
// weighted mean losses is the batch's mean loss and the gradients are the batch's to rounding.
// Each micro-batch's backward adds to the gradients of those before it, as autograd accumulates.
// Under a remat budget a micro-batch after the first that overruns its budget cannot run again on
// its own (its backward may have added part of its gradients): the step starts over from its first
// micro-batch, with the random state and the buffers put back, and plans the overrun bucket anew
// with the wider margin (Note [Planning per batch]); at most kMostRestarts times. Until 2026-12-03
// the gradients of the micro-batches before were taken off and added back after, which held a
// second copy of them through every micro-batch after the first (on the tree network, 0.4 MB of a
// 1.9 MB budget). Not for a model that normalises over the batch (batch norm in training:
// each micro-batch would have its own statistics); the knob says so (Trainer::configSpace). On the
// CPU a step that calibrates a remat budget_fraction runs the batch whole, so the fraction is of
// the whole batch's plain peak and a split step can meet a budget the whole batch cannot (on a GPU,
// where the whole batch may not fit the device, it calibrates as configured).

// Note [A bound step no plan fits]
// Under a remat budget a bound step (DynaCompiler's binder on the executor: remat.bind) that no
// plan fits, even after the attempts the binder settled in (Note [Steps the binder settles in]
// in rematerializer.h), splits into more micro-batches when the trainer may split it
// (control.split_on_overrun) and keeps its binder. Only a step that cannot split further drops
// the binder and starts over unbound (the binding note says from which step). Bound, each zoo
// model's step peaks lower than unbound (docs/benchmarks.md: `bind` against `eager`), so a batch
// no bound plan fits would not fit unbound either but for what the binder holds while it first
// meets a bucket, which the attempts it settled in already allow for. Until 2026-12-03 the binder
// went first: the tree network held to 1.913 MB (0.43 of its plain peak) ran unbound in eight
// micro-batches at 0.53x `script`'s throughput; bound it runs in three at 0.71x (the median of
// 15 rounds: docs/benchmarks.md, "The tree network at 0.45 of the plain peak").
//
// Note [Splitting further]
// A step no plan fits as it is split runs again in the next count of 1, 2, 3, 4, 6, 8, 12, 16, ...
// (the powers of two and three times them; at most the batch's samples, micro-batches of a count
// that does not divide the batch differing by one sample at most), and the run goes on at the
// first count that fits. Each micro-batch runs every op once more (on the tree network most of a
// step's time is per op, not per sample), so the fewer the faster; each count tried costs the
// step one attempt. Until 2026-12-03 the count doubled: the bound tree network under 1.913 MB
// went from two micro-batches to four (0.61x `script`'s throughput with a fixed four) where three
// fit (0.71x).

class Trainer {
 public:
  // Builds the model, data and optimizer, and sets up the session's rules
  // (rules::Registry::global() resolves their names; rewrites change the model first). Throws
  // SetupError.
  explicit Trainer(const Session& session);

  // Runs one training step on the next batch.
  StepResult step();

  // The model on the data's held-out samples in eval mode, without gradients; nullopt when the
  // data holds none out (synthetic data, no data.validation_fraction).
  std::optional<Validation> validate();

  // Writes the model as trained so far as a TorchScript archive that torch.jit.load reads in
  // Python and C++: a deep copy on the CPU in eval mode, written atomically (a temporary file,
  // then a rename). Throws std::runtime_error naming the path.
  void saveModel(const std::filesystem::path& path);

  // Checkpoints (Note [Checkpoints]). Writes, atomically, what the next step depends on and
  // `report` (what the caller has recorded of the steps so far, kept with them). Throws
  // std::runtime_error naming the path.
  void saveCheckpoint(const std::filesystem::path& path, const std::string& report);
  struct Resumed {
    int64_t steps = 0;               // the steps the checkpoint holds; the next step is this one
    std::string report;              // as saveCheckpoint was given it
    std::vector<std::string> notes;  // what the resumed run does not carry over, one line each
  };
  // Restores a checkpoint of this session's run, before its first step. Throws SetupError (one
  // line naming the file) for a file that is missing, unreadable or of another run.
  Resumed resume(const std::filesystem::path& path);

  // The model's static graph (the executor's SyMuGen); built on first use.
  const Graph& staticGraph();
  // Runs one training step like step(), asking the executor to record it (Note [Step capture]),
  // and returns the step's graph: shapes, branches taken, loop trips, and the autograd graph
  // linked to the forward ops. The step trains like any other.
  Graph captureStep(StepResult* result = nullptr);

  // Takes effect from the next step. PerNode builds the static graph on first use; `ops` adds
  // input shapes or CUDA device time. On a CUDA model per-node steps time the device by
  // themselves: with CUPTI's GPU activity where it is available and the session's run.gpu_trace
  // allows it, with CUDA events otherwise (Note [Device time]; gpuTraceNote() says why not).
  void setTelemetry(Telemetry level, OpTracerOptions ops = {});
  Telemetry telemetry() const { return telemetry_; }
  // Why per-node steps on this trainer's device time it with CUDA events rather than GPU
  // activity (turned off, no CUPTI, ...); nullopt when they use GPU activity or run on the CPU.
  const std::optional<std::string>& gpuTraceNote() const { return gpuTraceNote_; }
  // Keeps the raw op events of per-node steps (for a trace) until takeEvents(), and their GPU
  // activity until takeGpuRecords().
  void setKeepEvents(bool on) { keepEvents_ = on; }
  std::vector<OpEvent> takeEvents() { return std::move(keptEvents_); }
  GpuRecords takeGpuRecords() { return std::exchange(keptGpu_, GpuRecords{}); }

  int64_t stepsDone() const { return optimizer_->stepCount(); }
  int64_t batchSize() const { return data_->batchSize(); }
  int64_t parameterCount() const { return parameterCount_; }
  const torch::Device& device() const { return device_; }
  const std::string& modelDescription() const { return description_; }
  // What the data files hold (FileDataSource::description); "" for synthetic data.
  const std::string& dataDescription() const { return dataDescription_; }
  // `symtune check`: a zoo model run once on its first batch, without gradients, as a model
  // file's was when the trainer was built — a batch too large for memory is said before a run,
  // not at its first step. Throws SetupError.
  void checkFirstBatch();

  Executor& executor() { return *executor_; }
  // DynaCompiler's binder when the model runs with op sites bound (the session's `binding`
  // block, on by default; docs/binding.md); null otherwise.
  binding::Binder* binder();
  // Where the binding table came from, or why the session's was not used (measured on another
  // kind of machine, unreadable, ...); nullopt when there was none to read.
  const std::optional<std::string>& bindingNote() const { return bindingNote_; }
  // Writes the binder's table to the session's table file (bindingTablePath) and returns the
  // path; nullopt when there is no binder or no file. Throws std::runtime_error when it cannot.
  std::optional<std::string> saveBindingTable();
  // The rules applied after each step's backward, before its update. Add, enable and disable
  // them between steps; a step records the set in force (StepResult::rulesInForce). They read
  // gradient statistics through MetaInfoBroker, so they need telemetry on (Features, the default).
  rules::RuleSet& rules() { return rules_; }
  // Changes the rules from any thread (the attach server's): `change` runs on the training thread
  // at the next step boundary, before that step begins, so a step never sees half a change. The
  // future becomes ready then, holding what `change` threw (an unknown rule, a taken name).
  std::future<void> changeRules(std::function<void(rules::RuleSet&)> change);
  // Runs the changes changeRules() queued, on the calling (training) thread. step() does it
  // first; call it while no steps run (paused, finished) so changes still take effect.
  void applyRuleChanges();
  // What the session's rewrite rules changed in the model when the trainer was built (one report
  // per rewrite rule, in the session's order).
  const std::vector<rules::RewriteReport>& rewrites() const { return rewrites_; }
  // The session's rules' parameter selectors that select none of the model's parameters
  // (RuleSet::unselected), found when the trainer was built: the rule does nothing there.
  const std::vector<std::string>& unselectedRules() const { return unselectedRules_; }
  // The rematerializer when the session has a `remat` block (docs/remat.md); null otherwise.
  remat::Rematerializer* rematerializer() { return remat_.get(); }
  // Changes the memory budget from the next step on (the attach protocol's set_budget), on the
  // training thread: in megabytes (10^6 bytes) or as a share of the plain peak, one of the two.
  // The session (snapshot) follows. Throws SetupError when the run holds no budget or the
  // rematerializer refuses it (a bad value, or below what any plan is predicted to fit); the
  // budget then stays. While it is in force, a step that finds in fact that no plan fits it runs
  // under the budget in force before it, which is put back (StepResult::Remat::note says so).
  void setRematBudget(std::optional<double> megabytes, std::optional<double> fraction);
  // The recomputable units' nodes in the static graph (SyMuGen::unitNodes()); empty without a
  // rematerializer.
  std::map<std::string, std::vector<NodeId>> rematUnitNodes();

  // The configuration space of this run (docs/control.md): micro-batches, intra-op threads and,
  // under a remat budget_fraction, the remat budget, each with its values and what limits them.
  control::ConfigSpace configSpace();
  // The configuration the next step runs with.
  control::Configuration configuration() const;
  // The online controller when the session's control.mode is "online"; null otherwise.
  control::OnlineController* controller() { return controller_.get(); }
  // Takes effect from the next step. Throws SetupError for a configuration outside configSpace()
  // or a remat budget the rematerializer refuses.
  void configure(const control::Configuration& configuration);

  // Runs the model through `executor` from the next step on (e.g. a SegmentExecutor). It must run
  // this trainer's model: the same parameter tensors, which the optimizer updates.
  void setExecutor(std::unique_ptr<Executor> executor);
  // Batch `index` of the trainer's data, on its device (what step `index` trains on).
  Batch batch(int64_t index);
  const Session& session() const { return session_; }
  MetaOptimizer& optimizer() { return *optimizer_; }
  MetaInfoBroker& broker() { return *broker_; }

 private:
  StepResult runStep(Graph* capture);
  SyMuGen& graphOfModel();  // the executor's; throws c10::Error when its model has no IR
  void setUpFileData();     // a model file's data: the session's files, or synthetic
  void checkModelOnData();  // a model file run once on the data, before training
  void setUpRules();        // the session's rules, before the model first runs
  void setUpBinding();      // the session's binding block, once the model is ready
  void setUpRemat();        // the session's remat block, after the binding
  // Runs `pass` (forward and backward) under the rematerializer's plan for `inputs`, held to its
  // budget, again with more recomputed when it overruns (Note [Planning per batch]).
  torch::Tensor runRemat(const std::vector<c10::IValue>& inputs,
                         const std::function<torch::Tensor()>& pass,
                         std::optional<StepResult::Remat>& out);
  torch::Tensor runPlanned(const std::vector<c10::IValue>& inputs,
                           const std::function<torch::Tensor()>& pass,
                           std::optional<StepResult::Remat>& out);
  bool applyRules(const torch::Tensor& loss);  // the optimizer's update gate
  // The session's loss of one forward against `target`: the model's loss method, or the loss
  // kind on the main output (through `binder`'s loss site when it has one) plus, with
  // `auxiliary`, each auxiliary output's times its weight.
  torch::Tensor sessionLoss(const ForwardResult& forward, const torch::Tensor& target,
                            binding::Binder* binder, bool auxiliary);
  void setUpControl();  // the session's control block, last
  // Why the batch cannot run as micro-batches (its data cannot be split, the model normalises
  // over the batch); nullopt when it can.
  const std::optional<std::string>& unsplittable();
  // `whole` as `parts` micro-batches on the device, each with its loss weight.
  std::vector<std::pair<Batch, double>> microBatches(const Batch& whole, int parts);
  // A micro-batch after the first overran its budget: the step starts over (Note [Micro-batches]).
  struct StartOver {};
  static constexpr int kMostRestarts = 8;
  size_t partIndex_ = 0;        // the running micro-batch's
  std::string startOverNote_;   // why a step started over, for its remat record
  int64_t settlingBefore_ = 0;  // the binder's settling() as the step's attempt began

  Session session_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<MetaOptimizer> optimizer_;
  std::unique_ptr<MetaInfoBroker> broker_;
  rules::RuleSet rules_;
  rules::RuleOutcome lastRules_;  // of the step being run
  std::vector<rules::RewriteReport> rewrites_;
  std::vector<std::string> unselectedRules_;
  rules::RuleChanges ruleChanges_;
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters_;
  Telemetry telemetry_ = Telemetry::Features;
  std::unique_ptr<OpTracer> tracer_;  // recording while telemetry_ is PerNode
  bool keepEvents_ = false;
  std::vector<OpEvent> keptEvents_;
  GpuRecords keptGpu_;
  std::optional<std::string> gpuTraceNote_;
  std::optional<std::string> bindingNote_;
  std::unique_ptr<remat::Rematerializer> remat_;
  // The budget before the last set_budget (the session's values), to go back to when no plan
  // fits the new one and the step cannot split further.
  struct SetBudget {
    std::optional<double> megabytes, fraction;
  };
  std::optional<SetBudget> rematBefore_;
  // Holds the session to the budget `next` (the rematerializer checking it with `check`, and
  // throwing RematInfeasible or c10::Error); returns whether it holds more than the one before
  // (or cannot be told not to).
  bool holdSessionTo(const SetBudget& next, bool check);
  // The online controller moved to the space under a budget the session was held to since, if
  // it was (whether that budget grew: controllerBudgetGrew_; Note [A new memory budget] in
  // controller.h).
  void moveController();
  std::optional<bool> controllerBudgetGrew_;
  // A step under a budget set on the running job found no plan fits it and cannot split further:
  // the session goes back to rematBefore_, which is let go. Returns the step's note: `why`, and
  // the budget gone back to.
  std::string backToBudgetBefore(const std::string& why);
  int64_t parameterCount_ = 0;
  std::string description_, dataDescription_;
  std::vector<Batch> validationBatches_;  // the held-out samples (data files only)
  std::vector<torch::Tensor> trainable_;  // the parameters the optimizer updates
  int microbatches_ = 1;
  int64_t stepsRun_ = 0;  // steps this object ran: from 0 after a resume too (a fresh executor)
  int threads_ = 0;       // set by configure(); 0: as the run began
  int threadsAtStart_ = 1;
  std::optional<double> rematBudget_;                       // set by configure()
  std::optional<bool> bindingExplore_;                      // set by configure()
  std::optional<std::optional<std::string>> unsplittable_;  // worked out on first use
  bool splitting_ = false;  // a step no remat plan fits is split rather than stopped
  std::unique_ptr<control::OnlineController> controller_;
  // The controller's choice for the step on `whole`, applied (a remat budget the rematerializer
  // refuses stays as it was); nullopt without a controller.
  std::optional<control::Decision> decide(const Batch& whole);
  // Note [A knob that changes nothing] in controller.h: the shape buckets whose last step met
  // nothing the binder would measure (true) or something (false).
  std::map<std::string, bool> nothingToExplore_;
  // What was live when a step run as micro-batches began: each micro-batch is held to the budget
  // above it, so the gradients of those before it count (nullopt: the step runs whole).
  std::optional<int64_t> stepLive_;
  int64_t liveNow();  // resets the device's peak to what is live, and returns it
  // The highest peak the remat side reset in the running step (StepResult::peakBeforeResets).
  int64_t stepHighest_ = 0;
  // The seconds the running step spent preparing its remat plans (Note [A new bucket's step,
  // learnt from] in trainer.cpp).
  double preparing_ = 0;
};

// The first line of a LibTorch error, without its C++ backtrace.
std::string oneLine(const c10::Error& error);
// The same for any exception; for TorchScript's errors, the line that says what went wrong.
std::string oneLine(const std::exception& error);

}  // namespace symtune
