// The enforced CPU memory budget (symtune/remat/memory_budget.h): allocations past it raise
// c10::OutOfMemoryError and allocate nothing; what fits runs; budgets nest and put back the
// limit they found; a suspension lifts it for work that is not the step's (the binder's
// measurements) and forgets that work's peak; threads allocating at once never take the live
// bytes past it together; a refusal inside TorchScript reaches the caller as another error and is
// counted; a training step that needs more than its budget fails, one that needs less completes
// under it.

#include "doctest_torch.h"

#include <atomic>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/jit.h>
#include <torch/torch.h>

#include "symtune/remat/memory_budget.h"
#include "symtune/telemetry/allocation_limit.h"
#include "symtune/telemetry/memory_tracker.h"

namespace {

using symtune::CpuAllocationCounter;
using symtune::remat::ScopedCpuBudget;

constexpr int64_t kMiB = 1 << 20;

int64_t live() {
  return CpuAllocationCounter::counters().current;
}

// A float tensor of `mib` MiB.
torch::Tensor mebibytes(int64_t mib) {
  return torch::empty({mib * kMiB / 4});
}

}  // namespace

TEST_CASE("an allocation past the budget raises OutOfMemoryError and allocates nothing") {
  REQUIRE(CpuAllocationCounter::active());
  CHECK_FALSE(CpuAllocationCounter::limit().has_value());
  {
    ScopedCpuBudget budget(8 * kMiB);
    CHECK(budget.limit() == budget.base() + 8 * kMiB);
    CHECK(CpuAllocationCounter::limit() == budget.limit());
    const auto kept = mebibytes(5);  // fits
    const int64_t before = live();
    std::string message;
    try {
      mebibytes(4);
    } catch (const c10::OutOfMemoryError& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.find("past the budget's limit") != std::string::npos);
    CHECK(live() == before);      // nothing allocated, nothing counted
    CHECK_NOTHROW(mebibytes(2));  // what still fits
  }
  CHECK_FALSE(CpuAllocationCounter::limit().has_value());
  CHECK_NOTHROW(mebibytes(64));
  CHECK_THROWS(ScopedCpuBudget(-1));
}

// Note [Enforced CPU budget]: TorchScript's interpreter rethrows what an op raised as another
// error; the refusal is counted, which is how the trainer knows a step ran out.
TEST_CASE("a refusal inside TorchScript reaches the caller as another error, and is counted") {
  const auto unit = torch::jit::compile(R"(
def fill(n: int):
    return torch.ones([n])
)");
  ScopedCpuBudget budget(2 * kMiB);
  const int64_t before = CpuAllocationCounter::refusals();
  std::string message;
  try {
    unit->run_method("fill", int64_t{4 * kMiB / 4});
  } catch (const std::exception& e) {  // LibTorch 2.11's interpreter: a std::runtime_error
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("past the budget's limit") != std::string::npos);
  CHECK(CpuAllocationCounter::refusals() == before + 1);
  CHECK_NOTHROW(unit->run_method("fill", int64_t{kMiB / 4}));
  CHECK(CpuAllocationCounter::refusals() == before + 1);
}

TEST_CASE("budgets nest: the tighter limit holds inside, each puts back the one it found") {
  ScopedCpuBudget outer(16 * kMiB);
  const auto held = mebibytes(4);
  {
    ScopedCpuBudget looser(64 * kMiB);  // 4 + 64 above the outer's base: the outer's is tighter
    CHECK(looser.limit() == outer.limit());
    CHECK_THROWS_AS(mebibytes(13), c10::OutOfMemoryError);
    {
      ScopedCpuBudget tighter(2 * kMiB);
      CHECK(tighter.limit() == tighter.base() + 2 * kMiB);
      CHECK_THROWS_AS(mebibytes(3), c10::OutOfMemoryError);
    }
    CHECK(CpuAllocationCounter::limit() == outer.limit());
    CHECK_NOTHROW(mebibytes(8));
  }
  CHECK(CpuAllocationCounter::limit() == outer.limit());
}

