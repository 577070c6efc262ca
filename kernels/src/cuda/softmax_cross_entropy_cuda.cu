// CUDA implementation of symtune::softmax_cross_entropy's forward and backward: one block per
// row — a block-wide max, then a block-wide sum of exp(x - max) — each row's loss and log-sum-exp
// written out, the mean taken on the device; the backward one elementwise pass. No read-back:
// out-of-range targets are caught by a device-side check that makes the kernel fail.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cfloat>

#include "../softmax_cross_entropy_common.h"
#include "block_reduce.cuh"
#include "cuda_check.h"

namespace symtune::kernels {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void forwardKernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                              int64_t columns, int64_t ignoreIndex,
                              at::opmath_type<T>* __restrict__ lse, at::opmath_type<T>* rowLoss,
                              at::opmath_type<T>* counted) {
  using Opmath = at::opmath_type<T>;
  __shared__ Opmath shared[kThreads];
  const int64_t r = blockIdx.x;
  const T* x = logits + r * columns;
  Opmath m = -INFINITY;
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x)
    m = max(m, static_cast<Opmath>(x[c]));
  m = blockReduce(m, shared, BlockOp::Max);
  Opmath s = 0;
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x)
    s += exp(static_cast<Opmath>(x[c]) - m);
  s = blockReduce(s, shared, BlockOp::Sum);
  if (threadIdx.x == 0) {
    const Opmath l = isinf(m) && m < 0 ? m : m + log(s);  // +inf: NaN, as ATen's
    lse[r] = l;
    const int64_t t = target[r];
    CUDA_KERNEL_ASSERT(t == ignoreIndex || (t >= 0 && t < columns));
    const bool used = t != ignoreIndex;
    rowLoss[r] = used ? l - static_cast<Opmath>(x[t]) : Opmath(0);
    counted[r] = used ? Opmath(1) : Opmath(0);
  }
}

template <typename T>
__global__ void backwardKernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                               const at::opmath_type<T>* __restrict__ lse,
                               const at::opmath_type<T>* __restrict__ scale, int64_t columns,
                               int64_t ignoreIndex, T* __restrict__ dx) {
  using Opmath = at::opmath_type<T>;
  const int64_t r = blockIdx.x;
  const int64_t t = target[r];
  const bool used = t != ignoreIndex;
  const Opmath l = lse[r], s = *scale;
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
    const Opmath p = used ? exp(static_cast<Opmath>(logits[r * columns + c]) - l) * s : Opmath(0);
    dx[r * columns + c] = static_cast<T>(c == t && used ? p - s : p);
  }
}

at::ScalarType mathType(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

std::tuple<at::Tensor, at::Tensor> forwardCuda(const at::Tensor& logitsIn,
                                               const at::Tensor& targetIn, int64_t ignoreIndex) {
  checkCrossEntropyArguments(logitsIn, targetIn);
  const c10::cuda::CUDAGuard guard(logitsIn.device());
  const at::Tensor logits = logitsIn.contiguous(), target = targetIn.contiguous();
  const int64_t rows = logits.size(0), columns = logits.size(1);
  const auto math = logits.options().dtype(mathType(logits.scalar_type()));
  at::Tensor lse = at::empty({rows}, math), rowLoss = at::empty({rows}, math),
             counted = at::empty({rows}, math);
  if (rows > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, logits.scalar_type(), "softmax_ce_cuda", [&] {
      using Opmath = at::opmath_type<scalar_t>;
      forwardKernel<scalar_t><<<rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          logits.const_data_ptr<scalar_t>(), target.const_data_ptr<int64_t>(), columns, ignoreIndex,
          lse.data_ptr<Opmath>(), rowLoss.data_ptr<Opmath>(), counted.data_ptr<Opmath>());
      SYMTUNE_CUDA_CHECK(cudaGetLastError());
    });
  }
  // The mean over the rows that count: 0 / 0 is NaN, as PyTorch's.
  const at::Tensor loss = (rowLoss.sum() / counted.sum()).to(logits.scalar_type());
  return {loss, lse};
}

at::Tensor backwardCuda(const at::Tensor& grad, const at::Tensor& logitsIn,
                        const at::Tensor& targetIn, const at::Tensor& lse, int64_t ignoreIndex) {
  checkCrossEntropyBackwardArguments(grad, logitsIn, targetIn, lse);
  const c10::cuda::CUDAGuard guard(logitsIn.device());
  const at::Tensor logits = logitsIn.contiguous(), target = targetIn.contiguous();
  const int64_t rows = logits.size(0), columns = logits.size(1);
  at::Tensor dx = at::empty_like(logits);
  if (rows == 0)
    return dx;
  // grad / count, on the device.
  const at::Tensor count = target.ne(ignoreIndex).sum().clamp_min(1).to(lse.scalar_type());
  const at::Tensor scale = grad.to(lse.scalar_type()) / count;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, logits.scalar_type(), "softmax_ce_bwd_cuda", [&] {
    using Opmath = at::opmath_type<scalar_t>;
    backwardKernel<scalar_t><<<rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        logits.const_data_ptr<scalar_t>(), target.const_data_ptr<int64_t>(),
        lse.const_data_ptr<Opmath>(), scale.const_data_ptr<Opmath>(), columns, ignoreIndex,
        dx.data_ptr<scalar_t>());
    SYMTUNE_CUDA_CHECK(cudaGetLastError());
  });
  return dx.view(logitsIn.sizes());
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("softmax_cross_entropy_forward", &symtune::kernels::forwardCuda);
  m.impl("softmax_cross_entropy_backward", &symtune::kernels::backwardCuda);
}
