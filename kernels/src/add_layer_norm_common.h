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

// The backward operator's arguments against the sum's shape, dtype and device. It is callable as it
// is, past autograd (torch.ops.symtune.add_layer_norm_backward), and reads every operand by rows of
// the sum's last dimension: a grad_sum of [1, 64] for a sum of [4096, 64], or a mean of 3 values
// for 4096 rows, was read past its end (a segfault), and a sum without columns divided by zero.
// Zero columns are refused as the forward refuses them; zero rows are an empty gradient.
inline void checkAddLayerNormBackwardArguments(const at::Tensor& gradOut,
                                               const std::optional<at::Tensor>& gradSum,
                                               const at::Tensor& sum, const at::Tensor& mean,
                                               const at::Tensor& rstd,
                                               const std::optional<at::Tensor>& weight) {
  const char* op = "symtune::add_layer_norm_backward";
  TORCH_CHECK(sum.dim() >= 1 && sum.size(-1) > 0, op,
              ": the sum needs a last dimension to normalize, got ", sum.sizes());
  const int64_t columns = sum.size(-1);
  const int64_t rows = sum.numel() / columns;
  const auto likeTheSum = [&](const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.sizes() == sum.sizes() && t.scalar_type() == sum.scalar_type() &&
                    t.device() == sum.device(),
                op, ": ", what, " must be ", sum.scalar_type(), " ", sum.sizes(), " on ",
                sum.device(), " as the sum is, got ", t.scalar_type(), " ", t.sizes(), " on ",
                t.device());
  };
  likeTheSum(gradOut, "grad_output");
  if (const auto d = definedOrNone(gradSum))
    likeTheSum(*d, "grad_sum");
  const at::ScalarType math = layerNormMathType(sum.scalar_type());
  const auto perRow = [&](const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.numel() == rows && t.scalar_type() == math && t.device() == sum.device(), op,
                ": ", what, " must hold one ", math, " per row of the sum (", rows, ") on ",
                sum.device(), ", got ", t.scalar_type(), " ", t.sizes(), " on ", t.device());
  };
  perRow(mean, "mean");
  perRow(rstd, "rstd");
  if (const auto w = definedOrNone(weight)) {
    TORCH_CHECK(w->dim() == 1 && w->size(0) == columns && w->scalar_type() == sum.scalar_type() &&
                    w->device() == sum.device(),
                op, ": the weight must be ", sum.scalar_type(), " [", columns, "] on ",
                sum.device(), ", got ", w->scalar_type(), " ", w->sizes(), " on ", w->device());
  }
}

// The backward's operands, after the checks: dy, s, the sum output's own gradient dsIn, w, and
// each row's mean and rstd contiguous (dsIn and w undefined when absent); ds, the sum's gradient,
// allocated.
struct AddLayerNormBackward {
  at::Tensor dy, s, dsIn, w, mean, rstd, ds;
  int64_t rows = 0, columns = 0;
};

inline AddLayerNormBackward addLayerNormBackwardOperands(
    const at::Tensor& gradOut, const std::optional<at::Tensor>& gradSum, const at::Tensor& sum,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight) {
  checkAddLayerNormBackwardArguments(gradOut, gradSum, sum, mean, rstd, weight);
  AddLayerNormBackward g;
  g.dy = gradOut.contiguous();
  g.s = sum.contiguous();
  if (const auto d = definedOrNone(gradSum))
    g.dsIn = d->contiguous();
  if (const auto w = definedOrNone(weight))
    g.w = w->contiguous();
  g.mean = mean.contiguous();
  g.rstd = rstd.contiguous();
  g.columns = g.s.size(-1);
  g.rows = g.s.numel() / g.columns;
  g.ds = at::empty_like(g.s);
  return g;
}

}  // namespace symtune::kernels
