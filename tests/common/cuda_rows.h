#pragma once
// For the Qt-free suites: whether a test's CUDA rows can run here. When they cannot, the test says
// why in a line that begins "CUDA rows skipped" — on a machine with a GPU, scripts/gpu-check.sh
// treats that line as a failure.

#include "doctest_torch.h"

#include <torch/cuda.h>

namespace symtune::test {

inline bool cudaRowsRun() {
#ifndef SYMTUNE_HAVE_TORCH_CUDA
  MESSAGE("CUDA rows skipped: this build has no CUDA kernels (SYMTUNE_WITH_CUDA=OFF)");
  return false;
#else
  if (!torch::cuda::is_available()) {
    MESSAGE("CUDA rows skipped: no CUDA device here");
    return false;
  }
  return true;
#endif
}

}  // namespace symtune::test
