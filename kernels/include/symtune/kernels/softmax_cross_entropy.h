#pragma once
// symtune::softmax_cross_entropy — the mean cross-entropy of logits against class targets, as
// torch::nn::functional::cross_entropy (reduction "mean", ignore_index), without the log-softmax
// tensor: the forward reads the logits once per row and keeps only each row's log-sum-exp for the
// backward, which writes the gradient in one pass. With autograd. Registered as
//   symtune::softmax_cross_entropy(Tensor logits, Tensor target, int ignore_index=-100) -> Tensor
//   symtune::softmax_cross_entropy_forward(Tensor logits, Tensor target, int ignore_index)
//       -> (Tensor loss, Tensor lse)
//   symtune::softmax_cross_entropy_backward(Tensor grad, Tensor logits, Tensor target,
//       Tensor lse, int ignore_index) -> Tensor
// with CPU and CUDA implementations. logits: [N, C] floating point; target: [N] int64, each in
// [0, C) or ignore_index. With every row ignored the loss is NaN, as in PyTorch.

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace symtune::kernels {

at::Tensor softmaxCrossEntropy(const at::Tensor& logits, const at::Tensor& target,
                               int64_t ignoreIndex = -100);

}  // namespace symtune::kernels
