#pragma once
// What the CPU and CUDA bias_gelu kernels share: how the bias lies against the input, the
// approximation's name, and the composition used for the shapes the fused kernels do not take.
// Private to kernels/.

#include <optional>

#include <ATen/ATen.h>

#include "bias_layout.h"

namespace symtune::kernels {

// True for "tanh", false for "none"; anything else is the caller's mistake.
inline bool tanhApproximation(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh",
              "symtune::bias_gelu: approximate must be \"none\" or \"tanh\", got \"",
              std::string(approximate), "\"");
  return approximate == "tanh";
}

// The operands of a fused pass: the approximation, the bias's layout and, unless the layout is
// Broadcast (the callers then take the composition), the input, the bias and — for the backward,
// given `grad` — the gradient, contiguous.
struct BiasGeluOperands {
  bool tanhApprox = false;
  BiasLayout layout = BiasLayout::None;
  at::Tensor x, b, g;  // b undefined without a bias; g only for the backward
};

inline BiasGeluOperands biasGeluOperands(const at::Tensor& input,
                                         const std::optional<at::Tensor>& bias,
                                         c10::string_view approximate,
                                         const at::Tensor& grad = {}) {
  BiasGeluOperands o;
  o.tanhApprox = tanhApproximation(approximate);
  o.layout = biasLayout(input, bias, "symtune::bias_gelu");
  // The gradient is read as the input is: one of another dtype failed deep in the kernel with
  // ATen's generic message, and a CPU one given with a CUDA input reached the CUDA kernel as a
  // host pointer (an illegal access). Its shape is the input's unless the bias broadcasts
  // (the composition's output, checked by ATen there).
  if (grad.defined()) {
    TORCH_CHECK(grad.scalar_type() == input.scalar_type() && grad.device() == input.device(),
                "symtune::bias_gelu_backward: the gradient is ", grad.scalar_type(), " on ",
                grad.device(), ", the input ", input.scalar_type(), " on ", input.device());
  }
  if (o.layout == BiasLayout::Broadcast)
    return o;
  if (grad.defined()) {
    TORCH_CHECK(grad.sizes() == input.sizes(), "symtune::bias_gelu_backward: the gradient has ",
                "shape ", grad.sizes(), ", the input ", input.sizes());
    o.g = grad.contiguous();
  }
  o.x = input.contiguous();
  if (o.layout != BiasLayout::None)
    o.b = bias->contiguous();
  return o;
}

// The composition the fused op stands for, for broadcast shapes: forward and its backward.
inline at::Tensor composedForward(const at::Tensor& input, const at::Tensor& bias,
                                  c10::string_view approximate) {
  return at::gelu(input + bias, approximate);
}

inline std::tuple<at::Tensor, at::Tensor> composedBackward(const at::Tensor& grad,
                                                           const at::Tensor& input,
                                                           const at::Tensor& bias,
                                                           c10::string_view approximate) {
  const at::Tensor gradSum = at::gelu_backward(grad, input + bias, approximate);
  return {gradSum.sum_to_size(input.sizes()), gradSum.sum_to_size(bias.sizes())};
}

// The GELU and its derivative, in the math type (float for float and bfloat16, double for
// double), the same formulas as ATen's GeluKernel.
template <typename T>
struct GeluMath {
  static constexpr T kSqrtHalf = T(0.70710678118654752440);     // 1 / sqrt(2)
  static constexpr T kInvSqrt2Pi = T(0.39894228040143267794);   // 1 / sqrt(2 pi)
  static constexpr T kSqrt2OverPi = T(0.79788456080286535588);  // sqrt(2 / pi)
  static constexpr T kCubic = T(0.044715);
};

}  // namespace symtune::kernels