TEST_CASE("a budget as large as int64 holds everything: its limit saturates, never wraps") {
  const auto held = mebibytes(1);
  ScopedCpuBudget huge(std::numeric_limits<int64_t>::max() - 1, live());
  REQUIRE(huge.base() > 1);
  CHECK(huge.limit() == std::numeric_limits<int64_t>::max());
  CHECK_NOTHROW(mebibytes(4));
}

TEST_CASE("a suspension lifts the budget for work that is not the step's, and forgets its peak") {
  REQUIRE(CpuAllocationCounter::active());
  CpuAllocationCounter::resetPeak();  // as a step begins: the peak is the step's
  ScopedCpuBudget budget(4 * kMiB);
  torch::Tensor kept;
  {
    symtune::ScopedAllocationLimitLift measuring;
    CHECK_FALSE(CpuAllocationCounter::limit().has_value());
    const torch::Tensor replay = mebibytes(16);  // past the budget: allowed, not the step's
    kept = mebibytes(1);
  }
  CHECK(CpuAllocationCounter::limit() == budget.limit());
  // The peak counts on from what is live now: the replay's 16 MiB are not in it.
  CHECK(CpuAllocationCounter::counters().peak < budget.base() + 4 * kMiB);
  // What it kept still counts against the budget.
  CHECK_THROWS_AS(mebibytes(4), c10::OutOfMemoryError);
  CHECK_NOTHROW(mebibytes(2));
}

// The step's peak before the suspension stays: a step of several micro-batches that measured in a
// later one forgot the earlier ones' peak (the peak counted on from what was live after it).
TEST_CASE("a suspension keeps the step's peak from before it") {
  REQUIRE(CpuAllocationCounter::active());
  CpuAllocationCounter::resetPeak();
  const int64_t base = CpuAllocationCounter::counters().current;
  mebibytes(8);  // the step's peak so far, freed
  torch::Tensor kept;
  {
    symtune::ScopedAllocationLimitLift measuring;
    kept = mebibytes(1);
  }
  CHECK(CpuAllocationCounter::counters().peak >= base + 8 * kMiB);
}

TEST_CASE("threads allocating at once never take the live bytes past the budget") {
  CpuAllocationCounter::resetPeak();
  ScopedCpuBudget budget(24 * kMiB);
  std::atomic<int> refused{0}, granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        try {
          const auto a = mebibytes(3);
          const auto b = mebibytes(3);
          granted.fetch_add(1);
        } catch (const c10::OutOfMemoryError&) {
          refused.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads)
    t.join();
  INFO("granted ", granted.load(), ", refused ", refused.load());
  CHECK(granted.load() > 0);
  CHECK(CpuAllocationCounter::counters().peak <= budget.limit());
}

TEST_CASE("a training step past its budget fails; within it, it completes under it") {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(256, 1024), torch::nn::ReLU(),
                              torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                              torch::nn::Linear(1024, 10));
  const auto x = torch::randn({512, 256});
  const auto step = [&] {
    model->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), torch::zeros({512}, torch::kLong))
        .backward();
  };
  step();  // the gradients allocated once
  // The step's peak above what is live before it, unbudgeted.
  CpuAllocationCounter::resetPeak();
  const int64_t start = live();
  step();
  const int64_t peak = CpuAllocationCounter::counters().peak - start;

  INFO("the step's peak: ", peak / kMiB, " MiB");
  REQUIRE(peak > 4 * kMiB);
  const int64_t before = live();
  {
    ScopedCpuBudget tight(peak / 2);
    CHECK_THROWS_AS(step(), c10::OutOfMemoryError);
  }
  // Nothing of the failed step is left (its zero_grad dropped the gradients, which it did not
  // get to make again).
  CHECK(live() <= before);
  step();  // the gradients back, as before the budget
  {
    CpuAllocationCounter::resetPeak();
    ScopedCpuBudget enough(peak + kMiB);
    CHECK_NOTHROW(step());
    CHECK(CpuAllocationCounter::counters().peak <= enough.limit());
  }
}
