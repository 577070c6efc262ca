#pragma once
// The column sums of a row-parallel backward — a row bias's gradient — without atomics: each
// thread of the at::parallel_for adds its rows into a slot of its own, then the slots are added.
// Private to kernels/.

#include <vector>

#include <ATen/ATen.h>

#include "../parallel.h"

namespace symtune::kernels {

template <typename Opmath>
class ThreadColumnSums {
 public:
  // Inactive (no slots, slot() is nullptr) when the backward has no row bias.
  ThreadColumnSums(bool active, int64_t columns)
      : columns_(columns),
        threads_(active ? at::get_num_threads() : 0),
        partial_(static_cast<size_t>(threads_ * columns), Opmath(0)) {}

  // The calling thread's slot; nullptr when inactive.
  Opmath* slot() {
    return threads_ > 0 ? partial_.data() + at::get_thread_num() * columns_ : nullptr;
  }

  // The sums over every slot, summed in Opmath, as a vector of `dtype`.
  at::Tensor total(const at::TensorOptions& options, at::ScalarType dtype) const {
    at::Tensor sums = at::zeros({columns_}, options.dtype(c10::CppTypeToScalarType<Opmath>::value));
    Opmath* s = sums.data_ptr<Opmath>();
    for (int t = 0; t < threads_; ++t)
      for (int64_t c = 0; c < columns_; ++c)
        s[c] += partial_[static_cast<size_t>(t * columns_ + c)];
    return sums.to(dtype);
  }

 private:
  int64_t columns_;
  int threads_;
  std::vector<Opmath> partial_;
};

}  // namespace symtune::kernels
