// symtune::kernels::batchNormReluConv2d and its per-element steps (symtune/kernels/
// batch_norm_relu_conv.h).

#include "symtune/kernels/batch_norm_relu_conv.h"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include "batch_norm_relu_common.h"
#include "once_differentiable.h"

namespace symtune::kernels {

namespace {

const char* const kOp = "symtune::batch_norm_relu_conv2d";

// Note [Lean convolution block]
// A convolution block's batch norm and ReLU followed by the next convolution, as ATen runs them,
// keeps two activations of the same size for the backward: the batch norm's input, and the ReLU's
// output (the ReLU's own, and the convolution's input). Here the three are one autograd op that
// keeps the first only, with the batch norm's statistics: the forward is symtune::batch_norm_relu's
// (statistics, one pass writing the ReLU's output), then the convolution, after which the ReLU's
// output is freed. The backward holds at most the kept activation, the incoming gradient and one
// more of the same size at a time:
//   1. the ReLU's output made again from the kept input (one pass: relu(x * scale + shift));
//   2. the convolution's weight (and bias) gradient from it, after which it is freed;
//   3. the gradient of the convolution's input, which reads that input's shape only (the kept
//      input, of the same shape and layout, stands in for it), after which the incoming gradient
//      is released;
//   4. over that gradient, in place: the ReLU's mask (x * scale + shift > 0, one pass), the
//      batch norm's per-channel sums (ATen's batch-norm backward asked for the weight's and the
//      bias's gradients only, which allocates nothing of the activation's size), and one pass
//      writing the input's gradient. (Sums of our own, per element into per-channel doubles,
//      took 1.6 ms where ATen's whole backward takes 0.24 ms on early exit's 32x16x32x32.)
// On early exit's network at the `cpu` preset, with backwards in place throughout, this is what
// takes the step to 0.40 of ATen's peak (docs/benchmarks.md, "Backwards in place, and stage 1 by
// hand").

// An activation [N, C, ...] as runs of `per` consecutive elements: a channel's values in one
// image (contiguous), or a pixel's channels (channels-last).
struct Runs {
  int64_t count = 0, per = 0, channels = 0;
  bool channelsLast = false;

  Runs(const at::Tensor& t, bool nhwc) : channels(t.size(1)), channelsLast(nhwc) {
    const int64_t inner = t.numel() / std::max<int64_t>(t.size(0) * channels, 1);
    count = nhwc ? t.size(0) * inner : t.size(0) * channels;
    per = nhwc ? channels : inner;
  }
};

bool isChannelsLast(const at::Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

at::MemoryFormat layoutOf(const at::Tensor& t) {
  return isChannelsLast(t) ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// f(i, c) for every element i with its channel c, on ATen's threads. (The channel found once per
// run: a modulo per element made the contiguous passes ten times slower than the channels-last
// ones.)
template <typename F>
void eachElement(const Runs& runs, F f) {
  const int64_t per = runs.per, channels = runs.channels;
  if (runs.channelsLast) {
    at::parallel_for(0, runs.count, 256, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t j = 0; j < per; ++j)
          f(r * per + j, j);
    });
    return;
  }
  at::parallel_for(0, runs.count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t c = r % channels;
      for (int64_t j = 0; j < per; ++j)
        f(r * per + j, c);
    }
  });
}

// scale = weight * invstd and shift = bias - mean * scale per channel, computed in double.
template <typename T>
std::pair<std::vector<T>, std::vector<T>> scaleAndShift(const at::Tensor& weight,
                                                        const at::Tensor& bias,
                                                        const at::Tensor& mean,
                                                        const at::Tensor& invstd) {
  const int64_t channels = weight.size(0);
  const at::Tensor w = weight.contiguous(), b = bias.contiguous(), m = mean.contiguous(),
                   s = invstd.contiguous();
  const T *pw = w.const_data_ptr<T>(), *pb = b.const_data_ptr<T>(), *pm = m.const_data_ptr<T>(),
          *ps = s.const_data_ptr<T>();
  std::vector<T> scale(static_cast<size_t>(channels)), shift(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const double k = static_cast<double>(pw[c]) * ps[c];
    scale[static_cast<size_t>(c)] = static_cast<T>(k);
    shift[static_cast<size_t>(c)] = static_cast<T>(pb[c] - pm[c] * k);
  }
  return {scale, shift};
}

// The checks the per-element steps make: a CPU activation [N, C, ...] of float or double,
// contiguous or channels-last, and vectors of C beside it.
void checkActivation(const char* op, const at::Tensor& t, const at::Tensor& weight,
                     const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd) {
  TORCH_CHECK(t.defined() && t.device().is_cpu(), op, ": CPU tensors only");
  batchNormReluShape(t, weight, bias, std::nullopt, std::nullopt);  // shape, dtype, vectors
  for (const at::Tensor* v : {&mean, &invstd}) {
    TORCH_CHECK(v->defined() && v->dim() == 1 && v->size(0) == t.size(1) &&
                    v->scalar_type() == t.scalar_type() && v->device() == t.device(),
                op, ": the statistics must be vectors of ", t.size(1), " ", t.scalar_type());
  }
  TORCH_CHECK(t.is_contiguous() || isChannelsLast(t), op,
              ": the activation must be contiguous or channels-last");
}

