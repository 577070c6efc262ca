#pragma once
// A block-wide sum or max for the kernels that give a block to a row (softmax_cross_entropy,
// add_layer_norm): every thread gets the result. `shared` holds blockDim.x values. Private to
// kernels/.

namespace symtune::kernels {

enum class BlockOp { Sum, Max };

template <typename T>
__device__ T blockReduce(T value, T* shared, BlockOp op) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const T other = shared[threadIdx.x + stride];
      const T mine = shared[threadIdx.x];
      shared[threadIdx.x] = op == BlockOp::Max ? (other > mine ? other : mine) : mine + other;
    }
    __syncthreads();
  }
  const T result = shared[0];
  __syncthreads();
  return result;
}

}  // namespace symtune::kernels
