// CPU implementation of symtune::batch_norm_relu (Note [Batch norm ReLU] in
// ../batch_norm_relu_op.cpp). Contiguous (NCHW) activations: one task per channel; within it,
// vectorized passes (at::vec) over the channel's rows of each image, sums kept in double.
// Channels-last (NHWC) ones, as the image-input binding makes them: tasks of rows, vectors along
// each row's channels, per-thread sums combined per channel (the mean, then the squares around
// it, as for NCHW).

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include "../batch_norm_relu_common.h"
#include "../parallel.h"
#include "cpu_kernels.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// Note [Lanes flushed to double]
// A row here is a whole image plane of one channel (512 x 512 values, say): float lanes summed
// over all of it lost digits (the mean 4e-5 off a float64 reference for values around 100, where
// ATen's is 2e-6), so each block of kFlush values is summed in the lanes and then added in double.
constexpr int64_t kFlush = 1024;  // a multiple of every vector's length

template <typename T>
double lanes(const Vec<T>& acc) {
  return at::vec::vec_reduce_all([](Vec<T> a, Vec<T> b) { return a + b; }, acc);
}

// Sum of row[0, n) in double: vector lanes within each block of the row, then the lanes.
template <typename T>
double rowSum(const T* row, int64_t n) {
  double sum = 0;
  int64_t i = 0;
  while (i + Vec<T>::size() <= n) {
    Vec<T> acc(T(0));
    const int64_t end = std::min(n, i + kFlush);
    for (; i + Vec<T>::size() <= end; i += Vec<T>::size())
      acc = acc + Vec<T>::loadu(row + i);
    sum += lanes(acc);
  }
  for (; i < n; ++i)
    sum += row[i];
  return sum;
}

// Sum of (row[i] - mean)^2 over row[0, n), in double (Note [Lanes flushed to double]).
template <typename T>
double rowSquares(const T* row, int64_t n, T mean) {
  const Vec<T> m(mean);
  double sum = 0;
  int64_t i = 0;
  while (i + Vec<T>::size() <= n) {
    Vec<T> acc(T(0));
    const int64_t end = std::min(n, i + kFlush);
    for (; i + Vec<T>::size() <= end; i += Vec<T>::size()) {
      const Vec<T> d = Vec<T>::loadu(row + i) - m;
      acc = at::vec::fmadd(d, d, acc);
    }
    sum += lanes(acc);
  }
  for (; i < n; ++i) {
    const double d = static_cast<double>(row[i]) - mean;
    sum += d * d;
  }
  return sum;
}

template <typename T>
void forwardKernel(const BatchNormReluShape& s, const T* x, const T* weight, const T* bias,
                   T* running_mean, T* running_var, double momentum, double eps, T* y, T* mean_out,
                   T* invstd_out) {
  const double count = static_cast<double>(s.n * s.inner);
  at::parallel_for(0, s.channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double sum = 0;
      for (int64_t b = 0; b < s.n; ++b)
        sum += rowSum(x + (b * s.channels + c) * s.inner, s.inner);
      const double mean = sum / count;
      double squares = 0;
      for (int64_t b = 0; b < s.n; ++b)
        squares += rowSquares(x + (b * s.channels + c) * s.inner, s.inner, static_cast<T>(mean));
      const double var = squares / count;
      const double invstd = 1.0 / std::sqrt(var + eps);
      mean_out[c] = static_cast<T>(mean);
      invstd_out[c] = static_cast<T>(invstd);
      if (running_mean != nullptr)
        running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * mean);
      if (running_var != nullptr) {
        running_var[c] =
            static_cast<T>((1 - momentum) * running_var[c] + momentum * var * count / (count - 1));
      }
      const T scale = static_cast<T>(weight[c] * invstd);
      const T shift = static_cast<T>(bias[c] - mean * weight[c] * invstd);
      const Vec<T> vs(scale), vb(shift), zero(T(0));
      for (int64_t b = 0; b < s.n; ++b) {
        const T* in = x + (b * s.channels + c) * s.inner;
        T* out = y + (b * s.channels + c) * s.inner;
        int64_t i = 0;
        for (; i + Vec<T>::size() <= s.inner; i += Vec<T>::size())
          at::vec::maximum(at::vec::fmadd(Vec<T>::loadu(in + i), vs, vb), zero).store(out + i);
        for (; i < s.inner; ++i)
          out[i] = std::max(in[i] * scale + shift, T(0));
      }
    }
  });
}

