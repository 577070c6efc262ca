#pragma once
// Our in-place ops write through raw pointers, past ATen's in-place machinery, so a tensor they
// write keeps its version unless told: whatever checks a version to see a change (autograd's
// saved tensors, a CUDA graph's static copy of a weight, cuda_graph.cpp) would take the old
// values for current. Private to kernels/.

#include <ATen/core/Tensor.h>

namespace symtune::kernels {

inline void markWritten(at::TensorList written) {
  for (const at::Tensor& t : written) {
    if (t.defined() && !t.is_inference())  // an inference tensor has no version
      t.unsafeGetTensorImpl()->bump_version();
  }
}

}  // namespace symtune::kernels
