// The online controller (Note [Online controller] in symtune/control/controller.h): it finds the
// fastest configuration of a space whose times it has to learn, keeps to its pins, and, driving
// a trainer, changes how the steps run but not what they compute.

#include "doctest_torch.h"

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "symtune/control/controller.h"
#include "symtune/runtime/trainer.h"

using symtune::control::ConfigSpace;
using symtune::control::Configuration;
using symtune::control::Knob;
using symtune::control::OnlineController;

namespace {

ConfigSpace threeKnobs() {
  return ConfigSpace({Knob{"microbatches", {1, 2, 4, 8}, 1, ""}, Knob{"threads", {1, 2}, 2, ""},
                      Knob{"remat_budget", {0.3, 0.4, 0.5, 0.6}, 0.6, ""}});
}

// A step's seconds per sample: a bucket's scale times a factor per knob value, with noise. The
// fastest: 2 micro-batches, 1 thread, remat budget 0.6.
double secondsPerSample(const Configuration& c, int bucket, std::mt19937_64& rng) {
  const std::map<int, double> micro{{1, 1.25}, {2, 1.0}, {4, 1.15}, {8, 1.6}};
  const double threads = c.threads == 1 ? 1.0 : 1.12;
  const double budget = 1.0 + (0.6 - c.rematBudget.value_or(0.6)) * 0.8;
  std::lognormal_distribution<double> noise(0.0, 0.05);
  return (1 + bucket) * 1e-3 * micro.at(c.microbatches) * threads * budget * noise(rng);
}

}  // namespace

TEST_CASE("the online controller finds the fastest configuration and settles on it") {
  OnlineController controller(threeKnobs());
  std::mt19937_64 rng(3);
  const ConfigSpace space = threeKnobs();
  int best = 0;
  for (int64_t step = 0; step < 200; ++step) {
    const int bucket = static_cast<int>(step % 3);  // three shape buckets, their scales 1:2:3
    const auto d = controller.choose(step, "bucket " + std::to_string(bucket));
    CHECK_FALSE(space.outside(d.chosen).has_value());
    if (step == 0)
      CHECK(d.chosen == space.current());  // nothing measured: as the run began
    const int64_t samples = 32;
    controller.observe(d, secondsPerSample(d.chosen, bucket, rng) * samples, samples);
    if (step >= 150)
      best += d.chosen.text() == "microbatches 2, threads 1, remat_budget 0.6";
  }
  MESSAGE("the fastest chosen in ", best, " of the last 50 steps");
  CHECK(best >= 40);
  REQUIRE(controller.log().size() == 200);
  const auto& last = controller.log().back();
  REQUIRE(last.samplesPerSecond.has_value());
  // The model's prediction for what it chose is within 15 % of what the step measured.
  CHECK(last.predictedSamplesPerSecond == doctest::Approx(*last.samplesPerSecond).epsilon(0.15));
  CHECK(last.alternatives.size() == 3);
  Configuration fastest;
  fastest.microbatches = 2;
  fastest.threads = 1;
  fastest.rematBudget = 0.6;
  Configuration slowest;
  slowest.microbatches = 8;
  slowest.threads = 2;
  slowest.rematBudget = 0.3;
  // In truth 2.2 times as fast; a configuration seldom tried is shrunk towards the mean.
  CHECK(controller.predictedSamplesPerSecond(fastest, "bucket 0") >
        1.5 * controller.predictedSamplesPerSecond(slowest, "bucket 0"));
  CHECK(controller.predictedSamplesPerSecond(fastest, "bucket 0") ==
        doctest::Approx(1000).epsilon(0.1));  // bucket 0: 1 ms a sample at the fastest
}

TEST_CASE("a pinned knob keeps its value; a pin outside the space is refused") {
  OnlineController controller(threeKnobs());
  controller.pin("threads", 2);
  controller.pin("microbatches", 4);
  std::mt19937_64 rng(5);
  for (int64_t step = 0; step < 30; ++step) {
    const auto d = controller.choose(step, "b");
    CHECK(d.chosen.threads == 2);
    CHECK(d.chosen.microbatches == 4);
    controller.observe(d, secondsPerSample(d.chosen, 0, rng), 1);
  }
  controller.unpin("microbatches");
  bool moved = false;
  for (int64_t step = 30; step < 80; ++step) {
    const auto d = controller.choose(step, "b");
    moved = moved || d.chosen.microbatches != 4;
    controller.observe(d, secondsPerSample(d.chosen, 0, rng), 1);
  }
  CHECK(moved);
  CHECK_THROWS_AS(controller.pin("threads", 3), std::invalid_argument);
  CHECK_THROWS_AS(controller.pin("jit", 1), std::invalid_argument);
  CHECK_THROWS_AS(OnlineController(ConfigSpace{}), std::invalid_argument);
}

TEST_CASE("driving a trainer, the controller changes how steps run, not what they compute") {
  at::set_num_threads(2);
  symtune::Session s;
  s.name = "online";
  s.model.zoo = "dynamic_tagger";
  s.model.preset = "ci";
  s.data.seed = 11;
  s.binding.enabled = false;
  s.optimizer.name = "sgd";
  s.optimizer.lr = 0.05;
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
    CHECK(b.decision->samplesPerSecond.has_value());
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-5));
    ++chosen[b.decision->chosen.text()];
  }
  CHECK(chosen.size() > 1);  // it explored
  CHECK(online.controller()->log().size() == 16);
  at::set_num_threads(2);
}
