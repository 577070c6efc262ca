// symtune-bench-kernels: fused ops against the ATen composition they replace, forward plus
// backward, side by side in one process. Prints JSON.
//   symtune-bench-kernels [--rounds 20] [--device cpu|cuda]
//
// bias_gelu: gelu(x + b) with x of a Transformer's feed-forward activations ([tokens, 4 × width])
// and b its bias, then backward of a fixed upstream gradient into x and b; the composition is
// torch::gelu(x + b) through autograd. Each round times both (alternating which goes first);
// the figures are medians over rounds.
//
// add_layer_norm and bias_dropout_add: a Transformer block's residual paths, forward and backward.
//
// softmax_cross_entropy: logits of a language model's output layer against torch's
// cross_entropy (log_softmax + nll_loss), forward and backward.
//
// gru_cell: one time step of a GRU's gates and its length mask ([batch, 3 × hidden] input and
// hidden projections, the [batch, hidden] state, a third of the rows past their length), forward
// and backward, against the gates written out (sigmoid, tanh, the blend, torch::where).
//
// rms_clamp_ and clip_grad_norm_: the gradients of a Transformer's layers (per layer: attention
// in and out projections, two feed-forward matrices, their biases, two norms' weights and
// biases), every gradient clamped to its own RMS — the gradient_steering rule, written in ATen
// as t = g.pow(2).mean().sqrt(); g.clamp_(-t, t) per tensor — and global-norm clipping against
// what torch::nn::utils::clip_grad_norm_ runs (a norm per tensor, the norm of the norms, a
// multiplication per tensor).

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <string>

