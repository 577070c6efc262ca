#pragma once
// The argument checks the CPU and CUDA softmax_cross_entropy kernels share. Private to kernels/.

#include <ATen/ATen.h>

namespace symtune::kernels {

inline void checkCrossEntropyArguments(const at::Tensor& logits, const at::Tensor& target) {
  TORCH_CHECK(logits.dim() == 2, "symtune::softmax_cross_entropy: logits must be [N, C], got ",
              logits.sizes());
  TORCH_CHECK(at::isFloatingType(logits.scalar_type()),
              "symtune::softmax_cross_entropy: logits must be floating point, got ",
              logits.scalar_type());
  TORCH_CHECK(target.dim() == 1 && target.size(0) == logits.size(0),
              "symtune::softmax_cross_entropy: target must be [N] = [", logits.size(0), "], got ",
              target.sizes());
  TORCH_CHECK(target.scalar_type() == at::kLong,
              "symtune::softmax_cross_entropy: target must be int64, got ", target.scalar_type());
  TORCH_CHECK(target.device() == logits.device(), "symtune::softmax_cross_entropy: target is on ",
              target.device(), ", logits on ", logits.device());
}

// The backward operator's other arguments, as both kernels read them. Called as it is, past
// autograd (torch.ops.symtune.softmax_cross_entropy_backward), a short lse was read past its end,
// and on CUDA an lse or grad on another device than the logits was handed to the kernel (an
// illegal access that poisons the context). The targets' range is the CPU kernel's own check (it
// reads them on the host); the CUDA kernel compares each column with its row's target and
// indexes nothing by it.
inline void checkCrossEntropyBackwardArguments(const at::Tensor& grad, const at::Tensor& logits,
                                               const at::Tensor& target, const at::Tensor& lse) {
  checkCrossEntropyArguments(logits, target);
  const char* op = "symtune::softmax_cross_entropy_backward";
  const int64_t rows = logits.size(0);
  TORCH_CHECK(lse.dim() == 1 && lse.size(0) == rows && lse.is_contiguous(), op,
              ": lse must hold one value per row (", rows, "), got shape ", lse.sizes());
  const at::ScalarType math = logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(lse.scalar_type() == math && lse.device() == logits.device(), op, ": lse must be ",
              math, " on ", logits.device(), " for ", logits.scalar_type(), " logits, got ",
              lse.scalar_type(), " on ", lse.device());
  TORCH_CHECK(grad.numel() == 1, op, ": grad must be the loss's, one value, got shape ",
              grad.sizes());
  // On the logits' device, or a CPU scalar (as ATen's binary ops take one beside CUDA tensors).
  TORCH_CHECK(at::isFloatingType(grad.scalar_type()) &&
                  (grad.device() == logits.device() || (grad.dim() == 0 && grad.is_cpu())),
              op, ": grad must be floating point, on ", logits.device(),
              " with the logits or a CPU scalar, got ", grad.scalar_type(), " on ", grad.device());
}

}  // namespace symtune::kernels
