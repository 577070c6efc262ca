#pragma once
// Inline float exp and GELU pieces for the at::vec kernels (Note [Inline float math]). Included
// by the per-capability kernel sources only; private to kernels/.

#include <limits>
#include <type_traits>

#include <ATen/cpu/vec/vec.h>

namespace symtune::kernels::CPU_CAPABILITY {

// Note [Inline float math]
// at::vec's float exp, erf and tanh call Sleef through the PLT: a call per vector that spills
// the other live registers and keeps two independent chains from overlapping. These are short
// inline replacements for float, built from at::vec's own operations so every capability gets
// them: exp by Cody–Waite reduction to r in [-ln2/2, ln2/2], a degree-6 Taylor polynomial
// (truncation error below 1.3e-7 relative) and the exponent assembled in the float's bits; and
// the GELU's erf as Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7, the formula ATen's AVX kernels
// use), whose exp(-x²) at x = z/√2 is the same exp(-z²/2) the GELU's derivative needs, so one
// exp serves both; on AVX-512 divisions are reciprocal estimates refined once. Double keeps
// at::vec's Sleef functions: these are float accurate only.
using FloatVec = at::vec::Vectorized<float>;

// ln(FLT_MAX): above it std::exp overflows to +inf.
constexpr float kExpOverflow = 88.7228391f;

// exp(v), accurate to a few ulp for v in [-87.3, 88.3]; 0 below, ~1.7e38 on to ln(FLT_MAX), and
// +inf above it, where std::exp overflows (the callers divide by it and get 0, which reciprocal()
// keeps exact). Until 2026-12-07 it saturated above ln(FLT_MAX) too, and the tanh GELU of -inf
// came out -inf · 1/1.7e38 = -inf where ATen's is -inf · 0 = NaN.
inline FloatVec expInline(FloatVec input) {
  using IntVec = at::vec::Vectorized<int32_t>;
  // Clamped where n stays at most 127: 2^128 has no float (its exponent field would be +inf's).
  const FloatVec v = at::vec::clamp(input, FloatVec(-87.3f), FloatVec(88.3f));
  const FloatVec n = (v * FloatVec(1.44269504088896341f)).round();  // v / ln 2, to nearest
  // r = v - n ln2, ln2 split in two so that n times the first part (0.693359375) is exact.
  FloatVec r = at::vec::fmadd(n, FloatVec(-0.693359375f), v);
  r = at::vec::fmadd(n, FloatVec(2.12194440e-4f), r);
  FloatVec p = at::vec::fmadd(FloatVec(1.f / 720.f), r, FloatVec(1.f / 120.f));
  p = at::vec::fmadd(p, r, FloatVec(1.f / 24.f));
  p = at::vec::fmadd(p, r, FloatVec(1.f / 6.f));
  p = at::vec::fmadd(p, r, FloatVec(0.5f));
  p = at::vec::fmadd(p, r, FloatVec(1.f));
  p = at::vec::fmadd(p, r, FloatVec(1.f));
  // 2^n: n + 127 in the exponent field (n is in [-126, 127] after the clamp).
  const IntVec biased = at::vec::convert_to_int_of_same_size(n) + IntVec(127);
  const FloatVec result = p * at::vec::cast<float>(biased << IntVec(23));
  const FloatVec low = FloatVec::blendv(result, FloatVec(0.f), input < FloatVec(-87.3f));
  return FloatVec::blendv(low, FloatVec(std::numeric_limits<float>::infinity()),
                          input > FloatVec(kExpOverflow));
}

// exp in a kernel's math type: inline for float, at::vec's (Sleef) for double.
template <typename T>
inline at::vec::Vectorized<T> vecExp(at::vec::Vectorized<T> v) {
  if constexpr (std::is_same_v<T, float>)
    return expInline(v);
  else
    return v.exp();
}

// 1 / d. AVX-512: the hardware's 14-bit reciprocal estimate and one Newton step, r (2 - d r),
// to about an ulp without a division (a 512-bit division blocks its unit for 10–16 cycles on
// these CPUs). AVX2's estimate has 12 bits, one step leaves errors the tanh GELU's derivative
// amplifies past float tolerance (kernels.bias_gelu.avx2 caught it), so there a division.
// For d = ±inf (and 0) the estimate ±0 (±inf) is exact and the step's inf · 0 is NaN, so there
// the estimate is kept: the exact GELU of +inf was NaN on AVX-512 where ATen's is +inf. Two more
// instructions (a compare into a mask, a masked blend) per vector.
inline FloatVec reciprocal(FloatVec d) {
#if defined(CPU_CAPABILITY_AVX512)
  const FloatVec r(_mm512_rcp14_ps(d));
  const FloatVec refined = r * at::vec::fnmadd(d, r, FloatVec(2.f));
  return FloatVec(
      _mm512_mask_blend_ps(_mm512_cmp_ps_mask(refined, refined, _CMP_UNORD_Q), refined, r));
#else
  return FloatVec(1.f) / d;
#endif
}

// The exact GELU's two pieces at z: 1 + erf(z/√2) and exp(-z²/2).
struct GeluErfParts {
  FloatVec onePlusErf;
  FloatVec gauss;
};

inline GeluErfParts geluErfParts(FloatVec z) {
  const FloatVec x = z * FloatVec(0.70710678118654752440f);
  const FloatVec t = reciprocal(at::vec::fmadd(FloatVec(0.3275911f), x.abs(), FloatVec(1.f)));
  FloatVec r = at::vec::fmadd(FloatVec(1.061405429f), t, FloatVec(-1.453152027f));
  r = at::vec::fmadd(r, t, FloatVec(1.421413741f));
  r = at::vec::fmadd(r, t, FloatVec(-0.284496736f));
  r = at::vec::fmadd(r, t, FloatVec(0.254829592f));
  const FloatVec gauss = expInline(FloatVec(-0.5f) * z * z);
  // erfc(|x|) = r t exp(-x²); for x < 0, 1 + erf(x) is that tail itself (no cancellation),
  // for x ≥ 0 it is 2 minus it.
  const FloatVec tail = r * t * gauss;
  return {FloatVec::blendv(FloatVec(2.f) - tail, tail, x < FloatVec(0.f)), gauss};
}

}  // namespace symtune::kernels::CPU_CAPABILITY
