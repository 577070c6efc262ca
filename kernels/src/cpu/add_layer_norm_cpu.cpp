// CPU implementation of symtune::add_layer_norm's forward and backward: rows in one parallel
// loop. Forward, per row: the sum written while its mean is accumulated, the variance from the
// row again (in cache), then the normalized, scaled and shifted output. Backward, per row: the
// two row means the layer norm's gradient needs, then the sum's gradient, with the weight's and
// bias's gradients accumulated per thread in the same pass.

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/vec.h>

#include "../add_layer_norm_common.h"
#include "../parallel.h"
#include "column_sums.h"
#include "cpu_kernels.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

template <typename T>
T sumLanes(const at::vec::Vectorized<T>& v) {
  T lanes[at::vec::Vectorized<T>::size()];
  v.store(lanes);
  T total = 0;
  for (int l = 0; l < at::vec::Vectorized<T>::size(); ++l)
    total += lanes[l];
  return total;
}

// One row: s = x + r (stored), mean and 1/std (returned through m and rs), y.
template <typename T>
void forwardRow(const T* x, const T* r, T* s, T* y, const T* w, const T* b, int64_t columns,
                double eps, at::opmath_type<T>& m, at::opmath_type<T>& rs) {
  using Opmath = at::opmath_type<T>;
  Opmath total = 0;
  int64_t c = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    Vec acc(T(0));
    for (; c + Vec::size() <= columns; c += Vec::size()) {
      const Vec v = Vec::loadu(x + c) + Vec::loadu(r + c);
      v.store(s + c);
      acc = acc + v;
    }
    total = sumLanes(acc);
  }
  for (; c < columns; ++c) {
    const Opmath v = static_cast<Opmath>(x[c]) + static_cast<Opmath>(r[c]);
    s[c] = static_cast<T>(v);
    total += static_cast<Opmath>(s[c]);
  }
  const Opmath mean = total / static_cast<Opmath>(columns);
  Opmath squares = 0;
  c = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    Vec acc(T(0));
    const Vec vm(mean);
    for (; c + Vec::size() <= columns; c += Vec::size()) {
      const Vec d = Vec::loadu(s + c) - vm;
      acc = acc + d * d;
    }
    squares = sumLanes(acc);
  }
  for (; c < columns; ++c) {
    const Opmath d = static_cast<Opmath>(s[c]) - mean;
    squares += d * d;
  }
  const Opmath rstd =
      Opmath(1) / std::sqrt(squares / static_cast<Opmath>(columns) + static_cast<Opmath>(eps));
  c = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    const Vec vm(mean), vr(rstd);
    for (; c + Vec::size() <= columns; c += Vec::size()) {
      Vec v = (Vec::loadu(s + c) - vm) * vr;
      if (w != nullptr)
        v = v * Vec::loadu(w + c);
      if (b != nullptr)
        v = v + Vec::loadu(b + c);
      v.store(y + c);
    }
  }
  for (; c < columns; ++c) {
    Opmath v = (static_cast<Opmath>(s[c]) - mean) * rstd;
    if (w != nullptr)
      v = v * static_cast<Opmath>(w[c]);
    if (b != nullptr)
      v = v + static_cast<Opmath>(b[c]);
    y[c] = static_cast<T>(v);
  }
  m = mean;
  rs = rstd;
}