#include "bench_common.h"
#include "symtune/kernels/add_layer_norm.h"
#include "symtune/kernels/bias_dropout_add.h"
#include "symtune/kernels/bias_gelu.h"
#include "symtune/kernels/cpu_capability.h"
#include "symtune/kernels/grad_clip.h"
#include "symtune/kernels/gru_cell.h"
#include "symtune/kernels/softmax_cross_entropy.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// `rounds` side-by-side timings of run(true) (the fused op) and run(false) (the composition),
// alternating which goes first, after one warm-up of each: the case's JSON with medians.
nlohmann::ordered_json sideBySide(int rounds, const std::function<double(bool fused)>& run,
                                  nlohmann::ordered_json info) {
  run(true);
  run(false);
  std::vector<double> fusedSeconds, atenSeconds, ratios;
  for (int r = 0; r < rounds; ++r) {
    const bool fusedFirst = r % 2 == 0;
    const double first = run(fusedFirst), second = run(!fusedFirst);
    const double fused = fusedFirst ? first : second, aten = fusedFirst ? second : first;
    fusedSeconds.push_back(fused);
    atenSeconds.push_back(aten);
    ratios.push_back(aten / fused);
  }
  info["aten_s"] = symtune::bench::summary(atenSeconds);
  info["fused_s"] = symtune::bench::summary(fusedSeconds);
  info["speedup"] = symtune::bench::median(ratios);
  return info;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20;
  std::string deviceName = "cpu";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds =
          static_cast<int>(symtune::bench::wholeNumberArg("symtune-bench-kernels", a, argv[++i]));
    } else if (a == "--device" && i + 1 < argc) {
      deviceName = argv[++i];
    } else {
      std::cerr << "usage: symtune-bench-kernels [--rounds N] [--device cpu|cuda]\n";
      return 2;
    }
  }
  const bool cuda = deviceName == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::cerr << "symtune-bench-kernels: no CUDA device\n";
    return 2;
  }
  const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
  auto sync = [cuda] {
    if (cuda)
      torch::cuda::synchronize();
  };
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  // Feed-forward activations: [tokens, 4 × width] of a small and a base-sized Transformer.
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      cuda ? std::vector<std::pair<int64_t, int64_t>>{{8192, 3072}, {16384, 4096}}
           : std::vector<std::pair<int64_t, int64_t>>{{2048, 512}, {2048, 3072}};
  for (const auto& [tokens, features] : shapes) {
    for (const char* approximate : {"none", "tanh"}) {
      torch::manual_seed(0);
      const auto x0 = torch::randn({tokens, features}, torch::TensorOptions().device(device));
      const auto b0 = torch::randn({features}, torch::TensorOptions().device(device));
      const auto upstream = torch::randn_like(x0);
      auto run = [&](bool fused) {
        auto x = x0.detach().clone().requires_grad_(true);
        auto b = b0.detach().clone().requires_grad_(true);
        sync();
        const double t0 = now();
        const auto y =
            fused ? symtune::kernels::biasGelu(x, b, approximate) : torch::gelu(x + b, approximate);
        y.backward(upstream);
        sync();
        return now() - t0;
      };
      cases.push_back(sideBySide(
          rounds, run,
          {{"op", "bias_gelu"}, {"shape", {tokens, features}}, {"approximate", approximate}}));
    }
  }
  // add_layer_norm: a Transformer block's residual add and layer norm, [tokens, width], forward
  // and backward (a loss on the output) against x + r followed by torch::layer_norm.
  for (const auto& [tokens, width] : cuda ? std::vector<std::pair<int64_t, int64_t>>{{16384, 1024}}
                                          : std::vector<std::pair<int64_t, int64_t>>{{4096, 768}}) {
    torch::manual_seed(0);
    const auto o = torch::TensorOptions().device(device);
    const auto x0 = torch::randn({tokens, width}, o), r0 = torch::randn({tokens, width}, o);
    const auto w0 = torch::randn({width}, o), b0 = torch::randn({width}, o);
    const auto upstream = torch::randn({tokens, width}, o);
    auto run = [&](bool fused) {
      auto x = x0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true);
      auto w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
      sync();
      const double t0 = now();
      const auto out = fused ? std::get<0>(symtune::kernels::addLayerNorm(x, r, w, b, 1e-5))
                             : torch::layer_norm(x + r, {width}, w, b, 1e-5);
      out.backward(upstream);
      sync();
      return now() - t0;
    };
    cases.push_back(
        sideBySide(rounds, run, {{"op", "add_layer_norm"}, {"shape", {tokens, width}}}));
  }

  // bias_dropout_add: the end of a Transformer sublayer, r + dropout(x + b, 0.1), [tokens, width],
  // forward and backward into x, b and r against the same through torch::dropout (which keeps a
  // mask for its backward; the fused op recomputes its mask from a seed).
  for (const auto& [tokens, width] : cuda ? std::vector<std::pair<int64_t, int64_t>>{{16384, 1024}}
                                          : std::vector<std::pair<int64_t, int64_t>>{{4096, 768}}) {
    torch::manual_seed(0);
    const auto o = torch::TensorOptions().device(device);
    const auto x0 = torch::randn({tokens, width}, o), r0 = torch::randn({tokens, width}, o);
    const auto b0 = torch::randn({width}, o);
    const auto upstream = torch::randn({tokens, width}, o);
    auto run = [&](bool fused) {
      auto x = x0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true);
      auto b = b0.clone().requires_grad_(true);
      sync();
      const double t0 = now();
      const auto out = fused ? symtune::kernels::biasDropoutAdd(x, b, r, 0.1)
                             : r + torch::dropout(x + b, 0.1, true);
      out.backward(upstream);
      sync();
      return now() - t0;
    };
    cases.push_back(sideBySide(
        rounds, run, {{"op", "bias_dropout_add"}, {"shape", {tokens, width}}, {"p", 0.1}}));
  }

  // softmax_cross_entropy: a language model's output layer, [tokens, vocabulary], every 8th
  // token ignored (padding), forward and backward against torch's cross_entropy.
  for (const auto& [tokens, vocabulary] :
       cuda ? std::vector<std::pair<int64_t, int64_t>>{{8192, 32000}}
            : std::vector<std::pair<int64_t, int64_t>>{{2048, 1000}, {512, 32000}}) {
    torch::manual_seed(0);
    const auto logits0 = torch::randn({tokens, vocabulary}, torch::TensorOptions().device(device));
    auto target = torch::randint(vocabulary, {tokens},
                                 torch::TensorOptions().dtype(torch::kLong).device(device));
    target.index_put_({torch::arange(0, tokens, 8, target.options())}, -100);
    auto run = [&](bool fused) {
      auto logits = logits0.detach().clone().requires_grad_(true);
      sync();
      const double t0 = now();
      const auto loss = fused ? symtune::kernels::softmaxCrossEntropy(logits, target)
                              : torch::nn::functional::cross_entropy(logits, target);
      loss.backward();
      sync();
      return now() - t0;
    };
    cases.push_back(sideBySide(rounds, run,
                               {{"op", "softmax_cross_entropy"}, {"shape", {tokens, vocabulary}}}));
  }

  // gru_cell: the tagger's cpu preset (32 sentences, hidden 256) and a wider one.
  for (const auto& [batch, hidden] :
       cuda ? std::vector<std::pair<int64_t, int64_t>>{{128, 1024}}
            : std::vector<std::pair<int64_t, int64_t>>{{32, 256}, {128, 1024}}) {
    torch::manual_seed(0);
    const auto o = torch::TensorOptions().device(device);
    const auto in0 = torch::randn({batch, 3 * hidden}, o),
               hid0 = torch::randn({batch, 3 * hidden}, o);
    const auto state0 = torch::randn({batch, hidden}, o);
    const auto keep = (torch::arange(batch, o.dtype(torch::kLong)) % 3 != 1).unsqueeze(1);
    const auto upstream = torch::randn({batch, hidden}, o);
    auto run = [&](bool fused) {
      auto in = in0.clone().requires_grad_(true), hid = hid0.clone().requires_grad_(true);
      auto state = state0.clone().requires_grad_(true);
      sync();
      const double t0 = now();
      torch::Tensor out;
      if (fused) {
        out = symtune::kernels::gruCell(in, hid, state, keep);
      } else {
        const auto r = torch::sigmoid(in.slice(1, 0, hidden) + hid.slice(1, 0, hidden));
        const auto z =
            torch::sigmoid(in.slice(1, hidden, 2 * hidden) + hid.slice(1, hidden, 2 * hidden));
        const auto n = torch::tanh(in.slice(1, 2 * hidden) + r * hid.slice(1, 2 * hidden));
        out = torch::where(keep, (1 - z) * n + z * state, state);
      }
      out.backward(upstream);
      sync();
      return now() - t0;
    };
    cases.push_back(sideBySide(rounds, run,
                               {{"op", "gru_cell"}, {"shape", {batch, hidden}}, {"masked", true}}));
  }

  // A Transformer's gradients: `layers` layers of width `width`.
  const int64_t layers = cuda ? 24 : 4, width = cuda ? 1024 : 512;
  std::vector<torch::Tensor> gradients;
  for (int64_t l = 0; l < layers; ++l) {
    const auto o = torch::TensorOptions().device(device);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{3 * width, width},
                                                               {3 * width},
                                                               {width, width},
                                                               {width},
                                                               {4 * width, width},
                                                               {4 * width},
                                                               {width, 4 * width},
                                                               {width},
                                                               {width},
                                                               {width},
                                                               {width},
                                                               {width}})
      gradients.push_back(torch::randn(shape, o));
  }
  int64_t elements = 0;
  for (const auto& g : gradients)
    elements += g.numel();
  auto copies = [&] {
    std::vector<torch::Tensor> c;
    for (const auto& g : gradients)
      c.push_back(g.clone());
    return c;
  };
  auto timeRounds = [&](const std::function<void(std::vector<torch::Tensor>&)>& fused,
                        const std::function<void(std::vector<torch::Tensor>&)>& aten,
                        const char* name) {
    std::vector<double> fusedSeconds, atenSeconds, ratios;
    for (int r = -1; r < rounds; ++r) {  // round -1 warms up
      auto a = copies(), b = copies();
      auto time = [&](const std::function<void(std::vector<torch::Tensor>&)>& f,
                      std::vector<torch::Tensor>& gs) {
        sync();
        const double t0 = now();
        f(gs);
        sync();
        return now() - t0;
      };
      double tf = 0, ta = 0;
      if (r % 2 == 0) {
        tf = time(fused, a);
        ta = time(aten, b);
      } else {
        ta = time(aten, b);
        tf = time(fused, a);
      }
      if (r < 0)
        continue;
      fusedSeconds.push_back(tf);
      atenSeconds.push_back(ta);
      ratios.push_back(ta / tf);
    }
    cases.push_back({{"op", name},
                     {"tensors", gradients.size()},
                     {"elements", elements},
                     {"aten_s", symtune::bench::summary(atenSeconds)},
                     {"fused_s", symtune::bench::summary(fusedSeconds)},
                     {"speedup", symtune::bench::median(ratios)}});
  };
  timeRounds([](std::vector<torch::Tensor>& gs) { symtune::kernels::rmsClamp_(gs); },
             [](std::vector<torch::Tensor>& gs) {
               for (auto& g : gs) {
                 const auto t = g.pow(2).mean().sqrt();
                 g.clamp_(-t, t);
               }
             },
             "rms_clamp_");
  timeRounds([](std::vector<torch::Tensor>& gs) { symtune::kernels::clipGradNorm_(gs, 1.0); },
             [](std::vector<torch::Tensor>& gs) {
               // What torch::nn::utils::clip_grad_norm_ runs, on the gradients themselves.
               std::vector<torch::Tensor> norms;
               for (const auto& g : gs)
                 norms.push_back(g.norm());
               const auto coefficient = (1.0 / (torch::stack(norms).norm() + 1e-6)).clamp_max(1.0);
               for (auto& g : gs)
                 g.mul_(coefficient);
             },
             "clip_grad_norm_");

  nlohmann::ordered_json out = {{"bench", "kernels"},
                                {"machine", symtune::bench::cpuModel()},
                                {"device", deviceName},
                                {"threads", at::get_num_threads()},
                                {"cpu_kernels", symtune::kernels::cpuCapability()},
                                {"rounds", rounds},
                                {"cases", cases}};
  std::cout << out.dump(2) << std::endl;
  return 0;
}
