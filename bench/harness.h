#pragma once
// The side-by-side benchmark harness behind `symtune-bench`: named modes of the same zoo model on
// the same data in one process, stepped in turn, with medians, ratios to a baseline mode, loss
// agreement and a roofline. docs/benchmarks.md describes the JSON it writes.

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "symtune/core/binding_table.h"
#include "symtune/runtime/trainer.h"

namespace symtune::bench {

// One way of running a model. Modes added by later parts (remat plans, bindings, the controller)
// register the same way.
struct Mode {
  std::string name;
  std::string description;
  std::function<void(Trainer&)> setup;  // once, after the trainer is built (may be empty)
  // Around each of the mode's steps: process-wide switches (may be empty).
  std::function<void()> enter, leave;
  // The session as this mode trains it, before the trainer is built (may be empty).
  std::function<void(Session&)> configure = {};
  // What the trainer measures on the mode's steps; unset: the run's level (RunConfig::telemetry).
  // The harness times the steps and measures their peaks itself whatever the level.
  std::optional<Telemetry> telemetry = {};
};

// The baselines: "script" (TorchScript's default profiling executor), "script-noopt" (the same
// with graph optimization off: the closest TorchScript gets to eager), "eager" (the model's
// graph run op by op through SyMuGen's evaluator, nothing recomputed: what LibTorch eager does,
// the C++ counterpart of PyTorch eager), "checkpoint" (full
// activation checkpointing of every top-level block); "per-node" (per-node telemetry on every
// step: the price of measuring each op); and "tanh-gelu" (the built-in tanh_gelu
// rewrite applied to the model before it runs; the same as "script" on models without GELU);
// "fused-optim" (the session's optimizer with symtune::optim's fused step); "fused" (that
// step and the built-in pack's fusion rewrites: kernels/ end to end); and "bind+fused" (those
// and DynaCompiler's binding).
const std::vector<Mode>& baselineModes();
const Mode* findMode(const std::string& name);

// Note [Lockstep with the anchor]
// Two processes timed one after the other drift apart on a shared machine (the same eager run
// moved 1.3x between two runs a minute apart), so PyTorch eager is compared with the engine in
// lockstep: symtune-bench and bench/python/anchor.py run at the same time and take turns step by
// step, through two named pipes in one folder (bench/python/side_by_side.py makes them). After
// each mode's step the harness writes "MODEL STEP SLOT SLOTS" to DIR/turn.anchor (SLOT: which of
// the SLOTS modes stepped) and waits for the anchor to run the same step on its copy number SLOT
// of the model and answer with the same line on DIR/turn.engine. So every step of either process
// follows one step of the other, and each side's caches and threads are as cold as the other's:
// with turns of a whole round (three engine steps, then one of PyTorch's) the side with one step
// a turn came out up to 1.4x slower on the tree network. The export of a model is written before
// its first turn. After the last model the harness writes its JSON, then "done". Only one of the
// two computes at any moment.
class Lockstep {
 public:
  explicit Lockstep(const std::string& folder);  // opens both pipes (blocks until the anchor does)
  // The anchor's turn after mode `slot` of `slots` ran `step`; back when it answers.
  void pass(const std::string& model, int step, size_t slot, size_t slots);
  void finish();  // "done"
 private:
  std::ofstream toAnchor_;
  std::ifstream fromAnchor_;
  std::string folder_;
};

class SharedTables;

struct RunConfig {
  std::string preset = "cpu";
  std::vector<std::string> modes{"script", "script-noopt", "checkpoint"};
  std::string baseline = "script";
  int steps = 20;  // measured steps per mode
  int warmup = 3;  // steps per mode before measuring (their losses are kept)
  uint64_t seed = 7;
  std::string device = "auto";
  int threads = 0;  // 0: LibTorch's default
  // Every mode's session's run.cpu_memory: "system" (the default) or "retain" (Note [Freed
  // memory kept] in symtune/runtime/cpu_memory.h; process-wide, so one setting for the run).
  std::string cpuMemory = "system";
  std::string sessionsDir;  // optimizer settings per model; empty: defaultSessionsDir()
  std::string exportDir;    // when set: model, batches and manifest for bench/python/anchor.py
  // The telemetry of every mode that does not set its own: Off compares the modes as a job runs
  // unobserved (and as PyTorch eager runs); Features as a session runs by default.
  Telemetry telemetry = Telemetry::Off;
  std::shared_ptr<Lockstep> lockstep;  // set: turns with the Python anchor after every round
  // Also predict each step's peak of the baseline mode before it runs (remat's MemoryPredictor,
  // fed the steps before) and report the predictions' errors: a forward counting template costs
  // on the step's batch runs before each of its steps, outside the timed step.
  bool memoryPrediction = false;
  // Also run every configuration of each model's space under this share of its plain peak
  // (gridModes), and report the grid's best (gridSummary).
  std::optional<double> grid;
  // Set: the grid's configurations, its controller and auto_tune run bound (DynaCompiler's binder
  // under the budget, remat.bind) with this memory slack (binding.memory_slack; 0: none). The
  // plain peak the budget is a share of stays "script"'s.
  std::optional<double> gridBind;
  // Set (--binding-table shared): every bound mode of a model, and auto_tune beside a bound grid,
  // starts from one binding table per memory slack (Note [One table for the run's bound modes]).
  // Shared by the copies of the config (the head-to-head runs read the grid's tables).
  std::shared_ptr<SharedTables> sharedTables;
};

// Note [One table for the run's bound modes]
// A bound mode's binder measures its candidates in its first steps and binds the fastest by what
// it measured: two trainers of one configuration can bind differently, and then differ by more
// than configurations do. Under 0.6 of early exit's plain peak, bound with a memory slack of 0.1,
// the grid's best and runner-up in one round were the same step under two budgets (nothing
// recomputed either way) and ran 1000 and 895 samples/s, at 12.1 and 9.8 MB: one trainer's
// measurements had taken a leaner pair of blocks than the other's. A grid, a controller and a
// tuner compare configurations; what the binder happened to measure is none of their knobs. So
// with a shared table the harness first trains the model bound (the memory slack asked for, no
// budget, the process's threads) over the run's batches in a trainer of its own, untimed, and
// gives every bound mode's binder its table, as a session's saved table is read
// (Binder::adopt): they bind alike, and measure only the buckets it did not meet (a
// micro-batch's shapes). auto_tune's evaluations read it as their session's table file.
class SharedTables {
 public:
  struct Table {
    BindingTable table;
    std::string path;          // where it was written (a session's binding.table)
    int steps = 0;             // the measuring trainer's steps
    int64_t measurements = 0;  // the (site, bucket)s it measured
    double seconds = 0;        // its steps' time
  };
  SharedTables();   // its files in a folder of its own under the system's temporary folder
  ~SharedTables();  // which it removes
  SharedTables(const SharedTables&) = delete;
  SharedTables& operator=(const SharedTables&) = delete;

