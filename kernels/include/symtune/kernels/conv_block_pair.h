#pragma once
// symtune::kernels::convBlockPairAgain — two convolution blocks in a row (each conv2d, a training
// batch norm, ReLU) as one autograd op that keeps its input and the batch norms' statistics only
// and runs itself again in its backward, holding three of the blocks' activations at most there
// (Note [A block pair run again] in src/conv_block_pair_op.cpp). ATen's six ops keep four
// activations for the backward (each batch norm's input and each ReLU's output); the lean block
// (batch_norm_relu_conv.h) keeps two. It trades two convolutions' forwards in the backward for
// them: what the binder's memory slack weighs (docs/binding.md, "Memory slack").
//
// CPU tensors, float or double; `input` [N, C, H, W], contiguous or channels-last (other layouts
// are made contiguous); no convolution bias. The running statistics, when given, are updated in
// place by the forward as aten::batch_norm updates them, and not again by the backward. Not twice
// differentiable.

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace symtune::kernels {

// relu(batch_norm(conv2d(x, weight, None, stride, padding, dilation, groups), bnWeight, bnBias,
// runningMean, runningVar, training=true, momentum, eps)).
struct ConvBlock {
  at::Tensor weight;  // [out, in / groups, kH, kW]
  std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  at::Tensor bnWeight, bnBias;         // [out]
  at::Tensor runningMean, runningVar;  // [out], both or neither (undefined)
  double momentum = 0.1, eps = 1e-5;
};

// second(first(input)). Differentiable in the input and in each block's weight, batch-norm
// weight and bias.
at::Tensor convBlockPairAgain(const at::Tensor& input, const ConvBlock& first,
                              const ConvBlock& second);

}  // namespace symtune::kernels
