// The online controller under a memory budget: what did not fit (Note [Predicted not to fit] in
// symtune/control/controller.h), a budget the run refused (Note [A budget the run refused]) and a
// budget set on the running job (Note [A new memory budget]), by itself and driving a trainer.

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include <ATen/Parallel.h>

#include "controller_fixtures.h"
#include "symtune/control/controller.h"
#include "symtune/runtime/trainer.h"

using symtune::control::ConfigSpace;
using symtune::control::Configuration;
using symtune::control::Decision;
using symtune::control::Knob;
using symtune::control::OnlineController;
using symtune::test::control::secondsPerSample;
using symtune::test::control::threeKnobs;

namespace {

Configuration configuration(int microbatches, int threads, std::optional<double> rematBudget) {
  Configuration c;
  c.microbatches = microbatches;
  c.threads = threads;
  c.rematBudget = rematBudget;
  return c;
}

// What the run did not fit: `c` on `bucket`.
void didNotFit(OnlineController& controller, const Configuration& c, const std::string& bucket) {
  Decision d;
  d.bucket = bucket;
  d.chosen = c;
  controller.notFit(d, "no plan fits");
}

}  // namespace

TEST_CASE("a configuration that did not fit a bucket runs there no more, nor any holding as much") {
  // Note [Predicted not to fit]. The run begins at 1 micro-batch, 2 threads, budget 0.6.
  OnlineController controller(threeKnobs());
  auto first = controller.choose(0, "big");
  REQUIRE(first.chosen.microbatches == 1);
  controller.notFit(first, "no plan fits: split into 2 micro-batches");
  CHECK(first.violation ==
        "the memory budget: no plan fits: split into 2 micro-batches; on this bucket, no "
        "configuration holding as much runs from now on");
  controller.observe(first, 0.05, 32, 1.0);
  // Not learnt from: nothing measured yet, so the next choice on the bucket is the one nearest
  // the run's start that may fit.
  const auto second = controller.choose(1, "big");
  CHECK(second.chosen.microbatches == 2);
  CHECK(second.chosen.threads == 2);
  CHECK(second.chosen.rematBudget.value_or(0.6) == doctest::Approx(0.6));
  controller.observe(second, 0.03, 32, 1.0);

  Configuration one = first.chosen;
  one.threads = 1;
  CHECK(controller.notFitting(first.chosen, "big"));
  CHECK(controller.notFitting(one, "big"));  // threads hold no memory of their own
  one.rematBudget = 0.3;                     // less budget holds more
  CHECK(controller.notFitting(one, "big"));
  CHECK_FALSE(controller.notFitting(first.chosen, "small"));
  CHECK_FALSE(controller.notFitting(second.chosen, "big"));

  std::mt19937_64 rng(3);
  for (int64_t step = 2; step < 150; ++step) {
    const std::string bucket = step % 3 == 0 ? "small" : "big";
    const auto d = controller.choose(step, bucket);
    if (bucket == "big")
      CHECK(d.chosen.microbatches >= 2);
    controller.observe(d, secondsPerSample(d.chosen, 0, rng) * 32, 32, 1.0);
  }
  // Pinned to the whole batch: another bucket runs it; on this one the pin wins (the trainer
  // splits the step as it must).
  controller.pin("microbatches", 1);
  CHECK(controller.choose(150, "small").chosen.microbatches == 1);
  CHECK(controller.choose(151, "big").chosen.microbatches == 1);
  controller.unpin("microbatches");

  // A restored controller keeps the records; a new budget that holds more lets all run again
  // (Note [A new memory budget]), in the same space learning on.
  OnlineController resumed(threeKnobs());
  resumed.restore(controller.state());
  CHECK(resumed.notFitting(first.chosen, "big"));
  CHECK_FALSE(resumed.newBudget(threeKnobs(), /*grew=*/true));
  CHECK_FALSE(resumed.notFitting(first.chosen, "big"));
}

