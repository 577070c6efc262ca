// What SyMuGen's capture costs on top of a training step: the static graph plus one step's
// autograd graph of the full-size dynamic-branch ResNet-152 (the zoo's gpu preset: width 64,
// 224x224 images), run on the CPU with a small batch. Interleaves a plain step (forward, loss,
// backward through the module) with a captured one (SyMuGen built from scratch, the step's forward
// through SyMuGen's evaluator, loss, backward) and prints JSON with the medians.
//
//   build/ci/bin/symtune-bench-symugen [--runs N] [--batch B] [--preset gpu|cpu|ci]

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "symtune/graph/symugen.h"
#include "symtune/zoo/model_zoo.h"

namespace {

using symtune::bench::cpuModel;
using symtune::bench::median;

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  int64_t batch = 2;
  std::string preset = "gpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs")
      runs =
          static_cast<int>(symtune::bench::wholeNumberArg("symtune-bench-symugen", a, argv[i + 1]));
    else if (a == "--batch")
      batch = symtune::bench::wholeNumberArg("symtune-bench-symugen", a, argv[i + 1]);
    else if (a == "--preset")
      preset = argv[i + 1];
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  symtune::ZooModel zoo = symtune::buildZooModel("dynamic_resnet", {preset, 0, batch});
  const symtune::Batch data = zoo.data->batch(0);
  auto lossOf = [&](const torch::Tensor& out) {
    return torch::nn::functional::cross_entropy(out, data.target);
  };
  auto zeroGrads = [&] {
    for (auto p : zoo.module.parameters())
      p.mutable_grad() = torch::Tensor();
  };

  std::vector<double> plain, captured, staticOnly, stepOnly;
  size_t forwardNodes = 0, backwardNodes = 0, regions = 0;
  // Warm-up: TorchScript's profiling executor profiles and optimizes over its first runs.
  for (int i = 0; i < 3; ++i) {
    zeroGrads();
    lossOf(zoo.module.forward(data.inputs).toTensor()).backward();
  }
  for (int i = -1; i < runs; ++i) {  // i = -1: one more warm-up of each
    // The two take turns going first: what runs before a step moves its time.
    auto plainStep = [&] {
      zeroGrads();
      const auto t0 = Clock::now();
      lossOf(zoo.module.forward(data.inputs).toTensor()).backward();
      return seconds(t0);
    };
    double a = 0, s = 0, c = 0;
    if (i % 2 == 0)
      a = plainStep();
    zeroGrads();
    const auto t0 = Clock::now();
    symtune::SyMuGen gen(zoo.module, "resnet152");
    s = seconds(t0);
    const auto t1 = Clock::now();
    symtune::StepCapture step = gen.captureStep(
        data.inputs, [&](const c10::IValue& out) { return lossOf(out.toTensor()); });
    step.loss.backward();
    c = seconds(t0);
    const double stepSeconds = seconds(t1);
    if (i % 2 != 0)
      a = plainStep();
    if (i < 0)
      continue;
    plain.push_back(a);
    captured.push_back(c);
    staticOnly.push_back(s);
    stepOnly.push_back(stepSeconds);
    forwardNodes = step.graph.countNodes(symtune::GraphSide::Forward);
    backwardNodes = step.graph.countNodes(symtune::GraphSide::Backward);
    regions = step.graph.regions().size();
  }
  std::vector<double> overhead;
  for (size_t i = 0; i < plain.size(); ++i)
    overhead.push_back(captured[i] - plain[i]);

  nlohmann::ordered_json out = {
      {"benchmark", "symugen_capture"},
      {"model", "dynamic_resnet"},
      {"preset", preset},
      {"batch", batch},
      {"runs", runs},
      {"machine",
       {{"cpu", cpuModel()},
        {"cores", std::thread::hardware_concurrency()},
        {"threads", at::get_num_threads()},
        {"torch", TORCH_VERSION}}},
      {"graph",
       {{"forward_nodes", forwardNodes}, {"backward_nodes", backwardNodes}, {"regions", regions}}},
      {"plain_step_s",
       {{"median", median(plain)},
        {"min", *std::min_element(plain.begin(), plain.end())},
        {"max", *std::max_element(plain.begin(), plain.end())}}},
      {"captured_step_s",
       {{"median", median(captured)},
        {"min", *std::min_element(captured.begin(), captured.end())},
        {"max", *std::max_element(captured.begin(), captured.end())}}},
      {"static_capture_s", {{"median", median(staticOnly)}}},
      {"step_capture_s", {{"median", median(stepOnly)}}},
      {"capture_overhead_s",
       {{"median", median(overhead)},
        {"min", *std::min_element(overhead.begin(), overhead.end())},
        {"max", *std::max_element(overhead.begin(), overhead.end())}}},
      {"captured_over_plain", median(captured) / median(plain)},
  };
  std::cout << out.dump(2) << std::endl;
  return 0;
}
