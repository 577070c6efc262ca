// CUDA implementation of symtune::bias_dropout_add and its backward: one grid-stride elementwise
// pass each way, the mask's hash per element (Note [Dropout mask]: the same bits as the CPU
// kernels for the same seed), math in float for float and bfloat16; a row bias's gradient is the
// column sums of the input gradient (at::sum over the rows).

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../bias_dropout_add_common.h"
#include "cuda_check.h"
#include "grid.cuh"

namespace symtune::kernels {

namespace {

// columns > 0: a row bias (bias[i % columns]); columns == 0: a full one (bias[i]).
template <typename T>
__global__ void forwardKernel(const T* __restrict__ x, const T* __restrict__ bias,
                              const T* __restrict__ residual, T* out, int64_t n, int64_t columns,
                              DropoutMask m) {
  using Opmath = at::opmath_type<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Opmath z = static_cast<Opmath>(x[i]);
    if (bias != nullptr)
      z += static_cast<Opmath>(bias[columns > 0 ? i % columns : i]);
    out[i] = static_cast<T>(static_cast<Opmath>(residual[i]) + z * m.template factor<Opmath>(i));
  }
}

template <typename T>
__global__ void backwardKernel(const T* __restrict__ g, T* dx, int64_t n, DropoutMask m) {
  using Opmath = at::opmath_type<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = static_cast<T>(static_cast<Opmath>(g[i]) * m.template factor<Opmath>(i));
}

at::Tensor biasDropoutAddCuda(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                              const at::Tensor& residual, double p, int64_t seed) {
  const BiasDropoutAddOperands o = biasDropoutAddOperands(input, bias, residual, p);
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor &x = o.x, &b = o.b, &r = o.r;
  at::Tensor out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0)
    return out.view(input.sizes());
  const int64_t columns = o.layout == BiasLayout::Row ? x.size(-1) : 0;
  const DropoutMask m = dropoutMask(p, seed);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "bias_dropout_add_cuda", [&] {
    forwardKernel<scalar_t>
        <<<elementwiseBlocks(n), kElementwiseThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.const_data_ptr<scalar_t>(), b.defined() ? b.const_data_ptr<scalar_t>() : nullptr,
            r.const_data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n, columns, m);
    SYMTUNE_CUDA_CHECK(cudaGetLastError());
  });
  return out.view(input.sizes());
}

std::tuple<at::Tensor, at::Tensor> biasDropoutAddBackwardCuda(const at::Tensor& gradIn,
                                                              const std::optional<at::Tensor>& bias,
                                                              double p, int64_t seed) {
  const BiasLayout layout = biasDropoutAddBackwardLayout(gradIn, bias, p);
  const c10::cuda::CUDAGuard guard(gradIn.device());
  const at::Tensor g = gradIn.contiguous();
  at::Tensor dx = at::empty_like(g);
  const int64_t n = g.numel();
  if (n > 0) {
    const DropoutMask m = dropoutMask(p, seed);
    AT_DISPATCH_FLOATING_TYPES_AND(
        at::kBFloat16, g.scalar_type(), "bias_dropout_add_bwd_cuda", [&] {
          backwardKernel<scalar_t>
              <<<elementwiseBlocks(n), kElementwiseThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
                  g.const_data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), n, m);
          SYMTUNE_CUDA_CHECK(cudaGetLastError());
        });
  }
  return {dx.view(gradIn.sizes()), biasGradient(dx, layout)};
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("bias_dropout_add_forward", &symtune::kernels::biasDropoutAddCuda);
  m.impl("bias_dropout_add_backward", &symtune::kernels::biasDropoutAddBackwardCuda);
}
