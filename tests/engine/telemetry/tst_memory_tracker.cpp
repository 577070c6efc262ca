// The memory tracker's step peak against an independent count: a CPU allocator that wraps
// LibTorch's and counts every byte it hands out and takes back.

#include "doctest_torch.h"

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "symtune/telemetry/memory_tracker.h"
#include "symtune/zoo/model_zoo.h"

namespace {

// Counts bytes live through it and their peak; delegates to the allocator it replaces. Its data
// pointers are "simple" (context == data), as LibTorch expects of CPU allocators.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) { instance_ = this; }

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr block = inner_->allocate(n);
    void* data = block.get();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_.emplace(data, std::make_pair(std::move(block), n));
    }
    add(static_cast<int64_t>(n));
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  void reset() { peak_.store(current_.load()); }
  int64_t current() const { return current_.load(); }
  int64_t peak() const { return peak_.load(); }

 private:
  static void release(void* data) {
    CountingAllocator* self = instance_;
    c10::DataPtr block;  // destroyed last, outside the lock: frees through the inner allocator
    size_t size = 0;
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      auto it = self->blocks_.find(data);
      if (it == self->blocks_.end())
        return;
      block = std::move(it->second.first);
      size = it->second.second;
      self->blocks_.erase(it);
    }
    self->add(-static_cast<int64_t>(size));
  }
  void add(int64_t bytes) {
    const int64_t now = current_.fetch_add(bytes) + bytes;
    int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
  }

  static inline CountingAllocator* instance_ = nullptr;
  c10::Allocator* inner_;
  std::mutex mutex_;
  std::unordered_map<void*, std::pair<c10::DataPtr, size_t>> blocks_;
  std::atomic<int64_t> current_{0}, peak_{0};
};

}  // namespace

// Before the cases that put other allocators in its place. A step's resets (one per micro-batch,
// one after each lifted limit) zeroed the counts until 2026-12-07: the step's allocations feature
// told those after the last reset only.
TEST_CASE("the allocation counter counts on through a peak reset") {
  REQUIRE(symtune::CpuAllocationCounter::active());
  const symtune::MemoryCounters before = symtune::CpuAllocationCounter::counters();
  { auto t = torch::ones({1000}); }
  symtune::CpuAllocationCounter::resetPeak();
  const symtune::MemoryCounters after = symtune::CpuAllocationCounter::counters();
  CHECK(after.allocations >= before.allocations + 1);
  CHECK(after.frees >= before.frees + 1);
  CHECK(after.peak == after.current);
}

TEST_CASE("the step peak agrees with a counting allocator's") {
  at::set_num_threads(2);
  static CountingAllocator counting(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/10);

  auto zoo = symtune::buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
  const symtune::Batch batch = zoo.data->batch(0);
  symtune::MemoryTracker tracker;
  double trackedPeak = 0, countedPeak = 0;
  {
    auto active = tracker.activate();
    tracker.resetPeak();
    const int64_t countedStart = counting.current();
    counting.reset();
    auto loss = torch::nn::functional::cross_entropy(zoo.module.forward(batch.inputs).toTensor(),
                                                     batch.target);
    loss.backward();
    trackedPeak = static_cast<double>(tracker.counters(c10::DeviceType::CPU).peak);
    countedPeak = static_cast<double>(counting.peak() - countedStart);
  }
  c10::SetCPUAllocator(c10::GetDefaultCPUAllocator(), /*priority=*/11);
  MESSAGE("step peak: tracker ", static_cast<int64_t>(trackedPeak), " bytes, counting allocator ",
          static_cast<int64_t>(countedPeak), " bytes");
  CHECK(countedPeak > 1e5);  // the step held real memory
  const auto cpu = tracker.counters(c10::DeviceType::CPU);
  CHECK(cpu.allocations > 100);
  CHECK(cpu.frees > 0);
  INFO("the tracker's peak is within 5 % of the independent count");
  CHECK(std::abs(trackedPeak - countedPeak) <= 0.05 * countedPeak);
}

TEST_CASE("the tracker counts only while it is active") {
  symtune::MemoryTracker tracker;
  { auto t = torch::ones({1000}); }
  CHECK(tracker.counters(c10::DeviceType::CPU).allocations == 0);
  {
    auto active = tracker.activate();
    auto t = torch::ones({1000});
    CHECK(tracker.counters(c10::DeviceType::CPU).current == 4000);
  }
  const auto c = tracker.counters(c10::DeviceType::CPU);
  CHECK(c.allocations == 1);
  CHECK(c.frees == 1);
  CHECK(c.current == 0);
  CHECK(c.peak == 4000);
}
