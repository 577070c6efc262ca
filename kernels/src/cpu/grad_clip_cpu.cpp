// CPU implementation of symtune::rms_clamp_ and symtune::clip_grad_norm_: all chunks of all
// gradients in one parallel loop per pass — the sums of squares (float lanes within a block,
// double across blocks), then the clamp or the scaling, vectorized (at::vec).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/vec.h>

#include "../contiguous_lists.h"
#include "../parallel.h"
#include "cpu_kernels.h"
#include "symtune/kernels/grad_clip.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

constexpr int64_t kGrain = 32768;
constexpr int64_t kBlock = 1024;  // elements summed in float lanes before going to double

template <typename T>
double sumOfSquares(const T* g, int64_t begin, int64_t end) {
  using Opmath = at::opmath_type<T>;
  double total = 0;
  for (int64_t blockStart = begin; blockStart < end; blockStart += kBlock) {
    const int64_t blockEnd = std::min(end, blockStart + kBlock);
    int64_t i = blockStart;
    Opmath partial = 0;
    if constexpr (std::is_same_v<T, Opmath>) {
      using Vec = at::vec::Vectorized<T>;
      Vec lanes(T(0));
      for (; i + Vec::size() <= blockEnd; i += Vec::size()) {
        const Vec v = Vec::loadu(g + i);
        lanes = lanes + v * v;
      }
      T lane[Vec::size()];
      lanes.store(lane);
      for (int l = 0; l < Vec::size(); ++l)
        partial += lane[l];
    }
    for (; i < blockEnd; ++i) {
      const Opmath v = static_cast<Opmath>(g[i]);
      partial += v * v;
    }
    total += static_cast<double>(partial);
  }
  return total;
}

// Per-tensor sums of squares of `grads`, one parallel pass over all their chunks.
std::vector<double> sumsOfSquares(const ContiguousList& grads, const std::vector<Chunk>& chunks) {
  std::vector<double> partials(chunks.size());
  parallelOverChunks(chunks, [&](size_t k, const Chunk& c) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, grads[c.tensor].scalar_type(), "sum_of_squares_cpu", [&] {
          partials[k] = sumOfSquares(grads[c.tensor].const_data_ptr<scalar_t>(), c.begin, c.end);
        });
  });
  std::vector<double> sums(grads.size(), 0.0);
  for (size_t k = 0; k < chunks.size(); ++k)
    sums[chunks[k].tensor] += partials[k];
  return sums;
}

// Each element clamped to [-limit, limit], as torch::clamp does it: a NaN element stays NaN, and
// a NaN limit (a gradient holding a NaN has a NaN RMS) makes every element NaN — the vector clamp
// and std::min/max would leave them unclamped instead.
template <typename T>
void clampChunk(T* g, int64_t begin, int64_t end, double limit) {
  using Opmath = at::opmath_type<T>;
  if (std::isnan(limit)) {
    std::fill(g + begin, g + end, std::numeric_limits<T>::quiet_NaN());
    return;
  }
  const Opmath hi = static_cast<Opmath>(limit), lo = -hi;
  int64_t i = begin;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    const Vec vlo(lo), vhi(hi);
    for (; i + Vec::size() <= end; i += Vec::size())
      at::vec::clamp(Vec::loadu(g + i), vlo, vhi).store(g + i);
  }
  for (; i < end; ++i)
    g[i] = static_cast<T>(std::min(std::max(static_cast<Opmath>(g[i]), lo), hi));
}

template <typename T>
void scaleChunk(T* g, int64_t begin, int64_t end, double factor) {
  using Opmath = at::opmath_type<T>;
  const Opmath f = static_cast<Opmath>(factor);
  int64_t i = begin;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    const Vec vf(f);
    for (; i + Vec::size() <= end; i += Vec::size())
      (Vec::loadu(g + i) * vf).store(g + i);
  }
  for (; i < end; ++i)
    g[i] = static_cast<T>(static_cast<Opmath>(g[i]) * f);
}

}  // namespace

at::Tensor rmsClampCpu(at::TensorList grads) {
  ContiguousList g;
  for (const auto& t : grads)
    g.add(t, true);
  const auto chunks = chunksOf(g.tensors(), kGrain);
  const std::vector<double> sums = sumsOfSquares(g, chunks);
  at::Tensor rms = at::empty({static_cast<int64_t>(grads.size())}, at::kDouble);
  double* r = rms.data_ptr<double>();
  for (size_t t = 0; t < grads.size(); ++t) {
    const int64_t n = g[t].numel();
    r[t] = n > 0 ? std::sqrt(sums[t] / static_cast<double>(n)) : 0.0;
  }
  parallelOverChunks(chunks, [&](size_t, const Chunk& c) {
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, g[c.tensor].scalar_type(), "rms_clamp_cpu",
        [&] { clampChunk(g[c.tensor].data_ptr<scalar_t>(), c.begin, c.end, r[c.tensor]); });
  });
  g.writeBack();
  return rms;
}

at::Tensor clipGradNormCpu(at::TensorList grads, double maxNorm) {
  ContiguousList g;
  for (const auto& t : grads)
    g.add(t, true);
  const auto chunks = chunksOf(g.tensors(), kGrain);
  double total = 0;
  for (double s : sumsOfSquares(g, chunks))
    total += s;
  const double norm = std::sqrt(total);
  const double factor = maxNorm / (norm + 1e-6);
  if (!(factor >= 1)) {  // a NaN norm scales by NaN, as torch's does (and the CUDA kernel)
    parallelOverChunks(chunks, [&](size_t, const Chunk& c) {
      AT_DISPATCH_FLOATING_TYPES_AND2(
          at::kHalf, at::kBFloat16, g[c.tensor].scalar_type(), "clip_grad_norm_cpu",
          [&] { scaleChunk(g[c.tensor].data_ptr<scalar_t>(), c.begin, c.end, factor); });
    });
    g.writeBack();
  }
  return at::scalar_tensor(norm, at::kDouble);
}

}  // namespace symtune::kernels::CPU_CAPABILITY
