#pragma once
// symtune::kernels::batchNormReluConv2d — conv2d(relu(batch_norm(input))) in training mode, with
// autograd, keeping for its backward the batch norm's input and statistics only: one activation
// where ATen's three ops keep two (the batch norm's input, and the ReLU's output, which the
// convolution keeps too). The backward makes the convolution's input again from the kept one in
// one pass, takes the convolution's weight gradient, frees it, takes the input's gradient (which
// reads only its shape), then writes the ReLU's mask and the batch norm's backward over that
// gradient in place (Note [Lean convolution block] in src/batch_norm_relu_conv_op.cpp).
//
// The two per-element steps are exported for backwards written by hand around them
// (bench/lean_chain.cpp's first stage): batchNormReluInPlace and batchNormReluBackwardInPlace.
//
// CPU tensors, float or double; `input` [N, C, H, W], contiguous or channels-last (other layouts
// are made contiguous); the batch norm's weight and bias vectors of C; the running statistics,
// when given, updated in place as aten::batch_norm updates them. The convolution's arguments are
// aten::conv2d's. Not twice differentiable.

#include <tuple>

#include <ATen/core/Tensor.h>

namespace symtune::kernels {

// conv2d(relu(batch_norm(input, weight, bias, runningMean, runningVar, training=true, momentum,
// eps)), convWeight, convBias, stride, padding, dilation, groups). Differentiable in input,
// weight, bias, convWeight and convBias (which may be undefined: no bias).
at::Tensor batchNormReluConv2d(const at::Tensor& input, const at::Tensor& weight,
                               const at::Tensor& bias, const at::Tensor& runningMean,
                               const at::Tensor& runningVar, double momentum, double eps,
                               const at::Tensor& convWeight, const at::Tensor& convBias,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef dilation, int64_t groups);

// t <- relu(t * scale + shift) per channel, scale = weight * invstd and shift = bias - mean *
// scale: a training batch norm with the statistics it measured (`mean`, `invstd`), and its ReLU.
// `t` contiguous or channels-last. No autograd.
void batchNormReluInPlace(at::Tensor& t, const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& mean, const at::Tensor& invstd);

// The backward of relu(batch_norm(input)) in training with the statistics it measured, written
// over `grad` (the output's gradient becomes the input's): the ReLU's mask read from input *
// scale + shift > 0, then batch norm's backward (its per-channel sums ATen's). `grad` has the
// input's shape and layout (contiguous or channels-last). Returns the gradients of the weight and
// the bias. No autograd.
std::tuple<at::Tensor, at::Tensor> batchNormReluBackwardInPlace(
    at::Tensor& grad, const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias,
    const at::Tensor& mean, const at::Tensor& invstd);

}  // namespace symtune::kernels