template <typename T>
void backwardKernel(const BatchNormReluShape& s, const T* dy, const T* x, const T* y,
                    const T* weight, const T* mean_in, const T* invstd_in, T* dx, T* dweight,
                    T* dbias) {
  const double count = static_cast<double>(s.n * s.inner);
  at::parallel_for(0, s.channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const T mean = mean_in[c];
      const Vec<T> zero(T(0)), vm(mean);
      // The ReLU's mask applied to the gradient: its sum, and its sum against x - mean.
      double sumDy = 0, sumDyX = 0;
      for (int64_t b = 0; b < s.n; ++b) {
        const int64_t base = (b * s.channels + c) * s.inner;
        int64_t i = 0;
        while (i + Vec<T>::size() <= s.inner) {  // Note [Lanes flushed to double]
          Vec<T> accDy(T(0)), accDyX(T(0));
          const int64_t blockEnd = std::min(s.inner, i + kFlush);
          for (; i + Vec<T>::size() <= blockEnd; i += Vec<T>::size()) {
            const Vec<T> g = Vec<T>::blendv(zero, Vec<T>::loadu(dy + base + i),
                                            Vec<T>::loadu(y + base + i) > zero);
            accDy = accDy + g;
            accDyX = at::vec::fmadd(g, Vec<T>::loadu(x + base + i) - vm, accDyX);
          }
          sumDy += lanes(accDy);
          sumDyX += lanes(accDyX);
        }
        for (; i < s.inner; ++i) {
          if (y[base + i] > T(0)) {
            sumDy += dy[base + i];
            sumDyX += static_cast<double>(dy[base + i]) * (x[base + i] - mean);
          }
        }
      }
      const double invstd = invstd_in[c];
      const double w = weight[c];
      dbias[c] = static_cast<T>(sumDy);
      dweight[c] = static_cast<T>(sumDyX * invstd);
      // dx = w invstd (g - sumDy / count - (x - mean) invstd^2 sumDyX / count), with g the masked
      // gradient: g * a + x * k + d.
      const double a = w * invstd;
      const double k = -w * invstd * invstd * invstd * sumDyX / count;
      const double d = -w * invstd * sumDy / count - mean * k;
      const Vec<T> va(static_cast<T>(a)), vk(static_cast<T>(k)), vd(static_cast<T>(d));
      for (int64_t b = 0; b < s.n; ++b) {
        const int64_t base = (b * s.channels + c) * s.inner;
        int64_t i = 0;
        for (; i + Vec<T>::size() <= s.inner; i += Vec<T>::size()) {
          const Vec<T> g = Vec<T>::blendv(zero, Vec<T>::loadu(dy + base + i),
                                          Vec<T>::loadu(y + base + i) > zero);
          at::vec::fmadd(g, va, at::vec::fmadd(Vec<T>::loadu(x + base + i), vk, vd))
              .store(dx + base + i);
        }
        for (; i < s.inner; ++i) {
          const T g = y[base + i] > T(0) ? dy[base + i] : T(0);
          dx[base + i] = static_cast<T>(g * a + x[base + i] * k + d);
        }
      }
    }
  });
}

// Per-thread, per-channel sums over rows of `channels` values (NHWC): vectors along the channels
// summed over blocks of kBlockRows rows in the element type, then added to doubles.
constexpr int64_t kBlockRows = 16;

class ChannelSums {
 public:
  ChannelSums(int64_t channels, int quantities)
      : channels_(channels),
        quantities_(quantities),
        sums_(static_cast<size_t>(at::get_num_threads() * channels * quantities), 0.0) {}

