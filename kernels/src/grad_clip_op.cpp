// Operator schemas and C++ entry points of symtune::rms_clamp_ and symtune::clip_grad_norm_.

#include <ATen/core/LegacyTypeDispatch.h>
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

const auto& rmsClampOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::rms_clamp_", "")
                             .typed<at::Tensor(at::TensorList)>();
  return op;
}

const auto& clipGradNormOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::clip_grad_norm_", "")
                             .typed<at::Tensor(at::TensorList, double)>();
  return op;
}

// The ADInplaceOrView kernels (Note [In-place ops move versions] in written.h).
at::Tensor rmsClampInplaceOrView(c10::DispatchKeySet keys, at::TensorList grads) {
  at::Tensor clamped;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    clamped = rmsClampOp().redispatch(keys & c10::after_ADInplaceOrView_keyset, grads);
  }
  markWritten(grads);
  return clamped;
}

at::Tensor clipGradNormInplaceOrView(c10::DispatchKeySet keys, at::TensorList grads,
                                     double maxNorm) {
  at::Tensor norm;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    norm = clipGradNormOp().redispatch(keys & c10::after_ADInplaceOrView_keyset, grads, maxNorm);
  }
  markWritten(grads);
  return norm;
}

}  // namespace

// The versions move in the ops (Note [In-place ops move versions] in written.h).
at::Tensor rmsClamp_(at::TensorList grads) {
  checkGrads("symtune::rms_clamp_", grads);
  return rmsClampOp().call(grads);
}

at::Tensor clipGradNorm_(at::TensorList grads, double maxNorm) {
  checkGrads("symtune::clip_grad_norm_", grads);
  TORCH_CHECK(maxNorm > 0, "symtune::clip_grad_norm_: max_norm must be positive, got ", maxNorm);
  return clipGradNormOp().call(grads, maxNorm);
}

}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, ADInplaceOrView, m) {
  m.impl("rms_clamp_", &symtune::kernels::rmsClampInplaceOrView);
  m.impl("clip_grad_norm_", &symtune::kernels::clipGradNormInplaceOrView);
}
