// symtune-bench-lean-chain: how low a leaner convolution block could take early exit's step peak
// (the `cpu` preset's shapes), against the ATen composition, side by side in one process on the
// same batch. Prints JSON.
//   symtune-bench-lean-chain [--unsure N] [--rounds R] [--cpu-memory system|retain]
//
// Early exit's stages are chains of ConvBnRelu blocks: conv2d, batch_norm (training), relu. As
// ATen runs them each block keeps two activations for its backward: the convolution's output
// (batch norm's input) and the ReLU's output (the ReLU's own, and the next convolution's input).
// The lean chain keeps one: an op that runs a block's batch norm and ReLU and the next block's
// convolution keeps the batch norm's input and statistics only, and its backward makes the
// convolution's input again from them (one pass, x * scale + shift clamped at zero) before the
// convolution's backward; a stage's last batch norm and ReLU keep their input alone likewise.
// This is the "layer whose backward holds less" that docs/remat.md ("Why early exit fits nothing
// at 0.5") asked for, written by hand to measure how far it gets, not a candidate of the binder.
// Two steps further: backwards in place (the convolution's input freed before its gradient is
// computed, the ReLU's mask and the batch norm's backward written over the gradient: the lean
// block is then symtune::kernels::batchNormReluConv2d), and the first stage as one op that keeps
// the images and its statistics only and runs itself again in its backward (StageByHand, on the
// kernel's per-element steps).
//
// The network is early exit's at the `cpu` preset (32 images of 3 x 32 x 32; stages of 16, 48 and
// 96 channels, the second and third at stride 2; a head of global average pooling and a linear
// layer after stages 1 and 3): stages 2 and 3 run on the `--unsure` images (default all 32, where
// the ATen step peaks at what `symtune-bench` measures for `script`'s median step, 22.6 MB), the
// second head's logits are added into the first's at those rows, and the loss is cross-entropy.
// Variants, each with its own copy of the same parameters:
//   aten, aten-cl                the composition on NCHW and on channels-last tensors
//   lean, lean-cl                the lean chain, per stage
//   lean-cl-joined               stages 2 and 3 as one lean chain (stage 2's output not kept)
//   lean-cl-joined-stage1-again  and stage 1 run again in its backward (checkpointed: only the
//                                images kept)
//   lean-cl-joined-in-place      lean-cl-joined with its backwards in place
//   lean-cl-joined-in-place-stage1-by-hand
//                                and stage 1 as StageByHand
// For each: the step's peak (live CPU bytes above the step's start, counted by the engine's
// allocation counter), the live bytes at the forward's end, the step's time (forward and
// backward), and the largest difference of its parameters' gradients from ATen's on the same
// layout (aten-cl's: from aten's), relative to each gradient's largest value. Medians over rounds;
// the variants run in turn within a round.

#include <torch/torch.h>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "symtune/kernels/batch_norm_relu_conv.h"
#include "symtune/runtime/cpu_memory.h"
#include "symtune/telemetry/memory_tracker.h"

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kMomentum = 0.1;
constexpr double kEps = 1e-5;

struct Block {
  Tensor weight, gamma, beta;      // differentiable
  Tensor runningMean, runningVar;  // buffers
  int64_t stride = 1;
};

// A batch norm's scale and shift per channel in training, from the statistics it measured.
std::pair<Tensor, Tensor> scaleAndShift(const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                        const Tensor& invstd) {
  Tensor scale = (gamma * invstd).contiguous();
  Tensor shift = (beta - mean * scale).contiguous();
  return {scale, shift};
}

