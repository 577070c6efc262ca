#pragma once
// Gradient clamping and clipping over many tensors in two passes each, one dispatch for a model:
// what the built-in gradient_steering and global_norm_clipping rules do, as operators.
//   symtune::rms_clamp_(Tensor(a!)[] grads) -> Tensor
//       clamps every gradient to its own RMS, g = clamp(g, -t, t) with t = sqrt(mean(g^2));
//       returns the t of each (float64 [n], on the gradients' device)
//   symtune::clip_grad_norm_(Tensor(a!)[] grads, float max_norm) -> Tensor
//       as torch.nn.utils.clip_grad_norm_: with the global L2 norm N over all gradients, scales
//       them all by max_norm / (N + 1e-6) when that is below 1; returns N (float64 scalar)
// CPU and CUDA implementations; on CUDA neither reads back to the host.

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

namespace symtune::kernels {

at::Tensor rmsClamp_(at::TensorList grads);
at::Tensor clipGradNorm_(at::TensorList grads, double maxNorm);

}  // namespace symtune::kernels
