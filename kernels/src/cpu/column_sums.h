#pragma once
// The column sums of a row-parallel backward — a row bias's gradient — without atomics: each
// thread of the at::parallel_for adds its rows into a slot of its own, then the slots are added.
// Private to kernels/.
//
// Note [Slots flushed to double]
// A thread's slot in float, added to over all of its rows (a million rows of 16 columns on one
// thread), lost digits: the bias gradient was 7.4e-5 off a float64 reference where ATen's sum is
// 1.5e-7, past the binder's tolerance of 1e-5. So every kFlushRows rows (rowDone()) a slot is
// added into a double one of its thread and starts again from zero; the slots stay in Opmath for
// the rows' vector adds.

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
        partial_(static_cast<size_t>(threads_ * columns), Opmath(0)),
        wide_(partial_.size(), 0.0),
        rows_(static_cast<size_t>(threads_), 0) {}

  // The calling thread's slot; nullptr when inactive.
  Opmath* slot() {
    return threads_ > 0 ? partial_.data() + at::get_thread_num() * columns_ : nullptr;
  }

  // After each row the calling thread added to its slot (Note [Slots flushed to double]).
  void rowDone() {
    if (threads_ == 0)
      return;
    const int t = at::get_thread_num();
    if (++rows_[static_cast<size_t>(t)] % kFlushRows != 0)
      return;
    Opmath* p = partial_.data() + t * columns_;
    double* w = wide_.data() + t * columns_;
    for (int64_t c = 0; c < columns_; ++c) {
      w[c] += static_cast<double>(p[c]);
      p[c] = Opmath(0);
    }
  }

  // The sums over every slot, summed in double, as a vector of `dtype`.
  at::Tensor total(const at::TensorOptions& options, at::ScalarType dtype) const {
    at::Tensor sums = at::zeros({columns_}, options.dtype(at::kDouble));
    double* s = sums.data_ptr<double>();
    for (int t = 0; t < threads_; ++t) {
      for (int64_t c = 0; c < columns_; ++c) {
        const auto i = static_cast<size_t>(t * columns_ + c);
        s[c] += wide_[i] + static_cast<double>(partial_[i]);
      }
    }
    return sums.to(dtype);
  }

 private:
  static constexpr int64_t kFlushRows = 256;
  int64_t columns_;
  int threads_;
  std::vector<Opmath> partial_;
  std::vector<double> wide_;
  std::vector<int64_t> rows_;
};

}  // namespace symtune::kernels