// One row of the backward: with x̂ = (s - mean) * rstd and d = dy * w,
// ds = rstd * (d - mean(d) - x̂ * mean(d * x̂)) (+ the sum output's own gradient);
// dw += dy * x̂, db += dy.
template <typename T>
void backwardRow(const T* dy, const T* dsIn, const T* s, const T* w, T* ds, at::opmath_type<T> mean,
                 at::opmath_type<T> rstd, int64_t columns, at::opmath_type<T>* dw,
                 at::opmath_type<T>* db) {
  using Opmath = at::opmath_type<T>;
  Opmath sumD = 0, sumDX = 0;
  int64_t first = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    const Vec vm(mean), vr(rstd);
    Vec accD(T(0)), accDX(T(0));
    for (; first + Vec::size() <= columns; first += Vec::size()) {
      const Vec xh = (Vec::loadu(s + first) - vm) * vr;
      const Vec g = Vec::loadu(dy + first);
      const Vec d = w != nullptr ? g * Vec::loadu(w + first) : g;
      accD = accD + d;
      accDX = accDX + d * xh;
      (Vec::loadu(dw + first) + g * xh).store(dw + first);
      (Vec::loadu(db + first) + g).store(db + first);
    }
    sumD = sumLanes(accD);
    sumDX = sumLanes(accDX);
  }
  for (int64_t c = first; c < columns; ++c) {
    const Opmath xh = (static_cast<Opmath>(s[c]) - mean) * rstd;
    const Opmath g = static_cast<Opmath>(dy[c]);
    const Opmath d = w != nullptr ? g * static_cast<Opmath>(w[c]) : g;
    sumD += d;
    sumDX += d * xh;
    dw[c] += g * xh;
    db[c] += g;
  }
  const Opmath n = static_cast<Opmath>(columns);
  const Opmath meanD = sumD / n, meanDX = sumDX / n;
  int64_t c = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    const Vec vm(mean), vr(rstd), vmd(meanD), vmdx(meanDX);
    for (; c + Vec::size() <= columns; c += Vec::size()) {
      const Vec xh = (Vec::loadu(s + c) - vm) * vr;
      Vec d = Vec::loadu(dy + c);
      if (w != nullptr)
        d = d * Vec::loadu(w + c);
      Vec out = vr * (d - vmd - xh * vmdx);
      if (dsIn != nullptr)
        out = out + Vec::loadu(dsIn + c);
      out.store(ds + c);
    }
  }
  for (; c < columns; ++c) {
    const Opmath xh = (static_cast<Opmath>(s[c]) - mean) * rstd;
    const Opmath g = static_cast<Opmath>(dy[c]);
    const Opmath d = w != nullptr ? g * static_cast<Opmath>(w[c]) : g;
    Opmath out = rstd * (d - meanD - xh * meanDX);
    if (dsIn != nullptr)
      out += static_cast<Opmath>(dsIn[c]);
    ds[c] = static_cast<T>(out);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> addLayerNormForwardCpu(
    const at::Tensor& inputIn, const at::Tensor& residualIn,
    const std::optional<at::Tensor>& weightIn, const std::optional<at::Tensor>& biasIn,
    double eps) {
  const AddLayerNormForward f =
      addLayerNormForwardOperands(inputIn, residualIn, weightIn, biasIn, eps);
  const at::Tensor &x = f.x, &r = f.r, &w = f.w, &b = f.b, &s = f.s, &y = f.y, &mean = f.mean,
                   &rstd = f.rstd;
  const int64_t columns = f.columns, rows = f.rows;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "add_layer_norm_cpu", [&] {
    using Opmath = at::opmath_type<scalar_t>;
    const scalar_t* wp = w.defined() ? w.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* bp = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    Opmath* mp = mean.data_ptr<Opmath>();
    Opmath* rp = rstd.data_ptr<Opmath>();
    const int64_t grain = std::max<int64_t>(1, 16384 / columns);
    at::parallel_for(0, rows, grain, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const int64_t o = i * columns;
        forwardRow(x.const_data_ptr<scalar_t>() + o, r.const_data_ptr<scalar_t>() + o,
                   s.data_ptr<scalar_t>() + o, y.data_ptr<scalar_t>() + o, wp, bp, columns, eps,
                   mp[i], rp[i]);
      }
    });
  });
  return {y.view(inputIn.sizes()), s.view(inputIn.sizes()), mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> addLayerNormBackwardCpu(
    const at::Tensor& gradOut, const std::optional<at::Tensor>& gradSumIn, const at::Tensor& sum,
    const at::Tensor& meanIn, const at::Tensor& rstdIn, const std::optional<at::Tensor>& weightIn) {
  const AddLayerNormBackward g =
      addLayerNormBackwardOperands(gradOut, gradSumIn, sum, meanIn, rstdIn, weightIn);
  const at::Tensor &dy = g.dy, &s = g.s, &dsIn = g.dsIn, &w = g.w, &mean = g.mean, &rstd = g.rstd,
                   &ds = g.ds;
  const int64_t columns = g.columns, rows = g.rows;
  at::Tensor dw, db;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, s.scalar_type(), "add_layer_norm_bwd_cpu", [&] {
    using Opmath = at::opmath_type<scalar_t>;
    // Each thread's weight and bias gradient sums, then added up.
    ThreadColumnSums<Opmath> sumsW(true, columns), sumsB(true, columns);
    const Opmath* mp = mean.const_data_ptr<Opmath>();
    const Opmath* rp = rstd.const_data_ptr<Opmath>();
    const scalar_t* wp = w.defined() ? w.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* dsp = dsIn.defined() ? dsIn.const_data_ptr<scalar_t>() : nullptr;
    const int64_t grain = std::max<int64_t>(1, 16384 / columns);
    at::parallel_for(0, rows, grain, [&](int64_t first, int64_t last) {
      Opmath* pw = sumsW.slot();
      Opmath* pb = sumsB.slot();
      for (int64_t i = first; i < last; ++i) {
        const int64_t o = i * columns;
        backwardRow(dy.const_data_ptr<scalar_t>() + o, dsp != nullptr ? dsp + o : nullptr,
                    s.const_data_ptr<scalar_t>() + o, wp, ds.data_ptr<scalar_t>() + o, mp[i], rp[i],
                    columns, pw, pb);
        sumsW.rowDone();
        sumsB.rowDone();
      }
    });
    dw = sumsW.total(s.options(), s.scalar_type());
    db = sumsB.total(s.options(), s.scalar_type());
  });
  return {ds.view(sum.sizes()), dw, db};
}

}  // namespace symtune::kernels::CPU_CAPABILITY
