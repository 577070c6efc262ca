// A bound run under a remat budget (docs/remat.md, "With the binder"): early exit bound with a
// memory slack keeps little as written and runs so under a budget near that (Note [Bound to keep
// little] in symtune/remat/rematerializer.h); under a budget its slack is too narrow for, the
// binder trades more time for memory before the run goes on unbound (early exit cannot split its
// batch: batch norm), and a binder
// without a slack is given one (Note [A budget widens the slack] in symtune/binding/binder.h);
// where nothing fits, the budget named is the bound one when that is less.
//
// What a slack buys depends on the candidates' measured times, which a loaded machine reads
// otherwise from run to run: the trainers here bind by one table whose times are set (every
// candidate 1 ms, the pair's lean block 1.5 ms, the pair run again 2 ms), so the trades each
// slack takes, and the peaks, are the same on every run.

#include "doctest_torch.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "symtune/binding/binder.h"
#include "symtune/remat/rematerializer.h"
#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/memory_tracker.h"

using symtune::BindingTable;
using symtune::binding::Binder;

namespace {

symtune::Session boundEarlyExit(double slack) {
  symtune::Session s;
  s.name = "early_exit";
  s.model.zoo = "early_exit";
  s.model.preset = "ci";
  s.data.seed = 5;
  s.binding.enabled = true;
  s.binding.useTable = false;
  s.binding.memorySlack = slack;
  return s;
}

// Early exit's table after as many steps as the tests run, its times set as the file's comment
// says; measured once for the file.
const BindingTable& setTimes() {
  static const BindingTable table = [] {
    symtune::Trainer t(boundEarlyExit(0.02));
    for (int i = 0; i < 10; ++i)
      t.step();
    BindingTable out = t.binder()->table();
    for (auto& b : out.bindings) {
      for (auto& c : b.candidates) {
        const double seconds = c.name == "conv-block-pair-again" ? 2e-3
                               : c.name == "conv-block-pair"     ? 1.5e-3
                                                                 : 1e-3;
        c.forwardSeconds = c.backwardSeconds = seconds / 2;
      }
    }
    return out;
  }();
  return table;
}

// A trainer of `session` binding by setTimes()'s table under its slack.
std::unique_ptr<symtune::Trainer> bindingBySetTimes(const symtune::Session& session) {
  auto t = std::make_unique<symtune::Trainer>(session);
  BindingTable table = setTimes();
  table.memorySlack = session.binding.memorySlack;
  Binder* binder = t->binder();
  REQUIRE(binder != nullptr);
  const std::optional<std::string> refused = binder->adopt(std::move(table));
  INFO(refused.value_or(""));
  REQUIRE_FALSE(refused.has_value());
  return t;
}

// The largest step peak of `steps` unbudgeted steps.
double boundPeak(double slack, int steps) {
  const auto t = bindingBySetTimes(boundEarlyExit(slack));
  double peak = 0;
  for (int i = 0; i < steps; ++i) {
    const int64_t live = symtune::CpuAllocationCounter::counters().current;
    symtune::CpuAllocationCounter::resetPeak();
    t->step();
    peak =
        std::max(peak, static_cast<double>(symtune::CpuAllocationCounter::counters().peak - live));
  }
  return peak;
}

// Early exit bound at `slack` under a remat budget of `megabytes` (remat.bind).
symtune::Session heldTo(double slack, double megabytes) {
  symtune::Session s = boundEarlyExit(slack);
  s.remat.enabled = true;
  s.remat.bind = true;
  s.remat.budgetMb = megabytes;
  return s;
}

// `steps` more steps of `t`, each within its budget.
void stepWithin(symtune::Trainer& t, int steps) {
  for (int i = 0; i < steps; ++i) {
    INFO("step ", i);
    const symtune::StepResult r = t.step();
    REQUIRE(r.remat.has_value());
    REQUIRE(r.remat->plan.limitBytes.has_value());
    CHECK(r.remat->peakBytes <= static_cast<double>(*r.remat->plan.limitBytes));
  }
}

bool mentions(const std::optional<std::string>& note, const std::string& what) {
  return note && note->find(what) != std::string::npos;
}

}  // namespace

// Held to 1.25 times the bound step's own peak, every step completes within it, as written.
TEST_CASE("bound to keep little, early exit runs as written under a budget near its bound peak") {
  const double peak = boundPeak(0.99, 3);  // every pair run again
  REQUIRE(peak > 0);
  const symtune::Session held = heldTo(0.99, 1.25 * peak / 1e6);
  const auto t = bindingBySetTimes(held);
  for (int i = 0; i < 6; ++i) {
    INFO("step ", i, ", budget ", *held.remat.budgetMb, " MB");
    const symtune::StepResult r = t->step();
    REQUIRE(r.remat.has_value());
    REQUIRE(r.remat->plan.limitBytes.has_value());
    CHECK(r.remat->peakBytes <= static_cast<double>(*r.remat->plan.limitBytes));
    CHECK(r.remat->plan.segments.empty());
    CHECK(r.remat->attempts == 1);
  }
  // Bound throughout: the binder was not let go for want of a plan.
  CHECK_FALSE(mentions(t->bindingNote(), "binding off"));
}