// f(i, scale, shift) for every element i of `y` ([N, C, H, W], NCHW or channels-last) with its
// channel's scale and shift, on ATen's threads. The two are passed by value so that the compiler
// need not load them again after each store (they are floats, as the outputs are).
template <typename F>
void forEachElement(const Tensor& y, const Tensor& scale, const Tensor& shift, F f) {
  const int64_t channels = y.size(1), plane = y.size(2) * y.size(3), images = y.size(0);
  const float *sc = scale.const_data_ptr<float>(), *sh = shift.const_data_ptr<float>();
  if (!y.is_contiguous() && y.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    at::parallel_for(0, images * plane, 256, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p)
        for (int64_t c = 0; c < channels; ++c)
          f(p * channels + c, sc[c], sh[c]);
    });
  } else {
    TORCH_INTERNAL_ASSERT(y.is_contiguous());
    at::parallel_for(0, images * channels, 1, [&](int64_t begin, int64_t end) {
      for (int64_t nc = begin; nc < end; ++nc) {
        const float s = sc[nc % channels], h = sh[nc % channels];
        for (int64_t i = nc * plane; i < (nc + 1) * plane; ++i)
          f(i, s, h);
      }
    });
  }
}

// relu(y * scale + shift) per channel, in one pass: a batch norm in training with the statistics
// it measured, then its ReLU.
Tensor normalizedRelu(const Tensor& y, const Tensor& scale, const Tensor& shift) {
  Tensor out = at::empty_like(y);
  const float* in = y.const_data_ptr<float>();
  float* o = out.data_ptr<float>();
  forEachElement(y, scale, shift,
                 [in, o](int64_t i, float s, float h) { o[i] = std::max(in[i] * s + h, 0.0f); });
  return out;
}

// grad where out > 0, else 0 (the ReLU's backward from its output), in place; grad is made out's
// layout first.
Tensor maskedByRelu(Tensor grad, const Tensor& out) {
  grad = grad.contiguous(out.suggest_memory_format());
  float* g = grad.data_ptr<float>();
  const float* o = out.const_data_ptr<float>();
  at::parallel_for(0, grad.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      g[i] = o[i] > 0 ? g[i] : 0.0f;
  });
  return grad;
}

// `grad` to be written in place: itself when nothing else holds it and it has `format`, else a
// copy.
Tensor owned(Tensor grad, at::MemoryFormat format) {
  if (!grad.is_contiguous(format) || grad.is_view() || grad.use_count() != 1 ||
      grad.storage().use_count() != 1)
    return grad.clone(format);
  return grad;
}

