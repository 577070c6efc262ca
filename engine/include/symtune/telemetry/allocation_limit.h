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
// back; the peak it reached does not (the peak counts on from what is live when it ends: a step's
// peak before it — in a forward, at most the temporaries of the op before — is forgotten with it),
// so a step that measured peaks as one that did not.
class ScopedAllocationLimitLift {
 public:
  ScopedAllocationLimitLift();
  ~ScopedAllocationLimitLift();
  ScopedAllocationLimitLift(const ScopedAllocationLimitLift&) = delete;
  ScopedAllocationLimitLift& operator=(const ScopedAllocationLimitLift&) = delete;

 private:
  std::optional<int64_t> limit_;
};

}  // namespace symtune
