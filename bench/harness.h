#pragma once
// The side-by-side benchmark harness behind `symtune-bench`: named modes of the same zoo model on
// the same data in one process, stepped in turn, with medians, ratios to a baseline mode, loss
// agreement and a roofline. docs/benchmarks.md describes the JSON it writes.

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
  // What the trainer measures on the mode's steps (the step features at least: they are the
  // figures compared).
  Telemetry telemetry = Telemetry::Features;
};

// The baselines: "script" (TorchScript's default profiling executor), "script-noopt" (the same
// with graph optimization off: the closest TorchScript gets to eager), "eager" (the model's
// graph run op by op through SyMuGen's evaluator, nothing recomputed: what LibTorch eager does,
// the C++ counterpart of PyTorch eager), "checkpoint" (full
// activation checkpointing of every top-level block); "per-node" (per-node telemetry on every
// step: the price of measuring each op); and "tanh-gelu" (the built-in tanh_gelu
// rewrite applied to the model before it runs; the same as "script" on models without GELU);
// "fused-optim" (the session's optimizer with symtune::optim's fused step); and "fused" (that
// step and the built-in pack's fusion rewrites: kernels/ end to end).
const std::vector<Mode>& baselineModes();
const Mode* findMode(const std::string& name);

struct RunConfig {
  std::string preset = "cpu";
  std::vector<std::string> modes{"script", "script-noopt", "checkpoint"};
  std::string baseline = "script";
  int steps = 20;  // measured steps per mode
  int warmup = 3;  // steps per mode before measuring (their losses are kept)
  uint64_t seed = 7;
  std::string device = "auto";
  int threads = 0;          // 0: LibTorch's default
  std::string sessionsDir;  // optimizer settings per model; empty: defaultSessionsDir()
  std::string exportDir;    // when set: model, batches and manifest for bench/python/anchor.py
};

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

// Runs every mode of one model and returns its entry of the JSON's "models".
nlohmann::ordered_json runModel(const std::string& model, const RunConfig& config,
                                const Probes& probes);

// The JSON's "machine" object.
nlohmann::ordered_json machineInfo(const torch::Device& device);

// A few lines per model: each mode's medians and ratios.
std::string table(const nlohmann::ordered_json& results);

}  // namespace symtune::bench
