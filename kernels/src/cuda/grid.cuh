#pragma once
// The launch shape of the elementwise grid-stride kernels: 256 threads a block, enough blocks to
// cover the elements up to eight per multiprocessor (the loop strides over the rest).

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdint>

namespace symtune::kernels {

constexpr int kElementwiseThreads = 256;

inline int elementwiseBlocks(int64_t n) {
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return static_cast<int>(
      std::min<int64_t>((n + kElementwiseThreads - 1) / kElementwiseThreads, sms * 8));
}

}  // namespace symtune::kernels