// A slack of 2 % buys none of the pairs' leaner candidates (each costs a whole site's time or
// half of it more), and no plan of blocks recomputed brings the step near what the widest slack
// keeps: lowered to a budget near that on the running job, the binder's slack widens (doubling, to
// Binder::kWidestMemorySlack at most) until a plan fits, and the run goes on bound, every step
// within the budget.
TEST_CASE("under a budget its memory slack is too narrow for, the binder's slack widens") {
  const double widest = boundPeak(Binder::kWidestMemorySlack, 3);
  REQUIRE(widest > 0);
  const symtune::Session held = heldTo(0.02, 100 * widest / 1e6);
  const auto t = bindingBySetTimes(held);
  double narrow = 0;
  for (int i = 0; i < 2; ++i)
    narrow = std::max(narrow, t->step().remat.value().peakBytes);
  INFO("bound peaks: ", narrow / 1e6, " MB at a slack of 0.02, ", widest / 1e6, " MB at ",
       Binder::kWidestMemorySlack);
  REQUIRE(narrow > 1.3 * widest);  // the premise: the narrow slack keeps much more
  const double tight = 1.15 * widest / 1e6;
  t->setRematBudget(tight, std::nullopt);
  stepWithin(*t, 6);
  const Binder* binder = t->binder();
  REQUIRE(binder != nullptr);  // bound throughout
  CHECK(binder->options().memorySlack > 0.02);
  CHECK(binder->options().memorySlack <= Binder::kWidestMemorySlack);
  CHECK(binder->table().memorySlack == binder->options().memorySlack);
  CHECK(mentions(t->bindingNote(), "memory slack widened to"));
  CHECK_FALSE(mentions(t->bindingNote(), "binding off"));
}

// A binder without a slack never looks for the regions that only save memory; under a budget
// only those fit, a binder that does takes its place (given the table measured so far) and its
// slack widens from the first until a plan fits: a remat budget alone is enough.
TEST_CASE("under a budget only a memory slack fits, a binder without one is given one") {
  const double widest = boundPeak(Binder::kWidestMemorySlack, 3);
  REQUIRE(widest > 0);
  const double tight = 1.15 * widest / 1e6;
  const auto t = bindingBySetTimes(heldTo(0, tight));
  stepWithin(*t, 6);
  const Binder* binder = t->binder();
  REQUIRE(binder != nullptr);  // bound throughout
  CHECK(binder->options().memorySlack >= Binder::kFirstMemorySlack);
  CHECK(binder->options().memorySlack <= Binder::kWidestMemorySlack);
  CHECK(binder->measurements() == 0);  // the first binder's table had every region
  CHECK(mentions(t->bindingNote(), "memory slack"));
  CHECK_FALSE(mentions(t->bindingNote(), "binding off"));
}

// Below what even the widest slack keeps, nothing fits: the run stops at its first step and
// names the budget that would do, bound, where that is less than any unbound plan needs.
TEST_CASE(
    "below what the widest slack keeps, the smallest feasible budget named is the bound one") {
  const double widest = boundPeak(Binder::kWidestMemorySlack, 3);
  REQUIRE(widest > 0);
  const symtune::Session held = heldTo(0.02, 0.8 * widest / 1e6);
  const auto t = bindingBySetTimes(held);
  try {
    t->step();
    FAIL("a step ran under 0.8 of the widest slack's peak");
  } catch (const symtune::remat::RematInfeasible& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("bound with a memory slack of 0.5 (unbound ") != std::string::npos);
    CHECK(e.smallestFeasibleBytes() > 0.8 * widest);
    CHECK(e.smallestFeasibleBytes() < 1.1 * widest);
  }
  CHECK(mentions(t->bindingNote(), "binding off"));  // let go last, unbound fitting less
}

TEST_CASE("a binder without a memory slack, or at the widest, does not widen it") {
  symtune::Trainer none(boundEarlyExit(0));
  none.step();
  Binder* binder = none.binder();
  REQUIRE(binder != nullptr);
  CHECK_FALSE(binder->widenMemorySlack());
  CHECK(binder->options().memorySlack == 0);

  symtune::Trainer lean(boundEarlyExit(0.3));
  lean.step();
  Binder* widening = lean.binder();
  REQUIRE(widening != nullptr);
  CHECK(widening->widenMemorySlack());
  CHECK(widening->options().memorySlack == Binder::kWidestMemorySlack);  // 0.6 is past it
  CHECK_FALSE(widening->widenMemorySlack());
  CHECK(widening->options().memorySlack == Binder::kWidestMemorySlack);
}
