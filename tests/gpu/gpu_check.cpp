// The GPU checks, as one Qt-free executable: the GPU machine has no Qt, so the Qt Test suites do
// not build there. Each check compares a CUDA result with a CPU reference or with an independent
// measurement. Prints one JSON object; exit status 0 all passed, 1 a check failed, 77 no CUDA
// device (CTest counts that as skipped).
//
//   build/gpu/bin/symtune-gpu-check > gpu-check.json

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <functional>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "symtune/core/zoo_catalog.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/graph/symugen.h"
#include "symtune/kernels/grad_stats.h"
#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/gradient_monitor.h"
#include "symtune/telemetry/memory_tracker.h"
#include "symtune/zoo/model_zoo.h"

namespace {

using json = nlohmann::ordered_json;

struct Check {
  bool ok = true;
  json details = json::object();
  void expect(bool condition, const std::string& what) {
    if (!condition) {
      ok = false;
      details["failures"].push_back(what);
    }
  }
};

Check gradStatsMatchesCpu() {
  Check c;
  const torch::Device cuda(torch::kCUDA, 0);
  int cases = 0;
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16}) {
    for (std::vector<int64_t> shape : {std::vector<int64_t>{0}, {1}, {7}, {33, 17}, {1024, 4097}}) {
      for (bool poison : {false, true}) {
        auto g = torch::randn(shape, torch::TensorOptions().dtype(dtype));
        if (poison && g.numel() > 2) {
          g.view(-1)[0] = std::numeric_limits<double>::quiet_NaN();
          g.view(-1)[1] = std::numeric_limits<double>::infinity();
        }
        auto onGpu = g.to(cuda);
        if (shape.size() == 2)
          onGpu = onGpu.t();  // non-contiguous
        const auto want = symtune::kernels::gradStats(shape.size() == 2 ? g.t() : g);
        const auto got = symtune::kernels::gradStats(onGpu).cpu();
        c.expect(torch::allclose(got, want, 1e-9, 1e-6),
                 "grad_stats " + std::string(c10::toString(dtype)) + " " + c10::str(shape) +
                     (poison ? " poisoned" : ""));
        ++cases;
      }
    }
  }
  c.details["cases"] = cases;
  return c;
}

symtune::Session cudaSession(int64_t steps) {
  symtune::Session s;
  s.name = "gpu check";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.optimizer.lr = 3e-3;
  s.run.steps = steps;
  s.run.device = "cuda";
  // Bit-for-bit candidates only: the checks compare trainers, whose binders may choose
  // differently between candidates that round differently.
  s.binding.exact = true;
  return s;
}

Check trainerLearnsOnCuda() {
  Check c;
  symtune::Trainer trainer(cudaSession(50));
  std::vector<double> loss;
  for (int i = 0; i < 50; ++i)
    loss.push_back(trainer.step().loss);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i)
    first += loss[i] / 5, last += loss[45 + i] / 5;
  c.details["loss_first5"] = first;
  c.details["loss_last5"] = last;
  c.expect(trainer.device().is_cuda(), "trainer runs on CUDA");
  c.expect(last < 0.8 * first, "loss falls by a fifth in 50 steps");
  return c;
}

// Every zoo model trains on CUDA, and full checkpointing gives the same losses and less memory.
Check zooModelsAndCheckpointingOnCuda() {
  Check c;
  for (const auto& entry : symtune::zooCatalog()) {
    symtune::Session s = cudaSession(3);
    s.model.zoo = entry.name;
    symtune::Trainer plain(s), checkpointed(s);
    auto executor =
        std::make_unique<symtune::SegmentExecutor>(*checkpointed.executor().scriptModule());
    executor->setPlan(executor->recomputeAll());
    checkpointed.setExecutor(std::move(executor));
    double worst = 0, peakPlain = 0, peakCheckpointed = 0;
    for (int i = 0; i < 3; ++i) {
      const auto a = plain.step(), b = checkpointed.step();
      worst = std::max(worst, std::abs(a.loss - b.loss) / std::abs(a.loss));
      peakPlain = a.features[symtune::Feature::PeakMemory];
      peakCheckpointed = b.features[symtune::Feature::PeakMemory];
    }
    c.details[entry.name] = {{"max_rel_loss_dev", worst},
                             {"peak_bytes", peakPlain},
                             {"peak_bytes_checkpointed", peakCheckpointed}};
    c.expect(worst < 1e-4, entry.name + ": checkpointed losses match");
  }
  return c;
}

Check symugenCapturesOnCuda() {
  Check c;
  const torch::Device cuda(torch::kCUDA, 0);
  auto zoo = symtune::buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
  zoo.module.to(cuda);
  symtune::Batch batch = zoo.data->batch(0);
  for (auto& in : batch.inputs)
    in = in.toTensor().to(cuda);
  const auto target = batch.target.to(cuda);
  symtune::SyMuGen gen(zoo.module);
  auto step = gen.captureStep(batch.inputs, [&](const c10::IValue& out) {
    return torch::nn::functional::cross_entropy(out.toTensor(), target);
  });
  int linked = 0;
  for (const auto& n : step.graph.nodes())
    linked += n.side == symtune::GraphSide::Backward && n.forward.valid();
  c.details["backward_nodes"] = step.graph.countNodes(symtune::GraphSide::Backward);
  c.details["linked"] = linked;
  c.expect(linked > 0, "autograd nodes linked to forward ops on CUDA");
  step.loss.backward();
  return c;
}

