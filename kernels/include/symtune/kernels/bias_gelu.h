#pragma once
// symtune::bias_gelu — gelu(input + bias) in one pass, forward and backward, with autograd: the
// bias add of a linear layer fused into its GELU (what the built-in fused_bias_gelu rewrite puts
// in place of aten::linear + aten::gelu). Registered as the TorchScript operators
//   symtune::bias_gelu(Tensor input, Tensor? bias, str approximate="none") -> Tensor
//   symtune::bias_gelu_backward(Tensor grad, Tensor input, Tensor? bias, str approximate="none")
//       -> (Tensor grad_input, Tensor grad_bias)
// with CPU and CUDA implementations. `bias` may be none, a vector of input's last dimension (a
// linear layer's bias), or input's shape; other shapes broadcast through the ATen composition.
// `approximate`: "none" (exact, erf) or "tanh", as aten::gelu.

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

#include <string>
#include <tuple>

namespace symtune::kernels {

// Calls the registered operator (autograd included).
at::Tensor biasGelu(const at::Tensor& input, const at::Tensor& bias,
                    const std::string& approximate = "none");

// d gelu(input + bias) / d input times grad, and its reduction to bias's shape (undefined when
// bias is).
std::tuple<at::Tensor, at::Tensor> biasGeluBackward(const at::Tensor& grad, const at::Tensor& input,
                                                    const at::Tensor& bias,
                                                    const std::string& approximate = "none");

}  // namespace symtune::kernels