// out <- relu(in * scale + shift) per channel (`out` may be `in`); both of one layout.
void writeBatchNormRelu(const at::Tensor& in, at::Tensor& out, const at::Tensor& weight,
                        const at::Tensor& bias, const at::Tensor& mean, const at::Tensor& invstd) {
  const Runs runs(in, isChannelsLast(in));
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "symtune::batch_norm_relu_in_place", [&] {
    const auto [scale, shift] = scaleAndShift<scalar_t>(weight, bias, mean, invstd);
    const scalar_t* x = in.const_data_ptr<scalar_t>();
    scalar_t* y = out.data_ptr<scalar_t>();
    const scalar_t *sc = scale.data(), *sh = shift.data();
    eachElement(runs,
                [=](int64_t i, int64_t c) { y[i] = std::max(x[i] * sc[c] + sh[c], scalar_t(0)); });
  });
}

const auto& forwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::batch_norm_relu_forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                                 double, double)>();
  return op;
}

std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

std::vector<int64_t> ints(const c10::IValue& v) {
  return v.toIntVector();
}

class BatchNormReluConv2dFunction : public torch::autograd::Function<BatchNormReluConv2dFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, const at::Tensor& bias,
                            const std::optional<at::Tensor>& runningMean,
                            const std::optional<at::Tensor>& runningVar, double momentum,
                            double eps, const at::Tensor& convWeight,
                            const std::optional<at::Tensor>& convBias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [activation, mean, invstd] =
        forwardOp().call(input, weight, bias, runningMean, runningVar, momentum, eps);
    at::Tensor out = at::conv2d(activation, convWeight, convBias.value_or(at::Tensor()), stride,
                                padding, dilation, groups);
    ctx->save_for_backward({input, weight, bias, mean, invstd, convWeight});
    ctx->saved_data["stride"] = stride.vec();
    ctx->saved_data["padding"] = padding.vec();
    ctx->saved_data["dilation"] = dilation.vec();
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["conv_bias"] = convBias.has_value() && convBias->defined();
    // needs_input_grad counts the tensors given (an absent optional is none): the running
    // statistics come before the convolution's weight.
    ctx->saved_data["conv_edge"] = runningMean.has_value() && runningMean->defined() ? 5 : 3;
    return out;
  }

  // `grads` by reference: the incoming gradient is released at step 3 (taken by value, the
  // autograd node's own list would keep it to the end).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list& grads) {
    refuseDoubleBackward("batch_norm_relu_conv");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3],
                     &invstd = saved[4], &convWeight = saved[5];
    const auto stride = ints(ctx->saved_data["stride"]), padding = ints(ctx->saved_data["padding"]),
               dilation = ints(ctx->saved_data["dilation"]);
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const bool convBias = ctx->saved_data["conv_bias"].toBool();
    torch::autograd::variable_list out(13);
    if (!grads[0].defined())
      return out;
    const auto convolutionBackward = [&](const at::Tensor& convInput, std::array<bool, 3> mask) {
      const std::vector<int64_t> biasSize{convWeight.size(0)};
      const at::OptionalIntArrayRef biasSizes =
          convBias ? at::OptionalIntArrayRef(biasSize) : std::nullopt;
      return at::convolution_backward(grads[0], convInput, convWeight, biasSizes, stride, padding,
                                      dilation, false, {0, 0}, groups, mask);
    };
    const bool wantsInput =
        ctx->needs_input_grad(0) || ctx->needs_input_grad(1) || ctx->needs_input_grad(2);
    const auto convEdge = static_cast<size_t>(ctx->saved_data["conv_edge"].toInt());
    if (ctx->needs_input_grad(convEdge) || (convBias && ctx->needs_input_grad(convEdge + 1))) {
      // 1, 2: the convolution's input again, for its weight and bias gradients.
      at::Tensor activation = at::empty_like(input, layoutOf(input));
      writeBatchNormRelu(input, activation, weight, bias, mean, invstd);
      auto [unused, gradConvWeight, gradConvBias] =
          convolutionBackward(activation, {false, true, convBias});
      out[7] = gradConvWeight;
      out[8] = gradConvBias;
    }
    if (wantsInput) {
      // 3: the input stands in for the convolution's input, whose shape and layout it has.
      at::Tensor grad = std::get<0>(convolutionBackward(input, {true, false, false}));
      grads[0].reset();
      // The input's strides, which the in-place step requires (with 1 × 1 pixels a layout
      // does not fix them).
      if (grad.strides() != input.strides())
        grad = at::empty_like(input).copy_(grad);
      // 4
      auto [gradWeight, gradBias] =
          batchNormReluBackwardInPlace(grad, input, weight, bias, mean, invstd);
      out[0] = grad;
      out[1] = gradWeight;
      out[2] = gradBias;
    }
    return out;
  }
};

}  // namespace

