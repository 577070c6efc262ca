#pragma once
// The JSON report that `symtune --batch` writes (docs/session-format.md, "The report").
// Part of symtune::core.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "symtune/core/binding_table.h"

namespace symtune {

struct RunReport {
  static constexpr int kFormatVersion = 1;

  enum class Status { Completed, Interrupted, Failed };

  Status status = Status::Completed;
  std::string error;  // why it failed; empty otherwise

  // Versions of what produced the numbers.
  std::string symtuneVersion, torchVersion;
  bool cudaCompiled = false, cudaAvailable = false;

  std::string sessionName;
  std::filesystem::path sessionPath;
  std::string model;   // zoo name or file path
  std::string preset;  // empty for file models
  int64_t parameterCount = 0;
  std::string device;
  std::string optimizer;        // the session's ("adamw", "adam", "sgd")
  bool optimizerFused = false;  // whether its fused step ran (optimizer.fused, or the default)
  int threads = 0;
  int64_t batchSize = 0;

  int64_t stepsPlanned = 0;
  std::vector<int64_t> resumedAt;   // the steps from which a resumed run went on (--resume)
  std::vector<double> loss;         // one per completed step
  std::vector<double> stepSeconds;  // wall time of each completed step
  double wallSeconds = 0;           // whole run, setup included
  double trainSeconds = 0;          // sum of stepSeconds
  // Samples trained: each completed step's batch as it held (fewer than batchSize where the data
  // hold fewer, or in a short last batch). 0 in a report written before 2026-12-06: then
  // samplesPerSecond counts batchSize per step.
  int64_t samples = 0;
  int64_t peakRssBytes = 0;                       // the process's peak resident set (getrusage)
  std::optional<int64_t> peakCudaAllocatedBytes;  // CUDA caching allocator peak, when on CUDA
  // On CUDA, how per-node steps timed the device: "cupti" (GPU activity), or why CUDA events
  // did instead; empty on the CPU.
  std::string deviceTiming;
  std::string startedAt;  // ISO 8601, UTC
  // The last step's feature vector (docs/features.md), by name, in vector order.
  std::vector<std::pair<std::string, double>> features;

  // Rules (docs/rules.md): those in force at the last step; each rule that fired with the number
  // of steps it fired in; the steps a `skip step` held back; and each rewrite rule with the sites
  // it replaced in the model; and each parameter selector that selects none of the model's
  // parameters ("rule `r`: params \"enc*\" selects none of the model's 12 parameters").
  std::vector<std::string> rulesInForce;
  std::vector<std::pair<std::string, int64_t>> rulesFired;
  int64_t stepsSkipped = 0;
  std::vector<std::pair<std::string, int64_t>> rewrites;
  std::vector<std::string> rulesUnselected;

  // DynaCompiler (docs/binding.md), when the run bound op sites: the binding table after the
  // last step, the (site, bucket) measurements each completed step made, where the table came
  // from (or why the session's was not used) and the file it was written to.
  std::optional<BindingTable> bindings;
  std::vector<int64_t> bindingMeasurements;
  std::string bindingNote;
  std::string bindingTableFile;

  // Remat (docs/remat.md), when the session has a `remat` block: per completed step the budget
  // it was held to (none: a calibration step), its peak above what was live when it began, the
  // units it recomputed and how many times it ran (more than once: it overran and ran again);
  // and the rematerializer's counts over the run.
  struct RematStep {
    std::optional<int64_t> limitBytes;
    double peakBytes = 0;
    int64_t recomputed = 0;
    int attempts = 1;
  };
  struct Remat {
    std::vector<RematStep> steps;
    int64_t buckets = 0, plansMade = 0, cacheHits = 0, backOffs = 0;
    // Counting forwards: on batches (a bucket's largest), and on each batch's shapes alone, and why
    // the model's forward cannot run on shapes alone ("" when it can; docs/remat.md).
    int64_t profiles = 0, shapeProfiles = 0;
    std::string shapesRefused;
  };
  std::optional<Remat> remat;

  // Control (docs/control.md): the micro-batches each completed step ran as, the steps split
  // further because no remat plan fitted them whole (and why), and each OptimizeRequired: the
  // step whose batch broke a guard and what the optimizers re-planned for.
  std::vector<int> microbatches;
  std::vector<std::pair<int64_t, std::string>> splits;
  std::vector<std::pair<int64_t, std::vector<std::string>>> optimizeRequired;
  // Under the online controller, each step's decision: the configuration chosen, predicted and
  // measured samples per second, whether the choice explored, the next best by the model, the
  // batch's signals, why the chosen beat the next best (what, factor), the constraint the step
  // broke (empty: none), and the configuration the draw chose that conservative exploration held
  // back, and why (empty: none).
  struct Decision {
    int64_t step = 0;
    std::string chosen;
    double predictedSamplesPerSecond = 0, samplesPerSecond = 0;
    bool explored = false;
    std::vector<std::pair<std::string, double>> alternatives;
    std::vector<std::pair<std::string, double>> batchSignals, drivers;
    std::string violation;
    std::string heldBack;
    bool levelMoved = false;  // the step made the model believe its configuration's speed moved
    // The knobs kept at a value because on this step it changes nothing (knob, value).
    std::vector<std::pair<std::string, double>> idle;
  };
  std::vector<Decision> decisions;

  // Validation on the data's held-out samples (data.validation_fraction): after which step, on
  // how many samples, the mean loss and, under a class-index loss, top-1 and top-5 accuracy.
  struct ValidationPoint {
    int64_t step = 0, samples = 0;
    double loss = 0;
    std::optional<double> top1, top5;
  };
  std::vector<ValidationPoint> validation;

  int64_t stepsCompleted() const { return static_cast<int64_t>(loss.size()); }
  // Samples per second over all completed steps (0 when none).
  double samplesPerSecond() const;
};

const char* toString(RunReport::Status status);

std::string toJson(const RunReport& report);

// Reads back what toJson wrote about the steps (the loss curve, step times, rules fired, remat
// steps, micro-batches, splits, OptimizeRequired, decisions, validations, binding measurements
// per step) and the run's identity (session, model, device, batch size); what a run measures at
// its end (memory, features, the binding table) stays default. A resumed run goes on from it.
// Throws std::runtime_error for text that is not a symtune-report.
RunReport reportFromJson(const std::string& text);

// Writes the report atomically: a temporary file in the same folder, then a rename, so a reader
// never sees half a report. Throws std::runtime_error with the path and the reason.
void writeReport(const RunReport& report, const std::filesystem::path& path);

}  // namespace symtune
