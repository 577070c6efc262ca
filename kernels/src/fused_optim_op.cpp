// Operator schemas and the C++ entry points of the fused optimizer steps.

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "fused_optim_checks.h"
#include "symtune/kernels/fused_optim.h"
#include "written.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def(
      "fused_adam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, "
      "Tensor(c!)[] exp_avg_sqs, int[] steps, float lr, float beta1, float beta2, float eps, "
      "float weight_decay, bool decoupled_weight_decay) -> ()");
  m.def(
      "fused_sgd_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] momentum_buffers, "
      "int[] fresh, float lr, float momentum, float dampening, float weight_decay, "
      "bool nesterov) -> ()");
}

namespace symtune::kernels {

namespace {

const auto& adamOp() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::fused_adam_", "")
          .typed<void(at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                      c10::IntArrayRef, double, double, double, double, double, bool)>();
  return op;
}

const auto& sgdOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::fused_sgd_", "")
                             .typed<void(at::TensorList, at::TensorList, at::TensorList,
                                         c10::IntArrayRef, double, double, double, double, bool)>();
  return op;
}

// The ADInplaceOrView kernels (Note [In-place ops move versions] in written.h).
void fusedAdamInplaceOrView(c10::DispatchKeySet keys, at::TensorList params, at::TensorList grads,
                            at::TensorList expAvgs, at::TensorList expAvgSqs,
                            c10::IntArrayRef steps, double lr, double beta1, double beta2,
                            double eps, double weightDecay, bool decoupled) {
  {
    at::AutoDispatchBelowADInplaceOrView below;
    adamOp().redispatch(keys & c10::after_ADInplaceOrView_keyset, params, grads, expAvgs, expAvgSqs,
                        steps, lr, beta1, beta2, eps, weightDecay, decoupled);
  }
  for (at::TensorList written : {params, expAvgs, expAvgSqs})
    markWritten(written);
}

void fusedSgdInplaceOrView(c10::DispatchKeySet keys, at::TensorList params, at::TensorList grads,
                           at::TensorList momentumBuffers, c10::IntArrayRef fresh, double lr,
                           double momentum, double dampening, double weightDecay, bool nesterov) {
  {
    at::AutoDispatchBelowADInplaceOrView below;
    sgdOp().redispatch(keys & c10::after_ADInplaceOrView_keyset, params, grads, momentumBuffers,
                       fresh, lr, momentum, dampening, weightDecay, nesterov);
  }
  markWritten(params);
  if (momentum != 0)  // without momentum the buffers are not read or written
    markWritten(momentumBuffers);
}

}  // namespace

void fusedAdam_(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,
                at::TensorList expAvgSqs, const std::vector<int64_t>& steps, const AdamHyper& h) {
  checkFusedAdamArguments(params, grads, expAvgs, expAvgSqs, steps);  // before dispatch
  // The versions move in the op (Note [In-place ops move versions] in written.h).
  adamOp().call(params, grads, expAvgs, expAvgSqs, steps, h.lr, h.beta1, h.beta2, h.eps,
                h.weightDecay, h.decoupled);
}

void fusedSgd_(at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers,
               const std::vector<bool>& fresh, const SgdHyper& h) {
  const std::vector<int64_t> flags(fresh.begin(), fresh.end());  // the schema's int[]: 0 or 1
  checkFusedSgdArguments(params, grads, momentumBuffers, flags, h.momentum);  // before dispatch
  sgdOp().call(params, grads, momentumBuffers, flags, h.lr, h.momentum, h.dampening, h.weightDecay,
               h.nesterov);
}

}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, ADInplaceOrView, m) {
  m.impl("fused_adam_", &symtune::kernels::fusedAdamInplaceOrView);
  m.impl("fused_sgd_", &symtune::kernels::fusedSgdInplaceOrView);
}
