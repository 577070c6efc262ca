#pragma once
// symtune::bias_dropout_add — residual + dropout(input + bias, p) in one pass, forward and
// backward, with autograd: the end of a Transformer sublayer (a projection's bias, dropout, the
// residual connection), what the built-in fused_bias_dropout_add rewrite puts in place of
// aten::add + aten::dropout + aten::add. Registered as the TorchScript operators
//   symtune::bias_dropout_add(Tensor input, Tensor? bias, Tensor residual, float p,
//                             bool train=True) -> Tensor
//   symtune::bias_dropout_add_forward(Tensor input, Tensor? bias, Tensor residual, float p,
//                                     int seed) -> Tensor
//   symtune::bias_dropout_add_backward(Tensor grad, Tensor? bias, float p, int seed)
//       -> (Tensor grad_input, Tensor grad_bias)
// with CPU and CUDA implementations. The kernels take a bias that is none, a vector of input's
// last dimension or input's shape, and a residual of input's shape; bias_dropout_add runs other
// shapes through the composition with ATen's dropout. Kept elements are scaled by 1 / (1 - p), as
// aten::dropout. The mask is a hash of the element's index and a seed (Note [Dropout mask] in
// src/bias_dropout_add_common.h): bias_dropout_add draws the seed from the default CPU
// generator (torch::manual_seed reproduces it on either device), keeps only the seed for the
// backward — no mask tensor — and the same seed gives the same mask on CPU and CUDA. With
// train false or p = 0 it is input + bias + residual.

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace symtune::kernels {

// Calls the registered operator (autograd included); `bias` may be undefined.
at::Tensor biasDropoutAdd(const at::Tensor& input, const at::Tensor& bias,
                          const at::Tensor& residual, double p, bool train = true);

// The kernels with an explicit seed (no autograd): the forward, and the gradients of input and
// bias given the output's gradient (the residual's gradient is that gradient itself).
at::Tensor biasDropoutAddForward(const at::Tensor& input, const at::Tensor& bias,
                                 const at::Tensor& residual, double p, int64_t seed);
std::tuple<at::Tensor, at::Tensor> biasDropoutAddBackward(const at::Tensor& grad,
                                                          const at::Tensor& bias, double p,
                                                          int64_t seed);

}  // namespace symtune::kernels
