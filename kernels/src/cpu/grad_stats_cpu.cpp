// CPU implementation of symtune::grad_stats and symtune::grad_stats_multi: every tensor cut into
// chunks, all chunks of all tensors in one parallel loop, each accumulated in double, then
// combined per tensor. One call for a model's gradients instead of one dispatch per parameter.

#include <cmath>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "../parallel.h"
#include "symtune/kernels/grad_stats.h"

namespace symtune::kernels {

namespace {

struct Partial {
  double sumSquares = 0, sumAbs = 0, maxAbs = 0;
  int64_t nans = 0, infs = 0;
};

// The exact path: any values, non-finite ones counted and left out of the sums.
template <typename T>
void accumulateAny(const T* data, int64_t begin, int64_t end, Partial& p) {
  for (int64_t i = begin; i < end; ++i) {
    const double v = static_cast<double>(data[i]);
    if (std::isnan(v)) {
      ++p.nans;
    } else if (std::isinf(v)) {
      ++p.infs;
    } else {
      const double a = std::abs(v);
      p.sumSquares += v * v;
      p.sumAbs += a;
      p.maxAbs = a > p.maxAbs ? a : p.maxAbs;
    }
  }
}

// The fast path for float and double: independent lanes without a branch per element, which the
// compiler vectorises. v - v is 0 for a finite v and NaN otherwise, so `bad` tells whether the
// chunk needs the exact path. Returns false (p untouched) when it does.
template <typename T>
bool accumulateFinite(const T* data, int64_t begin, int64_t end, Partial& p) {
  constexpr int kLanes = 8;
  double sq[kLanes] = {}, ab[kLanes] = {}, mx[kLanes] = {}, bad[kLanes] = {};
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double v = static_cast<double>(data[i + l]);
      const double a = std::fabs(v);
      sq[l] += v * v;
      ab[l] += a;
      mx[l] = a > mx[l] ? a : mx[l];
      bad[l] += v - v;
    }
  }
  for (; i < end; ++i) {
    const double v = static_cast<double>(data[i]);
    const double a = std::fabs(v);
    sq[0] += v * v;
    ab[0] += a;
    mx[0] = a > mx[0] ? a : mx[0];
    bad[0] += v - v;
  }
  Partial q;
  double anyBad = 0;
  for (int l = 0; l < kLanes; ++l) {
    q.sumSquares += sq[l];
    q.sumAbs += ab[l];
    q.maxAbs = mx[l] > q.maxAbs ? mx[l] : q.maxAbs;
    anyBad += bad[l];
  }
  if (!(anyBad == 0))
    return false;
  p = q;
  return true;
}

// float: lanes of float, added into double every block of 1024 elements (each lane sums 64 values
// in float: a relative error of about 1e-7, far below what a float gradient resolves), four times
// the speed of double lanes.
bool accumulateFinite(const float* data, int64_t begin, int64_t end, Partial& p) {
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 1024;
  float mx[kLanes] = {}, bad[kLanes] = {};
  Partial q;
  int64_t i = begin;
  while (i + kBlock <= end) {
    float sq[kLanes] = {}, ab[kLanes] = {};
    for (const int64_t blockEnd = i + kBlock; i < blockEnd; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const float v = data[i + l];
        const float a = std::fabs(v);
        sq[l] += v * v;
        ab[l] += a;
        mx[l] = a > mx[l] ? a : mx[l];
        bad[l] += v - v;
      }
    }
    for (int l = 0; l < kLanes; ++l) {
      q.sumSquares += sq[l];
      q.sumAbs += ab[l];
      // A float lane's sum past float's range (a 1e20 squared) is inf; the exact path sums in
      // double, as the CUDA kernel does.
      bad[l] += (sq[l] - sq[l]) + (ab[l] - ab[l]);
    }
  }
  Partial tail;
  if (!accumulateFinite<float>(data, i, end, tail))
    return false;
  float anyBad = 0;
  for (int l = 0; l < kLanes; ++l) {
    q.maxAbs = std::max(q.maxAbs, static_cast<double>(mx[l]));
    anyBad += bad[l];
  }
  if (!(anyBad == 0))
    return false;
  q.sumSquares += tail.sumSquares;
  q.sumAbs += tail.sumAbs;
  q.maxAbs = std::max(q.maxAbs, tail.maxAbs);
  // Values this small square below float's normal range (1.2e-38): subnormal, then 0 past 4e-23.
  // A range of only such values is summed in double, as the CUDA kernel sums; in a range that
  // holds larger ones too they are far below what the sum resolves. (A weight's gradient of
  // values near 1e-26 read as norm 0: the vanishing-gradient signal itself.)
  if (q.maxAbs < 1e-18)
    return accumulateFinite<float>(data, begin, end, p);
  p = q;
  return true;
}

template <typename T>
void accumulate(const T* data, int64_t begin, int64_t end, Partial& p) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (accumulateFinite(data, begin, end, p))
      return;
  }
  accumulateAny(data, begin, end, p);
}

struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

// Row i of the result: the statistics of grads[i].
at::Tensor gradStatsMultiCpu(at::TensorList grads) {
  std::vector<at::Tensor> tensors;
  std::vector<Chunk> chunks;
  constexpr int64_t kGrain = 32768;
  for (size_t t = 0; t < grads.size(); ++t) {
    const at::Tensor& g = grads[t];
    TORCH_CHECK(g.is_floating_point(), "symtune::grad_stats expects floating point tensors, got ",
                g.scalar_type(), " (tensor ", t, ")");
    TORCH_CHECK(g.device().is_cpu(), "symtune::grad_stats_multi: tensor ", t, " is on ", g.device(),
                ", the first on cpu");
    tensors.push_back(g.contiguous());
    const int64_t n = g.numel();
    for (int64_t b = 0; b < n; b += kGrain)
      chunks.push_back({t, b, std::min(n, b + kGrain)});
  }
  std::vector<Partial> partials(chunks.size());
  at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const Chunk& c = chunks[static_cast<size_t>(k)];
      const at::Tensor& t = tensors[c.tensor];
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "grad_stats_cpu",
                                      [&] {
                                        accumulate(t.const_data_ptr<scalar_t>(), c.begin, c.end,
                                                   partials[static_cast<size_t>(k)]);
                                      });
    }
  });
  at::Tensor out = at::zeros({static_cast<int64_t>(grads.size()), kGradStatCount},
                             at::TensorOptions().dtype(at::kDouble));
  double* o = out.data_ptr<double>();
  for (size_t k = 0; k < chunks.size(); ++k) {
    const Partial& p = partials[k];
    double* row = o + chunks[k].tensor * kGradStatCount;
    row[kSumSquares] += p.sumSquares;
    row[kSumAbs] += p.sumAbs;
    row[kMaxAbs] = std::max(row[kMaxAbs], p.maxAbs);
    row[kNanCount] += static_cast<double>(p.nans);
    row[kInfCount] += static_cast<double>(p.infs);
  }
  return out;
}

at::Tensor gradStatsCpu(const at::Tensor& g) {
  return gradStatsMultiCpu({g})[0];
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CPU, m) {
  m.impl("grad_stats", &symtune::kernels::gradStatsCpu);
  m.impl("grad_stats_multi", &symtune::kernels::gradStatsMultiCpu);
}
