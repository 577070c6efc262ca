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

}  // namespace symtune::kernels
