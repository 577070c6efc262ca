// CUDA implementation of symtune::gru_cell and its backward: one grid-stride elementwise pass
// each way over the B x H outputs, each thread reading its column's six gate values and the
// state (rows may be strided) and, backward, recomputing r, z and n and writing the three
// gradients; rows the mask drops copy the state forward and pass the gradient to it backward.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../gru_cell_common.h"
#include "cuda_check.h"
#include "grid.cuh"

namespace symtune::kernels {

namespace {

template <typename T>
__device__ inline T sigmoid(T x) {
  return T(1) / (T(1) + exp(-x));
}

// Row strides of the operands (in elements); every row's values contiguous.
struct Strides {
  int64_t in, hidden, state, grad;
};

template <typename T>
__global__ void forwardKernel(const T* __restrict__ in, const T* __restrict__ hid,
                              const T* __restrict__ state, const bool* __restrict__ keep, T* out,
                              int64_t rows, int64_t H, Strides s) {
  const int64_t n = rows * H;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / H, j = i % H;
    const T h = state[b * s.state + j];
    if (keep != nullptr && !keep[b]) {
      out[i] = h;
      continue;
    }
    const T* gi = in + b * s.in;
    const T* gh = hid + b * s.hidden;
    const T r = sigmoid(gi[j] + gh[j]);
    const T z = sigmoid(gi[H + j] + gh[H + j]);
    const T nn = tanh(gi[2 * H + j] + r * gh[2 * H + j]);
    out[i] = (T(1) - z) * nn + z * h;
  }
}

template <typename T>
__global__ void backwardKernel(const T* __restrict__ grad, const T* __restrict__ in,
                               const T* __restrict__ hid, const T* __restrict__ state,
                               const bool* __restrict__ keep, T* gIn, T* gHid, T* gState,
                               int64_t rows, int64_t H, Strides s) {
  const int64_t n = rows * H;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / H, j = i % H;
    const T g = grad[b * s.grad + j];
    T* gi = gIn + b * 3 * H;
    T* gh = gHid + b * 3 * H;
    if (keep != nullptr && !keep[b]) {
      gi[j] = gi[H + j] = gi[2 * H + j] = T(0);
      gh[j] = gh[H + j] = gh[2 * H + j] = T(0);
      gState[i] = g;
      continue;
    }
    const T* xi = in + b * s.in;
    const T* xh = hid + b * s.hidden;
    const T h = state[b * s.state + j];
    const T r = sigmoid(xi[j] + xh[j]);
    const T z = sigmoid(xi[H + j] + xh[H + j]);
    const T hn = xh[2 * H + j];
    const T nn = tanh(xi[2 * H + j] + r * hn);
    const T dz = g * (h - nn) * z * (T(1) - z);
    const T dn = g * (T(1) - z) * (T(1) - nn * nn);
    const T dr = dn * hn * r * (T(1) - r);
    gi[j] = gh[j] = dr;
    gi[H + j] = gh[H + j] = dz;
    gi[2 * H + j] = dn;
    gh[2 * H + j] = dn * r;
    gState[i] = g * z;
  }
}

at::Tensor keepOf(const std::optional<at::Tensor>& keep) {
  return keep.has_value() && keep->defined() ? keep->reshape({-1}).contiguous() : at::Tensor();
}

at::Tensor gruCellForwardCuda(const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
                              const at::Tensor& hidden, const std::optional<at::Tensor>& keep) {
  const GruCellShape shape = gruCellShape(gatesIn, gatesHidden, hidden, keep);
  const c10::cuda::CUDAGuard guard(hidden.device());
  const at::Tensor in = rowsContiguous(gatesIn), hid = rowsContiguous(gatesHidden),
                   state = rowsContiguous(hidden), kept = keepOf(keep);
  at::Tensor out = at::empty({shape.rows, shape.hidden}, hidden.options());
  const int64_t n = shape.rows * shape.hidden;
  if (n == 0)
    return out;
  const Strides s{in.stride(0), hid.stride(0), state.stride(0), 0};
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_cell_forward_cuda", [&] {
    forwardKernel<scalar_t>
        <<<elementwiseBlocks(n), kElementwiseThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            in.const_data_ptr<scalar_t>(), hid.const_data_ptr<scalar_t>(),
            state.const_data_ptr<scalar_t>(),
            kept.defined() ? kept.const_data_ptr<bool>() : nullptr, out.data_ptr<scalar_t>(),
            shape.rows, shape.hidden, s);
    SYMTUNE_CUDA_CHECK(cudaGetLastError());
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gruCellBackwardCuda(
    const at::Tensor& grad, const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
    const at::Tensor& hidden, const std::optional<at::Tensor>& keep) {
  const GruCellShape shape = gruCellShape(gatesIn, gatesHidden, hidden, keep);
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == shape.rows && grad.size(1) == shape.hidden &&
                  grad.scalar_type() == hidden.scalar_type() && grad.device() == hidden.device(),
              "symtune::gru_cell_backward: the gradient must be ", hidden.scalar_type(), " ",
              hidden.sizes(), " on ", hidden.device(), ", got ", grad.scalar_type(), " ",
              grad.sizes());
  const c10::cuda::CUDAGuard guard(hidden.device());
  const at::Tensor g = rowsContiguous(grad), in = rowsContiguous(gatesIn),
                   hid = rowsContiguous(gatesHidden), state = rowsContiguous(hidden),
                   kept = keepOf(keep);
  at::Tensor gradIn = at::empty({shape.rows, 3 * shape.hidden}, hidden.options());
  at::Tensor gradHid = at::empty({shape.rows, 3 * shape.hidden}, hidden.options());
  at::Tensor gradState = at::empty({shape.rows, shape.hidden}, hidden.options());
  const int64_t n = shape.rows * shape.hidden;
  if (n == 0)
    return {gradIn, gradHid, gradState};
  const Strides s{in.stride(0), hid.stride(0), state.stride(0), g.stride(0)};
  AT_DISPATCH_FLOATING_TYPES(hidden.scalar_type(), "gru_cell_backward_cuda", [&] {
    backwardKernel<scalar_t>
        <<<elementwiseBlocks(n), kElementwiseThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            g.const_data_ptr<scalar_t>(), in.const_data_ptr<scalar_t>(),
            hid.const_data_ptr<scalar_t>(), state.const_data_ptr<scalar_t>(),
            kept.defined() ? kept.const_data_ptr<bool>() : nullptr, gradIn.data_ptr<scalar_t>(),
            gradHid.data_ptr<scalar_t>(), gradState.data_ptr<scalar_t>(), shape.rows, shape.hidden,
            s);
    SYMTUNE_CUDA_CHECK(cudaGetLastError());
  });
  return {gradIn, gradHid, gradState};
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("gru_cell_forward", &symtune::kernels::gruCellForwardCuda);
  m.impl("gru_cell_backward", &symtune::kernels::gruCellBackwardCuda);
}
