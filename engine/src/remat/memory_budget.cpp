#include "symtune/remat/memory_budget.h"

#include <algorithm>
#include <limits>

#include <c10/util/Exception.h>

#include "symtune/telemetry/memory_tracker.h"

namespace symtune::remat {

ScopedCpuBudget::ScopedCpuBudget(int64_t bytes)
    : ScopedCpuBudget(
          bytes, CpuAllocationCounter::active() ? CpuAllocationCounter::counters().current : 0) {
}

ScopedCpuBudget::ScopedCpuBudget(int64_t bytes, int64_t base) {
  TORCH_CHECK(bytes >= 0, "ScopedCpuBudget: the budget must be at least 0 bytes, got ", bytes);
  TORCH_CHECK(CpuAllocationCounter::active(),
              "ScopedCpuBudget: LibTorch's CPU allocator is not Symtune's counting one (another "
              "was installed with a higher priority), so no budget can hold");
  base_ = base;
  outer_ = CpuAllocationCounter::limit();
  // Saturated: a budget near INT64_MAX (as good as none) must not wrap to a negative limit.
  const int64_t mine = bytes > std::numeric_limits<int64_t>::max() - std::max<int64_t>(base_, 0)
                           ? std::numeric_limits<int64_t>::max()
                           : base_ + bytes;
  limit_ = outer_ ? std::min(*outer_, mine) : mine;
  CpuAllocationCounter::setLimit(limit_);
}

ScopedCpuBudget::~ScopedCpuBudget() {
  CpuAllocationCounter::setLimit(outer_);
}

}  // namespace symtune::remat
