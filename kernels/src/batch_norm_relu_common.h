#pragma once
// The shape checks of symtune::batch_norm_relu, shared by its kernels. Private to kernels/.

#include <optional>

#include <ATen/ATen.h>

namespace symtune::kernels {

// The input as [n, channels, inner]: images, channels, values per channel of an image.
struct BatchNormReluShape {
  int64_t n = 0, channels = 0, inner = 1;
};

inline BatchNormReluShape batchNormReluShape(const at::Tensor& input, const at::Tensor& weight,
                                             const at::Tensor& bias,
                                             const std::optional<at::Tensor>& runningMean,
                                             const std::optional<at::Tensor>& runningVar) {
  const char* op = "symtune::batch_norm_relu";
  TORCH_CHECK(input.dim() >= 2, op, ": the input must be [N, C, ...], got ", input.sizes());
  TORCH_CHECK(input.scalar_type() == at::kFloat || input.scalar_type() == at::kDouble, op,
              ": float or double input, got ", input.scalar_type());
  BatchNormReluShape s;
  s.n = input.size(0);
  s.channels = input.size(1);
  for (int64_t d = 2; d < input.dim(); ++d)
    s.inner *= input.size(d);
  TORCH_CHECK(s.n * s.inner > 1, op, ": expected more than 1 value per channel, got input ",
              input.sizes());
  const auto vector = [&](const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.defined() && t.dim() == 1 && t.size(0) == s.channels &&
                    t.scalar_type() == input.scalar_type() && t.device() == input.device(),
                op, ": ", what, " must be a vector of ", s.channels, " ", input.scalar_type(),
                " on ", input.device());
  };
  vector(weight, "the weight");
  vector(bias, "the bias");
  const bool mean = runningMean.has_value() && runningMean->defined();
  const bool var = runningVar.has_value() && runningVar->defined();
  TORCH_CHECK(mean == var, op, ": both running statistics or neither");
  if (mean) {
    vector(*runningMean, "the running mean");
    vector(*runningVar, "the running variance");
    TORCH_CHECK(runningMean->is_contiguous() && runningVar->is_contiguous(), op,
                ": the running statistics must be contiguous (they are updated in place)");
  }
  return s;
}

// The backward operator's arguments (batchNormReluShape's checks of the input and weight, then
// the rest), its shape returned. Called as it is, past autograd, a save_mean or save_invstd of
// one value for 64 channels was read past its end; the gradient and the output are read as the
// input is.
inline BatchNormReluShape batchNormReluBackwardShape(
    const at::Tensor& grad, const at::Tensor& input, const at::Tensor& output,
    const at::Tensor& weight, const at::Tensor& saveMean, const at::Tensor& saveInvstd) {
  const char* op = "symtune::batch_norm_relu_backward";
  const BatchNormReluShape s =
      batchNormReluShape(input, weight, weight, std::nullopt, std::nullopt);
  TORCH_CHECK(grad.sizes() == input.sizes() && output.sizes() == input.sizes(), op,
              ": the gradient ", grad.sizes(), " and the output ", output.sizes(),
              " must have the input's shape ", input.sizes());
  const auto likeTheInput = [&](const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.scalar_type() == input.scalar_type() && t.device() == input.device(), op, ": ",
                what, " must be ", input.scalar_type(), " on ", input.device(),
                " as the input is, got ", t.scalar_type(), " on ", t.device());
  };
  likeTheInput(grad, "the gradient");
  likeTheInput(output, "the output");
  // One value per channel, of any layout (the kernels read them contiguous).
  const auto perChannel = [&](const at::Tensor& t, const char* what) {
    TORCH_CHECK(t.defined() && t.dim() == 1 && t.size(0) == s.channels &&
                    t.scalar_type() == input.scalar_type() && t.device() == input.device(),
                op, ": ", what, " must be a vector of ", s.channels, " ", input.scalar_type(),
                " on ", input.device(), ", got ", t.defined() ? t.sizes() : at::IntArrayRef{}, " ",
                t.defined() ? t.scalar_type() : at::ScalarType::Undefined);
  };
  perChannel(saveMean, "save_mean");
  perChannel(saveInvstd, "save_invstd");
  return s;
}

}  // namespace symtune::kernels
