// CPU implementation of symtune::bias_dropout_add and its backward: rows of the last dimension in
// one parallel loop; per element the mask's hash (Note [Dropout mask]), computed sixteen lanes at
// a time in the AVX builds, and residual + (input + bias) · keep / (1 - p) — or, backward,
// grad · keep / (1 - p) with the row bias's gradient summed per thread in the same pass.

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/vec.h>

#include "../bias_dropout_add_common.h"
#include "../parallel.h"
#include "column_sums.h"
#include "cpu_kernels.h"

namespace symtune::kernels::CPU_CAPABILITY {

namespace {

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
// The mask's factors for the float lanes of elements index … index + lanes - 1, the hash on
// 32-bit integer lanes (at::vec's shifts are arithmetic: masked to logical).
using IntVec = at::vec::Vectorized<int32_t>;
using FloatVec = at::vec::Vectorized<float>;
static_assert(IntVec::size() == FloatVec::size());

inline IntVec shiftRight(IntVec x, int s) {
  return (x >> IntVec(s)) & IntVec(static_cast<int32_t>(0xffffffffU >> s));
}

inline IntVec mix32Vec(IntVec x) {
  x = x ^ shiftRight(x, 16);
  x = x * IntVec(static_cast<int32_t>(0x7feb352dU));
  x = x ^ shiftRight(x, 15);
  x = x * IntVec(static_cast<int32_t>(0x846ca68bU));
  return x ^ shiftRight(x, 16);
}

// Factors of the lanes from `index`, whose low 32 bits must not wrap within the vector.
inline FloatVec factorsVec(const DropoutMask& m, int64_t index) {
  const uint64_t i = static_cast<uint64_t>(index);
  const IntVec k0(static_cast<int32_t>(static_cast<uint32_t>(m.seed)));
  const IntVec k1(static_cast<int32_t>(static_cast<uint32_t>(m.seed >> 32)));
  const IntVec low = IntVec::arange(static_cast<int32_t>(static_cast<uint32_t>(i)), 1);
  IntVec h = mix32Vec(low ^ k0);
  h = mix32Vec(h ^ k1);
  h = mix32Vec(h ^ IntVec(static_cast<int32_t>(static_cast<uint32_t>(i >> 32))) ^ k0);
  // h >= threshold as unsigned: both with the sign bit flipped, compared signed.
  const IntVec flip(static_cast<int32_t>(0x80000000U));
  const IntVec keep = (h ^ flip) >= IntVec(static_cast<int32_t>(m.threshold ^ 0x80000000U));
  return FloatVec(static_cast<float>(m.scale)) & at::vec::cast<float>(keep);
}

// Whether the low 32 bits of the lanes' indices run without wrapping (else the scalar path).
inline bool lanesWithoutWrap(int64_t index) {
  return static_cast<uint32_t>(index) <= 0xffffffffU - static_cast<uint32_t>(FloatVec::size());
}
#endif

// out = residual + (x + bias) · factor for one row.
template <typename T>
void forwardRow(const T* x, const T* bias, bool rowBias, const T* residual, T* out, int64_t base,
                int64_t columns, const DropoutMask& m) {
  using Opmath = at::opmath_type<T>;
  int64_t c = 0;
#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    constexpr int64_t kStep = FloatVec::size();
    const bool uniform = m.all || m.threshold == 0;  // one factor for every element
    const FloatVec constant(m.factor<float>(0));
    for (; c + kStep <= columns; c += kStep) {
      const int64_t i = base + c;
      if (!uniform && !lanesWithoutWrap(i))
        break;  // the index's low word wraps inside this vector: the scalar loop from here
      FloatVec z = FloatVec::loadu(x + i);
      if (bias != nullptr)
        z = z + FloatVec::loadu(bias + (rowBias ? c : i));
      const FloatVec factor = uniform ? constant : factorsVec(m, i);
      at::vec::fmadd(z, factor, FloatVec::loadu(residual + i)).store(out + i);
    }
  }
#endif
  for (; c < columns; ++c) {
    const int64_t i = base + c;
    Opmath z = static_cast<Opmath>(x[i]);
    if (bias != nullptr)
      z += static_cast<Opmath>(bias[rowBias ? c : i]);
    out[i] = static_cast<T>(static_cast<Opmath>(residual[i]) + z * m.factor<Opmath>(i));
  }
}

// dx = grad · factor for one row, added to the row bias's sums when given.
template <typename T>
void backwardRow(const T* g, T* dx, at::opmath_type<T>* sums, int64_t base, int64_t columns,
                 const DropoutMask& m) {
  using Opmath = at::opmath_type<T>;
  int64_t c = 0;
#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    constexpr int64_t kStep = FloatVec::size();
    const bool uniform = m.all || m.threshold == 0;
    const FloatVec constant(m.factor<float>(0));
    for (; c + kStep <= columns; c += kStep) {
      const int64_t i = base + c;
      if (!uniform && !lanesWithoutWrap(i))
        break;
      const FloatVec d = FloatVec::loadu(g + i) * (uniform ? constant : factorsVec(m, i));
      d.store(dx + i);
      if (sums != nullptr)
        (FloatVec::loadu(sums + c) + d).store(sums + c);
    }
  }
#endif
  for (; c < columns; ++c) {
    const int64_t i = base + c;
    const Opmath d = static_cast<Opmath>(g[i]) * m.factor<Opmath>(i);
    dx[i] = static_cast<T>(d);
    if (sums != nullptr)
      sums[c] += d;
  }
}

}  // namespace