// One block's batch norm and ReLU, then the next block's convolution: keeps the batch norm's
// input and statistics, not the convolution's input. (With backwards in place as well, this is
// symtune::kernels::batchNormReluConv2d.)
struct NormReluConv : torch::autograd::Function<NormReluConv> {
  static Tensor forward(AutogradContext* ctx, const Tensor& y, const Tensor& gamma,
                        const Tensor& beta, const Tensor& weight, Tensor runningMean,
                        Tensor runningVar, int64_t stride, bool again) {
    auto [normalized, mean, invstd] =
        at::native_batch_norm(y, gamma, beta, again ? Tensor() : runningMean,
                              again ? Tensor() : runningVar, true, kMomentum, kEps);
    normalized.relu_();
    Tensor out = at::conv2d(normalized, weight, {}, {stride, stride}, {1, 1});
    ctx->save_for_backward({y, gamma, beta, weight, mean, invstd});
    ctx->saved_data["stride"] = stride;
    return out;
  }
  // `grads` by reference, so that resetting its tensor frees it (CppNode passes its own list).
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const variable_list s = ctx->get_saved_variables();
    const Tensor &y = s[0], &gamma = s[1], &beta = s[2], &weight = s[3], &mean = s[4],
                 &invstd = s[5];
    const int64_t stride = ctx->saved_data["stride"].toInt();
    const auto [scale, shift] = scaleAndShift(gamma, beta, mean, invstd);
    Tensor input = normalizedRelu(y, scale, shift);
    auto [gradInput, gradWeight, unusedBias] =
        at::convolution_backward(grads[0], input, weight, std::nullopt, {stride, stride}, {1, 1},
                                 {1, 1}, false, {0, 0}, 1, {true, true, false});
    grads[0].reset();
    gradInput = maskedByRelu(std::move(gradInput), input);
    input.reset();
    auto [gradY, gradGamma, gradBeta] = at::native_batch_norm_backward(
        gradInput, y, gamma, {}, {}, mean, invstd, true, kEps, {true, true, true});
    return {gradY, gradGamma, gradBeta, gradWeight, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// A stage's last batch norm and ReLU: keeps the batch norm's input and statistics, not the output.
// `inPlace`: the backward masks and normalizes the incoming gradient in place (when nothing else
// holds it).
struct NormRelu : torch::autograd::Function<NormRelu> {
  static Tensor forward(AutogradContext* ctx, const Tensor& y, const Tensor& gamma,
                        const Tensor& beta, Tensor runningMean, Tensor runningVar, bool again,
                        bool inPlace) {
    auto [normalized, mean, invstd] =
        at::native_batch_norm(y, gamma, beta, again ? Tensor() : runningMean,
                              again ? Tensor() : runningVar, true, kMomentum, kEps);
    ctx->save_for_backward({y, gamma, beta, mean, invstd});
    ctx->saved_data["in_place"] = inPlace;
    return normalized.relu_();
  }
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const variable_list s = ctx->get_saved_variables();
    const Tensor &y = s[0], &gamma = s[1], &beta = s[2], &mean = s[3], &invstd = s[4];
    const auto [scale, shift] = scaleAndShift(gamma, beta, mean, invstd);
    if (ctx->saved_data["in_place"].toBool()) {
      Tensor grad = owned(std::move(grads[0]), y.suggest_memory_format());
      auto [gradGamma, gradBeta] =
          symtune::kernels::batchNormReluBackwardInPlace(grad, y, gamma, beta, mean, invstd);
      return {grad, gradGamma, gradBeta, Tensor(), Tensor(), Tensor(), Tensor()};
    }
    const Tensor grad =
        maskedByRelu(grads[0].clone(y.suggest_memory_format()), normalizedRelu(y, scale, shift));
    grads[0].reset();
    auto [gradY, gradGamma, gradBeta] = at::native_batch_norm_backward(
        grad, y, gamma, {}, {}, mean, invstd, true, kEps, {true, true, true});
    return {gradY, gradGamma, gradBeta, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// A first stage of two blocks whose input asks for no gradient (early exit's stage 1, on the
// images) as one op that keeps that input and its batch norms' statistics only, and whose
// backward runs the stage again and writes its gradients in place, holding three of the stage's
// activations at most: the block's batch-norm input made again and turned into the ReLU's output
// in place, the next convolution's output, the gradient. In order: the first convolution's output,
// normalized in place (r1); the second convolution's output (y2); the incoming gradient masked and
// through the second batch norm in place (y2 freed); the second convolution's backward (r1 and the
// gradient freed); the first convolution's output made once more (y1) for the first batch norm's
// backward, in place; the first convolution's weight gradient.
struct StageByHand : torch::autograd::Function<StageByHand> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w1,
                        const Tensor& gamma1, const Tensor& beta1, const Tensor& w2,
                        const Tensor& gamma2, const Tensor& beta2, Tensor runningMean1,
                        Tensor runningVar1, Tensor runningMean2, Tensor runningVar2,
                        int64_t stride1, int64_t stride2) {
    TORCH_CHECK(!x.requires_grad(), "StageByHand: a first stage: its input takes no gradient");
    auto [r1, mean1, invstd1] =
        at::native_batch_norm(at::conv2d(x, w1, {}, {stride1, stride1}, {1, 1}), gamma1, beta1,
                              runningMean1, runningVar1, true, kMomentum, kEps);
    r1.relu_();
    Tensor y2 = at::conv2d(r1, w2, {}, {stride2, stride2}, {1, 1});
    r1.reset();
    auto [out, mean2, invstd2] =
        at::native_batch_norm(y2, gamma2, beta2, runningMean2, runningVar2, true, kMomentum, kEps);
    ctx->save_for_backward(
        {x, w1, gamma1, beta1, w2, gamma2, beta2, mean1, invstd1, mean2, invstd2});
    ctx->saved_data["stride1"] = stride1;
    ctx->saved_data["stride2"] = stride2;
    return out.relu_();
  }
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const variable_list s = ctx->get_saved_variables();
    const Tensor &x = s[0], &w1 = s[1], &gamma1 = s[2], &beta1 = s[3], &w2 = s[4], &gamma2 = s[5],
                 &beta2 = s[6], &mean1 = s[7], &invstd1 = s[8], &mean2 = s[9], &invstd2 = s[10];
    const int64_t stride1 = ctx->saved_data["stride1"].toInt(),
                  stride2 = ctx->saved_data["stride2"].toInt();
    const auto format = x.suggest_memory_format();
    Tensor grad = owned(std::move(grads[0]), format);
    Tensor r1 = at::conv2d(x, w1, {}, {stride1, stride1}, {1, 1});
    symtune::kernels::batchNormReluInPlace(r1, gamma1, beta1, mean1, invstd1);
    Tensor y2 = at::conv2d(r1, w2, {}, {stride2, stride2}, {1, 1});
    auto [gradGamma2, gradBeta2] =
        symtune::kernels::batchNormReluBackwardInPlace(grad, y2, gamma2, beta2, mean2, invstd2);
    y2.reset();
    auto [gradR1, gradW2, unused] =
        at::convolution_backward(grad, r1, w2, std::nullopt, {stride2, stride2}, {1, 1}, {1, 1},
                                 false, {0, 0}, 1, {true, true, false});
    grad.reset();
    r1.reset();
    gradR1 = gradR1.contiguous(format);
    const Tensor y1 = at::conv2d(x, w1, {}, {stride1, stride1}, {1, 1});
    auto [gradGamma1, gradBeta1] =
        symtune::kernels::batchNormReluBackwardInPlace(gradR1, y1, gamma1, beta1, mean1, invstd1);
    auto [unusedX, gradW1, unusedBias] =
        at::convolution_backward(gradR1, x, w1, std::nullopt, {stride1, stride1}, {1, 1}, {1, 1},
                                 false, {0, 0}, 1, {false, true, false});
    return {Tensor(), gradW1,   gradGamma1, gradBeta1, gradW2,   gradGamma2, gradBeta2,
            Tensor(), Tensor(), Tensor(),   Tensor(),  Tensor(), Tensor()};
  }
};

Tensor conv(const Tensor& x, const Block& b) {
  return at::conv2d(x, b.weight, {}, {b.stride, b.stride}, {1, 1});
}

// How a chain's blocks run: as ATen runs them, lean, or lean with backwards in place.
enum class Blocks { aten, lean, leanInPlace };

// A chain of blocks; `again` (a recomputation) leaves the running statistics as they are.
Tensor chain(const Tensor& x, const std::vector<Block*>& blocks, Blocks how, bool again = false) {
  const auto mean = [again](const Block& b) { return again ? Tensor() : b.runningMean; };
  const auto var = [again](const Block& b) { return again ? Tensor() : b.runningVar; };
  if (how == Blocks::aten) {
    Tensor h = x;
    for (Block* b : blocks) {
      h = at::batch_norm(conv(h, *b), b->gamma, b->beta, mean(*b), var(*b), true, kMomentum, kEps,
                         true);
      h = at::relu(h);
    }
    return h;
  }
  const bool inPlace = how == Blocks::leanInPlace;
  Tensor y = conv(x, *blocks.front());
  for (size_t i = 1; i < blocks.size(); ++i) {
    const Block& before = *blocks[i - 1];
    const Tensor runningMean = again ? Tensor() : before.runningMean,
                 runningVar = again ? Tensor() : before.runningVar;
    const int64_t stride = blocks[i]->stride;
    y = inPlace ? symtune::kernels::batchNormReluConv2d(
                      y, before.gamma, before.beta, runningMean, runningVar, kMomentum, kEps,
                      blocks[i]->weight, {}, {stride, stride}, {1, 1}, {1, 1}, 1)
                : NormReluConv::apply(y, before.gamma, before.beta, blocks[i]->weight,
                                      before.runningMean, before.runningVar, stride, again);
  }
  const Block& last = *blocks.back();
  return NormRelu::apply(y, last.gamma, last.beta, last.runningMean, last.runningVar, again,
                         inPlace);
}

// A stage run without keeping anything and run again in the backward (checkpointing): keeps its
// input. `anchor` is one of the stage's parameters, so that the output asks for a gradient; the
// parameters' gradients come from the backward of the stage run again.
struct Recomputed : torch::autograd::Function<Recomputed> {
  using Run = std::function<Tensor(const Tensor& input, bool again)>;
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& anchor,
                        const Run* run) {
    (void)anchor;
    ctx->save_for_backward({input});
    ctx->saved_data["run"] = reinterpret_cast<int64_t>(run);
    return (*run)(input, false);  // autograd records nothing inside a Function's forward
  }
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    const Tensor input = ctx->get_saved_variables()[0];
    const auto* run = reinterpret_cast<const Run*>(ctx->saved_data["run"].toInt());
    torch::autograd::Edge root;
    {
      torch::AutoGradMode enabled(true);
      // The output's values are not needed, only where its gradient goes.
      root = torch::autograd::impl::gradient_edge((*run)(input, true));
    }
    torch::autograd::Engine::get_default_engine().execute({root}, {std::move(grads[0])}, false,
                                                          false, true);
    return {Tensor(), Tensor(), Tensor()};
  }
};

