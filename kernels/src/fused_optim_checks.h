#pragma once
// What the fused optimizers' kernels take, checked where each kernel begins: the operators are
// callable from TorchScript and C++ as they are (`torch.ops.symtune.fused_adam_`), past the C++
// wrappers, and lists of unequal lengths sent a kernel reading past the shorter one (a segfault).
// Private to kernels/.

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <initializer_list>

namespace symtune::kernels {

// Every list as long as `params`, each tensor of its parameter's shape, type and device.
inline void checkParameterLists(const char* op, at::TensorList params,
                                std::initializer_list<at::TensorList> others) {
  TORCH_CHECK(!params.empty(), op, ": no parameters");
  for (at::TensorList list : others) {
    TORCH_CHECK(list.size() == params.size(), op, ": ", params.size(), " parameters but ",
                list.size(), " tensors in another list");
  }
  const auto device = params[0].device();
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(params[i].device() == device, op, ": parameter ", i, " is on ", params[i].device(),
                ", the first on ", device);
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

inline void checkFusedAdamArguments(at::TensorList params, at::TensorList grads,
                                    at::TensorList expAvgs, at::TensorList expAvgSqs,
                                    c10::IntArrayRef steps) {
  checkParameterLists("symtune::fused_adam_", params, {grads, expAvgs, expAvgSqs});
  TORCH_CHECK(steps.size() == params.size(), "symtune::fused_adam_: ", params.size(),
              " parameters but ", steps.size(), " step counts");
}

inline void checkFusedSgdArguments(at::TensorList params, at::TensorList grads,
                                   at::TensorList momentumBuffers, c10::IntArrayRef fresh,
                                   double momentum) {
  if (momentum != 0) {
    checkParameterLists("symtune::fused_sgd_", params, {grads, momentumBuffers});
    TORCH_CHECK(fresh.size() == params.size(), "symtune::fused_sgd_: ", params.size(),
                " parameters but ", fresh.size(), " fresh flags");
  } else {
    checkParameterLists("symtune::fused_sgd_", params, {grads});
  }
}

}  // namespace symtune::kernels
