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
#include <optional>

#include <c10/core/DeviceType.h>
#include <c10/util/ThreadLocalDebugInfo.h>

namespace symtune {

struct MemoryCounters {
  int64_t current = 0;      // bytes allocated minus bytes freed
  int64_t peak = 0;         // highest `current` since the last resetPeak()
  int64_t allocations = 0;  // number of allocations
  int64_t frees = 0;
};

// This thread's running totals of bytes allocated and freed (all devices) while any MemoryTracker
// was active on it. OpTracer reads them when an op starts and ends: the difference is what the op
// allocated and freed, on whichever thread it ran, without a lock.
struct ThreadMemoryTotals {
  int64_t allocated = 0;
  int64_t freed = 0;
  int64_t cudaAllocated = 0;  // the CUDA caching allocator's share of the two above
  int64_t cudaFreed = 0;
};
const ThreadMemoryTotals& threadMemoryTotals();

// Note [Step memory without reports]
// Memory reports cost more than they look on the CPU: with memoryProfilingEnabled(), LibTorch's
// CPU allocator also keeps every block's size in a map under a mutex, which costs a step of the
// zoo's cpu preset about 4 % (bench/telemetry_overhead). Step features need only the step's
// peak, live bytes and allocation count, so on the CPU they come from a thin wrapper around the
// CPU allocator instead: it swaps in its own deleter (the data pointer and context are
// unchanged, so raw_allocate still works), counts each block's malloc_usable_size with atomics
// and no map, and calls the wrapped deleter. The counts are process-wide. Per-op memory
// (per-node telemetry) still uses the reports, which are per thread.
//
// Note [Enforced CPU budget]
// The wrapper can also hold the count to a limit: an allocation that would take the live bytes
// it counts past the limit allocates nothing and raises c10::OutOfMemoryError — what LibTorch
// raises when a CUDA device (or its caching allocator's memory fraction) is exhausted — so that
// "does it fit" is testable on a CPU. The check and the count are one atomic step, so threads
// allocating at once never take the count past the limit together. Blocks the wrapper does not
// count (allocated before it was installed, or by another allocator) are outside the limit.
// The error can reach the caller as another: TorchScript's interpreter (a region the binder runs
// through TorchScript) rethrows what an op raised as a std::runtime_error with its message, so a
// caller that backs off on running out asks refusals() whether the limit refused an allocation
// in the meantime (a bound Transformer-XL under 66 MB stopped on the first such error until
// 2026-12-04).
class CpuAllocationCounter {
 public:
  // Installs the wrapper as LibTorch's CPU allocator (once); false when it cannot be — another
  // allocator was set with a higher priority — or is no longer the one in use.
  static bool active();
  // Live bytes and their peak; allocations and frees since the wrapper was installed.
  static MemoryCounters counters();
  // The peak down to what is live now (the counts go on).
  static void resetPeak();
  // The most live bytes (`counters().current`) allocations may reach; nullopt: no limit. The
  // wrapper must be active for a limit to hold (setLimit installs it).
  static void setLimit(std::optional<int64_t> bytes);
  static std::optional<int64_t> limit();
  // How many allocations a limit has refused so far (each raised c10::OutOfMemoryError).
  static int64_t refusals();
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

  // Bytes live on all devices (relative to the tracker's start) of the tracker active on this
  // thread; nullopt when none is.
  static std::optional<int64_t> activeLiveBytes();

 private:
  class Reporter;
  std::shared_ptr<Reporter> reporter_;
};

}  // namespace symtune
