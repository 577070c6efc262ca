// What MetaInfoBroker costs a training step: every zoo model's preset trained by four trainers
// built from the same session — telemetry off, off again (the control: the noise floor), step
// features only, per-node — stepped in turn (rotating which goes first), so step k of each sees
// the same batch and the same weights. The ratio of each mode to "off" is taken per step and the
// median over the steps reported, with the medians, minima and maxima of the step times. Prints
// JSON.
//
//   build/ci/bin/symtune-bench-telemetry [--preset cpu] [--steps 20] [--warmup 3] [--model NAME]

#include <algorithm>
#include <array>
#include <fstream>
#include <iostream>
#include <memory>
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

// A second "off" trainer is the control: its ratio to the first shows the noise floor.
constexpr std::array<symtune::Telemetry, 4> kModes = {
    symtune::Telemetry::Off, symtune::Telemetry::Off, symtune::Telemetry::Features,
    symtune::Telemetry::PerNode};
constexpr std::array<const char*, 4> kModeNames = {"off", "off_control", "features", "per_node"};
constexpr size_t kFeaturesMode = 2, kPerNodeMode = 3;

json measure(const std::string& model, const std::string& preset, int steps, int warmup) {
  symtune::Session session;
  session.name = model + " telemetry overhead";
  session.model.zoo = model;
  session.model.preset = preset;
  session.data.seed = 11;
  session.run.device = "auto";
  std::vector<std::unique_ptr<symtune::Trainer>> trainers;
  for (auto mode : kModes) {
    trainers.push_back(std::make_unique<symtune::Trainer>(session));
    trainers.back()->setTelemetry(mode);
  }
  std::array<std::vector<double>, kModes.size()> seconds;
  std::array<std::vector<double>, kModes.size()> ratios;  // per step, over "off"
  double attributed = 0, forwardBackward = 0;
  for (int k = 0; k < warmup + steps; ++k) {
    std::array<double, kModes.size()> t{};
    for (size_t j = 0; j < kModes.size(); ++j) {
      const size_t m = (j + static_cast<size_t>(k)) % kModes.size();  // rotate the order
      const symtune::StepResult r = trainers[m]->step();
      t[m] = r.seconds;
      if (m == kPerNodeMode && k >= warmup && r.nodes) {
        attributed += r.nodes->attributedSeconds;
        forwardBackward +=
            r.features[symtune::Feature::ForwardTime] + r.features[symtune::Feature::BackwardTime];
      }
    }
    if (k < warmup)
      continue;
    for (size_t m = 0; m < kModes.size(); ++m) {
      seconds[m].push_back(t[m]);
      ratios[m].push_back(t[m] / t[0]);
    }
  }
  json modes = json::object();
  for (size_t m = 0; m < kModes.size(); ++m) {
    modes[kModeNames[m]] = {{"step_s", summary(seconds[m])}, {"ratio_to_off", summary(ratios[m])}};
  }
  return {{"model", model},
          {"preset", preset},
          {"device", trainers[0]->device().str()},
          {"batch", trainers[0]->batchSize()},
          {"parameters", trainers[0]->parameterCount()},
          {"steps", steps},
          {"modes", modes},
          {"control_difference", median(ratios[1]) - 1},
          {"features_overhead", median(ratios[kFeaturesMode]) - 1},
          {"per_node_overhead", median(ratios[kPerNodeMode]) - 1},
          {"per_node_share_of_forward_backward",
           forwardBackward > 0 ? attributed / forwardBackward : 0.0}};
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
      steps = std::stoi(v);
    else if (a == "--warmup")
      warmup = std::stoi(v);
    else if (a == "--model")
      only = v;
    else {
      std::cerr << "symtune-bench-telemetry: unknown option " << a << "\n";
      return 2;
    }
  }
  if (steps < 1) {
    std::cerr << "symtune-bench-telemetry: --steps must be at least 1\n";
    return 2;
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
                << 100 * r["control_difference"].get<double>() << " %\n";
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
