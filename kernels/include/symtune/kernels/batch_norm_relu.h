#pragma once
// symtune::batch_norm_relu — relu(batch_norm(input)) in training mode, forward and backward, with
// autograd: a convolution block's batch normalization and its ReLU in one pass each way over the
// activation after the statistics (Note [Batch norm ReLU] in src/batch_norm_relu_op.cpp).
// Registered as the TorchScript operators
//   symtune::batch_norm_relu_forward(Tensor input, Tensor weight, Tensor bias,
//       Tensor? running_mean, Tensor? running_var, float momentum, float eps)
//       -> (Tensor output, Tensor save_mean, Tensor save_invstd)
//   symtune::batch_norm_relu_backward(Tensor grad, Tensor input, Tensor output, Tensor weight,
//       Tensor save_mean, Tensor save_invstd) -> (Tensor grad_input, Tensor grad_weight,
//       Tensor grad_bias)
// with a CPU implementation. `input` is [N, C, ...], contiguous or channels-last (the output and
// the input's gradient keep its layout; others are made contiguous), float or double, with more
// than one value per channel; `weight` and `bias` are vectors of C; the
// running statistics, when given, are updated in place as aten::batch_norm updates them
// (momentum, unbiased variance).

#include <ATen/core/Tensor.h>

namespace symtune::kernels {

// The fused op with autograd (input, weight and bias differentiable).
at::Tensor batchNormRelu(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
                         const at::Tensor& runningMean, const at::Tensor& runningVar,
                         double momentum, double eps);

}  // namespace symtune::kernels
