// Operator schemas of symtune::add_layer_norm, its autograd (saves the sum, each row's mean and
// 1/std, and the weight) and its C++ entry point.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "add_layer_norm_common.h"
#include "once_differentiable.h"
#include "symtune/kernels/add_layer_norm.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def(
      "add_layer_norm(Tensor input, Tensor residual, Tensor? weight, Tensor? bias, "
      "float eps=1e-5) -> (Tensor output, Tensor sum)");
  m.def(
      "add_layer_norm_forward(Tensor input, Tensor residual, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor output, Tensor sum, Tensor mean, Tensor rstd)");
  m.def(
      "add_layer_norm_backward(Tensor grad_output, Tensor? grad_sum, Tensor sum, Tensor mean, "
      "Tensor rstd, Tensor? weight) -> (Tensor grad_sum, Tensor grad_weight, Tensor grad_bias)");
}

namespace symtune::kernels {

namespace {

using Optional = std::optional<at::Tensor>;

const auto& forwardOp() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::add_layer_norm_forward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const Optional&, const Optional&, double)>();
  return op;
}

const auto& backwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::add_layer_norm_backward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                 const at::Tensor&, const Optional&, const at::Tensor&,
                                 const at::Tensor&, const at::Tensor&, const Optional&)>();
  return op;
}

Optional optional(const at::Tensor& t) {
  return t.defined() ? Optional(t) : std::nullopt;
}

class AddLayerNormFunction : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& input, const at::Tensor& residual,
                                                const Optional& weight, const Optional& bias,
                                                double eps) {
    at::AutoDispatchBelowADInplaceOrView below;
    // An output nobody used (often the sum) gets no gradient, not a tensor of zeros to read.
    ctx->set_materialize_grads(false);
    auto [out, sum, mean, rstd] = forwardOp().call(input, residual, weight, bias, eps);
    ctx->save_for_backward({sum, mean, rstd, weight.value_or(at::Tensor())});
    ctx->saved_data["has_weight"] = weight.has_value() && weight->defined();
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return {out, sum};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    refuseDoubleBackward("add_layer_norm");
    const auto saved = ctx->get_saved_variables();
    const bool hasWeight = ctx->saved_data["has_weight"].toBool();
    const bool hasBias = ctx->saved_data["has_bias"].toBool();
    if (!grads[0].defined())  // only the sum was used: its gradient is both inputs'
      return {grads[1], grads[1], at::Tensor(), at::Tensor(), at::Tensor()};
    auto [gradSum, gradWeight, gradBias] =
        backwardOp().call(grads[0].contiguous(), optional(grads[1]), saved[0], saved[1], saved[2],
                          hasWeight ? Optional(saved[3]) : std::nullopt);
    return {gradSum, gradSum, hasWeight ? gradWeight : at::Tensor(),
            hasBias ? gradBias : at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> addLayerNormAutograd(const at::Tensor& input,
                                                        const at::Tensor& residual,
                                                        const Optional& weight,
                                                        const Optional& bias, double eps) {
  auto outputs = AddLayerNormFunction::apply(input, residual, weight, bias, eps);
  return {outputs[0], outputs[1]};
}

std::tuple<at::Tensor, at::Tensor> addLayerNormPlain(const at::Tensor& input,
                                                     const at::Tensor& residual,
                                                     const Optional& weight, const Optional& bias,
                                                     double eps) {
  auto [out, sum, mean, rstd] = forwardOp().call(input, residual, weight, bias, eps);
  return {out, sum};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> addLayerNorm(const at::Tensor& input, const at::Tensor& residual,
                                                const at::Tensor& weight, const at::Tensor& bias,
                                                double eps) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::add_layer_norm", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                    const Optional&, const Optional&, double)>();
  // Checked before dispatch too: with its arguments on two devices, the call would go to the
  // kernel of whichever device dispatch ranks first (another's, or none: meta's).
  checkAddLayerNormArguments(input, residual, optional(weight), optional(bias), eps);
  return op.call(input, residual, optional(weight), optional(bias), eps);
}

}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, Autograd, m) {
  m.impl("add_layer_norm", &symtune::kernels::addLayerNormAutograd);
}

TORCH_LIBRARY_IMPL(symtune, CPU, m) {
  m.impl("add_layer_norm", &symtune::kernels::addLayerNormPlain);
}

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("add_layer_norm", &symtune::kernels::addLayerNormPlain);
}