// Note [Divergence constraint]. Until 2026-12-07 a step split further counted as having run what
// was chosen: the next step on its bucket, at the count it had split to, counted as a change, and
// a loss that jumped there excluded that count for the run.
TEST_CASE("a step split further is judged by what it ran: the next at its count is no change") {
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4}, 1, ""}});
  OnlineController controller(space);
  int64_t step = 0;
  // A step on bucket "b" with loss `loss`, split by the trainer into `splitInto` micro-batches.
  const auto run = [&](OnlineController& c, double loss, std::optional<int> splitInto) {
    Decision d = c.choose(step++, "b");
    if (splitInto) {
      c.notFit(d, "no plan fits: split into " + std::to_string(*splitInto) + " micro-batches",
               *splitInto);
    }
    c.observe(d, 1e-3, 1, loss);
    return c.log().back();
  };
  controller.pin("microbatches", 1);
  for (int i = 0; i < 8; ++i)
    run(controller, 2.0, std::nullopt);
  const Decision split = run(controller, 2.0, 2);
  CHECK(split.chosen.microbatches == 1);
  REQUIRE(split.ran.has_value());
  CHECK(split.ran->microbatches == 2);
  // The loss jumps on the next step, at the two micro-batches the step before ran: the model's
  // doing, not a change's; so too for a controller restored from the state.
  OnlineController resumed(space);
  resumed.restore(controller.state());
  for (OnlineController* judged : {&controller, &resumed}) {
    judged->pin("microbatches", 2);
    const Decision jump = run(*judged, 9.0, std::nullopt);
    CHECK(jump.chosen.microbatches == 2);
    CHECK(jump.violation.find("under the configuration that ran before: not a change's") !=
          std::string::npos);
    CHECK(judged->excluded().empty());
  }
  // A change from what ran still breaks it: four after a step chosen whole that ran two.
  run(controller, 2.0, std::nullopt);
  controller.pin("microbatches", 1);
  run(controller, 2.0, 2);
  controller.pin("microbatches", 4);
  CHECK(run(controller, 9.0, std::nullopt).violation.find("excluded from now on") !=
        std::string::npos);
  REQUIRE(controller.excluded().size() == 1);
  CHECK(controller.excluded().front().microbatches == 4);
  // A change chosen at two and split to three whose loss jumps: what is excluded is the two the
  // controller chose, not the three it ran (no configuration of its grid: it would bar nothing).
  OnlineController other(space);
  other.pin("microbatches", 1);
  for (int i = 0; i < 8; ++i)
    run(other, 2.0, std::nullopt);
  other.pin("microbatches", 2);
  CHECK(run(other, 9.0, 3).violation.find("excluded from now on") != std::string::npos);
  REQUIRE(other.excluded().size() == 1);
  CHECK(other.excluded().front().microbatches == 2);
}

// Note [A budget the run refused]. Until 2026-12-07, where no configuration passed both what did
// not fit and the budget refused, both were let go at once, and a budget the run had refused was
// chosen where another would run.
TEST_CASE("where nothing passes both records, what did not fit is let go before the refusal") {
  // The run begins at a remat budget of 0.3, which it then refuses.
  OnlineController controller(ConfigSpace(
      {Knob{"microbatches", {1, 2}, 1, ""}, Knob{"remat_budget", {0.3, 0.6}, 0.3, ""}}));
  Decision first = controller.choose(0, "small");
  controller.refused(first, configuration(1, 0, 0.6), "no plan fits", 0.3);
  // Nothing fits "big": of what the run takes, the nearest to its start runs (split further).
  didNotFit(controller, configuration(2, 0, 0.6), "big");
  CHECK(controller.choose(1, "big").chosen == configuration(1, 0, 0.6));
  // Pinned to the budget refused, what did not fit still holds where something else does.
  didNotFit(controller, configuration(1, 0, 0.6), "tall");
  controller.pin("remat_budget", 0.3);
  CHECK(controller.choose(2, "tall").chosen == configuration(2, 0, 0.3));
}

