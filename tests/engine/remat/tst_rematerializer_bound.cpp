// Steps under a memory budget with the rest of the engine: every recomputable unit names its nodes
// in the static graph, a bound run measures outside its budget and stays under it, and runs of ops
// recomputed in a bound step train as the bound step.

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "remat_sessions.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/remat/rematerializer.h"
#include "symtune/runtime/trainer.h"
#include "tensor_compare.h"

using namespace symtune::test::remat;

TEST_CASE_FIXTURE(TwoThreads, "every recomputable unit names its nodes in the static graph") {
  symtune::Trainer t(underBudget("dynamic_tagger", 0.6));
  const auto nodes = t.rematUnitNodes();
  auto* segments = dynamic_cast<symtune::SegmentExecutor*>(&t.executor());
  REQUIRE(segments != nullptr);
  const symtune::Graph& graph = segments->symugen()->staticGraph();
  for (const auto& unit : segments->symugen()->recomputableUnits()) {
    INFO(unit.name);
    const auto found = nodes.find(unit.name);
    REQUIRE(found != nodes.end());
    CHECK_FALSE(found->second.empty());
    for (const symtune::NodeId id : found->second)
      CHECK((graph.node(id).side == symtune::GraphSide::Forward));
    if (!unit.parent.empty()) {
      // A loop's recomputed ops lie in its block: its nodes are among the block's.
      const auto& block = nodes.at(unit.parent);
      for (const symtune::NodeId id : found->second)
        CHECK(std::find(block.begin(), block.end(), id) != block.end());
    }
  }
}

// The binder measures its candidates inside the step, outside the budget (docs/remat.md, "With the
// binder"): a bound run under a budget binds its sites, refuses none for running out, and holds
// every step to its budget.
TEST_CASE_FIXTURE(TwoThreads, "a bound run under a budget measures outside it and stays under it") {
  for (const char* model : {"dynamic_resnet", "dynamic_tagger"}) {
    INFO(std::string(model));
    symtune::Session s = underBudget(model, std::nullopt);
    // Half again the smallest budget the unbound run fits: room for the plan, not for the
    // candidates' replays.
    symtune::Trainer probe(underBudget(model, std::nullopt, 1e-3));
    double smallest = 0;
    try {
      probe.step();
    } catch (const symtune::remat::RematInfeasible& e) {
      smallest = e.smallestFeasibleBytes();
    }
    REQUIRE(smallest > 0);
    s.remat.budgetMb = 1.5 * smallest / 1e6;
    symtune::Trainer t(s);
    // A session with a remat block runs unbound: the binder is given to its executor, as
    // symtune-bench's bind+remat:F modes do.
    CHECK(t.binder() == nullptr);
    auto* segments = dynamic_cast<symtune::SegmentExecutor*>(&t.executor());
    REQUIRE(segments != nullptr);
    segments->setBinder(std::make_shared<symtune::binding::Binder>(
        segments->symugen()->staticGraph(), symtune::binding::currentMachine(t.device())));
    for (int i = 0; i < 4; ++i) {
      const symtune::StepResult r = t.step();
      REQUIRE(r.remat.has_value());
      REQUIRE(r.remat->plan.limitBytes.has_value());
      CHECK(std::isfinite(r.loss));
      CHECK(r.remat->peakBytes <= static_cast<double>(*r.remat->plan.limitBytes));
    }
    REQUIRE(t.binder() != nullptr);  // still bound: every step fitted with it
    CHECK(t.binder()->measurements() > 0);
    for (const auto& b : t.binder()->table().bindings) {
      for (const auto& c : b.candidates) {
        INFO(b.site, " ", c.name, ": ", c.refused);
        CHECK(c.refused.find("failed") == std::string::npos);
      }
    }
  }
}

