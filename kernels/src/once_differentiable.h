#pragma once
// Our autograd Functions' backwards call ops of their own, which have no gradient. Asked for one
// (a backward with create_graph: a gradient penalty, a Hessian-vector product), PyTorch's fallback
// only warned that no autograd kernel was registered and left the second-order term out: the
// numbers were wrong (0.98 off ATen's on a gradient penalty through bias_gelu). Refused instead.
// Private to kernels/.

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

namespace symtune::kernels {

// Called first in each Function's backward: the engine turns grad mode on there exactly when the
// backward is asked to make a graph of its own.
inline void refuseDoubleBackward(const char* op) {
  TORCH_CHECK(!at::GradMode::is_enabled(), "symtune::", op,
              ": not twice differentiable (its backward has no gradient); for a second-order "
              "gradient run the ATen ops it replaces");
}

}  // namespace symtune::kernels
