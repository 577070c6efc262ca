// symtune-bench: the six zoo models in named modes, side by side (bench/harness.h). Prints a table
// to stderr and the JSON to --output (or stdout).
//
//   build/ci/bin/symtune-bench --preset cpu --output bench-results/cpu.json
//   build/ci/bin/symtune-bench-chart bench-results/cpu.json bench-results/cpu.png

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>

#include "harness.h"
#include "symtune/core/atomic_file.h"
#include "symtune/core/report.h"
#include "symtune/core/zoo_catalog.h"
#include "symtune/runtime/trainer.h"

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kUsage = R"(usage: symtune-bench [options]
  --models LIST      comma-separated zoo models, or "all" (default: all)
  --preset NAME      ci, cpu or gpu (default: cpu)
  --modes LIST       modes to run (default: script,script-noopt,checkpoint)
  --baseline MODE    the mode ratios are taken against (default: script)
  --steps N          measured steps per mode (default: 20)
  --warmup N         steps per mode before measuring (default: 3)
  --seed N           parameters and data (default: 7)
  --device NAME      auto, cpu or cuda (default: auto)
  --threads N        intra-op threads (default: LibTorch's)
  --cpu-memory system|retain  the sessions' run.cpu_memory: glibc's malloc as it comes, or freed
                     CPU memory kept for the next step (default: system; docs/session-format.md)
  --telemetry LEVEL  off or features: what the trainer measures in every mode but per-node
                     (default: off, as a job runs unobserved; the harness times each step and
                     its peak memory itself either way)
  --sessions DIR     where the models' sessions are (default: resources/sessions, here or in
                     the source tree)
  --export-anchor DIR  also write each model, its batches and a manifest for bench/python/anchor.py
  --lockstep DIR     take turns step by step with bench/python/anchor.py --lockstep DIR through
                     the named pipes DIR/turn.anchor and DIR/turn.engine (needs --export-anchor;
                     bench/python/side_by_side.py runs both)
  --budget SECONDS   start no further model after this long (those left are listed as skipped)
  --output FILE      the JSON (default: stdout); rewritten after every model, so a run stopped
                     midway leaves the models done ("complete": false until the end)
  --budgets LIST      also run remat:F for each F in LIST ("0.3,0.4,0.5"): the time-memory curve
  --grid F           also run every configuration of each model's space (micro-batches, threads,
                     remat budget: docs/control.md) under F times the plain step's peak, and report
                     the grid's best and runner-up, and auto_tune's choice with a quarter of the
                     grid's evaluations; where that choice is not the grid's best, the two again
                     side by side, alone, for four times the steps (head_to_head)
  --grid-bind S      with --grid: the grid, its controller and auto_tune run bound under the
                     budget (remat.bind) with a memory slack of S in [0, 1) (binding.memory_slack;
                     their modes' names begin bind+ or bind+lean:S+); the budget stays a share of
                     script's plain peak
  --binding-table own|shared  own (the default): each bound mode's binder measures its own table;
                     shared: a trainer of the model's own, bound with the mode's memory slack, first
                     measures one over the run's batches, untimed, and every bound mode (auto_tune
                     beside a bound grid too) starts from it, as from a saved table (binding.table)
  --memory-prediction on|off  predict each step's peak of the baseline mode before it runs
                     (remat's memory predictor, fed the steps before) and report the errors
                     (default: off; on adds a template-counting forward before each baseline
                     step, outside its timing)
modes: script (TorchScript's default profiling executor), script-noopt (graph optimization off),
eager (the graph op by op through SyMuGen's evaluator: the C++ counterpart of PyTorch eager),
bind (eager with DynaCompiler binding each op site to its fastest agreeing candidate),
checkpoint (full activation checkpointing of every top-level block), per-node (per-node
telemetry on every step), tanh-gelu (the built-in
tanh_gelu rewrite: exact GELU to its tanh approximation), fused-optim (the optimizer's fused step),
fused (the fused step and the built-in fusion rewrites: fused_bias_gelu, fused_bias_dropout_add),
bind+fused (those and DynaCompiler's binding), remat:F for F in (0, 1] (remat's planner: per
batch, the cheapest units recomputed to keep the step under F times its predicted plain peak,
the budget enforced), bind+remat:F (the same with DynaCompiler's binding, measured outside the
budget); and modes named by their configuration, '+' between the parts: remat:F or remat_mb:X
(the planner under X MB), micro:K (K micro-batches), threads:T, split (with a remat budget: a
step no plan fits split into more micro-batches), bind (with any other part), lean:S (with
bind: S of the sites' time may go to candidates that keep less for the backward, the binding
block's memory_slack; e.g. bind+lean:0.1), explore:E (with bind: the binding_explore knob, 0:
the binder binds by its table and cost model only, the ATen op elsewhere), online (the online
controller choosing each step's configuration), conservative:C (with online: after its warm-up
it explores while the run keeps C of its first configuration's throughput; 0, the default: freely),
outward (with online: an ordinal knob explored next to any value measured, not only the fastest),
horizon:H (with online: its model remembers about H steps; 0: every step alike),
shifts:R (with online: R steps of one configuration in a row far off one side make its model
believe that configuration's speed moved; 0: never),
e.g. remat:0.6+micro:2+threads:1, online+conservative:0.97, online+horizon:40, online+shifts:0
)";

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty())
      items.push_back(item);
  }
  return items;
}

// Digits only: std::stoi and std::stod also take " 5", "+5", "0.5abc" and (stod) "0x0.8p0".
int toInt(const std::string& text, const std::string& option) {
  static const std::regex digits("[0-9]{1,10}");
  if (std::regex_match(text, digits)) {
    const long long v = std::stoll(text);
    if (v <= std::numeric_limits<int>::max())
      return static_cast<int>(v);
  }
  throw std::invalid_argument(option + " needs a non-negative integer, got \"" + text + "\"");
}

// A decimal fraction, "0.5" or "5e-1"; nullopt for anything else (1e400 too).
std::optional<double> toFraction(const std::string& text) {
  static const std::regex real("([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?");
  if (!std::regex_match(text, real))
    return std::nullopt;
  try {
    return std::stod(text);
  } catch (const std::out_of_range&) {
    return std::nullopt;
  }
}

}  // namespace

int main(int argc, char** argv) {
  symtune::bench::RunConfig config;
  std::vector<std::string> models;
  std::string output;
  int budget = 0;  // seconds; 0: none
  std::string lockstep;
  std::vector<std::string> budgets;  // --budgets, as remat:F modes
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::cout << kUsage;
        return 0;
      }
      if (i + 1 >= argc)
        throw std::invalid_argument(arg + " needs a value (see --help)");
      const std::string value = argv[++i];
      if (arg == "--models")
        models = value == "all" ? std::vector<std::string>{} : split(value);
      else if (arg == "--preset")
        config.preset = value;
      else if (arg == "--modes")
        config.modes = split(value);
      else if (arg == "--baseline")
        config.baseline = value;
      else if (arg == "--steps")
        config.steps = toInt(value, arg);
      else if (arg == "--warmup")
        config.warmup = toInt(value, arg);
      else if (arg == "--seed")
        config.seed = static_cast<uint64_t>(toInt(value, arg));
      else if (arg == "--device")
        config.device = value;
      else if (arg == "--threads")
        config.threads = toInt(value, arg);
      else if (arg == "--cpu-memory") {
        if (value != "retain" && value != "system")
          throw std::invalid_argument("--cpu-memory: expected retain or system, found " + value);
        config.cpuMemory = value;
      } else if (arg == "--telemetry")
        config.telemetry = symtune::bench::parseTelemetry(value);
      else if (arg == "--sessions")
        config.sessionsDir = value;
      else if (arg == "--export-anchor")
        config.exportDir = value;
      else if (arg == "--lockstep")
        lockstep = value;
      else if (arg == "--output")
        output = value;
      else if (arg == "--budget")
        budget = toInt(value, arg);
      else if (arg == "--budgets") {
        for (const auto& f : split(value))
          budgets.push_back("remat:" + f);
      } else if (arg == "--grid") {
        const auto f = toFraction(value);
        if (!f || !(*f > 0 && *f <= 1))
          throw std::invalid_argument("--grid takes a share of the plain peak in (0, 1], got \"" +
                                      value + "\"");
        config.grid = *f;
      } else if (arg == "--grid-bind") {
        const auto s = toFraction(value);
        if (!s || !(*s >= 0 && *s < 1))
          throw std::invalid_argument("--grid-bind takes a memory slack in [0, 1), got \"" + value +
                                      "\"");
        config.gridBind = *s;
      } else if (arg == "--binding-table") {
        if (value != "own" && value != "shared")
          throw std::invalid_argument("--binding-table: expected own or shared, found " + value);
        config.sharedTables =
            value == "shared" ? std::make_shared<symtune::bench::SharedTables>() : nullptr;
      } else if (arg == "--memory-prediction") {
        if (value != "on" && value != "off")
          throw std::invalid_argument("--memory-prediction: expected on or off, found " + value);
        config.memoryPrediction = value == "on";
      } else {
        throw std::invalid_argument("unknown option " + arg + " (see --help)");
      }
    }
    config.modes.insert(config.modes.end(), budgets.begin(), budgets.end());
    // A mode given twice ran twice, the harness taking the last as the baseline and the anchor
    // the first, so their ratios were of different runs.
    for (auto m = config.modes.begin(); m != config.modes.end(); ++m) {
      if (std::find(config.modes.begin(), m, *m) != m)
        throw std::invalid_argument("mode \"" + *m + "\" is given twice (--modes, --budgets)");
    }
    if (std::find(config.modes.begin(), config.modes.end(), config.baseline) == config.modes.end())
      throw std::invalid_argument("the baseline mode \"" + config.baseline +
                                  "\" is not among --modes");
    if (config.steps < 1)
      throw std::invalid_argument("--steps must be at least 1");
    if (config.gridBind && !config.grid)
      throw std::invalid_argument("--grid-bind goes with --grid");
    if (!lockstep.empty() && config.exportDir.empty())
      throw std::invalid_argument("--lockstep needs --export-anchor: the anchor trains the export");
    if (!lockstep.empty() && budget > 0)
      throw std::invalid_argument(
          "--lockstep and --budget: a skipped model would stall the anchor");
    if (models.empty()) {
      for (const auto& entry : symtune::zooCatalog())
        models.push_back(entry.name);
    }
    for (const auto& m : models) {
      if (symtune::findZooEntry(m) == nullptr)
        throw std::invalid_argument("unknown zoo model \"" + m + "\"");
    }
    for (const auto& m : config.modes) {
      if (symtune::bench::findMode(m) == nullptr)
        throw std::invalid_argument("unknown mode \"" + m + "\" (see --help)");
    }
  } catch (const std::exception& e) {
    std::cerr << "symtune-bench: " << e.what() << "\n";
    return 2;
  }

  try {
    const auto t0 = std::chrono::steady_clock::now();
    if (config.threads > 0)
      at::set_num_threads(config.threads);
    const bool cuda =
        config.device == "cuda" || (config.device == "auto" && torch::cuda::is_available());
    const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    if (!lockstep.empty()) {
      std::cerr << "waiting for the anchor on " << lockstep << "...\n";
      config.lockstep = std::make_shared<symtune::bench::Lockstep>(lockstep);
    }
    std::cerr << "probing the machine...\n";
    const auto probes = symtune::bench::probeMachine(device);
    json results{{"format", "symtune-bench"},
                 {"version", 1},
                 {"machine", symtune::bench::machineInfo(device)},
                 {"config",
                  {{"preset", config.preset},
                   {"steps", config.steps},
                   {"warmup", config.warmup},
                   {"seed", config.seed},
                   // Note [The order of a round] in harness.cpp; "rotated" before 2026-12-05.
                   {"order", "shuffled each round"},
                   {"cpu_memory", config.cpuMemory},
                   {"baseline", config.baseline},
                   {"telemetry", symtune::bench::telemetryName(config.telemetry)},
                   {"modes", config.modes},
                   {"grid", config.grid ? json(*config.grid) : json(nullptr)},
                   {"grid_bind", config.gridBind ? json(*config.gridBind) : json(nullptr)},
                   {"binding_table", config.sharedTables ? "shared" : "own"}}},
                 {"probes",
                  {{"matmul_flops_per_s", probes.matmulFlopsPerSecond},
                   {"memory_bytes_per_s", probes.memoryBytesPerSecond}}},
                 {"models", json::array()},
                 {"skipped", json::array()},
                 {"complete", false}};
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (const auto& model : models) {
      if (budget > 0 && elapsed() > budget) {
        std::cerr << model << ": skipped (the " << budget << " s budget is spent)\n";
        results["skipped"].push_back(model);
        continue;
      }
      std::cerr << model << " (" << config.preset << ")...\n";
      results["models"].push_back(symtune::bench::runModel(model, config, probes));
      results["seconds"] = elapsed();
      if (!output.empty())
        symtune::writeFileAtomically(output, results.dump(2) + "\n");
    }
    results["complete"] = true;
    results["seconds"] = elapsed();
    std::cerr << symtune::bench::table(results);
    if (output.empty())
      std::cout << results.dump(2) << "\n";
    else
      symtune::writeFileAtomically(output, results.dump(2) + "\n");
    if (config.lockstep)
      config.lockstep->finish();  // after the JSON: the anchor reads it for its ratios
  } catch (const symtune::SetupError& e) {
    std::cerr << "symtune-bench: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "symtune-bench: " << symtune::oneLine(e) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "symtune-bench: " << symtune::oneLine(e) << "\n";
    return 1;
  }
  return 0;
}
