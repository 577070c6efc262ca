#include "symtune/memory_tracker.h"

#include <atomic>

#include "symtune/torch_compat.h"

namespace symtune {

namespace {

struct AtomicCounters {
  std::atomic<int64_t> current{0}, peak{0}, allocations{0}, frees{0};

  void add(int64_t bytes) {
    const int64_t now = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    (bytes >= 0 ? allocations : frees).fetch_add(1, std::memory_order_relaxed);
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
};

}  // namespace

class MemoryTracker::Reporter final : public c10::MemoryReportingInfoBase {
 public:
  void reportMemoryUsage(void* /*ptr*/, int64_t allocSize, compat::MemoryReportTotal /*total*/,
                         compat::MemoryReportTotal /*reserved*/, c10::Device device) override {
    slot(device.type()).add(allocSize);
  }
  bool memoryProfilingEnabled() const override { return true; }

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

}  // namespace symtune
