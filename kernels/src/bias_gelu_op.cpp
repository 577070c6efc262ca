// Operator schemas of symtune::bias_gelu, its autograd (one saved tensor: the input), and the C++
// entry points.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "once_differentiable.h"
#include "symtune/kernels/bias_gelu.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def("bias_gelu(Tensor input, Tensor? bias, str approximate=\"none\") -> Tensor");
  m.def(
      "bias_gelu_backward(Tensor grad, Tensor input, Tensor? bias, str approximate=\"none\") -> "
      "(Tensor grad_input, Tensor grad_bias)");
}

namespace symtune::kernels {

namespace {

const auto& forwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::bias_gelu", "")
                             .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&,
                                               c10::string_view)>();
  return op;
}

const auto& backwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::bias_gelu_backward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, c10::string_view)>();
  return op;
}

std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// Note [Bias GELU autograd]
// The forward saves only the input (and the bias, a parameter already kept by the model): the
// backward recomputes input + bias inside its one pass instead of keeping the sum, as the ATen
// composition (add, then gelu) must.
class BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const std::optional<at::Tensor>& bias, c10::string_view approximate) {
    at::AutoDispatchBelowADInplaceOrView below;
    ctx->save_for_backward({input, bias.value_or(at::Tensor())});
    ctx->saved_data["approximate"] = std::string(approximate);
    ctx->saved_data["has_bias"] = bias.has_value() && bias->defined();
    return forwardOp().call(input, bias, approximate);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    refuseDoubleBackward("bias_gelu");
    const auto saved = ctx->get_saved_variables();
    const bool hasBias = ctx->saved_data["has_bias"].toBool();
    const std::string approximate = ctx->saved_data["approximate"].toStringRef();
    auto [gradInput, gradBias] = backwardOp().call(
        grads[0].contiguous(), saved[0],
        hasBias ? std::optional<at::Tensor>(saved[1]) : std::nullopt, approximate);
    return {gradInput, hasBias ? gradBias : at::Tensor(), at::Tensor()};
  }
};

at::Tensor biasGeluAutograd(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                            c10::string_view approximate) {
  return BiasGeluFunction::apply(input, bias, approximate);
}

}  // namespace

at::Tensor biasGelu(const at::Tensor& input, const at::Tensor& bias,
                    const std::string& approximate) {
  return forwardOp().call(input, optional(bias), approximate);
}

std::tuple<at::Tensor, at::Tensor> biasGeluBackward(const at::Tensor& grad, const at::Tensor& input,
                                                    const at::Tensor& bias,
                                                    const std::string& approximate) {
  return backwardOp().call(grad, input, optional(bias), approximate);
}

}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, Autograd, m) {
  m.impl("bias_gelu", &symtune::kernels::biasGeluAutograd);
}
