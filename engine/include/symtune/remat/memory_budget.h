#pragma once
// A CPU memory budget that is enforced (docs/remat.md, "The budget"): while a ScopedCpuBudget
// lives, an allocation through LibTorch's CPU allocator that would take the live tensors more than
// `bytes` above what was live when the budget began allocates nothing and raises
// c10::OutOfMemoryError, as a CUDA device does when it is full (Note [Enforced CPU budget] in
// symtune/telemetry/memory_tracker.h). So a step that fits its budget on a GPU, where the caching
// allocator's memory fraction holds it, can be tested for fitting on a CPU:
//
//   {
//     symtune::remat::ScopedCpuBudget budget(64 << 20);  // 64 MiB above what is live now
//     loss = model(x); loss.backward();                   // c10::OutOfMemoryError past it
//   }
//
// Budgets nest: inside another, the tighter limit holds; each puts back the limit it found.

#include <cstdint>
#include <optional>

namespace symtune::remat {

class ScopedCpuBudget {
 public:
  // `bytes` >= 0. Throws when LibTorch's CPU allocator is not the counting one (another allocator
  // was installed with a higher priority): the budget could not hold.
  explicit ScopedCpuBudget(int64_t bytes);
  // `bytes` above `base` live bytes rather than those live now (a retry held to the budget of the
  // attempt before it).
  ScopedCpuBudget(int64_t bytes, int64_t base);
  ~ScopedCpuBudget();
  ScopedCpuBudget(const ScopedCpuBudget&) = delete;
  ScopedCpuBudget& operator=(const ScopedCpuBudget&) = delete;

  // The live bytes counted when it began, and the most it lets them reach (the smaller of base +
  // bytes and an enclosing budget's limit).
  int64_t base() const { return base_; }
  int64_t limit() const { return limit_; }

 private:
  int64_t base_ = 0;
  int64_t limit_ = 0;
  std::optional<int64_t> outer_;
};

}  // namespace symtune::remat