  // Over rows [0, rows) in parallel: `terms(r, c, out)` stores into out[0, quantities) the
  // vectors of row r's channels [c, c + V); `scalar(r, c, out)` the values of channel c.
  template <typename T, typename Terms, typename Scalar>
  void accumulate(int64_t rows, const Terms& terms, const Scalar& scalar) {
    constexpr int64_t V = Vec<T>::size();
    at::parallel_for(0, rows, rowGrain(channels_), [&](int64_t begin, int64_t end) {
      double* sums = &sums_[static_cast<size_t>(at::get_thread_num() * channels_ * quantities_)];
      Vec<T> acc[2], term[2];
      alignas(64) T lanes[V];
      for (int64_t r0 = begin; r0 < end; r0 += kBlockRows) {
        const int64_t r1 = std::min(end, r0 + kBlockRows);
        int64_t c = 0;
        for (; c + V <= channels_; c += V) {
          for (int q = 0; q < quantities_; ++q)
            acc[q] = Vec<T>(T(0));
          for (int64_t r = r0; r < r1; ++r) {
            terms(r, c, term);
            for (int q = 0; q < quantities_; ++q)
              acc[q] = acc[q] + term[q];
          }
          for (int q = 0; q < quantities_; ++q) {
            acc[q].store(lanes);
            for (int64_t l = 0; l < V; ++l)
              sums[q * channels_ + c + l] += lanes[l];
          }
        }
        for (; c < channels_; ++c) {
          T value[2] = {T(0), T(0)};
          for (int64_t r = r0; r < r1; ++r) {
            scalar(r, c, value);
            for (int q = 0; q < quantities_; ++q)
              sums[q * channels_ + c] += value[q];
          }
        }
      }
    });
  }
  // Quantity q's total for channel c.
  double total(int q, int64_t c) const {
    double sum = 0;
    for (size_t i = static_cast<size_t>(q * channels_ + c); i < sums_.size();
         i += static_cast<size_t>(channels_ * quantities_))
      sum += sums_[i];
    return sum;
  }

 private:
  int64_t channels_;
  int quantities_;
  std::vector<double> sums_;  // [thread][quantity][channel]
};

// out[r, c] = f(vectors of row r at channels c...) over every row, vectorized along channels.
template <typename T, typename VecFn, typename ScalarFn>
void eachRow(int64_t rows, int64_t channels, const VecFn& vec, const ScalarFn& scalar) {
  constexpr int64_t V = Vec<T>::size();
  at::parallel_for(0, rows, rowGrain(channels), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t c = 0;
      for (; c + V <= channels; c += V)
        vec(r, c);
      for (; c < channels; ++c)
        scalar(r, c);
    }
  });
}

// Channels-last data seen as rows of `period` values: a row of the activation (its C channels)
// when C is a multiple of the vector width or no divisor of it; otherwise (few channels) a
// vector's width of values, V / C rows of the activation side by side, so that value j of such
// a row is channel j % C and a vector still holds whole channels. Per-channel coefficients are
// tiled to the period; what is left after the last whole period row (an odd row at the end) is
// done element by element.
template <typename T>
struct Tiling {
  int64_t channels, period, rows, total;
  Tiling(int64_t c, int64_t elements) : channels(c), total(elements) {
    constexpr int64_t V = Vec<T>::size();
    period = c < V && V % c == 0 ? V : c;
    rows = total / period;
  }
  std::vector<T> tile(const std::vector<T>& perChannel) const {
    std::vector<T> out(static_cast<size_t>(period));
    for (int64_t j = 0; j < period; ++j)
      out[static_cast<size_t>(j)] = perChannel[static_cast<size_t>(j % channels)];
    return out;
  }
  // Per channel, quantity q of `sums` (over the period's columns), plus `rest(i, out)` for
  // every element past the whole rows.
  template <typename Rest>
  std::vector<std::vector<double>> fold(const ChannelSums& sums, int quantities,
                                        const Rest& rest) const {
    std::vector<std::vector<double>> out(static_cast<size_t>(quantities),
                                         std::vector<double>(static_cast<size_t>(channels), 0.0));
    for (int q = 0; q < quantities; ++q) {
      for (int64_t j = 0; j < period; ++j)
        out[static_cast<size_t>(q)][static_cast<size_t>(j % channels)] += sums.total(q, j);
    }
    for (int64_t i = rows * period; i < total; ++i) {
      T value[2] = {T(0), T(0)};
      rest(i, value);
      for (int q = 0; q < quantities; ++q)
        out[static_cast<size_t>(q)][static_cast<size_t>(i % channels)] += value[q];
    }
    return out;
  }
};

