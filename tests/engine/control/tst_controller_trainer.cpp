// The online controller driving a trainer (Note [Online controller] in
// symtune/control/controller.h): it changes how the steps run but not what they compute, keeps
// binding_explore where it changes nothing, and learns from a step that met a new bucket under a
// remat budget.

#include "doctest_torch.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "controller_fixtures.h"
#include "symtune/binding/binder.h"
#include "symtune/control/controller.h"
#include "symtune/runtime/trainer.h"

using symtune::control::ConfigSpace;
using symtune::test::control::taggerSession;

TEST_CASE("driving a trainer, the controller changes how steps run, not what they compute") {
  at::set_num_threads(2);
  symtune::Session s = taggerSession("online");
  symtune::Trainer plain(s);
  s.control.enabled = true;
  s.control.mode = "online";
  symtune::Trainer online(s);
  REQUIRE(online.controller() != nullptr);
  const ConfigSpace space = online.configSpace();
  std::map<std::string, int> chosen;
  for (int step = 0; step < 16; ++step) {
    INFO("step ", step);
    const symtune::StepResult a = plain.step(), b = online.step();
    REQUIRE(b.decision.has_value());
    CHECK(b.decision->step == step);
    CHECK_FALSE(space.outside(b.decision->chosen).has_value());
    CHECK(b.microbatches == b.decision->chosen.microbatches);
    // Measured where learnt from: not the first two steps (the executor's profiling and
    // optimizing runs), nor one that met a new bucket.
    CHECK(b.decision->samplesPerSecond.has_value() ==
          (step > 1 && !b.optimizeRequired.has_value()));
    CHECK(b.decision->violation.empty());
    REQUIRE(b.decision->batchSignals.size() == 2);
    CHECK(b.decision->batchSignals[0].second == 16);  // the ci tagger's sentences
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
    ++chosen[b.decision->chosen.text()];
  }
  CHECK(chosen.size() > 1);  // it explored
  CHECK(online.controller()->log().size() == 16);
  at::set_num_threads(2);
}

// Note [A knob that changes nothing], driving a bound trainer: on a bucket whose last step met
// nothing the binder would measure, binding_explore stays 1.
TEST_CASE("bound, binding_explore stays 1 on a bucket whose last step met nothing to measure") {
  at::set_num_threads(2);
  symtune::Session s = taggerSession("online-bound");
  s.binding.enabled = true;
  s.control.enabled = true;
  s.control.mode = "online";
  symtune::Trainer online(s);
  REQUIRE(online.configSpace().knob("binding_explore") != nullptr);
  std::map<std::string, bool> nothingMet;  // by bucket: its last step's
  int kept = 0, measuring = 0;
  for (int step = 0; step < 24; ++step) {
    INFO("step ", step);
    const symtune::binding::Binder* b = online.binder();
    REQUIRE(b != nullptr);
    const bool mayHold = b->exploring() && !b->deferred();
    const int64_t before = b->unsettledMet();
    const symtune::StepResult r = online.step();
    REQUIRE(r.decision.has_value());
    const auto last = nothingMet.find(r.decision->bucket);
    if (mayHold && last != nothingMet.end() && last->second) {
      CHECK(r.decision->chosen.bindingExplore == std::optional<bool>(true));
      CHECK(r.decision->idle ==
            std::vector<std::pair<std::string, double>>{{"binding_explore", 1}});
      ++kept;
    }
    REQUIRE(online.binder() == b);
    nothingMet[r.decision->bucket] = b->unsettledMet() == before;
    measuring += b->unsettledMet() != before;
  }
  MESSAGE(kept, " of 24 steps kept binding_explore at 1; ", measuring, " met something to measure");
  CHECK(kept > 0);
  CHECK(measuring > 0);
  at::set_num_threads(2);
}

// Note [A new bucket's step, learnt from]: under a remat budget a step that met a new bucket is
// learnt from, less the time its plans took to prepare.
TEST_CASE("under a remat budget, a step that met a new bucket is learnt from, less its planning") {
  at::set_num_threads(2);
  symtune::Session s = taggerSession("online-remat");
  s.remat.enabled = true;
  s.remat.budgetMb = 1000;  // enforced, and fits whatever the controller chooses
  s.control.enabled = true;
  s.control.mode = "online";
  symtune::Trainer online(s);
  int newBuckets = 0;
  for (int step = 0; step < 16; ++step) {
    INFO("step ", step);
    const symtune::StepResult r = online.step();
    REQUIRE(r.decision.has_value());
    REQUIRE(r.remat.has_value());
    CHECK(r.decision->samplesPerSecond.has_value() == (step > 1));
    if (step > 1 && r.optimizeRequired.has_value()) {
      ++newBuckets;
      // Learnt from the step less its preparation: faster than the step as a whole.
      const double whole = static_cast<double>(online.batchSize()) / r.seconds;
      CHECK(*r.decision->samplesPerSecond > whole);
    }
  }
  MESSAGE(newBuckets, " steps after the first two met a new bucket");
  CHECK(newBuckets > 0);  // the controller tried another micro-batch count
  at::set_num_threads(2);
}

// Note [A budget the run refused]: a remat budget the trainer refuses is not chosen again, nor
// one smaller, and the step that ran the configuration before it says so.
TEST_CASE("a remat budget the trainer refused is not chosen again, nor one smaller") {
  at::set_num_threads(2);
  symtune::Session s;
  s.name = "online-refused";
  s.model.zoo = "tree_rnn";  // its ci preset fits no plan under 0.68 of its plain peak
  s.model.preset = "ci";
  s.data.seed = 7;
  s.optimizer.name = "adamw";
  s.optimizer.lr = 0.003;
  s.remat.enabled = true;
  s.remat.budgetFraction = 0.6;
  s.control.enabled = true;
  s.control.mode = "online";
  symtune::Trainer online(s);
  const ConfigSpace space = online.configSpace();
  const symtune::control::Knob* budget = space.knob("remat_budget");
  REQUIRE(budget != nullptr);
  int refusals = 0;
  std::optional<double> refused;
  for (int step = 0; step < 40; ++step) {
    INFO("step ", step);
    const symtune::StepResult r = online.step();
    REQUIRE(r.decision.has_value());
    const symtune::control::Decision& d = *r.decision;
    const double ran = valueOf(d.chosen, *budget);
    if (refused)
      CHECK(ran > *refused);  // what runs is never what was refused
    if (d.heldBack.find("the run refused it") != std::string::npos) {
      ++refusals;
      CHECK_FALSE(d.explored);
      CHECK(d.drivers.empty());
      const std::optional<double> now = online.controller()->refusedBudget();
      REQUIRE(now.has_value());
      if (refused)
        CHECK(*now > *refused);  // a budget as small as one refused was not drawn again
      refused = now;
    }
  }
  MESSAGE(refusals, " refusals in 40 steps; the largest budget refused ", refused ? *refused : 0.0);
  CHECK(refusals > 0);
  CHECK(refusals <= 3);  // 0.3, 0.4 and 0.5 at most, each once
  at::set_num_threads(2);
}