// Stage 1 as the other stages run, checkpointed (Recomputed), or StageByHand.
enum class Stage1 { chained, again, byHand };

struct Variant {
  std::string name;
  bool channelsLast = false;
  Blocks blocks = Blocks::aten;
  bool joined = false;  // stages 2 and 3 one chain
  Stage1 stage1 = Stage1::chained;
};

// Early exit at the `cpu` preset, its parameters drawn from `seed`.
class Net {
 public:
  Net(const Variant& v, uint64_t seed) : variant_(v) {
    torch::manual_seed(static_cast<int64_t>(seed));
    const int64_t widths[][3] = {{3, 16, 1},  {16, 16, 1}, {16, 48, 2},
                                 {48, 48, 1}, {48, 96, 2}, {96, 96, 1}};
    for (const auto& w : widths) {
      Block b;
      b.weight = torch::randn({w[1], w[0], 3, 3}) * std::sqrt(2.0 / static_cast<double>(w[0] * 9));
      if (v.channelsLast)
        b.weight = b.weight.contiguous(at::MemoryFormat::ChannelsLast);
      b.weight.set_requires_grad(true);
      b.gamma = torch::ones({w[1]}).requires_grad_();
      b.beta = torch::zeros({w[1]}).requires_grad_();
      b.runningMean = torch::zeros({w[1]});
      b.runningVar = torch::ones({w[1]});
      b.stride = w[2];
      blocks_.push_back(std::move(b));
    }
    head1_ = {(torch::randn({10, 16}) * 0.1).requires_grad_(), torch::zeros({10}).requires_grad_()};
    head2_ = {(torch::randn({10, 96}) * 0.1).requires_grad_(), torch::zeros({10}).requires_grad_()};
  }

