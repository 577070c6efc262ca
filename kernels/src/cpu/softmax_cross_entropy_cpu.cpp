// CPU implementation of symtune::softmax_cross_entropy's forward and backward: rows in one
// parallel loop; per row, a vectorized max, a vectorized sum of exp(x - max) (the row is in cache
// for the second pass), the log-sum-exp kept for the backward; the backward writes
// (softmax - one-hot) * grad / count in one pass per row.

#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/vec.h>

#include "../parallel.h"
#include "../softmax_cross_entropy_common.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

// max and log(sum(exp(x - max))) + max of one row.
template <typename T>
at::opmath_type<T> logSumExp(const T* x, int64_t columns) {
  using Opmath = at::opmath_type<T>;
  Opmath max = -std::numeric_limits<Opmath>::infinity();
  int64_t c = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    if (columns >= Vec::size()) {
      Vec m = Vec::loadu(x);
      for (c = Vec::size(); c + Vec::size() <= columns; c += Vec::size())
        m = at::vec::maximum(m, Vec::loadu(x + c));
      T lanes[Vec::size()];
      m.store(lanes);
      for (int l = 0; l < Vec::size(); ++l)
        max = std::max(max, lanes[l]);
    }
  }
  for (; c < columns; ++c)
    max = std::max(max, static_cast<Opmath>(x[c]));
  // A row of -inf: its log-sum-exp is -inf. One with +inf goes on: inf - inf makes it NaN, as
  // ATen's log_softmax does.
  if (std::isinf(max) && max < 0)
    return max;
  Opmath sum = 0;
  c = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    Vec s(T(0));
    const Vec vmax(max);
    for (; c + Vec::size() <= columns; c += Vec::size())
      s = s + vecExp(Vec::loadu(x + c) - vmax);
    T lanes[Vec::size()];
    s.store(lanes);
    for (int l = 0; l < Vec::size(); ++l)
      sum += lanes[l];
  }
  for (; c < columns; ++c)
    sum += std::exp(static_cast<Opmath>(x[c]) - max);
  return max + std::log(sum);
}

void checkTargets(const int64_t* target, int64_t rows, int64_t columns, int64_t ignoreIndex) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = target[r];
    TORCH_CHECK(t == ignoreIndex || (t >= 0 && t < columns),
                "symtune::softmax_cross_entropy: target ", t, " of row ", r,
                " is out of range [0, ", columns, ")");
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> softmaxCrossEntropyForwardCpu(const at::Tensor& logitsIn,
                                                                 const at::Tensor& targetIn,
                                                                 int64_t ignoreIndex) {
  checkCrossEntropyArguments(logitsIn, targetIn);
  const at::Tensor logits = logitsIn.contiguous(), target = targetIn.contiguous();
  const int64_t rows = logits.size(0), columns = logits.size(1);
  const int64_t* tp = target.const_data_ptr<int64_t>();
  checkTargets(tp, rows, columns, ignoreIndex);
  // Each row's log-sum-exp in the math type: float, or double for double logits.
  at::Tensor lse = at::empty(
      {rows},
      logits.options().dtype(logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat));
  at::Tensor loss;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, logits.scalar_type(), "softmax_ce_cpu", [&] {
    using Opmath = at::opmath_type<scalar_t>;
    const scalar_t* xp = logits.const_data_ptr<scalar_t>();
    Opmath* lp = lse.data_ptr<Opmath>();
    std::vector<double> rowLoss(static_cast<size_t>(rows), 0.0);
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(columns, 1));
    at::parallel_for(0, rows, grain, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const Opmath l = logSumExp(xp + r * columns, columns);
        lp[r] = l;
        if (tp[r] != ignoreIndex)
          rowLoss[static_cast<size_t>(r)] =
              static_cast<double>(l - static_cast<Opmath>(xp[r * columns + tp[r]]));
      }
    });
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < rows; ++r) {
      total += rowLoss[static_cast<size_t>(r)];
      count += tp[r] != ignoreIndex ? 1 : 0;
    }
    const double mean =
        count > 0 ? total / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN();
    loss = at::scalar_tensor(mean, logits.options());
  });
  return {loss, lse};
}

at::Tensor softmaxCrossEntropyBackwardCpu(const at::Tensor& grad, const at::Tensor& logitsIn,
                                          const at::Tensor& targetIn, const at::Tensor& lse,
                                          int64_t ignoreIndex) {
  checkCrossEntropyBackwardArguments(grad, logitsIn, targetIn, lse);
  const at::Tensor logits = logitsIn.contiguous(), target = targetIn.contiguous();
  const int64_t rows = logits.size(0), columns = logits.size(1);
  const int64_t* tp = target.const_data_ptr<int64_t>();
  // As the forward checks them: called as an operator, past autograd, a target out of range
  // wrote outside the gradient.
  checkTargets(tp, rows, columns, ignoreIndex);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r)
    count += tp[r] != ignoreIndex ? 1 : 0;
  at::Tensor dx = at::empty_like(logits);
  const double scale = grad.item<double>() / static_cast<double>(std::max<int64_t>(count, 1));
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, logits.scalar_type(), "softmax_ce_bwd_cpu", [&] {
    using Opmath = at::opmath_type<scalar_t>;
    const scalar_t* xp = logits.const_data_ptr<scalar_t>();
    const Opmath* lp = lse.const_data_ptr<Opmath>();
    scalar_t* dp = dx.data_ptr<scalar_t>();
    const Opmath s = static_cast<Opmath>(scale);
    const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(columns, 1));
    at::parallel_for(0, rows, grain, [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const scalar_t* x = xp + r * columns;
        scalar_t* d = dp + r * columns;
        if (tp[r] == ignoreIndex) {
          std::fill(d, d + columns, scalar_t(0));
          continue;
        }
        const Opmath l = lp[r];
        int64_t c = 0;
        if constexpr (std::is_same_v<scalar_t, Opmath>) {
          using Vec = at::vec::Vectorized<scalar_t>;
          const Vec vl(l), vs(s);
          for (; c + Vec::size() <= columns; c += Vec::size())
            (vecExp(Vec::loadu(x + c) - vl) * vs).store(d + c);
        }
        for (; c < columns; ++c)
          d[c] = static_cast<scalar_t>(std::exp(static_cast<Opmath>(x[c]) - l) * s);
        d[tp[r]] = static_cast<scalar_t>(static_cast<Opmath>(d[tp[r]]) - s);
      }
    });
  });
  return dx.view(logitsIn.sizes());
}

}  // namespace symtune::kernels::CPU_CAPABILITY