  // The table of `model` bound with `memorySlack`, measured on first use over config.warmup +
  // config.steps of the run's batches.
  const Table& of(const std::string& model, double memorySlack, const RunConfig& config);

 private:
  std::filesystem::path folder_;
  std::map<std::string, Table> tables_;  // by "<model> <slack>"
};

Telemetry parseTelemetry(const std::string& name);  // "off", "features" or "per-node"
std::string telemetryName(Telemetry level);

// The machine's measured peaks: a matmul probe and a copy probe on the benchmark's device.
struct Probes {
  double matmulFlopsPerSecond = 0;
  double memoryBytesPerSecond = 0;
};
Probes probeMachine(const torch::Device& device);

// resources/sessions under the working directory when there is one, else the source tree's.
std::string defaultSessionsDir();

// The session a model is benchmarked with: the bundled session whose model is `model` (its
// optimizer), with the config's preset, seed, device and threads.
Session benchSession(const std::string& model, const RunConfig& config);

// A step's peak bytes on top of what was live when it began, measured the same way for every
// mode whatever its telemetry: on the CPU from the allocation counter (process-wide, Note [Step
// memory without reports]), on CUDA from the caching allocator's peak of allocated bytes.
class StepPeak {
 public:
  explicit StepPeak(const torch::Device& device);
  // `beforeResets`: StepResult::peakBeforeResets (Note [A step's peak across resets]).
  double bytes(std::optional<int64_t> beforeResets = std::nullopt) const;

 private:
  torch::Device device_;
  int64_t live_ = 0;
};

// Modes named by their configuration, '+' between the parts (docs/benchmarks.md): "remat:F" (the
// planner under F of the plain peak), "remat_mb:X" (under X MB), "bind" (with a remat budget:
// DynaCompiler's binder too), "micro:K" (K micro-batches), "threads:T" (T intra-op threads around
// each step), "split" (with a remat budget: a step no plan fits split rather than stopped),
// "online" (the online controller choosing each step's configuration).
// Null for a name that is none of these.
const Mode* configuredMode(const std::string& name);

// The exhaustive grid over `model`'s configuration space (Trainer::configSpace) under a budget
// of config.grid times the plain run's peak (measured here over the run's batches, as "script"
// runs them; *budgetBytes): one configured mode per configuration, and last the online
// controller's mode over the same space and budget.
std::vector<std::string> gridModes(const std::string& model, const RunConfig& config,
                                   double* budgetBytes);
// auto_tune (symtune::tuneSession) on the model's session under config.grid of the plain peak,
// allowed a quarter of the grid's `configurations` as evaluations, each measured as the grid's
// modes are (config.warmup + config.steps steps): its choice as a grid mode name, and what it
// spent; {"error": ...} when it could not run.
nlohmann::ordered_json tuneBesideGrid(const std::string& model, const RunConfig& config,
                                      size_t configurations, double budgetBytes);
// The grid's best and auto_tune's choice (grid mode names) side by side again, alone, for four
// times config.steps (Note [The choice and the best, head to head] in configured_modes.cpp):
// their figures and the choice's ratio to the best; {"error": ...} when it could not run.
nlohmann::ordered_json headToHead(const std::string& model, const RunConfig& config,
                                  const Probes& probes, const std::string& best,
                                  const std::string& tune);
// The grid's entry of a model's JSON: its configurations that ran within the budget, best first,
// those no plan fitted, the online controller's and auto_tune's choice (`tune`, with the
// grid's measure of it) against the best.
nlohmann::ordered_json gridSummary(const nlohmann::ordered_json& modeResults,
                                   const std::vector<std::string>& grid, double fraction,
                                   double budgetBytes, nlohmann::ordered_json tune);

// A mode under the online controller: how often each configuration ran, how many choices
// explored and how many draws conservative exploration held back (with the seconds since its
// warm-up against what it reckoned its baseline took), and the median samples per second of the
// last quarter of the measured steps
// (`measured`, in order), where it has settled.
nlohmann::ordered_json controllerSummary(const control::OnlineController& controller,
                                         const std::vector<double>& measured);

// Runs every mode of one model and returns its entry of the JSON's "models".
nlohmann::ordered_json runModel(const std::string& model, const RunConfig& config,
                                const Probes& probes);

// The JSON's "machine" object.
nlohmann::ordered_json machineInfo(const torch::Device& device);

// A few lines per model: each mode's medians and ratios.
std::string table(const nlohmann::ordered_json& results);

}  // namespace symtune::bench
