// What MetaInfoBroker costs a training step: every zoo model's preset trained by trainers built
// from the same session — telemetry off, off again (the control: the noise floor), step features
// only, per-node, and on CUDA per-node timed with CUDA events instead of CUPTI's GPU activity
// (run.gpu_trace false) — stepped in turn (in an order shuffled each round), so step k of each sees
// the same batch and the same weights. The ratio of each mode to "off" is taken per step and the
// median over the steps reported, with the medians, minima and maxima of the step times; on CUDA
// also the GPU activity tracer's own cost: per-node with CUPTI over per-node with events. Prints
// JSON.
//
//   build/ci/bin/symtune-bench-telemetry [--preset cpu] [--steps 20] [--warmup 3] [--model NAME]

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "symtune/core/zoo_catalog.h"
#include "symtune/runtime/trainer.h"

namespace {

using symtune::bench::cpuModel;
using symtune::bench::median;
using symtune::bench::summary;

using json = nlohmann::ordered_json;

// A second "off" trainer is the control: its ratio to the first shows the noise floor. The last
// mode runs on CUDA only (on the CPU it would be per_node again).
constexpr std::array<symtune::Telemetry, 5> kModes = {
    symtune::Telemetry::Off, symtune::Telemetry::Off, symtune::Telemetry::Features,
    symtune::Telemetry::PerNode, symtune::Telemetry::PerNode};
constexpr std::array<const char*, 5> kModeNames = {"off", "off_control", "features", "per_node",
                                                   "per_node_cuda_events"};
constexpr size_t kFeaturesMode = 2, kPerNodeMode = 3, kEventsMode = 4;

json measure(const std::string& model, const std::string& preset, int steps, int warmup) {
  symtune::Session session;
  session.name = model + " telemetry overhead";
  session.model.zoo = model;
  session.model.preset = preset;
  session.data.seed = 11;
  session.run.device = "auto";
  std::vector<std::unique_ptr<symtune::Trainer>> trainers;
  for (size_t m = 0; m < kModes.size(); ++m) {
    symtune::Session own = session;
    own.run.gpuTrace = m != kEventsMode;
    trainers.push_back(std::make_unique<symtune::Trainer>(own));
    if (m == kEventsMode && !trainers.back()->device().is_cuda()) {
      trainers.pop_back();
      break;
    }
    trainers.back()->setTelemetry(kModes[m]);
  }
  const size_t modes = trainers.size();
  // One op tracer records at a time: with two per-node trainers (CUDA), each turns its telemetry
  // on for its own steps only (below). A per-node step's call switches CUPTI on and off (a paused
  // tracer lets go of it): gpu_trace_overhead holds that too.
  const bool takeTurns = modes > kEventsMode;
  if (takeTurns) {
    trainers[kPerNodeMode]->setTelemetry(symtune::Telemetry::Features);
    trainers[kEventsMode]->setTelemetry(symtune::Telemetry::Features);
  }
  std::array<std::vector<double>, kModes.size()> seconds;
  std::array<std::vector<double>, kModes.size()> ratios;  // per step, over "off"
  std::vector<double> gpuTraceRatios;                     // per step, CUPTI over CUDA events
  double attributed = 0, forwardBackward = 0;
  // Each round in an order of its own, shuffled from a fixed seed: a rotation has each mode
  // follow the same other, and what runs before a step moves its time (Note [The order of a
  // round] in harness.cpp).
  std::vector<size_t> order(modes);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937 shuffler(20261207);
  for (int k = 0; k < warmup + steps; ++k) {
    std::array<double, kModes.size()> t{};
    std::shuffle(order.begin(), order.end(), shuffler);
    for (const size_t m : order) {
      const bool perNode = takeTurns && kModes[m] == symtune::Telemetry::PerNode;
      if (perNode)
        trainers[m]->setTelemetry(symtune::Telemetry::PerNode);
      // The whole call: the trainer's clock stops at the loss, before the step's telemetry is
      // taken apart (op events sorted and attributed, features computed), which is what a mode
      // that measures costs. Building the batch is left out, as in symtune-bench.
      const auto called = std::chrono::steady_clock::now();
      const symtune::StepResult r = trainers[m]->step();
      t[m] = std::chrono::duration<double>(std::chrono::steady_clock::now() - called).count() -
             r.timings.data;
      if (perNode)
        trainers[m]->setTelemetry(symtune::Telemetry::Features);
      if (m == kPerNodeMode && k >= warmup && r.nodes) {
        attributed += r.nodes->attributedSeconds;
        forwardBackward +=
            r.features[symtune::Feature::ForwardTime] + r.features[symtune::Feature::BackwardTime];
      }
    }
    if (k < warmup)
      continue;
    for (size_t m = 0; m < modes; ++m) {
      seconds[m].push_back(t[m]);
      ratios[m].push_back(t[m] / t[0]);
    }
    if (modes > kEventsMode)
      gpuTraceRatios.push_back(t[kPerNodeMode] / t[kEventsMode]);
  }
  json byMode = json::object();
  for (size_t m = 0; m < modes; ++m) {
    byMode[kModeNames[m]] = {{"step_s", summary(seconds[m])}, {"ratio_to_off", summary(ratios[m])}};
  }
  json result = {{"model", model},
                 {"preset", preset},
                 {"device", trainers[0]->device().str()},
                 {"batch", trainers[0]->batchSize()},
                 {"parameters", trainers[0]->parameterCount()},
                 {"steps", steps},
                 {"modes", byMode},
                 {"control_difference", median(ratios[1]) - 1},
                 {"features_overhead", median(ratios[kFeaturesMode]) - 1},
                 {"per_node_overhead", median(ratios[kPerNodeMode]) - 1},
                 {"per_node_share_of_forward_backward",
                  forwardBackward > 0 ? attributed / forwardBackward : 0.0}};
  if (!gpuTraceRatios.empty()) {
    result["device_timing"] = trainers[kPerNodeMode]->gpuTraceNote().value_or("cupti");
    result["gpu_trace_overhead"] = median(gpuTraceRatios) - 1;  // CUPTI over CUDA events
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "cpu", only;
  int steps = 20, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "symtune-bench-telemetry: " << a << " needs a value\n";
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--preset")
      preset = v;
    else if (a == "--steps")
      steps = static_cast<int>(symtune::bench::wholeNumberArg("symtune-bench-telemetry", a, v));
    else if (a == "--warmup")
      warmup = static_cast<int>(symtune::bench::wholeNumberArg("symtune-bench-telemetry", a, v, 0));
    else if (a == "--model")
      only = v;
    else {
      std::cerr << "symtune-bench-telemetry: unknown option " << a << "\n";
      return 2;
    }
  }
  if (!only.empty()) {
    const auto& zoo = symtune::zooCatalog();
    if (std::none_of(zoo.begin(), zoo.end(), [&](const auto& e) { return e.name == only; })) {
      std::cerr << "symtune-bench-telemetry: no zoo model named \"" << only << "\"\n";
      return 2;
    }
  }
  json results = json::array();
  try {
    for (const auto& entry : symtune::zooCatalog()) {
      if (!only.empty() && entry.name != only)
        continue;
      results.push_back(measure(entry.name, preset, steps, warmup));
      const json& r = results.back();
      std::cerr << entry.name << " (" << preset << "): features "
                << 100 * r["features_overhead"].get<double>() << " %, per-node "
                << 100 * r["per_node_overhead"].get<double>() << " %, control "
                << 100 * r["control_difference"].get<double>() << " %";
      if (r.contains("gpu_trace_overhead"))
        std::cerr << ", GPU activity tracing over CUDA events "
                  << 100 * r["gpu_trace_overhead"].get<double>() << " %";
      std::cerr << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "symtune-bench-telemetry: " << symtune::oneLine(e) << "\n";
    return 1;
  }
  const json out = {{"benchmark", "telemetry_overhead"},
                    {"machine",
                     {{"cpu", cpuModel()},
                      {"cores", std::thread::hardware_concurrency()},
                      {"threads", at::get_num_threads()},
                      {"cuda_devices", torch::cuda::device_count()},
                      {"torch", TORCH_VERSION}}},
                    {"results", results}};
  std::cout << out.dump(2) << std::endl;
  return 0;
}