// Note [A budget the run refused].
TEST_CASE("a remat budget the run refused is not chosen again, nor any smaller") {
  OnlineController controller(threeKnobs());
  std::mt19937_64 rng(5);
  Configuration before = controller.space().current();
  int refusals = 0;
  for (int64_t step = 0; step < 120; ++step) {
    auto d = controller.choose(step, "b");
    if (controller.refusedBudget())
      CHECK(d.chosen.rematBudget.value_or(0.6) > *controller.refusedBudget() + 1e-9);
    if (d.chosen.rematBudget.value_or(0.6) < 0.55) {  // the run takes 0.6 only
      ++refusals;
      const Configuration drawn = d.chosen;
      controller.refused(d, before, "no plan fits", drawn.rematBudget);
      CHECK(d.chosen == before);
      CHECK_FALSE(d.explored);
      CHECK(d.heldBack == drawn.text() + ": the run refused it: no plan fits");
      REQUIRE(controller.refusedBudget().has_value());
      CHECK(*controller.refusedBudget() == doctest::Approx(*drawn.rematBudget));
    }
    before = d.chosen;
    controller.observe(d, secondsPerSample(d.chosen, 0, rng) * 32, 32, 1.0);
  }
  MESSAGE(refusals, " refusals; the largest budget refused ",
          controller.refusedBudget().value_or(0));
  CHECK(refusals >= 1);  // the draws reach 0.5, next to the leader
  CHECK(controller.refusedBudget().value_or(0) == doctest::Approx(0.5));

  // A refusal of the step alone records nothing.
  OnlineController other(threeKnobs());
  auto d = other.choose(0, "b");
  other.refused(d, other.space().current(), "outside the space");
  CHECK_FALSE(other.refusedBudget().has_value());

  // A restored controller keeps the record, and so does a new memory budget: a share of the plain
  // peak no plan fits fits no better under another budget for the session.
  OnlineController resumed(threeKnobs());
  resumed.restore(controller.state());
  CHECK(resumed.refusedBudget() == controller.refusedBudget());
  resumed.newBudget(threeKnobs(), /*grew=*/true);
  CHECK(resumed.refusedBudget() == controller.refusedBudget());
}

// Note [A new memory budget]: the session's budget_fraction, set from 0.6 to 0.5 on the running
// job, takes the remat_budget knob's 0.6 away; set in megabytes, the knob goes.
TEST_CASE("a new memory budget moves the controller to the run's space, keeping what still holds") {
  OnlineController controller(threeKnobs());
  std::mt19937_64 rng(7);
  int64_t step = 0;
  for (; step < 40; ++step) {
    const Decision d = controller.choose(step, "b");
    controller.observe(d, secondsPerSample(d.chosen, 0, rng) * 32, 32, 1.0);
  }
  const Configuration whole = configuration(1, 1, 0.6), two = configuration(2, 1, 0.4);
  REQUIRE(controller.predictedSamplesPerSecond(whole, "b") !=
          controller.predictedSamplesPerSecond(configuration(2, 1, 0.6), "b"));  // learnt
  controller.pin("threads", 1);
  didNotFit(controller, whole, "big");
  didNotFit(controller, two, "big");
  Decision refused = controller.choose(step, "b");
  controller.refused(refused, controller.space().current(), "no plan fits", 0.3);
  const size_t decisions = controller.log().size();

  const ConfigSpace smaller({Knob{"microbatches", {1, 2, 4, 8}, 1, ""},
                             Knob{"threads", {1, 2}, 2, ""},
                             Knob{"remat_budget", {0.3, 0.4, 0.5}, 0.5, ""}});
  CHECK(controller.newBudget(smaller, /*grew=*/false));
  REQUIRE(controller.space().knob("remat_budget") != nullptr);
  CHECK(controller.space().knob("remat_budget")->values.back() == doctest::Approx(0.5));
  CHECK(controller.pins().at("threads") == 1);
  CHECK(controller.log().size() == decisions);  // the log goes on
  // What did not fit under 0.6 does not fit under 0.5 either; 0.4's record stands as it was.
  CHECK(controller.notFitting(configuration(1, 2, 0.5), "big"));
  CHECK(controller.notFitting(configuration(2, 1, 0.3), "big"));
  CHECK_FALSE(controller.notFitting(configuration(2, 1, 0.5), "big"));
  CHECK(controller.refusedBudget() == 0.3);
  // The speeds are learnt afresh: none is known.
  CHECK(controller.predictedSamplesPerSecond(configuration(1, 1, 0.5), "b") ==
        controller.predictedSamplesPerSecond(configuration(2, 1, 0.5), "b"));
  for (const auto end = step + 60; step < end; ++step) {
    const std::string bucket = step % 2 == 0 ? "big" : "b";
    const Decision d = controller.choose(step, bucket);
    INFO("step ", step, ": ", d.chosen.text());
    CHECK_FALSE(smaller.outside(d.chosen).has_value());
    CHECK(d.chosen.threads == 1);
    CHECK(d.chosen.rematBudget.value_or(0.5) > 0.3 + 1e-9);
    if (bucket == "big")
      CHECK_FALSE(controller.notFitting(d.chosen, bucket));
    controller.observe(d, secondsPerSample(d.chosen, 0, rng) * 32, 32, 1.0);
  }

  // Back to 0.6: more than before, so what did not fit under the session's budget may now; what
  // did not fit under a share of its own still does not, and the refused share stays.
  CHECK(controller.newBudget(threeKnobs(), /*grew=*/true));
  CHECK_FALSE(controller.notFitting(whole, "big"));
  CHECK(controller.notFitting(two, "big"));
  CHECK(controller.refusedBudget() == 0.3);

  // In megabytes, no more than before: no remat_budget knob, and a pin of it goes. What did not
  // fit under the session's budget does not fit under the new one; under a share of its own, that
  // says nothing of it.
  didNotFit(controller, configuration(2, 1, 0.6), "big");
  didNotFit(controller, configuration(4, 1, 0.4), "big");
  controller.pin("remat_budget", 0.6);
  const ConfigSpace megabytes(
      {Knob{"microbatches", {1, 2, 4, 8}, 1, ""}, Knob{"threads", {1, 2}, 2, ""}});
  CHECK(controller.newBudget(megabytes, /*grew=*/false));
  CHECK(controller.pins().size() == 1);
  CHECK(controller.pins().count("threads") == 1);
  CHECK(controller.notFitting(configuration(2, 2, std::nullopt), "big"));
  CHECK_FALSE(controller.notFitting(configuration(4, 1, std::nullopt), "big"));
  CHECK_FALSE(controller.refusedBudget().has_value());
  const Decision d = controller.choose(step, "big");
  CHECK_FALSE(d.chosen.rematBudget.has_value());
  CHECK(d.chosen.microbatches >= 4);
  // Another budget in megabytes: the same space, learning on; one that holds more forgets.
  CHECK_FALSE(controller.newBudget(megabytes, /*grew=*/false));
  CHECK(controller.notFitting(configuration(2, 2, std::nullopt), "big"));
  CHECK_FALSE(controller.newBudget(megabytes, /*grew=*/true));
  CHECK_FALSE(controller.notFitting(configuration(2, 2, std::nullopt), "big"));
}