Check memoryTrackerAgreesWithCachingAllocator() {
  Check c;
  const torch::Device cuda(torch::kCUDA, 0);
  auto zoo = symtune::buildZooModel("dynamic_resnet", {"ci", 0, 64});
  zoo.module.to(cuda);
  symtune::Batch batch = zoo.data->batch(0);
  for (auto& in : batch.inputs)
    in = in.toTensor().to(cuda);
  const auto target = batch.target.to(cuda);
  torch::cuda::synchronize();
  symtune::MemoryTracker tracker;
  namespace alloc = c10::cuda::CUDACachingAllocator;
  alloc::resetPeakStats(0);
  const int64_t before = alloc::getDeviceStats(0).allocated_bytes[0].current;
  {
    auto active = tracker.activate();
    tracker.resetPeak();
    torch::nn::functional::cross_entropy(zoo.module.forward(batch.inputs).toTensor(), target)
        .backward();
    torch::cuda::synchronize();
  }
  const double tracked = static_cast<double>(tracker.counters(c10::DeviceType::CUDA).peak);
  const double independent =
      static_cast<double>(alloc::getDeviceStats(0).allocated_bytes[0].peak - before);
  c.details["tracker_peak_bytes"] = tracked;
  c.details["caching_allocator_peak_bytes"] = independent;
  c.expect(independent > 0 && std::abs(tracked - independent) <= 0.05 * independent,
           "step peak within 5 % of the caching allocator's");
  return c;
}

Check gradientMonitorOnCuda() {
  Check c;
  const torch::Device cuda(torch::kCUDA, 0);
  auto a = torch::ones({256}, torch::TensorOptions().device(cuda).requires_grad(true));
  auto b = torch::ones({3, 3}, torch::TensorOptions().device(cuda).requires_grad(true));
  symtune::GradientMonitor monitor({{"a", a}, {"b", b}});
  monitor.beginStep();
  auto mask = torch::ones({3, 3}, cuda);
  mask[1][1] = std::numeric_limits<float>::quiet_NaN();
  ((a * 2).sum() + (b * mask).sum()).backward();
  c.expect(monitor.stats()[0].nanCount == 0 && monitor.stats()[1].nanCount == 1,
           "planted NaN counted in the right parameter");
  c.expect(std::abs(monitor.stats()[0].norm - 32.0) < 1e-4, "norm of a 256-vector of twos");
  return c;
}

// Per-node telemetry on CUDA: backward runs on the autograd engine's device thread, so the
// attribution by sequence number and the thread buffers are what is checked; ops get CUDA event
// times; the step's features still come out.
Check perNodeTelemetryOnCuda() {
  Check c;
  symtune::Session s;
  s.name = "per-node cuda";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.run.device = "cuda";
  symtune::Trainer trainer(s);
  trainer.setTelemetry(symtune::Telemetry::PerNode);
  trainer.step();
  const symtune::StepResult r = trainer.step();
  const symtune::Graph& graph = trainer.staticGraph();
  int convs = 0, convsWithBackward = 0, withDeviceTime = 0;
  double device = 0;
  for (const auto& n : r.nodes->nodes) {
    if (graph.node(n.node).kind == "aten::conv2d") {
      ++convs;
      convsWithBackward += n.backwardCalls > 0;
    }
    if (n.forwardDeviceSeconds) {
      ++withDeviceTime;
      device += *n.forwardDeviceSeconds + n.backwardDeviceSeconds.value_or(0.0);
    }
  }
  const double modelSeconds =
      r.features[symtune::Feature::ForwardTime] + r.features[symtune::Feature::BackwardTime];
  c.details["nodes"] = r.nodes->nodes.size();
  c.details["convs"] = convs;
  c.details["convs_with_backward"] = convsWithBackward;
  c.details["nodes_with_device_time"] = withDeviceTime;
  c.details["device_seconds"] = device;
  c.details["attributed_s"] = r.nodes->attributedSeconds;
  c.details["forward_backward_s"] = modelSeconds;
  c.details["peak_memory_bytes"] = r.features[symtune::Feature::PeakMemory];
  c.expect(convs > 0 && convsWithBackward == convs,
           "every conv's backward (autograd device thread) attributed to it");
  c.expect(withDeviceTime > 0 && device > 0,
           "device times on the nodes (CUPTI's, or CUDA events')");
  c.expect(r.features[symtune::Feature::PeakMemory] > 0, "step peak memory on CUDA");
  return c;
}

}  // namespace

int main() {
  json out = {{"torch", TORCH_VERSION}, {"cuda_available", torch::cuda::is_available()}};
  if (!torch::cuda::is_available()) {
    out["skipped"] = "no CUDA device: nothing checked";
    std::cout << out.dump(2) << std::endl;
    return 77;
  }
  out["device"] = at::cuda::getCurrentDeviceProperties()->name;
  bool ok = true;
  const std::vector<std::pair<const char*, std::function<Check()>>> checks = {
      {"grad_stats_matches_cpu", gradStatsMatchesCpu},
      {"trainer_learns_on_cuda", trainerLearnsOnCuda},
      {"symugen_captures_on_cuda", symugenCapturesOnCuda},
      {"zoo_models_and_checkpointing_on_cuda", zooModelsAndCheckpointingOnCuda},
      {"memory_tracker_agrees_with_caching_allocator", memoryTrackerAgreesWithCachingAllocator},
      {"gradient_monitor_on_cuda", gradientMonitorOnCuda},
      {"per_node_telemetry_on_cuda", perNodeTelemetryOnCuda},
  };
  for (const auto& [name, run] : checks) {
    Check c;
    try {
      c = run();
    } catch (const std::exception& e) {
      c.expect(false, std::string("threw: ") + symtune::oneLine(e));
    }
    c.details["passed"] = c.ok;
    out["checks"][name] = c.details;
    ok = ok && c.ok;
  }
  out["passed"] = ok;
  std::cout << out.dump(2) << std::endl;
  return ok ? 0 : 1;
}
