// CUDA implementation of symtune::fused_adam_ and symtune::fused_sgd_: a multi-tensor apply.
// Each launch carries up to kMaxTensors tensors' pointers and up to kMaxBlocks (tensor, chunk)
// pairs by value in its parameters; each block updates one chunk of one tensor in one pass
// (Note [One pass]). A model's parameters take a few launches instead of ten per parameter.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../contiguous_lists.h"
#include "../fused_optim_checks.h"
#include "cuda_check.h"
#include "symtune/kernels/fused_optim.h"

namespace symtune::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;  // elements per block
constexpr int kMaxTensors = 24;
constexpr int kMaxBlocks = 256;

// Kernel parameters are limited to 4 KiB: 4 lists × 24 pointers, per-tensor sizes and
// coefficients, and the block map fit with room to spare.
struct LaunchMeta {
  void* ptr[4][kMaxTensors];
  int64_t numel[kMaxTensors];
  double stepSize[kMaxTensors];  // Adam: lr / (1 - beta1^t)
  double bc2Sqrt[kMaxTensors];   // Adam: sqrt(1 - beta2^t)
  int fresh[kMaxTensors];        // SGD: the momentum buffer's first step
  unsigned char blockTensor[kMaxBlocks];
  int blockChunk[kMaxBlocks];
};
static_assert(sizeof(LaunchMeta) + 128 < 4096, "kernel parameters must stay under 4 KiB");

// The tensor slot and element range of this block's chunk.
struct BlockChunk {
  int t;
  int64_t begin, end;
};

__device__ inline BlockChunk blockChunk(const LaunchMeta& meta) {
  const int t = meta.blockTensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(meta.blockChunk[blockIdx.x]) * kChunk;
  return {t, begin, min(meta.numel[t], begin + kChunk)};
}

// 1 - beta is taken in double here, as torch::optim takes it before ATen rounds it to float: in
// float, 1 - 0.999f is 0.999987e-3, and every second moment came out 1.3e-5 (relative) off
// torch::optim's on the GPU (an H200, 2026-12-04).
struct AdamScalars {
  double beta1, beta2, oneMinusBeta1, oneMinusBeta2, eps, weightDecay, decay;
  bool coupled;
};

template <typename T>
__global__ void adamKernel(LaunchMeta meta, AdamScalars s) {
  using Opmath = at::opmath_type<T>;
  const auto [t, begin, end] = blockChunk(meta);
  T* p = static_cast<T*>(meta.ptr[0][t]);
  const T* g = static_cast<const T*>(meta.ptr[1][t]);
  T* m = static_cast<T*>(meta.ptr[2][t]);
  T* v = static_cast<T*>(meta.ptr[3][t]);
  const Opmath beta1 = static_cast<Opmath>(s.beta1), beta2 = static_cast<Opmath>(s.beta2);
  const Opmath keep1 = static_cast<Opmath>(s.oneMinusBeta1);
  const Opmath keep2 = static_cast<Opmath>(s.oneMinusBeta2);
  const Opmath eps = static_cast<Opmath>(s.eps), wd = static_cast<Opmath>(s.weightDecay);
  const Opmath decay = static_cast<Opmath>(s.decay);
  const Opmath stepSize = static_cast<Opmath>(meta.stepSize[t]);
  const Opmath bc2Sqrt = static_cast<Opmath>(meta.bc2Sqrt[t]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    Opmath pv = static_cast<Opmath>(p[i]), gv = static_cast<Opmath>(g[i]);
    if (s.coupled)
      gv = gv + wd * pv;
    pv = pv * decay;
    const Opmath mv = static_cast<Opmath>(m[i]) * beta1 + keep1 * gv;
    const Opmath vv = static_cast<Opmath>(v[i]) * beta2 + keep2 * gv * gv;
    const Opmath denom = sqrt(vv) / bc2Sqrt + eps;
    p[i] = static_cast<T>(pv - stepSize * mv / denom);
    m[i] = static_cast<T>(mv);
    v[i] = static_cast<T>(vv);
  }
}

struct SgdScalars {
  double lr, momentum, keep, weightDecay;
  bool nesterov, buffers;
};

template <typename T>
__global__ void sgdKernel(LaunchMeta meta, SgdScalars s) {
  using Opmath = at::opmath_type<T>;
  const auto [t, begin, end] = blockChunk(meta);
  T* p = static_cast<T*>(meta.ptr[0][t]);
  const T* g = static_cast<const T*>(meta.ptr[1][t]);
  T* buf = static_cast<T*>(meta.ptr[2][t]);
  const bool fresh = meta.fresh[t] != 0;
  const Opmath lr = static_cast<Opmath>(s.lr), momentum = static_cast<Opmath>(s.momentum);
  const Opmath keep = static_cast<Opmath>(s.keep), wd = static_cast<Opmath>(s.weightDecay);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const Opmath pv = static_cast<Opmath>(p[i]);
    Opmath d = static_cast<Opmath>(g[i]);
    if (s.weightDecay != 0)
      d = d + wd * pv;
    if (s.buffers) {
      const Opmath b = fresh ? d : static_cast<Opmath>(buf[i]) * momentum + keep * d;
      buf[i] = static_cast<T>(b);
      d = s.nesterov ? d + momentum * b : b;
    }
    p[i] = static_cast<T>(pv - lr * d);
  }
}

