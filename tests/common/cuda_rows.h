#pragma once
// For the Qt-free suites: whether a test's CUDA rows can run here. When they cannot, the test says
// why in a line that begins "CUDA rows skipped" — on a machine with a GPU, scripts/gpu-check.sh
// treats that line as a failure.

#include "doctest_torch.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <string>

namespace symtune::test {

inline bool cudaRowsRun() {
  // A suite's CPU-capability variants (tests/CMakeLists.txt) run it again for the CPU kernels'
  // narrower builds; its CUDA rows run no differently there, and run in the suite's own test.
  if (const char* capability = std::getenv("SYMTUNE_CPU_CAPABILITY");
      capability != nullptr && *capability != '\0') {
    MESSAGE("CUDA rows left to this suite's own test: this run is its ", std::string(capability),
            " CPU-capability variant");
    return false;
  }
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
