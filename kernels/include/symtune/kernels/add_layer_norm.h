#pragma once
// symtune::add_layer_norm — a Transformer block's residual add and the layer norm after it in one
// pass per row: sum = input + residual (the residual stream, returned for the next block) and
// output = layer_norm(sum) over the last dimension, scaled by weight and shifted by bias. With
// autograd; the backward reads the sum and each row's mean and 1/std once and sums the weight's
// and bias's gradients in the same pass on the CPU. Registered as
//   symtune::add_layer_norm(Tensor input, Tensor residual, Tensor? weight, Tensor? bias,
//       float eps=1e-5) -> (Tensor output, Tensor sum)
//   symtune::add_layer_norm_forward(...) -> (Tensor output, Tensor sum, Tensor mean, Tensor rstd)
//   symtune::add_layer_norm_backward(Tensor grad_output, Tensor? grad_sum, Tensor sum,
//       Tensor mean, Tensor rstd, Tensor? weight) -> (Tensor grad_sum, Tensor grad_weight,
//       Tensor grad_bias)
// with CPU and CUDA implementations. weight and bias: none or a vector of the last dimension.

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

#include <tuple>

namespace symtune::kernels {

std::tuple<at::Tensor, at::Tensor> addLayerNorm(const at::Tensor& input, const at::Tensor& residual,
                                                const at::Tensor& weight, const at::Tensor& bias,
                                                double eps = 1e-5);

}  // namespace symtune::kernels
