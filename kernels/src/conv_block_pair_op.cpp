// symtune::kernels::convBlockPairAgain (symtune/kernels/conv_block_pair.h).

#include "symtune/kernels/conv_block_pair.h"

#include <array>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "once_differentiable.h"
#include "symtune/kernels/batch_norm_relu_conv.h"

namespace symtune::kernels {

namespace {

const char* const kOp = "symtune::conv_block_pair_again";

// Note [A block pair run again]
// Two convolution blocks in a row (conv2d, a training batch norm, ReLU; early exit's stages), as
// ATen runs them, keep four activations of the blocks' sizes for the backward: each batch norm's
// input and each ReLU's output. This op keeps its input (which whoever made it may keep anyway)
// and the batch norms' statistics, and in its backward runs the blocks again, holding three
// activations at most:
//   1. the first convolution's output, normalized and through the ReLU in place with the
//      statistics the forward measured (r1);
//   2. the second convolution's output (y2); the incoming gradient, masked by the second ReLU and
//      through the second batch norm's backward in place (batch_norm_relu_conv.h's step), after
//      which y2 is freed;
//   3. the second convolution's backward from r1 and that gradient, after which both are freed;
//   4. the first convolution's output once more (y1), for the first batch norm's backward in
//      place over the gradient of r1, after which y1 is freed; then the first convolution's
//      backward.
// Keeping the first convolution's output from 1 to 4 would save running it a third time, for a
// fourth activation at 3: on early exit it raised the step's peak from 10.9 to 12.0 MB (kept in
// the second stage) or 13.0 (in the first too), where the peak is the second stage's.
// The running statistics are updated by the forward only. The gradients are ATen's composition's
// to rounding (the in-place steps' per-channel sums are ATen's). Its price is two convolutions'
// forwards in the backward; on early exit's first stage it holds the step to 0.40 of ATen's peak
// with the lean blocks after it (docs/benchmarks.md, "Backwards in place, and stage 1 by hand").

// `grad`, to be written in place over `like`'s activation: itself when nothing else holds it and
// it has `like`'s strides, else a copy that has them. Strides, not a layout: with 1 × 1 pixels a
// tensor passes as contiguous and channels-last alike, with strides the in-place steps refuse
// (a flatten's gradient, (6, 1, 1, 1), against the activation's (6, 1, 6, 6)).
at::Tensor owned(at::Tensor grad, const at::Tensor& like) {
  if (grad.strides() != like.strides() || grad.is_view() || grad.use_count() != 1 ||
      grad.storage().use_count() != 1)
    return at::empty_like(like).copy_(grad);
  return grad;
}

at::Tensor convolve(const at::Tensor& x, const at::Tensor& weight, const ConvBlock& b) {
  return at::conv2d(x, weight, {}, b.stride, b.padding, b.dilation, b.groups);
}

std::tuple<at::Tensor, at::Tensor> convolutionBackward(const at::Tensor& grad,
                                                       const at::Tensor& input,
                                                       const at::Tensor& weight, const ConvBlock& b,
                                                       bool wantsInput) {
  auto [gradInput, gradWeight, unused] =
      at::convolution_backward(grad, input, weight, std::nullopt, b.stride, b.padding, b.dilation,
                               false, {0, 0}, b.groups, {wantsInput, true, false});
  return {gradInput, gradWeight};
}

void checkBlock(const at::Tensor& input, int64_t channels, const ConvBlock& b, const char* which) {
  const at::Tensor& w = b.weight;
  TORCH_CHECK(w.defined() && w.dim() == 4 && w.scalar_type() == input.scalar_type() &&
                  w.device() == input.device() && b.groups >= 1 && w.size(1) * b.groups == channels,
              kOp, ": the ", which, " block's convolution weight must be [out, ", channels,
              " / groups, kH, kW] of ", input.scalar_type(), " on the CPU");
  const auto vector = [&](const at::Tensor& t) {
    return t.defined() && t.dim() == 1 && t.size(0) == w.size(0) &&
           t.scalar_type() == input.scalar_type() && t.device() == input.device();
  };
  TORCH_CHECK(vector(b.bnWeight) && vector(b.bnBias), kOp, ": the ", which,
              " block's batch-norm weight and bias must be vectors of its ", w.size(0),
              " output channels");
  TORCH_CHECK(b.runningMean.defined() == b.runningVar.defined() &&
                  (!b.runningMean.defined() || (vector(b.runningMean) && vector(b.runningVar))),
              kOp, ": the ", which,
              " block's running statistics must be both vectors of its output channels, or "
              "neither");
  TORCH_CHECK(b.stride.size() == 2 && b.padding.size() == 2 && b.dilation.size() == 2, kOp,
              ": the ", which, " block's stride, padding and dilation must have two values each");
}

class ConvBlockPairFunction : public torch::autograd::Function<ConvBlockPairFunction> {
 public:
  // The blocks' tensors come as arguments (the ones autograd differentiates); `first` and
  // `second` carry the rest.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& w1, const at::Tensor& gamma1, const at::Tensor& beta1,
                            const at::Tensor& w2, const at::Tensor& gamma2, const at::Tensor& beta2,
                            const ConvBlock& first, const ConvBlock& second) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [r1, mean1, invstd1] =
        at::native_batch_norm(convolve(x, w1, first), gamma1, beta1, first.runningMean,
                              first.runningVar, true, first.momentum, first.eps);
    r1.relu_();
    at::Tensor y2 = convolve(r1, w2, second);
    r1.reset();
    auto [out, mean2, invstd2] =
        at::native_batch_norm(y2, gamma2, beta2, second.runningMean, second.runningVar, true,
                              second.momentum, second.eps);
    y2.reset();
    ctx->save_for_backward(
        {x, w1, gamma1, beta1, w2, gamma2, beta2, mean1, invstd1, mean2, invstd2});
    // The convolutions' arguments; the running statistics are the forward's business only.
    for (const auto& [key, block] : {std::pair{"first", &first}, std::pair{"second", &second}}) {
      ctx->saved_data[std::string(key) + ".stride"] = block->stride;
      ctx->saved_data[std::string(key) + ".padding"] = block->padding;
      ctx->saved_data[std::string(key) + ".dilation"] = block->dilation;
      ctx->saved_data[std::string(key) + ".groups"] = block->groups;
    }
    return out.relu_();
  }

