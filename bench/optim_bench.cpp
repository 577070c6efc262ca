// symtune-bench-optim: the fused optimizer step against torch::optim's on a zoo model's
// parameters, side by side in one process, and against this machine's memory bandwidth.
// Prints JSON.
//   symtune-bench-optim [--model dynamic_resnet] [--preset cpu] [--rounds 50] [--optimizer adamw]
//                       [--device cpu|cuda]
//
// Each round steps torch::optim's optimizer and the fused one once each (alternating which goes
// first) on the same gradients, over their own copies of the parameters; the figures are medians
// over rounds. The step's traffic is what it must read and write: Adam reads p, g, m, v and
// writes p, m, v (7 numbers per element), SGD with momentum reads p, g, buf and writes p, buf.
// Bandwidth is a STREAM-style triad (a = b + 3 c with at::add_out: 3 numbers per element) on the
// same threads, over 3 × 128 MiB and 3 × 1 GiB arrays; the higher figure is the one the step is
// compared with.

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <string>

#include "bench_common.h"
#include "symtune/kernels/cpu_capability.h"
#include "symtune/kernels/fused_optimizers.h"
#include "symtune/zoo/model_zoo.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of `repeats` triads over arrays of `n` floats: bytes moved per second. ATen's add
// (a = b + 3 c) is vectorized for the CPU's widest instructions and parallel, so the figure is
// the memory's, not a scalar loop's.
double triadBandwidth(int64_t n, int repeats) {
  torch::Tensor a = torch::empty({n}), b = torch::ones({n}), c = torch::ones({n});
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now();
    at::add_out(a, b, c, 3);
    best = std::max(best, 3.0 * 4.0 * static_cast<double>(n) / (now() - t0));
  }
  return best;
}

// The same on a CUDA device: best of `repeats`.
double cudaTriadBandwidth(int64_t n, int repeats) {
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  torch::Tensor a = torch::empty({n}, opts), b = torch::ones({n}, opts), c = torch::ones({n}, opts);
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    torch::cuda::synchronize();
    const double t0 = now();
    at::add_out(a, b, c, 3);
    torch::cuda::synchronize();
    best = std::max(best, 3.0 * 4.0 * static_cast<double>(n) / (now() - t0));
  }
  return best;
}

