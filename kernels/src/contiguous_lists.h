#pragma once
// Contiguous working copies of the tensors a multi-tensor kernel reads and writes: a tensor that
// is contiguous is used as it is; one that is not is copied, and written back by writeBack() when
// the kernel changed it. Private to kernels/.

#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace symtune::kernels {

class ContiguousList {
 public:
  void add(const at::Tensor& t, bool written) {
    if (t.is_contiguous()) {
      tensors_.push_back(t);
      return;
    }
    at::Tensor copy = t.contiguous();
    tensors_.push_back(copy);
    if (written)
      pending_.emplace_back(t, copy);
  }
  const at::Tensor& operator[](size_t i) const { return tensors_[i]; }
  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  void writeBack() {
    for (auto& [original, copy] : pending_)
      original.copy_(copy);
    pending_.clear();
  }

 private:
  std::vector<at::Tensor> tensors_;
  std::vector<std::pair<at::Tensor, at::Tensor>> pending_;  // (original, contiguous copy)
};

}  // namespace symtune::kernels
