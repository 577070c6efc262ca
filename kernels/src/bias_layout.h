#pragma once
// How an op's bias lies against its input — none, a vector of the last dimension, or the input's
// own shape — for the fused bias ops (bias_gelu, bias_dropout_add). Private to kernels/.

#include <optional>

#include <ATen/ATen.h>

namespace symtune::kernels {

enum class BiasLayout {
  None,       // no bias
  Row,        // a vector of input's last dimension: bias[i % C]
  Full,       // input's shape: bias[i]
  Broadcast,  // anything else
};

// `op` names the operator in the errors (a bias of another dtype or device than the input).
inline BiasLayout biasLayout(const at::Tensor& input, const std::optional<at::Tensor>& bias,
                             const char* op) {
  if (!bias || !bias->defined())
    return BiasLayout::None;
  TORCH_CHECK(bias->scalar_type() == input.scalar_type(), op, ": the bias is ", bias->scalar_type(),
              ", the input ", input.scalar_type());
  TORCH_CHECK(bias->device() == input.device(), op, ": the bias is on ", bias->device(),
              ", the input on ", input.device());
  if (input.dim() >= 1 && bias->dim() == 1 && bias->size(0) == input.size(-1))
    return BiasLayout::Row;
  if (bias->sizes() == input.sizes())
    return BiasLayout::Full;
  return BiasLayout::Broadcast;
}

// The bias's gradient given the input's, dx: a row bias's is dx's column sums (summed in float
// for reduced precision), a full one's a copy of dx (an output of its own: an op's two results do
// not alias), no bias's undefined. An empty dx gives a row bias zeros, as the CPU kernels' column
// sums do: reshaped to [-1, 0], a zero-width last dimension made the row count ambiguous and
// the CUDA backward threw.
inline at::Tensor biasGradient(const at::Tensor& dx, BiasLayout layout) {
  if (layout == BiasLayout::Row) {
    if (dx.numel() == 0)
      return at::zeros({dx.size(-1)}, dx.options());
    const at::ScalarType sum = dx.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    return dx.reshape({-1, dx.size(-1)}).sum(0, false, sum).to(dx.scalar_type());
  }
  if (layout == BiasLayout::Full)
    return dx.clone();
  return {};
}

}  // namespace symtune::kernels