  // `grads` by reference: the incoming gradient is written over and released (taken by value, the
  // autograd node's own list would keep it to the end).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list& grads) {
    refuseDoubleBackward("conv_block_pair");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w1 = saved[1], &gamma1 = saved[2], &beta1 = saved[3],
                     &w2 = saved[4], &gamma2 = saved[5], &beta2 = saved[6], &mean1 = saved[7],
                     &invstd1 = saved[8], &mean2 = saved[9], &invstd2 = saved[10];
    const auto block = [ctx](const std::string& key) {
      ConvBlock b;
      b.stride = ctx->saved_data[key + ".stride"].toIntVector();
      b.padding = ctx->saved_data[key + ".padding"].toIntVector();
      b.dilation = ctx->saved_data[key + ".dilation"].toIntVector();
      b.groups = ctx->saved_data[key + ".groups"].toInt();
      return b;
    };
    const ConvBlock first = block("first"), second = block("second");
    torch::autograd::variable_list out(9);
    if (!grads[0].defined())
      return out;
    // 1
    at::Tensor r1 = convolve(x, w1, first);
    batchNormReluInPlace(r1, gamma1, beta1, mean1, invstd1);
    // 2
    at::Tensor y2 = convolve(r1, w2, second);
    at::Tensor grad = owned(std::move(grads[0]), y2);
    auto [gradGamma2, gradBeta2] =
        batchNormReluBackwardInPlace(grad, y2, gamma2, beta2, mean2, invstd2);
    y2.reset();
    // 3: the gradient of r1 reads only its shape and layout.
    const bool wantsFirst = ctx->needs_input_grad(0) || ctx->needs_input_grad(1) ||
                            ctx->needs_input_grad(2) || ctx->needs_input_grad(3);
    auto [gradR1, gradW2] = convolutionBackward(grad, r1, w2, second, wantsFirst);
    grad.reset();
    r1.reset();
    out[4] = gradW2;
    out[5] = gradGamma2;
    out[6] = gradBeta2;
    if (!wantsFirst)
      return out;
    // 4
    at::Tensor y1 = convolve(x, w1, first);
    gradR1 = owned(std::move(gradR1), y1);
    auto [gradGamma1, gradBeta1] =
        batchNormReluBackwardInPlace(gradR1, y1, gamma1, beta1, mean1, invstd1);
    y1.reset();  // the convolution's backward reads its input and the gradient only
    auto [gradX, gradW1] = convolutionBackward(gradR1, x, w1, first, ctx->needs_input_grad(0));
    out[0] = gradX;
    out[1] = gradW1;
    out[2] = gradGamma1;
    out[3] = gradBeta1;
    return out;
  }
};

}  // namespace

at::Tensor convBlockPairAgain(const at::Tensor& input, const ConvBlock& first,
                              const ConvBlock& second) {
  TORCH_CHECK(input.defined() && input.dim() == 4, kOp, ": the input must be [N, C, H, W], got ",
              input.defined() ? input.sizes() : at::IntArrayRef{});
  TORCH_CHECK(input.device().is_cpu() &&
                  (input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble),
              kOp, ": float or double CPU tensors only, got ", input.scalar_type(), " on ",
              input.device());
  checkBlock(input, input.size(1), first, "first");
  checkBlock(input, first.weight.size(0), second, "second");
  const at::Tensor x = input.is_contiguous() || input.is_contiguous(at::MemoryFormat::ChannelsLast)
                           ? input
                           : input.contiguous();
  return ConvBlockPairFunction::apply(x, first.weight, first.bnWeight, first.bnBias, second.weight,
                                      second.bnWeight, second.bnBias, first, second);
}

}  // namespace symtune::kernels
