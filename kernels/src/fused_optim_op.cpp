// Operator schemas and the C++ entry points of the fused optimizer steps.

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

void fusedAdam_(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,
                at::TensorList expAvgSqs, const std::vector<int64_t>& steps, const AdamHyper& h) {
  checkFusedAdamArguments(params, grads, expAvgs, expAvgSqs, steps);  // before dispatch
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::fused_adam_", "")
          .typed<void(at::TensorList, at::TensorList, at::TensorList, at::TensorList,
                      c10::IntArrayRef, double, double, double, double, double, bool)>();
  op.call(params, grads, expAvgs, expAvgSqs, steps, h.lr, h.beta1, h.beta2, h.eps, h.weightDecay,
          h.decoupled);
  for (at::TensorList written : {params, expAvgs, expAvgSqs})
    markWritten(written);
}

void fusedSgd_(at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers,
               const std::vector<bool>& fresh, const SgdHyper& h) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::fused_sgd_", "")
                             .typed<void(at::TensorList, at::TensorList, at::TensorList,
                                         c10::IntArrayRef, double, double, double, double, bool)>();
  const std::vector<int64_t> flags(fresh.begin(), fresh.end());  // the schema's int[]: 0 or 1
  checkFusedSgdArguments(params, grads, momentumBuffers, flags, h.momentum);  // before dispatch
  op.call(params, grads, momentumBuffers, flags, h.lr, h.momentum, h.dampening, h.weightDecay,
          h.nesterov);
  markWritten(params);
  if (h.momentum != 0)
    markWritten(momentumBuffers);
}

}  // namespace symtune::kernels