  Net(const Net&) = delete;  // stage1_ holds `this`
  Net& operator=(const Net&) = delete;

  std::vector<Tensor> parameters() const {
    std::vector<Tensor> p{head1_[0], head1_[1], head2_[0], head2_[1]};
    for (const Block& b : blocks_)
      p.insert(p.end(), {b.weight, b.gamma, b.beta});
    return p;
  }

  Tensor forward(const Tensor& images, const Tensor& unsure) {
    const Blocks how = variant_.blocks;
    const Tensor x =
        variant_.channelsLast ? images.contiguous(at::MemoryFormat::ChannelsLast) : images;
    Tensor h;
    if (variant_.stage1 == Stage1::byHand) {
      const Block &a = blocks_[0], &b = blocks_[1];
      h = StageByHand::apply(x, a.weight, a.gamma, a.beta, b.weight, b.gamma, b.beta, a.runningMean,
                             a.runningVar, b.runningMean, b.runningVar, a.stride, b.stride);
    } else if (variant_.stage1 == Stage1::again) {
      h = Recomputed::apply(x, blocks_[0].weight, &stage1_);
    } else {
      h = chain(x, {&blocks_[0], &blocks_[1]}, how);
    }
    Tensor out = at::addmm(head1_[1], h.mean({2, 3}), head1_[0].t());
    if (unsure.numel() == 0)
      return out;
    Tensor g = h.index_select(0, unsure);
    h.reset();  // the evaluator frees a value after its last use: kept only where saved
    if (variant_.joined) {
      g = chain(g, {&blocks_[2], &blocks_[3], &blocks_[4], &blocks_[5]}, how);
    } else {
      g = chain(g, {&blocks_[2], &blocks_[3]}, how);
      g = chain(g, {&blocks_[4], &blocks_[5]}, how);
    }
    return out.index_add(0, unsure, at::addmm(head2_[1], g.mean({2, 3}), head2_[0].t()));
  }

