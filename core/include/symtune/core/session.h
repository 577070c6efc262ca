#pragma once
// The session file: what to train and how (docs/session-format.md). Part of symtune::core, so the
// studio can read and validate sessions without LibTorch.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace symtune {

// A session file that cannot be used. what() is one line: "<file>: <field>: <problem>".
class SessionError : public std::runtime_error {
 public:
  SessionError(std::string file, std::string field, std::string problem);
  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }      // e.g. "optimizer.lr"; empty: whole file
  const std::string& problem() const { return problem_; }  // e.g. "expected a number, found string"

 private:
  std::string file_, field_, problem_;
};

enum class DType { Float32, Float64, Int64 };
const char* toString(DType dtype);

// One of the values a model's forward returns when it returns several: a position in a tuple or
// list, or a key of a dict or a field of a named tuple.
struct OutputRef {
  std::optional<int64_t> index;
  std::string key;

  bool empty() const { return !index && key.empty(); }
  std::string text() const;  // "2", "\"aux\""
};

// An auxiliary output (a classifier part-way through the network): the session's loss between it
// and the same target, times `weight`, is added to the training loss.
struct AuxiliaryOutput {
  OutputRef output;
  double weight = 1.0;
};

// One input of a user's model: the shape includes the batch dimension.
struct InputSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::Float32;
};

struct ModelSpec {
  // Exactly one of zoo and file is set.
  std::string zoo;             // a model of the bundled zoo (ZooCatalog), e.g. "dynamic_resnet"
  std::string preset;          // its size preset: "ci", "cpu" or "gpu"
  std::filesystem::path file;  // a TorchScript archive (torch.jit.save), absolute
  // The file model's inputs; with data files optional (the data gives them; when given, checked
  // against it).
  std::vector<InputSpec> inputs;
  // The file model's output width: classes (logits; at least 2) under a class-index loss, else
  // values (at least 1).
  int64_t classes = 0;
  // When the forward returns a tuple, list, dict or named tuple: the output the loss and the
  // metrics read. Empty: the forward returns a tensor.
  OutputRef output;
  std::vector<AuxiliaryOutput> auxiliaryOutputs;  // training only; validation reads `output`

  bool isZoo() const { return !zoo.empty(); }
};

// A file model's samples read from files (docs/session-format.md, "Data from files"). Each array
// holds one sample per entry of its first dimension.
// How format "images" turns each image file into an input tensor [channels, height, width] of
// float32: decoded, scaled, cropped at the centre, scaled to [0, 1], normalised per channel.
struct ImageSpec {
  int channels = 3;  // 3: RGB; 1: grey
  // Empty: as stored (every image must then have the same size, or a crop); one value: the
  // shorter side scaled to it, the aspect kept; two: [height, width].
  std::vector<int64_t> resize;
  std::vector<int64_t> crop;      // [height, width] (one value: square) at the centre, after resize
  std::vector<double> mean, std;  // per channel; empty: 0 and 1
};

struct DataFilesSpec {
  // "npy", "npz", "torch", "csv", "mnist", "cifar10" or "images"
  std::string format;
  // npz, torch, csv: the file; mnist: the folder; cifar10: a .bin or a folder of them; images: a
  // folder with one sub-folder of PNG and JPEG files per class (classes in name order); absolute.
  // npy: empty.
  std::filesystem::path file;
  // The forward's arguments in order and the target, each an array named as its format has it:
  // a key (npz; a dict saved by torch.save; a TorchScript module's attribute), a position ("0",
  // "1": a tuple or list saved by torch.save), a file (npy, absolute). In a CSV file an input is
  // a group of numeric columns ([samples, columns], float32); empty inputs: every column but the
  // target's, as one input.
  std::vector<std::vector<std::string>> inputs;
  std::string target;
  // Sequences of different lengths: the array of each sample's length. A batch's inputs and
  // target are cut to its longest sequence (dimension 1), positions past a sample's length
  // ignored by the loss; listed among the inputs, the lengths reach the model too.
  std::string lengths;
  // With lengths: each epoch's shuffled order is cut into pools of 20 batches, each pool sorted
  // by length into batches, the batches shuffled, so a batch holds sequences of like length.
  bool bucketByLength = false;
  bool shuffle = true;    // a new order each epoch, drawn from data.seed
  bool dropLast = false;  // drop an epoch's last batch when it is short
  int workers = 0;        // data loader threads that prefetch batches; 0: the training thread
  double validationFraction = 0;  // samples held out for validation (drawn by data.seed)
  int64_t validateEvery = 0;      // validate every this many steps; 0: after the last step only
  ImageSpec image;                // format "images"

  bool enabled() const { return !format.empty(); }
};

struct DataSpec {
  uint64_t seed = 0;
  // Default: the preset's (zoo) or inputs[0].shape[0] (file model with synthetic data); required
  // with data files when the model has no `inputs`.
  std::optional<int64_t> batchSize;
  DataFilesSpec files;  // disabled: synthetic data (docs/session-format.md, "Data")
};

