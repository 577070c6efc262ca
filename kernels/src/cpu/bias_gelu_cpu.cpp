// CPU implementation of symtune::bias_gelu and its backward: rows of the last dimension in one
// parallel loop, each one vectorized pass (at::vec) that adds the bias and applies the GELU — or,
// backward, recomputes input + bias, multiplies the GELU's derivative into the gradient and
// accumulates the bias gradient of its rows in the same pass (per thread, then summed).

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/vec.h>

#include "../bias_gelu_common.h"
#include "../parallel.h"
#include "column_sums.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

template <typename T>
inline T geluScalar(T z, bool tanhApprox) {
  using M = GeluMath<T>;
  if (tanhApprox) {
    const T inner = M::kSqrt2OverPi * (z + M::kCubic * z * z * z);
    return T(0.5) * z * (T(1) + std::tanh(inner));
  }
  return T(0.5) * z * (T(1) + std::erf(z * M::kSqrtHalf));
}

template <typename T>
inline T geluGradScalar(T z, bool tanhApprox) {
  using M = GeluMath<T>;
  if (tanhApprox) {
    const T z2 = z * z;
    const T t = std::tanh(M::kSqrt2OverPi * (z + M::kCubic * z2 * z));
    return T(0.5) * (T(1) + t) +
           T(0.5) * z * (T(1) - t * t) * M::kSqrt2OverPi * (T(1) + T(3) * M::kCubic * z2);
  }
  return T(0.5) * (T(1) + std::erf(z * M::kSqrtHalf)) +
         z * std::exp(T(-0.5) * z * z) * M::kInvSqrt2Pi;
}

template <typename T>
inline at::vec::Vectorized<T> geluVec(at::vec::Vectorized<T> z, bool tanhApprox) {
  using Vec = at::vec::Vectorized<T>;
  using M = GeluMath<T>;
  const Vec half(T(0.5)), one(T(1));
  if (tanhApprox) {
    const Vec inner = Vec(M::kSqrt2OverPi) * (z + Vec(M::kCubic) * z * z * z);
    return half * z * (one + inner.tanh());
  }
  return half * z * (one + (z * Vec(M::kSqrtHalf)).erf());
}

template <typename T>
inline at::vec::Vectorized<T> geluGradVec(at::vec::Vectorized<T> z, bool tanhApprox) {
  using Vec = at::vec::Vectorized<T>;
  using M = GeluMath<T>;
  const Vec half(T(0.5)), one(T(1));
  if (tanhApprox) {
    const Vec z2 = z * z;
    const Vec t = (Vec(M::kSqrt2OverPi) * (z + Vec(M::kCubic) * z2 * z)).tanh();
    return half * (one + t) +
           half * z * (one - t * t) * Vec(M::kSqrt2OverPi) * (one + Vec(T(3) * M::kCubic) * z2);
  }
  return half * (one + (z * Vec(M::kSqrtHalf)).erf()) +
         z * (Vec(T(-0.5)) * z * z).exp() * Vec(M::kInvSqrt2Pi);
}

// Float: one inline exp per vector (Note [Inline float math]). The tanh form is rewritten
// without tanh: 0.5 z (1 + tanh(u)) = z sigmoid(2u), and 1 - tanh(u)² = 4 s (1 - s) for
// s = sigmoid(2u).
inline FloatVec geluVec(FloatVec z, bool tanhApprox) {
  using M = GeluMath<float>;
  if (tanhApprox) {
    const FloatVec u =
        FloatVec(M::kSqrt2OverPi) * at::vec::fmadd(FloatVec(M::kCubic) * z, z * z, z);
    return z * reciprocal(FloatVec(1.f) + expInline(FloatVec(-2.f) * u));
  }
  return FloatVec(0.5f) * z * geluErfParts(z).onePlusErf;
}

inline FloatVec geluGradVec(FloatVec z, bool tanhApprox) {
  using M = GeluMath<float>;
  if (tanhApprox) {
    const FloatVec z2 = z * z;
    const FloatVec u = FloatVec(M::kSqrt2OverPi) * at::vec::fmadd(FloatVec(M::kCubic) * z, z2, z);
    const FloatVec s = reciprocal(FloatVec(1.f) + expInline(FloatVec(-2.f) * u));
    const FloatVec slope = FloatVec(2.f * M::kSqrt2OverPi) *
                           at::vec::fmadd(FloatVec(3.f * M::kCubic), z2, FloatVec(1.f));
    return at::vec::fmadd(z * s * (FloatVec(1.f) - s), slope, s);
  }
  const GeluErfParts parts = geluErfParts(z);
  return at::vec::fmadd(z * parts.gauss, FloatVec(M::kInvSqrt2Pi),
                        FloatVec(0.5f) * parts.onePlusErf);
}

// The bias against a row of the input: none, bias[col] (a row bias) or bias[base + col] (full);
// and input + bias at a column of the row starting at flat index `base`, one element or a vector.
template <typename T>
struct BiasAt {
  const T* data = nullptr;
  int64_t columns = 0;  // Row: C; Full: 0

  at::opmath_type<T> sum(const T* x, int64_t base, int64_t col) const {
    using Opmath = at::opmath_type<T>;
    const Opmath z = static_cast<Opmath>(x[base + col]);
    if (data == nullptr)
      return z;
    return z + static_cast<Opmath>(columns > 0 ? data[col] : data[base + col]);
  }
  at::vec::Vectorized<T> sumVec(const T* x, int64_t base, int64_t col) const {
    using Vec = at::vec::Vectorized<T>;
    const Vec z = Vec::loadu(x + base + col);
    return data == nullptr ? z : z + Vec::loadu(data + (columns > 0 ? col : base + col));
  }
};

