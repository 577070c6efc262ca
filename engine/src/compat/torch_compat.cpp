#include "symtune/compat/torch_compat.h"

#include <ATen/Context.h>

#ifdef SYMTUNE_HAVE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

namespace symtune::compat {

std::optional<int64_t> cudaPeakAllocatedBytes([[maybe_unused]] int device) {
#ifdef SYMTUNE_HAVE_TORCH_CUDA
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
  return stats.allocated_bytes[0].peak;  // index 0: StatType::AGGREGATE
#else
  return std::nullopt;
#endif
}

void cudaResetPeakStats([[maybe_unused]] int device) {
#ifdef SYMTUNE_HAVE_TORCH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
#endif
}

std::string cudaDeviceName([[maybe_unused]] int device) {
#ifdef SYMTUNE_HAVE_TORCH_CUDA
  // -1 (a device named "cuda" without an index): the current one.
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // leave no error for the next launch check to find
    return {};
  }
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) == cudaSuccess)
    return props.name;
  (void)cudaGetLastError();
#endif
  return {};
}

bool cudnnConvolutionsInTf32() {
#if SYMTUNE_TORCH_AT_LEAST(2, 9)
  return at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV) ==
         at::Float32Precision::TF32;
#else
  return at::globalContext().allowTF32CuDNN();
#endif
}

void setCudnnConvolutionsInTf32(bool allowed) {
#if SYMTUNE_TORCH_AT_LEAST(2, 9)
  at::globalContext().setFloat32Precision(
      at::Float32Backend::CUDA, at::Float32Op::CONV,
      allowed ? at::Float32Precision::TF32 : at::Float32Precision::IEEE);
#else
  at::globalContext().setAllowTF32CuDNN(allowed);
#endif
}

}  // namespace symtune::compat