// The training loss (docs/session-format.md, "loss"), between the model's output and the target.
struct LossSpec {
  // cross_entropy, nll (class indices; per-token outputs [batch, time, classes] flattened),
  // mse, l1, smooth_l1, bce_with_logits (float targets shaped as the output).
  std::string kind = "cross_entropy";
  int64_t ignoreIndex = -100;  // cross_entropy, nll: a target entry the loss leaves out
  double labelSmoothing = 0;   // cross_entropy
  double beta = 1.0;           // smooth_l1
  // The model's own TorchScript method that computes the loss from what the forward returned
  // (all of it) and the target, e.g. "loss"; the kind above then only says how the metrics read
  // the target. Empty: the kind computes it.
  std::string method;

  bool classIndices() const { return kind == "cross_entropy" || kind == "nll"; }
  // PyTorch's default cross-entropy, the loss the binder and the zoo's padding assume.
  bool isPlainCrossEntropy() const {
    return kind == "cross_entropy" && ignoreIndex == -100 && labelSmoothing == 0 && method.empty();
  }
};

struct OptimizerSpec {
  std::string name = "adamw";  // "adamw", "adam" or "sgd"
  double lr = 1e-3;
  double weightDecay = 0.0;
  double momentum = 0.0;  // sgd only
  // symtune::optim's fused step (kernels/: one pass over all parameters) instead of
  // torch::optim's; the same hyper-parameters, state and results to rounding. Unset: the fused
  // step where the run is on CUDA, torch::optim's on the CPU — as PyTorch's own optimizers take
  // their multi-tensor path by default on CUDA tensors only (the Trainer decides, and its copy of
  // the session says what it decided).
  std::optional<bool> fused;
};

struct RunSpec {
  int64_t steps = 100;
  std::string device = "cpu";  // "cpu", "cuda" or "auto"
  int threads = 0;             // intra-op threads; 0 keeps LibTorch's default
  // "retain": freed CPU memory stays with the process for the next step (Note [Freed memory
  // kept] in symtune/runtime/cpu_memory.h); "system": the C library's malloc as it comes.
  std::string cpuMemory = "system";
  // Per-node steps on CUDA trace the GPU's activity with CUPTI where it is available (kernel
  // time per node, the trace's GPU lanes); false times them with CUDA events (docs/profiling.md).
  bool gpuTrace = true;
  bool nvtx = false;  // NVTX ranges named after steps and graph nodes, for Nsight Systems
  // The trained TorchScript module, written atomically after the last step (and every saveEvery
  // steps when positive); absolute; empty: not saved.
  std::filesystem::path save;
  int64_t saveEvery = 0;
  // A checkpoint (parameters, optimizer state, data position, RNG states, the report so far...)
  // written atomically every checkpointEvery steps when positive, on SIGTERM and SIGINT, and
  // after the last step; `symtune --batch SESSION --resume` continues from it. Absolute; empty:
  // none.
  std::filesystem::path checkpoint;
  int64_t checkpointEvery = 0;
};

// The rules the run starts with (docs/session-format.md, "rules"; docs/rules.md).
struct RulesSpec {
  // Names of registered rules (the built-in pack, installed packs, plugins, C++ rules), enabled
  // in this order; rewrites among them change the model before it first runs.
  std::vector<std::string> enable;
  // Rules written in the session itself (the rule language), checked when the session loads and
  // enabled after `enable`.
  std::string source;
  bool empty() const { return enable.empty() && source.empty(); }
};

// DynaCompiler (docs/binding.md; docs/session-format.md, "binding").
struct BindingSpec {
  // Bind op sites: the model runs op by op through SyMuGen's evaluator, each site bound per shape
  // bucket to the fastest candidate that agrees with the ATen op. Off: TorchScript's executor.
  bool enabled = true;
  // The most (site, bucket) measurements the run may make; when spent, unseen buckets use the
  // cost model or the ATen op. None: no limit; 0: measure nothing (the table only).
  std::optional<int64_t> budget;
  int repetitions = 3;  // timed runs per candidate in a measurement
  // Only candidates that compute their site bit for bit (no fused kernel, no channels-last
  // images): a run then rounds as one op by op does, whatever was bound.
  bool exact = false;
  // The share of the op sites' time that may go to candidates keeping less for the backward
  // (0.1: 10 %); 0: the fastest everywhere (docs/binding.md, "Memory slack"). In [0, 1).
  double memorySlack = 0;
  // The binding table, read before the first step (when it exists and was measured for this
  // model on this kind of machine) and written after the last. Relative paths resolve against the
  // session file. Empty: "<session file's name>.bindings.json" beside it; none for a session
  // without a file.
  std::filesystem::path table;
  bool useTable = true;  // false ("table": null): no table file, every run measures anew
  bool save = true;      // write the table after the run
};