// Note [Runs recomputed bound] in symtune/binding/binder.h: a bound step that recomputes runs of
// ops, or loops trip by trip, binds them in the recomputation as in the forward and trains as the
// bound step without a plan; a run that holds part of a site of several nodes is refused, and a
// plan that names one runs its step unbound.
TEST_CASE_FIXTURE(TwoThreads, "runs of ops recomputed in a bound step train as the bound step") {
  for (const char* model : {"transformer_xl", "moe_topk", "dynamic_resnet"}) {
    INFO(std::string(model));
    symtune::Session s = sessionFor(model);
    s.binding.enabled = true;
    s.binding.exact = true;  // two binders choose alike only among bit-for-bit candidates
    symtune::Trainer plain(s), planned(s);
    auto* segments = dynamic_cast<symtune::SegmentExecutor*>(&planned.executor());
    REQUIRE(segments != nullptr);
    symtune::binding::Binder* binder = segments->binder();
    REQUIRE(binder != nullptr);
    const std::vector<std::string>& runs = segments->symugen()->opRuns();
    const std::vector<std::string>& loops = segments->symugen()->loopSpans();
    const auto refusedAmong = [&](const std::vector<std::string>& units) {
      const std::set<std::string>& refused = segments->refusedUnits();
      return std::count_if(units.begin(), units.end(),
                           [&](const std::string& u) { return refused.count(u) != 0; });
    };
    // Before the binder has met the model's ops it allows no run or loop that holds one.
    CHECK(refusedAmong(runs) == static_cast<std::ptrdiff_t>(runs.size()));
    CHECK(refusedAmong(loops) == static_cast<std::ptrdiff_t>(loops.size()));
    CHECK(std::abs(planned.step().loss - plain.step().loss) == 0);
    const std::set<std::string> refused = segments->refusedUnits();
    symtune::SegmentPlan lighter;
    for (const auto& run : segments->recomputeCheapOps().recompute) {
      if (refused.count(run) == 0)
        lighter.recompute.insert(run);
    }
    // Then every loop it allows, recomputed trip by trip.
    symtune::SegmentPlan trips;
    for (const auto& loop : loops) {
      if (refused.count(loop) == 0)
        trips.recompute.insert(loop);
    }
    MESSAGE(std::string(model), ": ", runs.size(), " runs and ", loops.size(), " loops, ",
            refusedAmong(runs), " and ", refusedAmong(loops),
            " refused bound (bit-for-bit candidates only); ", lighter.recompute.size(),
            " lighter runs recomputed, then ", trips.recompute.size(), " loops");
    REQUIRE(!lighter.empty());
    for (int i = 1; i < 6; ++i) {
      if (i == 1)
        segments->setPlan(lighter);
      if (i == 4 && trips.empty())
        break;
      if (i == 4)
        segments->setPlan(trips);
      const int64_t before = binder->boundExecutions();
      const int64_t plainBefore = plain.binder()->boundExecutions();
      const double expected = plain.step().loss;
      const double loss = planned.step().loss;
      INFO("step ", i, ": ", loss, " vs ", expected);
      CHECK(std::abs(loss - expected) <= 1e-5 * std::abs(expected));
      CHECK(segments->lastRecomputed() > 0);
      // Bound: as many bound executions as the plain step's, and the recomputations' besides.
      CHECK(binder->boundExecutions() - before >= plain.binder()->boundExecutions() - plainBefore);
    }
    symtune::test::checkEach(planned.executor().parameters(), plain.executor().parameters(), 1e-5,
                             "parameters");
  }

  // With every candidate, Transformer-XL's attention region is a site of several nodes that a run
  // ends inside: that run is refused, and a plan that names it runs the step unbound.
  symtune::Session s = sessionFor("transformer_xl");
  s.binding.enabled = true;
  symtune::Trainer t(s);
  auto* segments = dynamic_cast<symtune::SegmentExecutor*>(&t.executor());
  REQUIRE(segments != nullptr);
  t.step();
  std::set<std::string> refused;
  for (const auto& run : segments->symugen()->opRuns()) {
    if (segments->refusedUnits().count(run) != 0)
      refused.insert(run);
  }
  MESSAGE("transformer_xl, every candidate: ", refused.size(), " of ",
          segments->symugen()->opRuns().size(), " runs refused bound");
  REQUIRE(!refused.empty());
  CHECK(refused.size() < segments->symugen()->opRuns().size());
  // The bound executions of a step under `plan` (the loss site's among them: the trainer's).
  const auto boundIn = [&](const symtune::SegmentPlan& plan) {
    segments->setPlan(plan);
    const int64_t before = t.binder()->boundExecutions();
    CHECK(std::isfinite(t.step().loss));
    CHECK((segments->lastRecomputed() > 0) == !plan.empty());
    return t.binder()->boundExecutions() - before;
  };
  const int64_t plainStep = boundIn({});
  symtune::SegmentPlan cut;
  cut.recompute = {*refused.begin()};
  CHECK(boundIn(cut) < plainStep / 2);  // the model's sites unbound
  symtune::SegmentPlan allowed;
  for (const auto& run : segments->recomputeCheapOps().recompute) {
    if (refused.count(run) == 0)
      allowed.recompute.insert(run);
  }
  REQUIRE(!allowed.empty());
  CHECK(boundIn(allowed) >= plainStep);  // bound, in the forward and the recomputations
}
