// CUDA implementation of symtune::rms_clamp_ and symtune::clip_grad_norm_: two multi-tensor
// passes — sums of squares (block reductions, one atomic per block into a per-tensor double),
// then the clamp to each tensor's RMS or the scaling by the global factor, both read from device
// memory: no read-back to the host.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../contiguous_lists.h"
#include "cuda_check.h"

namespace symtune::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;
constexpr int kMaxTensors = 48;
constexpr int kMaxBlocks = 320;

struct ChunkMeta {
  void* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  int index[kMaxTensors];  // the tensor's index in the whole list (for the per-tensor sums)
  unsigned char blockTensor[kMaxBlocks];
  int blockChunk[kMaxBlocks];
};
static_assert(sizeof(ChunkMeta) + 64 < 4096, "kernel parameters must stay under 4 KiB");

// Calls launch(meta, blocks) for every batch of (tensor, chunk) blocks.
template <typename Launch>
void forEachBatch(const ContiguousList& tensors, Launch launch) {
  ChunkMeta meta{};
  int slots = 0, blocks = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t n = tensors[i].numel();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || slots == 0) {
        meta.ptr[slots] = tensors[i].data_ptr();
        meta.numel[slots] = n;
        meta.index[slots] = static_cast<int>(i);
        ++slots;
      }
      meta.blockTensor[blocks] = static_cast<unsigned char>(slots - 1);
      meta.blockChunk[blocks] = static_cast<int>(c);
      ++blocks;
      if (blocks == kMaxBlocks || (slots == kMaxTensors && c + 1 == chunks)) {
        launch(meta, blocks);
        slots = blocks = 0;
      }
    }
  }
  if (blocks > 0)
    launch(meta, blocks);
}

template <typename T>
__global__ void sumOfSquaresKernel(ChunkMeta meta, double* sums) {
  using Opmath = at::opmath_type<T>;
  __shared__ double partial[kThreads];
  const int slot = meta.blockTensor[blockIdx.x];
  const T* g = static_cast<const T*>(meta.ptr[slot]);
  const int64_t begin = static_cast<int64_t>(meta.blockChunk[blockIdx.x]) * kChunk;
  const int64_t end = min(meta.numel[slot], begin + kChunk);
  double s = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const Opmath v = static_cast<Opmath>(g[i]);
    s += static_cast<double>(v * v);
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    atomicAdd(sums + meta.index[slot], partial[0]);
}

// rms[i] = sqrt(sums[i] / n_i), then each element clamped to [-rms, rms].
template <typename T>
__global__ void clampKernel(ChunkMeta meta, const double* rms) {
  using Opmath = at::opmath_type<T>;
  const int slot = meta.blockTensor[blockIdx.x];
  T* g = static_cast<T*>(meta.ptr[slot]);
  const int64_t begin = static_cast<int64_t>(meta.blockChunk[blockIdx.x]) * kChunk;
  const int64_t end = min(meta.numel[slot], begin + kChunk);
  const Opmath hi = static_cast<Opmath>(rms[meta.index[slot]]), lo = -hi;
  // torch::clamp's NaNs: a NaN element stays NaN (the comparisons fail), a NaN bound makes every
  // element NaN. (fmin and fmax, which min and max are for floats, drop a NaN operand.)
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const Opmath v = static_cast<Opmath>(g[i]);
    g[i] = static_cast<T>(hi != hi ? hi : (v < lo ? lo : (v > hi ? hi : v)));
  }
}

template <typename T>
__global__ void scaleKernel(ChunkMeta meta, const double* factor) {
  using Opmath = at::opmath_type<T>;
  const double f = *factor;
  if (f >= 1)
    return;
  const int slot = meta.blockTensor[blockIdx.x];
  T* g = static_cast<T*>(meta.ptr[slot]);
  const int64_t begin = static_cast<int64_t>(meta.blockChunk[blockIdx.x]) * kChunk;
  const int64_t end = min(meta.numel[slot], begin + kChunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    g[i] = static_cast<T>(static_cast<Opmath>(g[i]) * static_cast<Opmath>(f));
}

ContiguousList contiguous(at::TensorList grads) {
  ContiguousList g;
  for (size_t i = 0; i < grads.size(); ++i) {
    TORCH_CHECK(grads[i].scalar_type() == grads[0].scalar_type(),
                "symtune gradient clipping on CUDA: one dtype per call, gradient ", i, " is ",
                grads[i].scalar_type(), ", the first ", grads[0].scalar_type());
    g.add(grads[i], true);
  }
  return g;
}

at::Tensor sums(const ContiguousList& g, at::ScalarType dtype, cudaStream_t stream) {
  at::Tensor out = at::zeros({static_cast<int64_t>(g.size())}, g[0].options().dtype(at::kDouble));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "sum_of_squares_cuda", [&] {
    forEachBatch(g, [&](const ChunkMeta& meta, int blocks) {
      sumOfSquaresKernel<scalar_t><<<blocks, kThreads, 0, stream>>>(meta, out.data_ptr<double>());
      SYMTUNE_CUDA_CHECK(cudaGetLastError());
    });
  });
  return out;
}

at::Tensor rmsClampCuda(at::TensorList grads) {
  const c10::cuda::CUDAGuard guard(grads[0].device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  ContiguousList g = contiguous(grads);
  std::vector<int64_t> numels;
  for (const auto& t : g.tensors())
    numels.push_back(std::max<int64_t>(t.numel(), 1));
  const at::Tensor counts = at::tensor(numels, at::kDouble).to(g[0].device(), true);
  const at::Tensor rms = (sums(g, g[0].scalar_type(), stream) / counts).sqrt_();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, g[0].scalar_type(), "rms_clamp_cuda", [&] {
        forEachBatch(g, [&](const ChunkMeta& meta, int blocks) {
          clampKernel<scalar_t>
              <<<blocks, kThreads, 0, stream>>>(meta, rms.const_data_ptr<double>());
          SYMTUNE_CUDA_CHECK(cudaGetLastError());
        });
      });
  g.writeBack();
  return rms;
}

at::Tensor clipGradNormCuda(at::TensorList grads, double maxNorm) {
  const c10::cuda::CUDAGuard guard(grads[0].device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  ContiguousList g = contiguous(grads);
  const at::Tensor norm = sums(g, g[0].scalar_type(), stream).sum().sqrt_();
  const at::Tensor factor = maxNorm / (norm + 1e-6);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, g[0].scalar_type(), "clip_grad_norm_cuda", [&] {
        forEachBatch(g, [&](const ChunkMeta& meta, int blocks) {
          scaleKernel<scalar_t>
              <<<blocks, kThreads, 0, stream>>>(meta, factor.const_data_ptr<double>());
          SYMTUNE_CUDA_CHECK(cudaGetLastError());
        });
      });
  g.writeBack();
  return norm;
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("rms_clamp_", &symtune::kernels::rmsClampCuda);
  m.impl("clip_grad_norm_", &symtune::kernels::clipGradNormCuda);
}
