#include "symtune/telemetry/memory_tracker.h"

#include "symtune/telemetry/allocation_limit.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include "symtune/compat/torch_compat.h"

namespace symtune {

namespace {

struct AtomicCounters {
  std::atomic<int64_t> current{0}, peak{0}, allocations{0}, frees{0};

  void add(int64_t bytes) {
    const int64_t now = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    counted(bytes, now);
  }

  // Adds an allocation of `bytes` unless it would take `current` past `limit` (< 0: none): then
  // nothing changes and it returns what `current` would have been.
  std::optional<int64_t> addWithin(int64_t bytes, int64_t limit) {
    int64_t now = current.load(std::memory_order_relaxed);
    do {
      if (limit >= 0 && now + bytes > limit)
        return now + bytes;
    } while (!current.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
    counted(bytes, now + bytes);
    return std::nullopt;
  }

 private:
  void counted(int64_t bytes, int64_t now) {
    (bytes >= 0 ? allocations : frees).fetch_add(1, std::memory_order_relaxed);
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
};

thread_local ThreadMemoryTotals tTotals;

}  // namespace

const ThreadMemoryTotals& threadMemoryTotals() {
  return tTotals;
}

class MemoryTracker::Reporter final : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void* /*ptr*/, int64_t allocSize, compat::MemoryReportTotal /*total*/,
                         compat::MemoryReportTotal /*reserved*/, c10::Device device) override {
    slot(device.type()).add(allocSize);
    const int64_t bytes = allocSize >= 0 ? allocSize : -allocSize;
    (allocSize >= 0 ? tTotals.allocated : tTotals.freed) += bytes;
    if (device.is_cuda())
      (allocSize >= 0 ? tTotals.cudaAllocated : tTotals.cudaFreed) += bytes;
  }
  bool memoryProfilingEnabled() const override { return true; }

  int64_t liveBytes() const {
    return cpu_.current.load(std::memory_order_relaxed) +
           cuda_.current.load(std::memory_order_relaxed) +
           other_.current.load(std::memory_order_relaxed);
  }

  // Counters are atomics updated from const contexts too (reports arrive through a const tracker).
  AtomicCounters& slot(c10::DeviceType type) const {
    return type == c10::DeviceType::CUDA ? cuda_ : type == c10::DeviceType::CPU ? cpu_ : other_;
  }

 private:
  mutable AtomicCounters cpu_, cuda_, other_;
};

MemoryTracker::MemoryTracker() : reporter_(std::make_shared<Reporter>()) {
}
MemoryTracker::~MemoryTracker() = default;

std::unique_ptr<c10::DebugInfoGuard> MemoryTracker::activate() {
  return std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, reporter_);
}

void MemoryTracker::resetPeak() {
  for (auto type : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    AtomicCounters& c = reporter_->slot(type);
    c.peak.store(c.current.load());
    c.allocations.store(0);
    c.frees.store(0);
  }
}

MemoryCounters MemoryTracker::counters(c10::DeviceType device) const {
  const AtomicCounters& c = reporter_->slot(device);
  return {c.current.load(), c.peak.load(), c.allocations.load(), c.frees.load()};
}

std::optional<int64_t> MemoryTracker::activeLiveBytes() {
  const auto* reporter = dynamic_cast<const Reporter*>(
      c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE));
  if (reporter == nullptr)
    return std::nullopt;
  return reporter->liveBytes();
}

namespace {

AtomicCounters gCpuCounts;
std::atomic<c10::DeleterFnPtr> gWrappedDeleter{nullptr};
std::atomic<int64_t> gCpuLimit{-1};  // Note [Enforced CPU budget]; -1: none
std::atomic<int64_t> gCpuRefusals{0};

std::string mebibytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

void countingDelete(void* data) {
  gCpuCounts.add(-static_cast<int64_t>(malloc_usable_size(data)));
  gWrappedDeleter.load(std::memory_order_relaxed)(data);
}

// Note [Step memory without reports]
class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr block = inner_->allocate(n);
    void* data = block.get();
    c10::DeleterFnPtr wrapped = block.get_deleter();
    c10::DeleterFnPtr expected = nullptr;
    // Only blocks that own their memory through one plain deleter are counted (LibTorch's default
    // CPU allocator hands out only those).
    if (data == nullptr || data != block.get_context() || wrapped == nullptr ||
        (!gWrappedDeleter.compare_exchange_strong(expected, wrapped) && expected != wrapped)) {
      return block;
    }
    const auto bytes = static_cast<int64_t>(malloc_usable_size(data));
    const int64_t limit = gCpuLimit.load(std::memory_order_relaxed);
    if (const auto past = gCpuCounts.addWithin(bytes, limit)) {
      block.clear();  // its own deleter: nothing was counted
      gCpuRefusals.fetch_add(1, std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "Symtune's CPU memory budget: allocating ",
                       mebibytes(bytes), " would take the live CPU tensors to ", mebibytes(*past),
                       ", past the budget's limit of ", mebibytes(limit));
    }
    if (!block.compare_exchange_deleter(wrapped, &countingDelete)) {
      gCpuCounts.add(-bytes);
      return block;
    }
    return block;
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return gWrappedDeleter.load() != nullptr ? &countingDelete : inner_->raw_deleter();
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    inner_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
};

CountingCpuAllocator* installCounting() {
  static CountingCpuAllocator* installed = [] {
    auto* counting = new CountingCpuAllocator(c10::GetCPUAllocator());  // lives as long as LibTorch
    c10::SetCPUAllocator(counting, /*priority=*/0);
    return counting;
  }();
  return installed;
}

}  // namespace

bool CpuAllocationCounter::active() {
  const CountingCpuAllocator* counting = installCounting();  // before asking which is in use
  return c10::GetCPUAllocator() == counting;
}

MemoryCounters CpuAllocationCounter::counters() {
  return {gCpuCounts.current.load(), gCpuCounts.peak.load(), gCpuCounts.allocations.load(),
          gCpuCounts.frees.load()};
}

void CpuAllocationCounter::setLimit(std::optional<int64_t> bytes) {
  installCounting();
  gCpuLimit.store(bytes ? std::max<int64_t>(*bytes, 0) : -1);
}

std::optional<int64_t> CpuAllocationCounter::limit() {
  const int64_t limit = gCpuLimit.load();
  return limit >= 0 ? std::optional<int64_t>(limit) : std::nullopt;
}

int64_t CpuAllocationCounter::refusals() {
  return gCpuRefusals.load(std::memory_order_relaxed);
}

ScopedAllocationLimitLift::ScopedAllocationLimitLift()
    : limit_(CpuAllocationCounter::limit()), peakBefore_(gCpuCounts.peak.load()) {
  if (limit_)
    CpuAllocationCounter::setLimit(std::nullopt);
}

ScopedAllocationLimitLift::~ScopedAllocationLimitLift() {
  if (limit_)
    CpuAllocationCounter::setLimit(limit_);
  // The peak is the step's again: its peak before, or what is live now, not the lifted work's.
  gCpuCounts.peak.store(std::max(peakBefore_, gCpuCounts.current.load()));
}

void CpuAllocationCounter::resetPeak() {
  gCpuCounts.peak.store(gCpuCounts.current.load());
}

}  // namespace symtune
