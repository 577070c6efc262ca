// Operator schemas of symtune::bias_dropout_add, its autograd (saved: the seed, p and the bias's
// shape — no mask, no activations, no tensor) and the C++ entry points.

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "bias_dropout_add_common.h"
#include "once_differentiable.h"
#include "symtune/kernels/bias_dropout_add.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def(
      "bias_dropout_add(Tensor input, Tensor? bias, Tensor residual, float p, bool train=True) -> "
      "Tensor");
  m.def(
      "bias_dropout_add_forward(Tensor input, Tensor? bias, Tensor residual, float p, int seed) "
      "-> Tensor");
  m.def(
      "bias_dropout_add_backward(Tensor grad, Tensor? bias, float p, int seed) -> "
      "(Tensor grad_input, Tensor grad_bias)");
}

namespace symtune::kernels {

namespace {

const auto& forwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::bias_dropout_add_forward", "")
                             .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&,
                                               const at::Tensor&, double, int64_t)>();
  return op;
}

const auto& backwardOp() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::bias_dropout_add_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(
              const at::Tensor&, const std::optional<at::Tensor>&, double, int64_t)>();
  return op;
}

std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// A seed from the default CPU generator, as aten::dropout draws its randomness from the default
// generator: torch::manual_seed makes runs repeatable. Non-negative (the schema's int is signed).
int64_t drawSeed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  const uint64_t bits = at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
  return static_cast<int64_t>(bits >> 1);
}

// Shapes the kernels do not take — a bias that broadcasts another way, a residual of another
// shape — go through the composition with ATen's dropout, as bias_gelu's broadcast biases do: a
// rewrite that matched such a model still runs it. Mismatched dtypes and devices are left to
// the kernels' checks.
bool fusable(const at::Tensor& input, const std::optional<at::Tensor>& bias,
             const at::Tensor& residual) {
  if (residual.sizes() != input.sizes())
    return false;
  if (!bias || !bias->defined())
    return true;
  return (input.dim() >= 1 && bias->dim() == 1 && bias->size(0) == input.size(-1)) ||
         bias->sizes() == input.sizes();
}

at::Tensor composition(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                       const at::Tensor& residual, double p, bool train) {
  checkDropoutProbability(p);
  return residual + at::dropout(bias && bias->defined() ? input + *bias : input, p, train);
}

// Without dropout (evaluation, or p = 0) the kernels run with p = 0: no mask, no seed.
double effectiveP(double p, bool train) {
  checkDropoutProbability(p);
  return train ? p : 0.0;
}

// Note [Bias dropout add saves no bias]
// The backward reads nothing of the bias: its gradient is the input's (summed over the rows for a
// row bias), so the bias only says which of the two. The forward records its shape, not the
// tensor: a saved bias made an in-place update between forward and backward (an optimizer step,
// `b.add_(1)` under no_grad) fail the backward with "modified by an inplace operation", where
// ATen's composition (add, dropout, add) saves no bias and runs. The backward operator still
// takes a bias for its layout; it gets a stand-in of the recorded shape on the gradient's dtype
// and device, one element expanded (no allocation of the bias's size).
class BiasDropoutAddFunction : public torch::autograd::Function<BiasDropoutAddFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const std::optional<at::Tensor>& bias, const at::Tensor& residual,
                            double p, bool train) {
    at::AutoDispatchBelowADInplaceOrView below;
    const double rate = effectiveP(p, train);
    const int64_t seed = rate > 0 ? drawSeed() : 0;
    const bool hasBias = bias.has_value() && bias->defined();
    ctx->saved_data["p"] = rate;
    ctx->saved_data["seed"] = seed;
    ctx->saved_data["has_bias"] = hasBias;
    if (hasBias)
      ctx->saved_data["bias_sizes"] = bias->sizes().vec();
    return forwardOp().call(input, bias, residual, rate, seed);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    refuseDoubleBackward("bias_dropout_add");
    const bool hasBias = ctx->saved_data["has_bias"].toBool();
    const at::Tensor grad = grads[0].contiguous();
    // Note [Bias dropout add saves no bias]
    std::optional<at::Tensor> biasShape;
    if (hasBias)
      biasShape = at::empty({}, grad.options()).expand(ctx->saved_data["bias_sizes"].toIntVector());
    auto [gradInput, gradBias] = backwardOp().call(grad, biasShape, ctx->saved_data["p"].toDouble(),
                                                   ctx->saved_data["seed"].toInt());
    return {gradInput, hasBias ? gradBias : at::Tensor(), grads[0], at::Tensor(), at::Tensor()};
  }
};

at::Tensor biasDropoutAddAutograd(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                                  const at::Tensor& residual, double p, bool train) {
  if (!fusable(input, bias, residual))
    return composition(input, bias, residual, p, train);
  return BiasDropoutAddFunction::apply(input, bias, residual, p, train);
}

// Below autograd (inference mode, or tensors that need no gradient): draw and run.
at::Tensor biasDropoutAddPlain(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                               const at::Tensor& residual, double p, bool train) {
  if (!fusable(input, bias, residual))
    return composition(input, bias, residual, p, train);
  const double rate = effectiveP(p, train);
  return forwardOp().call(input, bias, residual, rate, rate > 0 ? drawSeed() : 0);
}

}  // namespace

at::Tensor biasDropoutAdd(const at::Tensor& input, const at::Tensor& bias,
                          const at::Tensor& residual, double p, bool train) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::bias_dropout_add", "")
                             .typed<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&,
                                               const at::Tensor&, double, bool)>();
  return op.call(input, optional(bias), residual, p, train);
}

at::Tensor biasDropoutAddForward(const at::Tensor& input, const at::Tensor& bias,
                                 const at::Tensor& residual, double p, int64_t seed) {
  return forwardOp().call(input, optional(bias), residual, p, seed);
}

std::tuple<at::Tensor, at::Tensor> biasDropoutAddBackward(const at::Tensor& grad,
                                                          const at::Tensor& bias, double p,
                                                          int64_t seed) {
  return backwardOp().call(grad, optional(bias), p, seed);
}

}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, Autograd, m) {
  m.impl("bias_dropout_add", &symtune::kernels::biasDropoutAddAutograd);
}

TORCH_LIBRARY_IMPL(symtune, CompositeExplicitAutograd, m) {
  m.impl("bias_dropout_add", &symtune::kernels::biasDropoutAddPlain);
}