template <typename T>
void forwardRows(const T* x, T* y, BiasAt<T> bias, int64_t rows, int64_t columns, bool tanhApprox) {
  using Opmath = at::opmath_type<T>;
  at::parallel_for(0, rows, rowGrain(columns), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t base = r * columns;
      int64_t c = 0;
      if constexpr (std::is_same_v<T, Opmath>) {
        using Vec = at::vec::Vectorized<T>;
        constexpr int64_t kStep = Vec::size();
        auto load = [&](int64_t at) { return bias.sumVec(x, base, at); };
        // Two vectors per iteration: erf and tanh are long dependency chains, and two
        // independent ones keep the vector units busy (as ATen's cpu_kernel_vec does).
        for (; c + 2 * kStep <= columns; c += 2 * kStep) {
          const Vec z0 = load(c), z1 = load(c + kStep);
          geluVec(z0, tanhApprox).store(y + base + c);
          geluVec(z1, tanhApprox).store(y + base + c + kStep);
        }
        for (; c + kStep <= columns; c += kStep)
          geluVec(load(c), tanhApprox).store(y + base + c);
      }
      for (; c < columns; ++c) {
        y[base + c] = static_cast<T>(geluScalar(bias.sum(x, base, c), tanhApprox));
      }
    }
  });
}

// One row of the backward: dx = grad * gelu'(x + bias), and dx added to the row bias's sums.
template <typename T>
void backwardRow(const T* g, const T* x, BiasAt<T> bias, T* dx, at::opmath_type<T>* sums, int64_t r,
                 int64_t columns, bool tanhApprox) {
  using Opmath = at::opmath_type<T>;
  const int64_t base = r * columns;
  int64_t c = 0;
  if constexpr (std::is_same_v<T, Opmath>) {
    using Vec = at::vec::Vectorized<T>;
    constexpr int64_t kStep = Vec::size();
    auto one = [&](int64_t at) {
      return Vec::loadu(g + base + at) * geluGradVec(bias.sumVec(x, base, at), tanhApprox);
    };
    auto keep = [&](int64_t at, const Vec& d) {
      d.store(dx + base + at);
      if (sums != nullptr)
        (Vec::loadu(sums + at) + d).store(sums + at);
    };
    for (; c + 2 * kStep <= columns; c += 2 * kStep) {  // two chains, as forward
      const Vec d0 = one(c), d1 = one(c + kStep);
      keep(c, d0);
      keep(c + kStep, d1);
    }
    for (; c + kStep <= columns; c += kStep)
      keep(c, one(c));
  }
  for (; c < columns; ++c) {
    const Opmath d =
        static_cast<Opmath>(g[base + c]) * geluGradScalar(bias.sum(x, base, c), tanhApprox);
    dx[base + c] = static_cast<T>(d);
    if (sums != nullptr)
      sums[c] += d;
  }
}

}  // namespace

at::Tensor biasGeluCpu(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                       c10::string_view approximate) {
  const BiasGeluOperands o = biasGeluOperands(input, bias, approximate);
  if (o.layout == BiasLayout::Broadcast)
    return composedForward(input, *bias, approximate);
  const bool tanhApprox = o.tanhApprox;
  const BiasLayout layout = o.layout;
  const at::Tensor &x = o.x, &b = o.b;
  at::Tensor y = at::empty_like(x);
  if (x.numel() == 0)
    return y;
  const int64_t columns = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = x.numel() / columns;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "bias_gelu_cpu", [&] {
    const BiasAt<scalar_t> biasAt{b.defined() ? b.const_data_ptr<scalar_t>() : nullptr,
                                  layout == BiasLayout::Row ? columns : 0};
    forwardRows(x.const_data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), biasAt, rows, columns,
                tanhApprox);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> biasGeluBackwardCpu(const at::Tensor& gradIn,
                                                       const at::Tensor& input,
                                                       const std::optional<at::Tensor>& bias,
                                                       c10::string_view approximate) {
  const BiasGeluOperands o = biasGeluOperands(input, bias, approximate, gradIn);
  if (o.layout == BiasLayout::Broadcast)
    return composedBackward(gradIn, input, *bias, approximate);
  const bool tanhApprox = o.tanhApprox;
  const BiasLayout layout = o.layout;
  const at::Tensor &g = o.g, &x = o.x, &b = o.b;
  at::Tensor dx = at::empty_like(x);
  const int64_t columns = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = columns == 0 ? 0 : x.numel() / columns;
  at::Tensor db;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "bias_gelu_backward_cpu", [&] {
    using Opmath = at::opmath_type<scalar_t>;
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    const BiasAt<scalar_t> biasAt{b.defined() ? b.const_data_ptr<scalar_t>() : nullptr,
                                  layout == BiasLayout::Row ? columns : 0};
    ThreadColumnSums<Opmath> sums(layout == BiasLayout::Row, columns);
    at::parallel_for(0, rows, rowGrain(columns), [&](int64_t first, int64_t last) {
      Opmath* slot = sums.slot();
      for (int64_t r = first; r < last; ++r) {
        backwardRow(gp, xp, biasAt, dxp, slot, r, columns, tanhApprox);
        sums.rowDone();
      }
    });
    db = layout == BiasLayout::Row ? sums.total(x.options(), x.scalar_type())
                                   : biasGradient(dx, layout);
  });
  return {dx.view(input.sizes()), db};
}

}  // namespace symtune::kernels::CPU_CAPABILITY
