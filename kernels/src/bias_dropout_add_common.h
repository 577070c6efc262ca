#pragma once
// What the CPU and CUDA bias_dropout_add kernels share: the operand checks, the keep scale and
// the dropout mask's hash (the same bits on either device). Private to kernels/.

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>

#include "bias_layout.h"

#if defined(__CUDACC__)
#define SYMTUNE_HOST_DEVICE __host__ __device__
#else
#define SYMTUNE_HOST_DEVICE
#endif

namespace symtune::kernels {

// Note [Dropout mask]
// The mask is not stored: element i is kept when a keyed hash of (i, seed) is at least
// p · 2^32, and the backward recomputes it from the seed — no mask tensor between forward and
// backward (ATen's dropout keeps one of the input's size), and the same mask on CPU and CUDA for
// the same seed. The hash is three rounds of a 32-bit integer mixer (xor-shift-multiply with
// full avalanche) with the seed's halves injected between them, so seeds that differ in either
// half give unrelated masks rather than shifted ones. Counter-based generators such as Philox
// would cost ten rounds of 32×32→64 multiplies per four elements; this costs three rounds of
// 32-bit multiplies per element, which vectorize on every capability. A dropout mask needs
// independence and the right rate, not cryptographic strength; the tests check the rate, the
// seeds and the mask's agreement between forward and backward.
SYMTUNE_HOST_DEVICE inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// The mask's hash of element index = high · 2^32 + low.
SYMTUNE_HOST_DEVICE inline uint32_t dropoutHash(uint32_t low, uint32_t high, uint64_t seed) {
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  uint32_t h = mix32(low ^ k0);
  h = mix32(h ^ k1);
  return mix32(h ^ high ^ k0);
}

// Elements whose hash is below this are dropped: p · 2^32, saturated (p = 1 drops everything,
// handled by the callers since 2^32 does not fit).
inline uint32_t dropThreshold(double p) {
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xffffffffU : static_cast<uint32_t>(t);
}

// The factor a kept element is multiplied by: 1 / (1 - p), 0 when everything is dropped.
inline double keepScale(double p) {
  return p >= 1 ? 0.0 : 1.0 / (1.0 - p);
}

// The mask of one call, and the factor each element is multiplied by: 1 / (1 - p) when kept, 0
// when dropped. Host and device.
struct DropoutMask {
  uint64_t seed = 0;
  uint32_t threshold = 0;  // dropped when the hash is below (0: nothing dropped)
  double scale = 1;        // 1 / (1 - p); 0 when everything is dropped
  bool all = false;        // p = 1

  template <typename Opmath>
  SYMTUNE_HOST_DEVICE Opmath factor(int64_t index) const {
    if (all)
      return Opmath(0);
    if (threshold == 0)
      return static_cast<Opmath>(scale);
    const uint64_t i = static_cast<uint64_t>(index);
    const uint32_t h = dropoutHash(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), seed);
    return h >= threshold ? static_cast<Opmath>(scale) : Opmath(0);
  }
};

inline DropoutMask dropoutMask(double p, int64_t seed) {
  DropoutMask m;
  m.seed = static_cast<uint64_t>(seed);
  m.all = p >= 1;
  m.threshold = p > 0 && !m.all ? dropThreshold(p) : 0;
  m.scale = keepScale(p);
  return m;
}

inline void checkDropoutProbability(double p) {
  TORCH_CHECK(p >= 0 && p <= 1, "symtune::bias_dropout_add: p must be in [0, 1], got ", p);
}

// The forward's operands, contiguous, after the checks.
struct BiasDropoutAddOperands {
  BiasLayout layout = BiasLayout::None;
  at::Tensor x, b, r;  // b undefined without a bias
};

inline BiasDropoutAddOperands biasDropoutAddOperands(const at::Tensor& input,
                                                     const std::optional<at::Tensor>& bias,
                                                     const at::Tensor& residual, double p) {
  checkDropoutProbability(p);
  BiasDropoutAddOperands o;
  o.layout = biasLayout(input, bias, "symtune::bias_dropout_add");
  TORCH_CHECK(o.layout != BiasLayout::Broadcast,
              "symtune::bias_dropout_add: the bias must be a vector of the input's last "
              "dimension or have the input's shape ",
              input.sizes(), ", got ", bias->sizes());
  TORCH_CHECK(residual.sizes() == input.sizes(), "symtune::bias_dropout_add: the residual has ",
              "shape ", residual.sizes(), ", the input ", input.sizes());
  TORCH_CHECK(residual.scalar_type() == input.scalar_type() && residual.device() == input.device(),
              "symtune::bias_dropout_add: the residual is ", residual.scalar_type(), " on ",
              residual.device(), ", the input ", input.scalar_type(), " on ", input.device());
  o.x = input.contiguous();
  o.r = residual.contiguous();
  if (o.layout != BiasLayout::None)
    o.b = bias->contiguous();
  return o;
}

// The backward's layout: the bias only says which gradient it gets.
inline BiasLayout biasDropoutAddBackwardLayout(const at::Tensor& grad,
                                               const std::optional<at::Tensor>& bias, double p) {
  checkDropoutProbability(p);
  const BiasLayout layout = biasLayout(grad, bias, "symtune::bias_dropout_add_backward");
  TORCH_CHECK(layout != BiasLayout::Broadcast,
              "symtune::bias_dropout_add_backward: the bias must be a vector of the gradient's "
              "last dimension or have its shape ",
              grad.sizes(), ", got ", bias->sizes());
  return layout;
}

}  // namespace symtune::kernels
