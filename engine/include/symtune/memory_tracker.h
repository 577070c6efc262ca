#pragma once
// Bytes allocated and freed while the tracker is active, per device type, from LibTorch's own
// allocation reports (c10::MemoryReportingInfoBase): the CPU allocator and the CUDA caching
// allocator both report through it. Part of MetaInfoBroker.
//
//   symtune::MemoryTracker tracker;
//   {
//     auto active = tracker.activate();   // this thread, and autograd's threads for its backward
//     tracker.resetPeak();
//     loss = model(x); loss.backward();
//   }
//   tracker.counters(c10::DeviceType::CPU).peak   // the step's peak above where it started
//
// Note [Memory reports]
// The reports carry +size for an allocation and -size for a free. Counters are atomics, so
// reports from several threads need no lock. "current" and "peak" are relative to the moment the
// tracker was created (or reset), so blocks allocated before that and freed during the step count
// negative: a step's peak is the most memory it held on top of what was live when it began. Do not
// run LibTorch's own profiler at the same time: both use the PROFILER_STATE debug-info slot.

#include <cstdint>
#include <memory>

#include <c10/core/DeviceType.h>
#include <c10/util/ThreadLocalDebugInfo.h>

namespace symtune {

struct MemoryCounters {
  int64_t current = 0;      // bytes allocated minus bytes freed
  int64_t peak = 0;         // highest `current` since the last resetPeak()
  int64_t allocations = 0;  // number of allocations
  int64_t frees = 0;
};

class MemoryTracker {
 public:
  MemoryTracker();
  ~MemoryTracker();

  // While the returned guard lives, allocations on this thread (and on the autograd threads of a
  // backward started from it) are reported to this tracker.
  [[nodiscard]] std::unique_ptr<c10::DebugInfoGuard> activate();

  // Sets every device's peak to its current value and zeroes the allocation counts.
  void resetPeak();
  MemoryCounters counters(c10::DeviceType device) const;

 private:
  class Reporter;
  std::shared_ptr<Reporter> reporter_;
};

}  // namespace symtune
