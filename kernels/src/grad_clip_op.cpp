// Operator schemas and C++ entry points of symtune::rms_clamp_ and symtune::clip_grad_norm_.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "symtune/kernels/grad_clip.h"
#include "written.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def("rms_clamp_(Tensor(a!)[] grads) -> Tensor");
  m.def("clip_grad_norm_(Tensor(a!)[] grads, float max_norm) -> Tensor");
}

namespace symtune::kernels {

namespace {

void checkGrads(const char* op, at::TensorList grads) {
  TORCH_CHECK(!grads.empty(), op, ": no gradients");
  for (size_t i = 0; i < grads.size(); ++i) {
    TORCH_CHECK(grads[i].device() == grads[0].device(), op, ": gradient ", i, " is on ",
                grads[i].device(), ", the first on ", grads[0].device());
    TORCH_CHECK(at::isFloatingType(grads[i].scalar_type()), op, ": gradient ", i, " is ",
                grads[i].scalar_type(), ", not floating point");
  }
}

}  // namespace

at::Tensor rmsClamp_(at::TensorList grads) {
  checkGrads("symtune::rms_clamp_", grads);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::rms_clamp_", "")
                             .typed<at::Tensor(at::TensorList)>();
  at::Tensor clamped = op.call(grads);
  markWritten(grads);
  return clamped;
}

at::Tensor clipGradNorm_(at::TensorList grads, double maxNorm) {
  checkGrads("symtune::clip_grad_norm_", grads);
  TORCH_CHECK(maxNorm > 0, "symtune::clip_grad_norm_: max_norm must be positive, got ", maxNorm);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::clip_grad_norm_", "")
                             .typed<at::Tensor(at::TensorList, double)>();
  at::Tensor norm = op.call(grads, maxNorm);
  markWritten(grads);
  return norm;
}

}  // namespace symtune::kernels