namespace {

// The ci tagger, unbound, under an online controller and a budget of `fraction` of its plain
// peak.
symtune::Session taggerUnderBudget(double fraction) {
  symtune::Session s = symtune::test::control::taggerSession("online-budget");
  s.remat.enabled = true;
  s.remat.budgetFraction = fraction;
  s.control.enabled = true;
  s.control.mode = "online";
  return s;
}

}  // namespace

// Until 2026-12-07 the controller kept the space it began with: set in megabytes, every budget it
// drew was refused as outside the run's space; set to a larger fraction, it never drew it.
TEST_CASE("a budget set on a running job moves its online controller to the space under it") {
  at::set_num_threads(2);
  symtune::Trainer t(taggerUnderBudget(0.9));
  REQUIRE(t.controller() != nullptr);
  int64_t limit = 0;
  const auto steps = [&](int count, const ConfigSpace& space) {
    for (int i = 0; i < count; ++i) {
      const symtune::StepResult r = t.step();
      REQUIRE(r.decision.has_value());
      INFO("step ", r.step, ": ", r.decision->chosen.text(), "; held back: ", r.decision->heldBack);
      CHECK_FALSE(space.outside(r.decision->chosen).has_value());
      CHECK(r.decision->heldBack.find("no such knob") == std::string::npos);
      REQUIRE(r.remat.has_value());
      if (r.remat->plan.limitBytes) {
        limit = std::max(limit, *r.remat->plan.limitBytes);
        CHECK(r.remat->peakBytes <= static_cast<double>(*r.remat->plan.limitBytes));
      }
    }
  };
  steps(4, t.configSpace());
  t.setRematBudget(std::nullopt, 1.0);
  const ConfigSpace wider = t.configSpace();
  const Knob* budget = t.controller()->space().knob("remat_budget");
  REQUIRE(budget != nullptr);
  CHECK(budget->values.back() == 1.0);
  CHECK(wider.knob("remat_budget")->values == budget->values);
  steps(6, wider);
  REQUIRE(limit > 0);

  t.setRematBudget(std::ceil(2 * static_cast<double>(limit) / 1e6), std::nullopt);
  const ConfigSpace megabytes = t.configSpace();
  CHECK(megabytes.knob("remat_budget") == nullptr);
  CHECK(t.controller()->space().knob("remat_budget") == nullptr);
  for (int i = 0; i < 6; ++i) {
    const symtune::StepResult r = t.step();
    REQUIRE(r.decision.has_value());
    INFO("step ", r.step, ": ", r.decision->chosen.text());
    CHECK(r.decision->heldBack.empty());
    CHECK_FALSE(r.decision->chosen.rematBudget.has_value());
  }
  at::set_num_threads(2);
}
