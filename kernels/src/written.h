#pragma once
// Our in-place ops write through raw pointers, past ATen's in-place machinery, so a tensor they
// write keeps its version unless told: whatever checks a version to see a change (autograd's
// saved tensors, a CUDA graph's static copy of a weight, cuda_graph.cpp) would take the old
// values for current. Private to kernels/.
//
// Note [In-place ops move versions]
// ATen moves an in-place op's versions in its ADInplaceOrView kernel, which every call through
// the dispatcher passes on the way to the backend's. Ours do the same: the operators with
// written (`Tensor(a!)`) arguments — fused_adam_, fused_sgd_, rms_clamp_, clip_grad_norm_ —
// have an ADInplaceOrView kernel that runs the backend's below it and then marks what it wrote.
// The versions moved in the C++ wrappers only, so the same op called by name
// (torch.ops.symtune.clip_grad_norm_ in TorchScript, the dispatcher from C++) left them as they
// were. As with ATen's ops, a call below ADInplaceOrView (at::AutoDispatchBelowADInplaceOrView)
// moves none, and an inference tensor has none to move.

#include <ATen/core/Tensor.h>

namespace symtune::kernels {

inline void markWritten(at::TensorList written) {
  for (const at::Tensor& t : written) {
    if (t.defined() && !t.is_inference())  // an inference tensor has no version
      t.unsafeGetTensorImpl()->bump_version();
  }
}

}  // namespace symtune::kernels