at::Tensor biasDropoutAddCpu(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                             const at::Tensor& residual, double p, int64_t seed) {
  const BiasDropoutAddOperands o = biasDropoutAddOperands(input, bias, residual, p);
  const at::Tensor &x = o.x, &b = o.b, &r = o.r;
  at::Tensor out = at::empty_like(x);
  if (x.numel() == 0)
    return out.view(input.sizes());
  const int64_t columns = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = x.numel() / columns;
  const DropoutMask m = dropoutMask(p, seed);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "bias_dropout_add_cpu", [&] {
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* bp = b.defined() ? b.const_data_ptr<scalar_t>() : nullptr;
    const scalar_t* rp = r.const_data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const bool rowBias = o.layout == BiasLayout::Row;
    at::parallel_for(0, rows, rowGrain(columns), [&](int64_t first, int64_t last) {
      for (int64_t row = first; row < last; ++row)
        forwardRow(xp, bp, rowBias, rp, op, row * columns, columns, m);
    });
  });
  return out.view(input.sizes());
}

std::tuple<at::Tensor, at::Tensor> biasDropoutAddBackwardCpu(const at::Tensor& gradIn,
                                                             const std::optional<at::Tensor>& bias,
                                                             double p, int64_t seed) {
  const BiasLayout layout = biasDropoutAddBackwardLayout(gradIn, bias, p);
  const at::Tensor g = gradIn.contiguous();
  at::Tensor dx = at::empty_like(g);
  const int64_t columns = g.dim() == 0 ? 1 : g.size(-1);
  const int64_t rows = columns == 0 ? 0 : g.numel() / columns;
  const DropoutMask m = dropoutMask(p, seed);
  at::Tensor db;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, g.scalar_type(), "bias_dropout_add_bwd_cpu", [&] {
    using Opmath = at::opmath_type<scalar_t>;
    const scalar_t* gp = g.const_data_ptr<scalar_t>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    ThreadColumnSums<Opmath> sums(layout == BiasLayout::Row, columns);
    at::parallel_for(0, rows, rowGrain(columns), [&](int64_t first, int64_t last) {
      Opmath* slot = sums.slot();
      for (int64_t row = first; row < last; ++row) {
        backwardRow(gp, dxp, slot, row * columns, columns, m);
        sums.rowDone();
      }
    });
    db = layout == BiasLayout::Row ? sums.total(g.options(), g.scalar_type())
                                   : biasGradient(dx, layout);
  });
  return {dx.view(gradIn.sizes()), db};
}

}  // namespace symtune::kernels::CPU_CAPABILITY