at::Tensor batchNormReluConv2d(const at::Tensor& input, const at::Tensor& weight,
                               const at::Tensor& bias, const at::Tensor& runningMean,
                               const at::Tensor& runningVar, double momentum, double eps,
                               const at::Tensor& convWeight, const at::Tensor& convBias,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, int64_t groups) {
  TORCH_CHECK(input.defined() && input.dim() == 4, kOp, ": the input must be [N, C, H, W], got ",
              input.defined() ? input.sizes() : at::IntArrayRef{});
  TORCH_CHECK(input.device().is_cpu(), kOp, ": CPU tensors only, got the input on ",
              input.device());
  batchNormReluShape(input, weight, bias, optional(runningMean), optional(runningVar));
  TORCH_CHECK(convWeight.defined() && convWeight.dim() == 4 &&
                  convWeight.scalar_type() == input.scalar_type() &&
                  convWeight.device() == input.device(),
              kOp, ": the convolution's weight must be [out, in / groups, kH, kW] of ",
              input.scalar_type(), " on ", input.device());
  // Another layout than the two the per-element steps read is made contiguous first.
  const at::Tensor x = input.is_contiguous() || isChannelsLast(input) ? input : input.contiguous();
  return BatchNormReluConv2dFunction::apply(x, weight, bias, optional(runningMean),
                                            optional(runningVar), momentum, eps, convWeight,
                                            optional(convBias), stride, padding, dilation, groups);
}

void batchNormReluInPlace(at::Tensor& t, const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& mean, const at::Tensor& invstd) {
  checkActivation("symtune::batch_norm_relu_in_place", t, weight, bias, mean, invstd);
  writeBatchNormRelu(t, t, weight, bias, mean, invstd);
}

std::tuple<at::Tensor, at::Tensor> batchNormReluBackwardInPlace(
    at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
    const at::Tensor& mean, const at::Tensor& invstd) {
  const char* op = "symtune::batch_norm_relu_backward_in_place";
  checkActivation(op, input, weight, bias, mean, invstd);
  TORCH_CHECK(grad.sizes() == input.sizes() && grad.strides() == input.strides() &&
                  grad.scalar_type() == input.scalar_type() && grad.device() == input.device(),
              op, ": the gradient must have the input's shape, layout and dtype");
  const Runs runs(input, isChannelsLast(input));
  // 1. The ReLU's mask, in place.
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "symtune::batch_norm_relu_mask", [&] {
    const auto [scale, shift] = scaleAndShift<scalar_t>(weight, bias, mean, invstd);
    scalar_t* g = grad.data_ptr<scalar_t>();
    const scalar_t *x = input.const_data_ptr<scalar_t>(), *sc = scale.data(), *sh = shift.data();
    eachElement(runs, [=](int64_t i, int64_t c) {
      g[i] = x[i] * sc[c] + sh[c] > scalar_t(0) ? g[i] : scalar_t(0);
    });
  });
  // 2. The weight's and the bias's gradients, Σ g (x - mean) invstd and Σ g per channel: ATen's
  // batch-norm backward, asked for those two only (it allocates nothing of the input's size).
  auto [unused, gradWeight, gradBias] =
      at::native_batch_norm_backward(grad, input, weight, {}, {}, mean, invstd, true,
                                     /*eps: unread in training*/ 0.0, {false, true, true});
  // 3. dx = w invstd (g - Σg / count - (x - mean) invstd Σg(x - mean) invstd / count), in place.
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "symtune::batch_norm_backward_in_place", [&] {
    using T = scalar_t;
    const int64_t channels = runs.channels;
    const double count = static_cast<double>(input.numel() / channels);
    const at::Tensor m = mean.contiguous(), s = invstd.contiguous(), w = weight.contiguous();
    const T *mu = m.const_data_ptr<T>(), *is = s.const_data_ptr<T>(), *pw = w.const_data_ptr<T>(),
            *gw = gradWeight.const_data_ptr<T>(), *gb = gradBias.const_data_ptr<T>();
    std::vector<T> offset(static_cast<size_t>(channels)), slope(static_cast<size_t>(channels)),
        factor(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      const double sd = is[c];
      offset[static_cast<size_t>(c)] = static_cast<T>(gb[c] / count);
      slope[static_cast<size_t>(c)] = static_cast<T>(gw[c] * sd / count);
      factor[static_cast<size_t>(c)] = static_cast<T>(sd * pw[c]);
    }
    T* g = grad.data_ptr<T>();
    const T *x = input.const_data_ptr<T>(), *po = offset.data(), *ps = slope.data(),
            *pf = factor.data();
    eachElement(runs, [=](int64_t i, int64_t c) {
      g[i] = (g[i] - po[c] - (x[i] - mu[c]) * ps[c]) * pf[c];
    });
  });
  return {gradWeight, gradBias};
}

}  // namespace symtune::kernels
