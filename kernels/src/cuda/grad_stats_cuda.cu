// CUDA implementation of symtune::grad_stats: a grid-stride pass, block reduction in shared
// memory, and one atomic per block and statistic.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "cuda_check.h"
#include "symtune/kernels/grad_stats.h"

namespace symtune::kernels {

namespace {

constexpr int kThreads = 256;

// |x| of a non-negative double compares like its bit pattern, so atomicMax on the bits works.
__device__ void atomicMaxNonNegative(double* address, double value) {
  atomicMax(reinterpret_cast<unsigned long long*>(address), __double_as_longlong(value));
}

template <typename T>
__global__ void gradStatsKernel(const T* __restrict__ data, int64_t n, double* out) {
  __shared__ double sq[kThreads], ab[kThreads], mx[kThreads];
  __shared__ unsigned long long nan[kThreads], inf[kThreads];
  double s = 0, a = 0, m = 0;
  unsigned long long nn = 0, ni = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = static_cast<double>(data[i]);
    if (isnan(v)) {
      ++nn;
    } else if (isinf(v)) {
      ++ni;
    } else {
      const double av = fabs(v);
      s += v * v;
      a += av;
      m = fmax(m, av);
    }
  }
  const int t = threadIdx.x;
  sq[t] = s;
  ab[t] = a;
  mx[t] = m;
  nan[t] = nn;
  inf[t] = ni;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      sq[t] += sq[t + stride];
      ab[t] += ab[t + stride];
      mx[t] = fmax(mx[t], mx[t + stride]);
      nan[t] += nan[t + stride];
      inf[t] += inf[t + stride];
    }
    __syncthreads();
  }
  if (t == 0) {
    atomicAdd(&out[kSumSquares], sq[0]);
    atomicAdd(&out[kSumAbs], ab[0]);
    atomicMaxNonNegative(&out[kMaxAbs], mx[0]);
    atomicAdd(&out[kNanCount], static_cast<double>(nan[0]));
    atomicAdd(&out[kInfCount], static_cast<double>(inf[0]));
  }
}

// Adds g's statistics into out[0..4] (zeroed by the caller) on the current stream.
void launchGradStats(const at::Tensor& g, double* out) {
  TORCH_CHECK(g.is_floating_point(), "symtune::grad_stats expects a floating point tensor, got ",
              g.scalar_type());
  const at::Tensor c = g.contiguous();
  const int64_t n = c.numel();
  if (n == 0)
    return;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<int64_t>(wanted, static_cast<int64_t>(sms) * 8));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, c.scalar_type(), "grad_stats_cuda", [&] {
        gradStatsKernel<scalar_t>
            <<<blocks, kThreads, 0, stream>>>(c.const_data_ptr<scalar_t>(), n, out);
      });
  SYMTUNE_CUDA_CHECK(cudaGetLastError());
}

at::Tensor gradStatsCuda(const at::Tensor& g) {
  const c10::cuda::CUDAGuard guard(g.device());
  at::Tensor out = at::zeros({kGradStatCount}, g.options().dtype(at::kDouble));
  launchGradStats(g, out.data_ptr<double>());
  return out;
}

at::Tensor gradStatsMultiCuda(at::TensorList grads) {
  const c10::cuda::CUDAGuard guard(grads[0].device());
  at::Tensor out = at::zeros({static_cast<int64_t>(grads.size()), kGradStatCount},
                             grads[0].options().dtype(at::kDouble));
  for (size_t i = 0; i < grads.size(); ++i) {
    TORCH_CHECK(grads[i].device() == grads[0].device(), "symtune::grad_stats_multi: tensor ", i,
                " is on ", grads[i].device(), ", the first on ", grads[0].device());
    launchGradStats(grads[i], out.data_ptr<double>() + i * kGradStatCount);
  }
  return out;
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CUDA, m) {
  m.impl("grad_stats", &symtune::kernels::gradStatsCuda);
  m.impl("grad_stats_multi", &symtune::kernels::gradStatsMultiCuda);
}