template <typename T>
void forwardChannelsLast(const BatchNormReluShape& s, const T* x, const T* weight, const T* bias,
                         T* running_mean, T* running_var, double momentum, double eps, T* y,
                         T* mean_out, T* invstd_out) {
  const int64_t C = s.channels;
  const Tiling<T> tiling(C, s.n * s.inner * C);
  const int64_t P = tiling.period;
  const double count = static_cast<double>(s.n * s.inner);
  ChannelSums sums(P, 1);
  sums.accumulate<T>(
      tiling.rows, [&](int64_t r, int64_t j, Vec<T>* t) { t[0] = Vec<T>::loadu(x + r * P + j); },
      [&](int64_t r, int64_t j, T* t) { t[0] = x[r * P + j]; });
  const auto total = tiling.fold(sums, 1, [&](int64_t i, T* t) { t[0] = x[i]; });
  std::vector<T> mean(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    mean[static_cast<size_t>(c)] = static_cast<T>(total[0][static_cast<size_t>(c)] / count);
  const std::vector<T> meanTiled = tiling.tile(mean);
  const T* m = meanTiled.data();
  ChannelSums squares(P, 1);
  squares.accumulate<T>(
      tiling.rows,
      [&](int64_t r, int64_t j, Vec<T>* t) {
        const Vec<T> d = Vec<T>::loadu(x + r * P + j) - Vec<T>::loadu(m + j);
        t[0] = d * d;
      },
      [&](int64_t r, int64_t j, T* t) {
        const T d = x[r * P + j] - m[j];
        t[0] = d * d;
      });
  const auto squared = tiling.fold(squares, 1, [&](int64_t i, T* t) {
    const T d = x[i] - mean[static_cast<size_t>(i % C)];
    t[0] = d * d;
  });
  std::vector<T> scale(static_cast<size_t>(C)), offset(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double mc = mean[static_cast<size_t>(c)];
    const double var = squared[0][static_cast<size_t>(c)] / count;
    const double invstd = 1.0 / std::sqrt(var + eps);
    mean_out[c] = mean[static_cast<size_t>(c)];
    invstd_out[c] = static_cast<T>(invstd);
    if (running_mean != nullptr)
      running_mean[c] = static_cast<T>((1 - momentum) * running_mean[c] + momentum * mc);
    if (running_var != nullptr) {
      running_var[c] =
          static_cast<T>((1 - momentum) * running_var[c] + momentum * var * count / (count - 1));
    }
    scale[static_cast<size_t>(c)] = static_cast<T>(weight[c] * invstd);
    offset[static_cast<size_t>(c)] = static_cast<T>(bias[c] - mc * weight[c] * invstd);
  }
  const std::vector<T> scaleTiled = tiling.tile(scale), offsetTiled = tiling.tile(offset);
  const T* sc = scaleTiled.data();
  const T* of = offsetTiled.data();
  const auto one = [&](int64_t i, int64_t j) { y[i] = std::max(x[i] * sc[j] + of[j], T(0)); };
  eachRow<T>(
      tiling.rows, P,
      [&](int64_t r, int64_t j) {
        const Vec<T> v = at::vec::fmadd(Vec<T>::loadu(x + r * P + j), Vec<T>::loadu(sc + j),
                                        Vec<T>::loadu(of + j));
        at::vec::maximum(v, Vec<T>(T(0))).store(y + r * P + j);
      },
      [&](int64_t r, int64_t j) { one(r * P + j, j); });
  for (int64_t i = tiling.rows * P; i < tiling.total; ++i)
    one(i, i % C);
}

template <typename T>
void backwardChannelsLast(const BatchNormReluShape& s, const T* dy, const T* x, const T* y,
                          const T* weight, const T* mean_in, const T* invstd_in, T* dx, T* dweight,
                          T* dbias) {
  const int64_t C = s.channels;
  const Tiling<T> tiling(C, s.n * s.inner * C);
  const int64_t P = tiling.period;
  const double count = static_cast<double>(s.n * s.inner);
  const std::vector<T> meanTiled = tiling.tile(std::vector<T>(mean_in, mean_in + C));
  const T* m = meanTiled.data();
  const Vec<T> zero(T(0));
  const auto masked = [&](int64_t i) {
    return Vec<T>::blendv(zero, Vec<T>::loadu(dy + i), Vec<T>::loadu(y + i) > zero);
  };
  const auto scalarTerms = [&](int64_t i, int64_t j, T* t) {
    t[0] = y[i] > T(0) ? dy[i] : T(0);
    t[1] = t[0] * (x[i] - m[j]);
  };
  ChannelSums sums(P, 2);
  sums.accumulate<T>(
      tiling.rows,
      [&](int64_t r, int64_t j, Vec<T>* t) {
        const int64_t i = r * P + j;
        t[0] = masked(i);
        t[1] = t[0] * (Vec<T>::loadu(x + i) - Vec<T>::loadu(m + j));
      },
      [&](int64_t r, int64_t j, T* t) { scalarTerms(r * P + j, j, t); });
  const auto total = tiling.fold(sums, 2, [&](int64_t i, T* t) { scalarTerms(i, i % C, t); });
  std::vector<T> a(static_cast<size_t>(C)), k(static_cast<size_t>(C)), d(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double sumDy = total[0][static_cast<size_t>(c)];
    const double sumDyX = total[1][static_cast<size_t>(c)];
    const double invstd = invstd_in[c], w = weight[c];
    dbias[c] = static_cast<T>(sumDy);
    dweight[c] = static_cast<T>(sumDyX * invstd);
    const double kc = -w * invstd * invstd * invstd * sumDyX / count;
    a[static_cast<size_t>(c)] = static_cast<T>(w * invstd);
    k[static_cast<size_t>(c)] = static_cast<T>(kc);
    d[static_cast<size_t>(c)] = static_cast<T>(-w * invstd * sumDy / count - mean_in[c] * kc);
  }
  const std::vector<T> aTiled = tiling.tile(a), kTiled = tiling.tile(k), dTiled = tiling.tile(d);
  const T *pa = aTiled.data(), *pk = kTiled.data(), *pd = dTiled.data();
  const auto one = [&](int64_t i, int64_t j) {
    const T g = y[i] > T(0) ? dy[i] : T(0);
    dx[i] = g * pa[j] + x[i] * pk[j] + pd[j];
  };
  eachRow<T>(
      tiling.rows, P,
      [&](int64_t r, int64_t j) {
        const int64_t i = r * P + j;
        at::vec::fmadd(
            masked(i), Vec<T>::loadu(pa + j),
            at::vec::fmadd(Vec<T>::loadu(x + i), Vec<T>::loadu(pk + j), Vec<T>::loadu(pd + j)))
            .store(dx + i);
      },
      [&](int64_t r, int64_t j) { one(r * P + j, j); });
  for (int64_t i = tiling.rows * P; i < tiling.total; ++i)
    one(i, i % C);
}

// Whether `t` is a channels-last (NHWC) activation that is not also plainly contiguous.
bool channelsLast(const at::Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormReluForwardCpu(
    const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
    const std::optional<at::Tensor>& runningMean, const std::optional<at::Tensor>& runningVar,
    double momentum, double eps) {
  const BatchNormReluShape s = batchNormReluShape(input, weight, bias, runningMean, runningVar);
  const bool nhwc = channelsLast(input);
  const at::Tensor x = nhwc ? input : input.contiguous();
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = bias.contiguous();
  at::Tensor y = at::empty_like(x);  // the input's layout
  at::Tensor mean = at::empty({s.channels}, x.options());
  at::Tensor invstd = at::empty({s.channels}, x.options());
  const bool tracked = runningMean.has_value() && runningMean->defined();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symtune::batch_norm_relu_forward", [&] {
    const auto kernel = nhwc ? forwardChannelsLast<scalar_t> : forwardKernel<scalar_t>;
    kernel(s, x.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
           b.const_data_ptr<scalar_t>(), tracked ? runningMean->data_ptr<scalar_t>() : nullptr,
           tracked ? runningVar->data_ptr<scalar_t>() : nullptr, momentum, eps,
           y.data_ptr<scalar_t>(), mean.data_ptr<scalar_t>(), invstd.data_ptr<scalar_t>());
  });
  return {y, mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormReluBackwardCpu(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& output,
    const at::Tensor& weight, const at::Tensor& mean, const at::Tensor& invstd) {
  const BatchNormReluShape s =
      batchNormReluBackwardShape(grad, input, output, weight, mean, invstd);
  const bool nhwc = channelsLast(input);
  const auto format = nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const at::Tensor g = grad.contiguous(format);
  const at::Tensor x = input.contiguous(format);
  const at::Tensor y = output.contiguous(format);
  const at::Tensor w = weight.contiguous();
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw = at::empty({s.channels}, x.options());
  at::Tensor db = at::empty({s.channels}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symtune::batch_norm_relu_backward", [&] {
    const auto kernel = nhwc ? backwardChannelsLast<scalar_t> : backwardKernel<scalar_t>;
    kernel(s, g.const_data_ptr<scalar_t>(), x.const_data_ptr<scalar_t>(),
           y.const_data_ptr<scalar_t>(), w.const_data_ptr<scalar_t>(),
           mean.contiguous().const_data_ptr<scalar_t>(),
           invstd.contiguous().const_data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(),
           dw.data_ptr<scalar_t>(), db.data_ptr<scalar_t>());
  });
  return {dx, dw, db};
}

}  // namespace symtune::kernels::CPU_CAPABILITY