// Rematerialization under a memory budget (docs/remat.md; docs/session-format.md, "remat").
struct RematSpec {
  // The step's peak above what is live when it begins, in MB (10^6 bytes), enforced; or a share
  // of the plain step's predicted peak. At most one; the planner needs one of them.
  std::optional<double> budgetMb;
  std::optional<double> budgetFraction;
  // "plan": the planner's cheapest units under the budget; "checkpoint": every top-level block;
  // "selective": every run of ops without its closing op (the matmuls and convolutions kept).
  std::string strategy = "plan";
  // With budget_fraction: the first steps, run plain and unenforced, whose largest peak the
  // fraction is of.
  int calibrationSteps = 1;
  // With budget_fraction: the plain peak in MB where it is known from more steps than the
  // calibration runs (a longer plain run's largest); the fraction is of the larger of it and what
  // the calibration measures, so a budget is the same whatever batches the calibration met.
  std::optional<double> plainPeakMb;
  // Run bound (DynaCompiler's binder on, measuring outside the budget) under the budget; off, a
  // session with a remat block runs unbound. Needs binding.enabled.
  bool bind = false;
  bool enabled = false;  // the session has a `remat` block
};

// How a step runs (docs/control.md). The configuration the run starts with, and what it may do
// when a step does not fit its memory budget.
struct ControlSpec {
  // "fixed": every step as configured here; "online": the online controller chooses each step's
  // configuration from the run's space (docs/control.md, "The online controller"); "tuned": as
  // "fixed", the configuration written by `symtune tune` (auto_tune), its search in `tuned`.
  std::string mode = "fixed";
  // Each batch runs as this many micro-batches whose gradients add up to the batch's (the
  // online controller's first step starts from it).
  int microbatches = 1;
  // Under the remat block's enforced budget, a step that no plan fits is split into more
  // micro-batches (1, 2, 3, 4, 6, 8, ...; again, until it fits or the batch cannot be split
  // further), and the run goes on so split, rather than stopping. Off without a `control` block.
  bool splitOnOverrun = true;
  // The online controller's conservative exploration (docs/control.md): after `warmupSteps`
  // decisions it explores only while the run keeps `conservative` of the throughput its first
  // configuration would have had (0, the default: explores freely throughout).
  double conservative = 0;
  int warmupSteps = 30;
  // How many steps the online controller's model remembers (docs/control.md, "Old steps fade"):
  // a step this many observations old counts about 1/e of a new one; 0: all alike; unset: the
  // controller's default.
  std::optional<double> horizon;
  // How many steps of one configuration in a row, each more than two predictive spreads off the
  // model's prediction on the same side, make the online controller's model believe that
  // configuration's speed moved (docs/control.md, "A level that moves"); 0: never; unset: the
  // controller's default.
  std::optional<int> shiftRun;
  // Where the online controller explores an ordinal knob (docs/control.md, "The choice"):
  // "around_leader", next to the fastest value measured; "outward", next to any value measured.
  std::string explore = "around_leader";
  // LibTorch's intra-op threads for the run's steps; 0: as run.threads has it.
  int threads = 0;
  // The remat budget as a share of the plain peak, tighter than remat.budget_fraction (which
  // stays the run's limit, and this at most it); unset: remat.budget_fraction.
  std::optional<double> rematBudget;
  // Whether the binder measures a (site, bucket) it meets unbound (true) or binds by its table and
  // cost model only (false); unset: it measures as the binding block allows. Needs binding on.
  std::optional<bool> bindingExplore;
  // What auto_tune measured when it chose the configuration above (`symtune tune`).
  struct Tuned {
    int64_t evaluations = 0, configurations = 0, steps = 0;
    double seconds = 0;
    double samplesPerSecond = 0;       // the configuration chosen, as measured
    std::string start;                 // the configuration the search began from...
    double startSamplesPerSecond = 0;  // ... and its measure
    std::string runnerUp;              // the second fastest measured (empty: none)
    double runnerUpSamplesPerSecond = 0;
    std::string stopped;  // why the search ended
  };
  std::optional<Tuned> tuned;
  bool enabled = false;  // the session has a `control` block
};

struct Session {
  static constexpr int kFormatVersion = 1;

  std::filesystem::path path;  // where it was loaded from (empty when parsed from text)
  std::string name;
  ModelSpec model;
  DataSpec data;
  LossSpec loss;
  OptimizerSpec optimizer;
  RunSpec run;
  RulesSpec rules;
  BindingSpec binding;
  RematSpec remat;
  ControlSpec control;
};

// Where `session`'s binding table is read and written (BindingSpec::table); empty: no file.
std::filesystem::path bindingTablePath(const Session& session);

// Whether `path` is a session file by its name: ".json", but not a binding table kept beside a
// session (".bindings.json"). What lists the sessions of a folder goes by this.
bool looksLikeSessionFile(const std::filesystem::path& path);

// Parses and validates session JSON. `origin` names the file in errors and anchors relative paths.
// Throws SessionError naming the field and what was expected.
Session parseSession(const std::string& text, const std::filesystem::path& origin);

// The session as session-format JSON, every field written, such that
// parseSession(sessionJson(s), s.path) gives back `s`. A path that lies in s.path's folder is
// written relative to it (the folder can move with its files), any other as it is: set s.path to
// where the text goes.
std::string sessionJson(const Session& session);

// Reads and parses a session file. Throws SessionError (also when the file cannot be read).
Session loadSession(const std::filesystem::path& path);

}  // namespace symtune
