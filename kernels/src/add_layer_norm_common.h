#pragma once
// What the CPU and CUDA add_layer_norm kernels share: the argument checks and the operands each
// direction works on, contiguous and allocated. Private to kernels/.

#include <optional>
#include <vector>

#include <ATen/ATen.h>

namespace symtune::kernels {

inline void checkAddLayerNormArguments(const at::Tensor& input, const at::Tensor& residual,
                                       const std::optional<at::Tensor>& weight,
                                       const std::optional<at::Tensor>& bias, double eps) {
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) > 0,
              "symtune::add_layer_norm: the input needs a last dimension to normalize, got ",
              input.sizes());
  TORCH_CHECK(residual.sizes() == input.sizes(), "symtune::add_layer_norm: the residual has ",
              "shape ", residual.sizes(), ", the input ", input.sizes());
  TORCH_CHECK(residual.scalar_type() == input.scalar_type(),
              "symtune::add_layer_norm: the residual is ", residual.scalar_type(), ", the input ",
              input.scalar_type());
  TORCH_CHECK(residual.device() == input.device(), "symtune::add_layer_norm: the residual is on ",
              residual.device(), ", the input on ", input.device());
  TORCH_CHECK(eps >= 0, "symtune::add_layer_norm: eps must not be negative, got ", eps);
  for (const auto* t : {&weight, &bias}) {
    if (*t && (*t)->defined()) {
      TORCH_CHECK((*t)->dim() == 1 && (*t)->size(0) == input.size(-1),
                  "symtune::add_layer_norm: weight and bias must be [", input.size(-1), "], got ",
                  (*t)->sizes());
      TORCH_CHECK((*t)->scalar_type() == input.scalar_type(),
                  "symtune::add_layer_norm: weight and bias must be ", input.scalar_type(),
                  ", got ", (*t)->scalar_type());
      // A host pointer handed to a kernel would be an illegal access that poisons the context.
      TORCH_CHECK((*t)->device() == input.device(), "symtune::add_layer_norm: weight and bias ",
                  "must be on ", input.device(), " with the input, got ", (*t)->device());
    }
  }
}

inline const std::optional<at::Tensor> definedOrNone(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? t : std::nullopt;
}

// The math type of the row statistics: double for double, float otherwise.
inline at::ScalarType layerNormMathType(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

// The forward's operands: x, r, w, b contiguous (w, b undefined when absent); the outputs s (the
// sum), y, and each row's mean and rstd, allocated.
struct AddLayerNormForward {
  at::Tensor x, r, w, b, s, y, mean, rstd;
  int64_t rows = 0, columns = 0;
};

inline AddLayerNormForward addLayerNormForwardOperands(const at::Tensor& input,
                                                       const at::Tensor& residual,
                                                       const std::optional<at::Tensor>& weight,
                                                       const std::optional<at::Tensor>& bias,
                                                       double eps) {
  checkAddLayerNormArguments(input, residual, weight, bias, eps);
  AddLayerNormForward f;
  f.x = input.contiguous();
  f.r = residual.contiguous();
  if (const auto w = definedOrNone(weight))
    f.w = w->contiguous();
  if (const auto b = definedOrNone(bias))
    f.b = b->contiguous();
  f.columns = f.x.size(-1);
  f.rows = f.x.numel() / f.columns;
  f.s = at::empty_like(f.x);
  f.y = at::empty_like(f.x);
  const auto math = f.x.options().dtype(layerNormMathType(f.x.scalar_type()));
  const std::vector<int64_t> rowShape(f.x.sizes().begin(), f.x.sizes().end() - 1);
  f.mean = at::empty(rowShape, math);
  f.rstd = at::empty(rowShape, math);
  return f;
}

// The backward's operands: dy, s, the sum output's own gradient dsIn and w contiguous (the last
// two undefined when absent); ds, the sum's gradient, allocated.
struct AddLayerNormBackward {
  at::Tensor dy, s, dsIn, w, ds;
  int64_t rows = 0, columns = 0;
};

inline AddLayerNormBackward addLayerNormBackwardOperands(const at::Tensor& gradOut,
                                                         const std::optional<at::Tensor>& gradSum,
                                                         const at::Tensor& sum,
                                                         const std::optional<at::Tensor>& weight) {
  AddLayerNormBackward g;
  g.dy = gradOut.contiguous();
  g.s = sum.contiguous();
  if (const auto d = definedOrNone(gradSum))
    g.dsIn = d->contiguous();
  if (const auto w = definedOrNone(weight))
    g.w = w->contiguous();
  g.columns = g.s.size(-1);
  g.rows = g.s.numel() / g.columns;
  g.ds = at::empty_like(g.s);
  return g;
}

}  // namespace symtune::kernels
