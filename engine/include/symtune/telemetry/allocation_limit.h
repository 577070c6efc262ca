#pragma once
// Lifting the CPU allocation limit for work inside a step that is not the step's own.

#include <cstdint>
#include <optional>

namespace symtune {

// Lifts whatever limit holds LibTorch's CPU allocator (a remat budget, ScopedCpuBudget in
// symtune/remat/memory_budget.h) while it lives, and puts it back when it ends: for work done
// inside a step that is not the step's own — the binder measuring its candidates on the step's
// inputs (docs/remat.md, "With the binder"), whose allocations would otherwise count against the
// budget and fail a candidate for good. What it allocates and keeps still counts once the limit is
// back; the peak it reached does not: the peak is the step's from before it, or what is live when
// it ends where that is more, so a step that measured peaks as one that did not. (Until
// 2026-12-07 the peak counted on from what was live when it ended, and a step of several
// micro-batches that measured in a later one forgot the earlier ones' peak.)
class ScopedAllocationLimitLift {
 public:
  ScopedAllocationLimitLift();
  ~ScopedAllocationLimitLift();
  ScopedAllocationLimitLift(const ScopedAllocationLimitLift&) = delete;
  ScopedAllocationLimitLift& operator=(const ScopedAllocationLimitLift&) = delete;

 private:
  std::optional<int64_t> limit_;
  int64_t peakBefore_ = 0;
};

}  // namespace symtune
