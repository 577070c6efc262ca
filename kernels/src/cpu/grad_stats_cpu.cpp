// CPU implementation of symtune::grad_stats: parallel over chunks, each chunk accumulated in
// double, then combined.

#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include "symtune/kernels/grad_stats.h"

namespace symtune::kernels {

namespace {

struct Partial {
  double sumSquares = 0, sumAbs = 0, maxAbs = 0;
  int64_t nans = 0, infs = 0;
};

template <typename T>
void accumulate(const T* data, int64_t begin, int64_t end, Partial& p) {
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

at::Tensor gradStatsCpu(const at::Tensor& g) {
  TORCH_CHECK(g.is_floating_point(), "symtune::grad_stats expects a floating point tensor, got ",
              g.scalar_type());
  const at::Tensor c = g.contiguous();
  const int64_t n = c.numel();
  constexpr int64_t kGrain = 32768;
  const int64_t chunks = std::max<int64_t>(1, (n + kGrain - 1) / kGrain);
  std::vector<Partial> partials(static_cast<size_t>(chunks));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "grad_stats_cpu", [&] {
    const scalar_t* data = c.const_data_ptr<scalar_t>();
    at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        accumulate(data, k * kGrain, std::min(n, (k + 1) * kGrain), partials[k]);
      }
    });
  });
  Partial total;
  for (const auto& p : partials) {
    total.sumSquares += p.sumSquares;
    total.sumAbs += p.sumAbs;
    total.maxAbs = std::max(total.maxAbs, p.maxAbs);
    total.nans += p.nans;
    total.infs += p.infs;
  }
  at::Tensor out = at::empty({kGradStatCount}, c.options().dtype(at::kDouble));
  double* o = out.data_ptr<double>();
  o[kSumSquares] = total.sumSquares;
  o[kSumAbs] = total.sumAbs;
  o[kMaxAbs] = total.maxAbs;
  o[kNanCount] = static_cast<double>(total.nans);
  o[kInfCount] = static_cast<double>(total.infs);
  return out;
}

}  // namespace
}  // namespace symtune::kernels

TORCH_LIBRARY_IMPL(symtune, CPU, m) {
  m.impl("grad_stats", &symtune::kernels::gradStatsCpu);
}
