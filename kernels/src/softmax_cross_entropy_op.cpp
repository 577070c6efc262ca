// Operator schemas of symtune::softmax_cross_entropy, its autograd (saves the logits, the targets
// and each row's log-sum-exp) and its C++ entry point.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "once_differentiable.h"
#include "symtune/kernels/softmax_cross_entropy.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def("softmax_cross_entropy(Tensor logits, Tensor target, int ignore_index=-100) -> Tensor");
  m.def(
      "softmax_cross_entropy_forward(Tensor logits, Tensor target, int ignore_index) -> "
      "(Tensor loss, Tensor lse)");
  m.def(
      "softmax_cross_entropy_backward(Tensor grad, Tensor logits, Tensor target, Tensor lse, "
      "int ignore_index) -> Tensor");
}

namespace symtune::kernels {

namespace {

const auto& forwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::softmax_cross_entropy_forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, int64_t)>();
  return op;
}

const auto& backwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::softmax_cross_entropy_backward", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t)>();
  return op;
}

class SoftmaxCrossEntropyFunction : public torch::autograd::Function<SoftmaxCrossEntropyFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& target, int64_t ignoreIndex) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [loss, lse] = forwardOp().call(logits, target, ignoreIndex);
    ctx->save_for_backward({logits, target, lse});
    ctx->saved_data["ignore_index"] = ignoreIndex;
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    refuseDoubleBackward("softmax_cross_entropy");
    const auto saved = ctx->get_saved_variables();
    const at::Tensor gradLogits = backwardOp().call(grads[0], saved[0], saved[1], saved[2],
                                                    ctx->saved_data["ignore_index"].toInt());
    return {gradLogits, at::Tensor(), at::Tensor()};
  }
};

at::Tensor softmaxCrossEntropyAutograd(const at::Tensor& logits, const at::Tensor& target,
                                       int64_t ignoreIndex) {
  return SoftmaxCrossEntropyFunction::apply(logits, target, ignoreIndex);
}

// Without autograd (no gradient wanted): the forward alone.
at::Tensor softmaxCrossEntropyPlain(const at::Tensor& logits, const at::Tensor& target,
                                    int64_t ignoreIndex) {
  return std::get<0>(forwardOp().call(logits, target, ignoreIndex));
}

}  // namespace

at::Tensor softmaxCrossEntropy(const at::Tensor& logits, const at::Tensor& target,
                               int64_t ignoreIndex) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::softmax_cross_entropy", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(logits, target, ignoreIndex);
}

}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, Autograd, m) {
  m.impl("softmax_cross_entropy", &symtune::kernels::softmaxCrossEntropyAutograd);
}

TORCH_LIBRARY_IMPL(symtune, CPU, m) {
  m.impl("softmax_cross_entropy", &symtune::kernels::softmaxCrossEntropyPlain);
}

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("softmax_cross_entropy", &symtune::kernels::softmaxCrossEntropyPlain);
}