 private:
  Variant variant_;
  std::vector<Block> blocks_;
  // Stage 1 for Recomputed: its first run keeps nothing (grad mode is off), the second runs as
  // the other stages.
  Recomputed::Run stage1_ = [this](const Tensor& input, bool again) {
    return chain(input, {&blocks_[0], &blocks_[1]}, again ? variant_.blocks : Blocks::aten, again);
  };
  std::vector<Tensor> head1_, head2_;
};

struct Samples {
  std::vector<double> peak, forwardEnd, seconds;
  double gradientDifference = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t unsureCount = 32;
  int rounds = 21;
  std::string cpuMemory = "system";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--unsure" && i + 1 < argc) {
      unsureCount = symtune::bench::wholeNumberArg("symtune-bench-lean-chain", a, argv[++i], 0);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = static_cast<int>(
          symtune::bench::wholeNumberArg("symtune-bench-lean-chain", a, argv[++i]));
    } else if (a == "--cpu-memory" && i + 1 < argc) {
      cpuMemory = argv[++i];
    } else {
      std::cerr << "usage: symtune-bench-lean-chain [--unsure N (0-32)] [--rounds R] "
                   "[--cpu-memory system|retain]\n";
      return 2;
    }
  }
  if (unsureCount < 0 || unsureCount > 32 || rounds < 1 ||
      (cpuMemory != "system" && cpuMemory != "retain")) {
    std::cerr << "symtune-bench-lean-chain: --unsure takes 0 to 32 images, --rounds at least 1, "
                 "--cpu-memory system or retain\n";
    return 2;
  }
  // The harness's --cpu-memory (Note [Freed memory kept] in symtune/runtime/cpu_memory.h): the
  // variants' speeds depend on how glibc hands freed memory back, their peaks do not.
  if (cpuMemory == "retain" && !symtune::keepFreedCpuMemory()) {
    std::cerr << "symtune-bench-lean-chain: --cpu-memory retain: the C library refused\n";
    return 1;
  }
  if (!symtune::CpuAllocationCounter::active()) {
    std::cerr << "symtune-bench-lean-chain: the CPU allocation counter could not be installed\n";
    return 1;
  }
  torch::manual_seed(1);
  const Tensor images = torch::randn({32, 3, 32, 32});
  const Tensor labels = torch::randint(0, 10, {32});
  const Tensor unsure = std::get<0>(torch::randperm(32).slice(0, 0, unsureCount).sort());

  const std::vector<Variant> variants{
      {"aten", false, Blocks::aten},
      {"aten-cl", true, Blocks::aten},
      {"lean", false, Blocks::lean},
      {"lean-cl", true, Blocks::lean},
      {"lean-cl-joined", true, Blocks::lean, true},
      {"lean-cl-joined-stage1-again", true, Blocks::lean, true, Stage1::again},
      {"lean-cl-joined-in-place", true, Blocks::leanInPlace, true},
      {"lean-cl-joined-in-place-stage1-by-hand", true, Blocks::leanInPlace, true, Stage1::byHand}};
  std::vector<std::unique_ptr<Net>> nets;
  for (const Variant& v : variants)
    nets.push_back(std::make_unique<Net>(v, 7));
  std::vector<Samples> samples(variants.size());
  // ATen's gradients at the first step, NCHW and channels-last (variants 0 and 1).
  std::vector<Tensor> aten, atenChannelsLast;
  // Round 0 in order (ATen's gradients first, the others checked against them); each timed round
  // in an order shuffled from a fixed seed: what runs before a step moves its time.
  std::vector<size_t> order(variants.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937 shuffler(7);
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms up
    if (round > 0)
      std::shuffle(order.begin(), order.end(), shuffler);
    for (const size_t i : order) {
      std::vector<Tensor> parameters = nets[i]->parameters();
      for (Tensor& p : parameters)
        p.mutable_grad() = Tensor();
      const int64_t start = symtune::CpuAllocationCounter::counters().current;
      symtune::CpuAllocationCounter::resetPeak();
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor loss = at::cross_entropy_loss(nets[i]->forward(images, unsure), labels);
      const int64_t forwardEnd = symtune::CpuAllocationCounter::counters().current;
      loss.backward();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int64_t peak = symtune::CpuAllocationCounter::counters().peak;
      if (round == 0) {
        // The same parameters and batch: gradients as ATen's on the same layout to rounding (and
        // ATen's channels-last ones as its NCHW ones).
        std::vector<Tensor>& own = variants[i].channelsLast ? atenChannelsLast : aten;
        const std::vector<Tensor>& against = i == 1 ? aten : own;
        const bool first = own.empty();
        for (size_t k = 0; k < parameters.size(); ++k) {
          const Tensor g = parameters[k].grad().contiguous();
          if (first)
            own.push_back(g.clone());
          const double scale = against[k].abs().max().item<double>();
          samples[i].gradientDifference =
              std::max(samples[i].gradientDifference,
                       (g - against[k]).abs().max().item<double>() / std::max(scale, 1e-30));
        }
        continue;
      }
      samples[i].peak.push_back(static_cast<double>(peak - start));
      samples[i].forwardEnd.push_back(static_cast<double>(forwardEnd - start));
      samples[i].seconds.push_back(seconds);
    }
  }

  using symtune::bench::median;
  nlohmann::ordered_json out;
  out["benchmark"] = "lean_chain";
  out["cpu"] = symtune::bench::cpuModel();
  out["threads"] = at::get_num_threads();
  out["unsure"] = unsureCount;
  out["rounds"] = rounds;
  out["cpu_memory"] = cpuMemory;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  const double atenPeak = median(samples[0].peak), atenSeconds = median(samples[0].seconds);
  for (size_t i = 0; i < variants.size(); ++i) {
    const Samples& s = samples[i];
    rows.push_back({{"variant", variants[i].name},
                    {"peak_bytes", median(s.peak)},
                    {"forward_end_bytes", median(s.forwardEnd)},
                    {"step_s", symtune::bench::summary(s.seconds)},
                    {"peak_over_aten", median(s.peak) / atenPeak},
                    {"throughput_over_aten", atenSeconds / median(s.seconds)},
                    {"gradient_max_relative_difference", s.gradientDifference}});
  }
  out["variants"] = std::move(rows);
  std::cout << out.dump(2) << "\n";
  return 0;
}
