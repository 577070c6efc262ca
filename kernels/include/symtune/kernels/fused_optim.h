#pragma once
// Fused optimizer steps over many tensors at once: one pass over each parameter, gradient and
// state element per step instead of one small op sequence per parameter (Note [One pass]).
// Registered as the TorchScript operators symtune::fused_adam_ and symtune::fused_sgd_, with CPU
// and CUDA implementations; the optimizers in fused_optimizers.h call them.
//
// The arithmetic is torch::optim's, in the same order, so results agree with it to rounding:
//   Adam:  g = grad (+ weight_decay * p, unless decoupled)      [AdamW: p *= 1 - lr * wd first]
//          m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
//          p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   SGD:   d = grad (+ weight_decay * p);  with momentum: buf = d on the buffer's first step,
//          else momentum * buf + (1 - dampening) * d;  d = nesterov ? d + momentum * buf : buf
//          p -= lr * d

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace symtune::kernels {

struct AdamHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  bool decoupled = false;  // AdamW
};

struct SgdHyper {
  double lr = 1e-2, momentum = 0, dampening = 0, weightDecay = 0;
  bool nesterov = false;
};

// In place on params, expAvgs and expAvgSqs; `steps[i]` is params[i]'s step count including this
// one (for the bias corrections). All tensors of index i have the same shape, dtype and device;
// all on one device. Floating dtypes: float32, float64, bfloat16 (math in float32).
void fusedAdam_(at::TensorList params, at::TensorList grads, at::TensorList expAvgs,
                at::TensorList expAvgSqs, const std::vector<int64_t>& steps,
                const AdamHyper& hyper);

// In place on params and (with momentum) momentumBuffers; `fresh[i]`: the buffer's first step.
// Without momentum, momentumBuffers is empty.
void fusedSgd_(at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers,
               const std::vector<bool>& fresh, const SgdHyper& hyper);

}  // namespace symtune::kernels
