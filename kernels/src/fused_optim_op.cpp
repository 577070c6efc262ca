// Operator schemas and the C++ entry points of the fused optimizer steps.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

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

void checkLists(const char* op, at::TensorList params,
                std::initializer_list<at::TensorList> others) {
  TORCH_CHECK(!params.empty(), op, ": no parameters");
  for (at::TensorList list : others) {
    TORCH_CHECK(list.size() == params.size(), op, ": ", params.size(), " parameters but ",
                list.size(), " tensors in another list");
  }
  const auto device = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    for (at::TensorList list : others) {
      const at::Tensor& t = list[i];
      TORCH_CHECK(t.sizes() == params[i].sizes(), op, ": tensor ", i, " has shape ", t.sizes(),
                  ", its parameter ", params[i].sizes());
      TORCH_CHECK(t.scalar_type() == params[i].scalar_type(), op, ": tensor ", i, " is ",
                  t.scalar_type(), ", its parameter ", params[i].scalar_type());
      TORCH_CHECK(t.device() == device, op, ": tensor ", i, " is on ", t.device(),
                  ", the first parameter on ", device);
    }
  }
}

}  // namespace

void fusedAdam_(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,
                at::TensorList expAvgSqs, const std::vector<int64_t>& steps, const AdamHyper& h) {
  checkLists("symtune::fused_adam_", params, {grads, expAvgs, expAvgSqs});
  TORCH_CHECK(steps.size() == params.size(), "symtune::fused_adam_: ", params.size(),
              " parameters but ", steps.size(), " step counts");
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
  if (h.momentum != 0) {
    checkLists("symtune::fused_sgd_", params, {grads, momentumBuffers});
    TORCH_CHECK(fresh.size() == params.size(), "symtune::fused_sgd_: ", params.size(),
                " parameters but ", fresh.size(), " fresh flags");
  } else {
    checkLists("symtune::fused_sgd_", params, {grads});
  }
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::fused_sgd_", "")
                             .typed<void(at::TensorList, at::TensorList, at::TensorList,
                                         c10::IntArrayRef, double, double, double, double, bool)>();
  const std::vector<int64_t> flags(fresh.begin(), fresh.end());  // the schema's int[]: 0 or 1
  op.call(params, grads, momentumBuffers, flags, h.lr, h.momentum, h.dampening, h.weightDecay,
          h.nesterov);
  markWritten(params);
  if (h.momentum != 0)
    markWritten(momentumBuffers);
}

}  // namespace symtune::kernels