// Fills LaunchMeta with the tensors' chunks and launches `launch(meta, blocks)` whenever it is
// full, then for the rest. `setTensor(meta, slot, i)` fills the per-tensor fields of tensor i.
template <typename SetTensor, typename Launch>
void multiTensorApply(size_t count, const std::vector<int64_t>& numels, SetTensor setTensor,
                      Launch launch) {
  LaunchMeta meta{};
  int tensors = 0, blocks = 0;
  for (size_t i = 0; i < count; ++i) {
    const int64_t n = numels[i];
    if (n == 0)
      continue;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || tensors == 0) {  // the tensor takes a slot (again, after a launch)
        setTensor(meta, tensors, i);
        meta.numel[tensors] = n;
        ++tensors;
      }
      meta.blockTensor[blocks] = static_cast<unsigned char>(tensors - 1);
      meta.blockChunk[blocks] = static_cast<int>(c);
      ++blocks;
      const bool lastChunk = c + 1 == chunks;
      if (blocks == kMaxBlocks || (tensors == kMaxTensors && lastChunk)) {
        launch(meta, blocks);
        tensors = blocks = 0;
      }
    }
  }
  if (blocks > 0)
    launch(meta, blocks);
}

void fusedAdamCuda(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,
                   at::TensorList expAvgSqs, c10::IntArrayRef steps, double lr, double beta1,
                   double beta2, double eps, double weightDecay, bool decoupled) {
  checkFusedAdamArguments(params, grads, expAvgs, expAvgSqs, steps);
  const c10::cuda::CUDAGuard guard(params[0].device());
  ContiguousList p, g, m, v;
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(params[i].scalar_type() == params[0].scalar_type(),
                "symtune::fused_adam_ on CUDA: one dtype per call, parameter ", i, " is ",
                params[i].scalar_type(), ", the first ", params[0].scalar_type());
    p.add(params[i], true);
    g.add(grads[i], false);
    m.add(expAvgs[i], true);
    v.add(expAvgSqs[i], true);
    numels.push_back(params[i].numel());
  }
  const AdamScalars s{beta1,
                      beta2,
                      1 - beta1,
                      1 - beta2,
                      eps,
                      weightDecay,
                      decoupled ? 1 - lr * weightDecay : 1.0,
                      !decoupled && weightDecay != 0};
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, params[0].scalar_type(), "fused_adam_cuda", [&] {
        multiTensorApply(
            params.size(), numels,
            [&](LaunchMeta& meta, int slot, size_t i) {
              meta.ptr[0][slot] = p[i].data_ptr();
              meta.ptr[1][slot] = const_cast<void*>(g[i].const_data_ptr());
              meta.ptr[2][slot] = m[i].data_ptr();
              meta.ptr[3][slot] = v[i].data_ptr();
              const double t = static_cast<double>(steps[i]);
              meta.stepSize[slot] = lr / (1 - std::pow(beta1, t));
              meta.bc2Sqrt[slot] = std::sqrt(1 - std::pow(beta2, t));
            },
            [&](const LaunchMeta& meta, int blocks) {
              adamKernel<scalar_t><<<blocks, kThreads, 0, stream>>>(meta, s);
              SYMTUNE_CUDA_CHECK(cudaGetLastError());
            });
      });
  p.writeBack();
  m.writeBack();
  v.writeBack();
}

void fusedSgdCuda(at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers,
                  c10::IntArrayRef fresh, double lr, double momentum, double dampening,
                  double weightDecay, bool nesterov) {
  checkFusedSgdArguments(params, grads, momentumBuffers, fresh, momentum);
  const c10::cuda::CUDAGuard guard(params[0].device());
  const bool buffers = momentum != 0;
  ContiguousList p, g, b;
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(params[i].scalar_type() == params[0].scalar_type(),
                "symtune::fused_sgd_ on CUDA: one dtype per call, parameter ", i, " is ",
                params[i].scalar_type(), ", the first ", params[0].scalar_type());
    p.add(params[i], true);
    g.add(grads[i], false);
    if (buffers)
      b.add(momentumBuffers[i], true);
    numels.push_back(params[i].numel());
  }
  const SgdScalars s{lr, momentum, 1 - dampening, weightDecay, nesterov, buffers};
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, params[0].scalar_type(), "fused_sgd_cuda", [&] {
        multiTensorApply(
            params.size(), numels,
            [&](LaunchMeta& meta, int slot, size_t i) {
              meta.ptr[0][slot] = p[i].data_ptr();
              meta.ptr[1][slot] = const_cast<void*>(g[i].const_data_ptr());
              meta.ptr[2][slot] = buffers ? b[i].data_ptr() : nullptr;
              meta.fresh[slot] = buffers && fresh[i] != 0 ? 1 : 0;
            },
            [&](const LaunchMeta& meta, int blocks) {
              sgdKernel<scalar_t><<<blocks, kThreads, 0, stream>>>(meta, s);
              SYMTUNE_CUDA_CHECK(cudaGetLastError());
            });
      });
  p.writeBack();
  b.writeBack();
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("fused_adam_", &symtune::kernels::fusedAdamCuda);
  m.impl("fused_sgd_", &symtune::kernels::fusedSgdCuda);
}
