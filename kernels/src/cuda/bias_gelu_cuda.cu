// CUDA implementation of symtune::bias_gelu and its backward: one grid-stride elementwise pass
// each way (the bias indexed by the column), math in float for float and bfloat16; a row bias's
// gradient is the column sums of the input gradient (at::sum over the rows).

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../bias_gelu_common.h"
#include "cuda_check.h"
#include "grid.cuh"

namespace symtune::kernels {

namespace {

template <typename T>
__device__ inline T gelu(T z, bool tanhApprox) {
  using M = GeluMath<T>;
  if (tanhApprox)
    return T(0.5) * z * (T(1) + tanh(M::kSqrt2OverPi * (z + M::kCubic * z * z * z)));
  return T(0.5) * z * (T(1) + erf(z * M::kSqrtHalf));
}

template <typename T>
__device__ inline T geluGrad(T z, bool tanhApprox) {
  using M = GeluMath<T>;
  if (tanhApprox) {
    const T z2 = z * z;
    const T t = tanh(M::kSqrt2OverPi * (z + M::kCubic * z2 * z));
    return T(0.5) * (T(1) + t) +
           T(0.5) * z * (T(1) - t * t) * M::kSqrt2OverPi * (T(1) + T(3) * M::kCubic * z2);
  }
  return T(0.5) * (T(1) + erf(z * M::kSqrtHalf)) + z * exp(T(-0.5) * z * z) * M::kInvSqrt2Pi;
}

// columns > 0: a row bias (bias[i % columns]); columns == 0: a full one (bias[i]).
template <typename T>
__global__ void forwardKernel(const T* __restrict__ x, const T* __restrict__ bias, T* y, int64_t n,
                              int64_t columns, bool tanhApprox) {
  using Opmath = at::opmath_type<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Opmath z = static_cast<Opmath>(x[i]);
    if (bias != nullptr)
      z += static_cast<Opmath>(bias[columns > 0 ? i % columns : i]);
    y[i] = static_cast<T>(gelu(z, tanhApprox));
  }
}

template <typename T>
__global__ void backwardKernel(const T* __restrict__ g, const T* __restrict__ x,
                               const T* __restrict__ bias, T* dx, int64_t n, int64_t columns,
                               bool tanhApprox) {
  using Opmath = at::opmath_type<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Opmath z = static_cast<Opmath>(x[i]);
    if (bias != nullptr)
      z += static_cast<Opmath>(bias[columns > 0 ? i % columns : i]);
    dx[i] = static_cast<T>(static_cast<Opmath>(g[i]) * geluGrad(z, tanhApprox));
  }
}

at::Tensor biasGeluCuda(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                        c10::string_view approximate) {
  const BiasGeluOperands o = biasGeluOperands(input, bias, approximate);
  if (o.layout == BiasLayout::Broadcast)
    return composedForward(input, *bias, approximate);
  const c10::cuda::CUDAGuard guard(input.device());
  const bool tanhApprox = o.tanhApprox;
  const BiasLayout layout = o.layout;
  const at::Tensor &x = o.x, &b = o.b;
  at::Tensor y = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0)
    return y;
  const int64_t columns = layout == BiasLayout::Row ? x.size(-1) : 0;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "bias_gelu_cuda", [&] {
    forwardKernel<scalar_t>
        <<<elementwiseBlocks(n), kElementwiseThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.const_data_ptr<scalar_t>(), b.defined() ? b.const_data_ptr<scalar_t>() : nullptr,
            y.data_ptr<scalar_t>(), n, columns, tanhApprox);
    SYMTUNE_CUDA_CHECK(cudaGetLastError());
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> biasGeluBackwardCuda(const at::Tensor& gradIn,
                                                        const at::Tensor& input,
                                                        const std::optional<at::Tensor>& bias,
                                                        c10::string_view approximate) {
  const BiasGeluOperands o = biasGeluOperands(input, bias, approximate, gradIn);
  if (o.layout == BiasLayout::Broadcast)
    return composedBackward(gradIn, input, *bias, approximate);
  const c10::cuda::CUDAGuard guard(input.device());
  const bool tanhApprox = o.tanhApprox;
  const BiasLayout layout = o.layout;
  const at::Tensor &g = o.g, &x = o.x, &b = o.b;
  at::Tensor dx = at::empty_like(x);
  const int64_t n = x.numel();
  const int64_t columns = layout == BiasLayout::Row ? x.size(-1) : 0;
  if (n > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "bias_gelu_backward_cuda", [&] {
      backwardKernel<scalar_t>
          <<<elementwiseBlocks(n), kElementwiseThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
              g.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
              b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, dx.data_ptr<scalar_t>(), n,
              columns, tanhApprox);
      SYMTUNE_CUDA_CHECK(cudaGetLastError());
    });
  }
  return {dx.view(input.sizes()), biasGradient(dx, layout)};
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("bias_gelu", &symtune::kernels::biasGeluCuda);
  m.impl("bias_gelu_backward", &symtune::kernels::biasGeluBackwardCuda);
}