std::unique_ptr<torch::optim::Optimizer> make(const std::string& name, bool fused,
                                              const std::vector<torch::Tensor>& params) {
  using namespace torch::optim;
  if (name == "sgd") {
    auto o = SGDOptions(0.01).momentum(0.9).weight_decay(1e-4);
    if (fused)
      return std::make_unique<symtune::optim::FusedSGD>(params, o);
    return std::make_unique<SGD>(params, o);
  }
  if (name == "adam") {
    auto o = AdamOptions(1e-3).weight_decay(1e-4);
    if (fused)
      return std::make_unique<symtune::optim::FusedAdam>(params, o);
    return std::make_unique<Adam>(params, o);
  }
  auto o = AdamWOptions(1e-3).weight_decay(1e-2);
  if (fused)
    return std::make_unique<symtune::optim::FusedAdamW>(params, o);
  return std::make_unique<AdamW>(params, o);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "dynamic_resnet", preset = "cpu", optimizer = "adamw", deviceName = "cpu";
  int rounds = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool hasValue = i + 1 < argc;
    if (a == "--model" && hasValue) {
      model = argv[++i];
    } else if (a == "--preset" && hasValue) {
      preset = argv[++i];
    } else if (a == "--rounds" && hasValue) {
      rounds =
          static_cast<int>(symtune::bench::wholeNumberArg("symtune-bench-optim", a, argv[++i]));
    } else if (a == "--optimizer" && hasValue) {
      optimizer = argv[++i];
    } else if (a == "--device" && hasValue) {
      deviceName = argv[++i];
    } else {
      std::cerr << "usage: symtune-bench-optim [--model NAME] [--preset P] [--rounds N] "
                   "[--optimizer adamw|adam|sgd] [--device cpu|cuda]\n";
      return 2;
    }
  }
  const bool cuda = deviceName == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::cerr << "symtune-bench-optim: no CUDA device\n";
    return 2;
  }
  const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
  torch::NoGradGuard noGrad;
  symtune::ZooOptions zooOptions;
  zooOptions.preset = preset;
  const symtune::ZooModel zoo = symtune::buildZooModel(model, zooOptions);
  std::vector<torch::Tensor> reference, fused;
  int64_t elements = 0;
  for (const auto& p : zoo.module.parameters()) {
    reference.push_back(p.detach().to(device).clone().requires_grad_(true));
    fused.push_back(p.detach().to(device).clone().requires_grad_(true));
    elements += p.numel();
  }
  torch::manual_seed(0);
  for (size_t i = 0; i < reference.size(); ++i) {
    const auto g = torch::randn_like(reference[i]) * 1e-2;
    reference[i].mutable_grad() = g.clone();
    fused[i].mutable_grad() = g.clone();
  }
  auto referenceOpt = make(optimizer, false, reference);
  auto fusedOpt = make(optimizer, true, fused);
  // Warm-up: the first step allocates the state.
  referenceOpt->step();
  fusedOpt->step();

  std::vector<double> referenceSeconds, fusedSeconds, ratios;
  for (int r = 0; r < rounds; ++r) {
    double tr = 0, tf = 0;
    auto timeOne = [cuda](torch::optim::Optimizer& o) {
      if (cuda)
        torch::cuda::synchronize();
      const double t0 = now();
      o.step();
      if (cuda)
        torch::cuda::synchronize();
      return now() - t0;
    };
    if (r % 2 == 0) {
      tr = timeOne(*referenceOpt);
      tf = timeOne(*fusedOpt);
    } else {
      tf = timeOne(*fusedOpt);
      tr = timeOne(*referenceOpt);
    }
    referenceSeconds.push_back(tr);
    fusedSeconds.push_back(tf);
    ratios.push_back(tr / tf);
  }
  double maxDiff = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const auto x = reference[i].detach().to(torch::kDouble);
    const auto y = fused[i].detach().to(torch::kDouble);
    // Against the tensor's largest entry (rounding differences, not near-zero elements).
    maxDiff = std::max(maxDiff, ((x - y).abs().max() / (x.abs().max() + 1e-30)).item<double>());
  }

  const double numbersPerElement = optimizer == "sgd" ? 5.0 : 7.0;
  const double bytes = numbersPerElement * 4.0 * static_cast<double>(elements);
  const double fusedMedian = symtune::bench::median(fusedSeconds);
  // Two sizes: 3 × 128 MiB and 3 × 1 GiB (beyond any last-level cache: this machine's L3 is
  // 480 MiB, shared). The step is held to the higher of the two figures.
  const double smallTriad =
      cuda ? cudaTriadBandwidth(int64_t{1} << 25, 10) : triadBandwidth(int64_t{1} << 25, 10);
  const double largeTriad =
      cuda ? cudaTriadBandwidth(int64_t{1} << 28, 5) : triadBandwidth(int64_t{1} << 28, 5);
  const double bandwidth = std::max(smallTriad, largeTriad);
  const double achieved = bytes / fusedMedian;
  nlohmann::ordered_json out = {
      {"bench", "optim"},
      {"machine", symtune::bench::cpuModel()},
      {"device", deviceName},
      {"threads", at::get_num_threads()},
      {"cpu_kernels", symtune::kernels::cpuCapability()},
      {"model", model + " (" + preset + ")"},
      {"optimizer", optimizer},
      {"tensors", reference.size()},
      {"elements", elements},
      {"rounds", rounds},
      {"torch_optim_s", symtune::bench::summary(referenceSeconds)},
      {"fused_s", symtune::bench::summary(fusedSeconds)},
      {"speedup", symtune::bench::median(ratios)},
      {"step_bytes", bytes},
      {"fused_bytes_per_s", achieved},
      {"triad_bytes_per_s", bandwidth},
      {"triad_3x128MiB_bytes_per_s", smallTriad},
      {"triad_3x1GiB_bytes_per_s", largeTriad},
      {"fraction_of_triad_bandwidth", achieved / bandwidth},
      {"max_relative_difference", maxDiff},
  };
  std::cout << out.dump(2) << std::endl;
  return 0;
}
