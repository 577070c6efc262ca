#pragma once
// The table the fused bias ops' reference tests share (bias_gelu, bias_dropout_add): input
// shapes with the bias each is given, and the operands they make.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace symtune::test {

enum class BiasKind { Row, Full, None, Broadcast };

struct BiasShape {
  const char* name;
  std::vector<int64_t> shape;
  BiasKind bias;
  bool transposed;  // the input is a transposed (non-contiguous) view
};

// Size 1, odd sizes, 3-D, a Transformer row, a non-contiguous input, a full-shape bias, no bias.
inline std::vector<BiasShape> biasShapes() {
  return {
      {"1x1 row bias", {1, 1}, BiasKind::Row, false},
      {"7x13 row bias", {7, 13}, BiasKind::Row, false},
      {"3x5x129 row bias", {3, 5, 129}, BiasKind::Row, false},
      {"64x768 row bias", {64, 768}, BiasKind::Row, false},
      {"transposed 24x17", {24, 17}, BiasKind::Row, true},
      {"9x31 full bias", {9, 31}, BiasKind::Full, false},
      {"9x31 no bias", {9, 31}, BiasKind::None, false},
  };
}

inline std::vector<std::pair<const char*, torch::Dtype>> biasDtypes() {
  return {
      {"float32", torch::kFloat32}, {"float64", torch::kFloat64}, {"bfloat16", torch::kBFloat16}};
}

// How far a fused bias op's output and input gradient may be from the ATen composition, against
// the reference's scale (scaledError): bfloat16 is loose because ATen rounds its intermediate
// results (x + bias, the scaled mask) to bfloat16 and the fused ops do not.
inline double biasTolerance(torch::Dtype dtype) {
  return dtype == torch::kBFloat16 ? 2e-2 : dtype == torch::kFloat64 ? 1e-12 : 2e-6;
}

// A random input of `sizes`, normal with standard deviation `scale` (through a transpose when
// asked: not contiguous).
inline torch::Tensor biasInput(const std::vector<int64_t>& sizes, bool transposed,
                               const torch::TensorOptions& opts, double scale = 1) {
  if (!transposed)
    return torch::randn(sizes, opts) * scale;
  return (torch::randn(std::vector<int64_t>(sizes.rbegin(), sizes.rend()), opts) * scale).t();
}

// The bias of `kind` for an input of `sizes` (undefined for None; Broadcast: [first, 1]).
inline torch::Tensor biasFor(BiasKind kind, const std::vector<int64_t>& sizes,
                             const torch::TensorOptions& opts) {
  switch (kind) {
    case BiasKind::Row:
      return torch::randn({sizes.back()}, opts);
    case BiasKind::Full:
      return torch::randn(sizes, opts);
    case BiasKind::Broadcast:
      return torch::randn({sizes.front(), 1}, opts);
    case BiasKind::None:
      break;
  }
  return {};
}

}  // namespace symtune::test
