// Operator schemas of symtune::batch_norm_relu, its autograd and the C++ entry point.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "once_differentiable.h"
#include "symtune/kernels/batch_norm_relu.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def(
      "batch_norm_relu_forward(Tensor input, Tensor weight, Tensor bias, Tensor(a!)? "
      "running_mean, Tensor(b!)? running_var, float momentum, float eps) -> (Tensor output, "
      "Tensor save_mean, Tensor save_invstd)");
  m.def(
      "batch_norm_relu_backward(Tensor grad, Tensor input, Tensor output, Tensor weight, Tensor "
      "save_mean, Tensor save_invstd) -> (Tensor grad_input, Tensor grad_weight, Tensor "
      "grad_bias)");
}

namespace symtune::kernels {

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

const auto& forwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::batch_norm_relu_forward", "")
                             .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const std::optional<at::Tensor>&,
                                           const std::optional<at::Tensor>&, double, double)>();
  return op;
}

const auto& backwardOp() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::batch_norm_relu_backward", "")
          .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                        const at::Tensor&, const at::Tensor&)>();
  return op;
}

std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// Note [Batch norm ReLU]
// Training-mode batch norm followed by a ReLU, as ATen runs them: statistics (a pass for the
// mean, one for the variance), the normalization (a pass writing the normalized activation),
// the ReLU (another, writing its output); backward, the ReLU's mask applied (a pass writing the
// masked gradient), then batch norm's two passes over it and the input. Fused, per channel: the
// two statistics passes, then one pass writing relu(x * scale + shift); backward, one pass
// reducing the masked gradient (the mask read from the output, which the next convolution keeps
// anyway) and one writing the input's gradient. On contiguous activations channels are
// independent, so each is one task whose passes find its data in cache; on channels-last ones
// each task takes rows (pixels), vectors along the channels, and per-thread sums are combined.
// It saves the input, the output and the per-channel mean and inverse deviation — what ATen's
// pair keeps, less the normalized activation.
class BatchNormReluFunction : public torch::autograd::Function<BatchNormReluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, const at::Tensor& bias,
                            const std::optional<at::Tensor>& runningMean,
                            const std::optional<at::Tensor>& runningVar, double momentum,
                            double eps) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [output, mean, invstd] =
        forwardOp().call(input, weight, bias, runningMean, runningVar, momentum, eps);
    ctx->save_for_backward({input, output, weight, mean, invstd});
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    refuseDoubleBackward("batch_norm_relu");
    const auto saved = ctx->get_saved_variables();
    if (!grads[0].defined())
      return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
              at::Tensor(), at::Tensor(), at::Tensor()};
    auto [gradInput, gradWeight, gradBias] =
        backwardOp().call(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4]);
    return {gradInput,    gradWeight,   gradBias,    at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor batchNormRelu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                         const at::Tensor& runningMean, const at::Tensor& runningVar,
                         double momentum, double eps) {
  // The running statistics as optionals: an undefined tensor is no autograd input.
  return BatchNormReluFunction::apply(input, weight, bias, optional(runningMean),
                                      optional(runningVar), momentum, eps);
}

}  // namespace symtune::kernels
