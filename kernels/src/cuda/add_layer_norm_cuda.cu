// CUDA implementation of symtune::add_layer_norm's forward and backward: one block per row, with
// block reductions for the row's mean and variance (forward) and for the two row means of the
// backward; the weight's and bias's gradients are column sums taken with ATen afterwards.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../add_layer_norm_common.h"
#include "block_reduce.cuh"
#include "cuda_check.h"

namespace symtune::kernels {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void forwardKernel(const T* __restrict__ x, const T* __restrict__ r,
                              const T* __restrict__ w, const T* __restrict__ b, T* s, T* y,
                              at::opmath_type<T>* mean, at::opmath_type<T>* rstd, int64_t columns,
                              double eps) {
  using Opmath = at::opmath_type<T>;
  __shared__ Opmath shared[kThreads];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * columns;
  Opmath total = 0;
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
    const T v = static_cast<T>(static_cast<Opmath>(x[o + c]) + static_cast<Opmath>(r[o + c]));
    s[o + c] = v;
    total += static_cast<Opmath>(v);
  }
  const Opmath m = blockReduce(total, shared, BlockOp::Sum) / static_cast<Opmath>(columns);
  Opmath squares = 0;
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
    const Opmath d = static_cast<Opmath>(s[o + c]) - m;
    squares += d * d;
  }
  const Opmath rs =
      rsqrt(blockReduce(squares, shared, BlockOp::Sum) / static_cast<Opmath>(columns) +
            static_cast<Opmath>(eps));
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
    Opmath v = (static_cast<Opmath>(s[o + c]) - m) * rs;
    if (w != nullptr)
      v *= static_cast<Opmath>(w[c]);
    if (b != nullptr)
      v += static_cast<Opmath>(b[c]);
    y[o + c] = static_cast<T>(v);
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = rs;
  }
}

template <typename T>
__global__ void backwardKernel(const T* __restrict__ dy, const T* __restrict__ dsIn,
                               const T* __restrict__ s, const T* __restrict__ w,
                               const at::opmath_type<T>* __restrict__ mean,
                               const at::opmath_type<T>* __restrict__ rstd, T* ds,
                               int64_t columns) {
  using Opmath = at::opmath_type<T>;
  __shared__ Opmath shared[kThreads];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * columns;
  const Opmath m = mean[blockIdx.x], rs = rstd[blockIdx.x];
  Opmath sumD = 0, sumDX = 0;
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
    const Opmath xh = (static_cast<Opmath>(s[o + c]) - m) * rs;
    Opmath d = static_cast<Opmath>(dy[o + c]);
    if (w != nullptr)
      d *= static_cast<Opmath>(w[c]);
    sumD += d;
    sumDX += d * xh;
  }
  const Opmath meanD = blockReduce(sumD, shared, BlockOp::Sum) / static_cast<Opmath>(columns);
  const Opmath meanDX = blockReduce(sumDX, shared, BlockOp::Sum) / static_cast<Opmath>(columns);
  for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
    const Opmath xh = (static_cast<Opmath>(s[o + c]) - m) * rs;
    Opmath d = static_cast<Opmath>(dy[o + c]);
    if (w != nullptr)
      d *= static_cast<Opmath>(w[c]);
    Opmath out = rs * (d - meanD - xh * meanDX);
    if (dsIn != nullptr)
      out += static_cast<Opmath>(dsIn[o + c]);
    ds[o + c] = static_cast<T>(out);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forwardCuda(
    const at::Tensor& inputIn, const at::Tensor& residualIn,
    const std::optional<at::Tensor>& weightIn, const std::optional<at::Tensor>& biasIn,
    double eps) {
  const c10::cuda::CUDAGuard guard(inputIn.device());
  const AddLayerNormForward f =
      addLayerNormForwardOperands(inputIn, residualIn, weightIn, biasIn, eps);
  const at::Tensor &x = f.x, &r = f.r, &w = f.w, &b = f.b, &s = f.s, &y = f.y, &mean = f.mean,
                   &rstd = f.rstd;
  const int64_t columns = f.columns, rows = f.rows;
  if (rows > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "add_layer_norm_cuda", [&] {
      using Opmath = at::opmath_type<scalar_t>;
      forwardKernel<scalar_t><<<rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          x.const_data_ptr<scalar_t>(), r.const_data_ptr<scalar_t>(),
          w.defined() ? w.const_data_ptr<scalar_t>() : nullptr,
          b.defined() ? b.const_data_ptr<scalar_t>() : nullptr, s.data_ptr<scalar_t>(),
          y.data_ptr<scalar_t>(), mean.data_ptr<Opmath>(), rstd.data_ptr<Opmath>(), columns, eps);
      SYMTUNE_CUDA_CHECK(cudaGetLastError());
    });
  }
  return {y.view(inputIn.sizes()), s.view(inputIn.sizes()), mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backwardCuda(
    const at::Tensor& gradOut, const std::optional<at::Tensor>& gradSumIn, const at::Tensor& sum,
    const at::Tensor& meanIn, const at::Tensor& rstdIn, const std::optional<at::Tensor>& weightIn) {
  // The checks before the guard: an argument on the CPU among CUDA ones is dispatched here, and
  // gets their message rather than the guard's.
  checkAddLayerNormBackwardArguments(gradOut, gradSumIn, sum, meanIn, rstdIn, weightIn);
  const c10::cuda::CUDAGuard guard(sum.device());
  const AddLayerNormBackward ops =
      addLayerNormBackwardOperands(gradOut, gradSumIn, sum, meanIn, rstdIn, weightIn);
  const at::Tensor &dy = ops.dy, &s = ops.s, &dsIn = ops.dsIn, &w = ops.w, &mean = ops.mean,
                   &rstd = ops.rstd, &ds = ops.ds;
  const int64_t columns = ops.columns, rows = ops.rows;
  if (rows > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, s.scalar_type(), "add_layer_norm_bwd_cuda", [&] {
      using Opmath = at::opmath_type<scalar_t>;
      backwardKernel<scalar_t><<<rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          dy.const_data_ptr<scalar_t>(), dsIn.defined() ? dsIn.const_data_ptr<scalar_t>() : nullptr,
          s.const_data_ptr<scalar_t>(), w.defined() ? w.const_data_ptr<scalar_t>() : nullptr,
          mean.const_data_ptr<Opmath>(), rstd.const_data_ptr<Opmath>(), ds.data_ptr<scalar_t>(),
          columns);
      SYMTUNE_CUDA_CHECK(cudaGetLastError());
    });
  }
  // The weight's and bias's gradients: column sums over the rows, in the math type.
  const auto math = layerNormMathType(s.scalar_type());
  const at::Tensor xh =
      (s.reshape({rows, columns}).to(math) - mean.reshape({rows, 1})) * rstd.reshape({rows, 1});
  const at::Tensor g = dy.reshape({rows, columns}).to(math);
  return {ds.view(sum.sizes()), (g * xh).sum(0).to(s.scalar_type()), g.sum(0).to(s.scalar_type())};
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("add_layer_norm_forward", &symtune::kernels::forwardCuda);
  m.impl("add_layer_norm_backward", &symtune::kernels::backwardCuda);
}
