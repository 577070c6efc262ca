// Old steps fade (Note [Old steps fade] in symtune/control/additive_model.h): with a horizon the
// speed model believes a lasting change in a configuration's speed within a few dozen steps, and
// the online controller leaves a configuration that became slower, at little cost where nothing
// changes.

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "symtune/control/additive_model.h"
#include "symtune/control/controller.h"

using symtune::control::AdditiveModel;
using symtune::control::ConfigSpace;
using symtune::control::Configuration;
using symtune::control::Knob;
using symtune::control::OnlineController;

namespace {

Configuration microbatches(int m) {
  Configuration c;
  c.microbatches = m;
  c.threads = 2;
  return c;
}

// Seconds per sample of `c` over the whole batch's: two micro-batches `twoBefore` until step
// `shiftAt`, `twoAfter` from then on; four 1.3, sixteen 2.4 and so on; one thread 1.5 times.
double factor(const Configuration& c, int64_t step, int64_t shiftAt, double twoBefore,
              double twoAfter) {
  const std::map<int, double> micro{
      {1, 1.0}, {2, step < shiftAt ? twoBefore : twoAfter}, {4, 1.3}, {8, 1.7}, {16, 2.4}};
  return micro.at(c.microbatches) * (c.threads == 1 ? 1.5 : 1.0);
}

struct Windows {
  int below = 0;           // windows of 20 steps, from the warm-up on, under 0.97 of the default's
  double overDefault = 0;  // the run's throughput over the default's, from the warm-up on
};

// A run of 200 steps under the online controller with `horizon`: the step's time is a batch's
// base time (lognormal, 0.06 apart, as the tagger's steps with freed memory kept) times the factor
// of the configuration it ran. Each window is read as the benchmark reads it: the default's time on
// the same batches over the run's.
Windows run(double horizon, uint64_t seed, int64_t shiftAt, double twoBefore, double twoAfter) {
  symtune::control::ControllerOptions options;
  options.seed = seed;
  options.horizon = horizon;
  OnlineController controller(
      ConfigSpace({Knob{"microbatches", {1, 2, 4, 8, 16}, 1, ""}, Knob{"threads", {1, 2}, 2, ""}}),
      options);
  std::mt19937_64 rng(seed + 7000);
  std::lognormal_distribution<double> noise(0.0, 0.06);
  const Configuration whole = microbatches(1);
  Windows out;
  double ran = 0, byDefault = 0, windowRan = 0, windowDefault = 0;
  for (int64_t step = 0; step < 200; ++step) {
    const double base = 1e-3 * noise(rng);
    const auto d = controller.choose(step, "bucket");
    const double took = base * factor(d.chosen, step, shiftAt, twoBefore, twoAfter) * 32;
    const double defaultTook = base * factor(whole, step, shiftAt, twoBefore, twoAfter) * 32;
    controller.observe(d, took, 32);
    if (step < 30)
      continue;
    ran += took;
    byDefault += defaultTook;
    windowRan += took;
    windowDefault += defaultTook;
    if ((step - 30) % 20 == 19) {
      out.below += windowDefault / windowRan < 0.97;
      windowRan = windowDefault = 0;
    }
  }
  out.overDefault = byDefault / ran;
  return out;
}

}  // namespace

TEST_CASE("a horizon under 2 steps is refused; 0 is none") {
  const ConfigSpace space({Knob{"microbatches", {1, 2}, 1, ""}});
  AdditiveModel model(space, 1.0, 0.05);
  CHECK_THROWS_WITH_AS(model.setHorizon(1.5),
                       "the speed model's horizon must be 0 (none) or at least 2 steps, got 1.5",
                       std::invalid_argument);
  CHECK_THROWS_AS(model.setHorizon(-3), std::invalid_argument);
  model.setHorizon(0);
  model.setHorizon(40);
  CHECK(model.horizon() == 40);
  symtune::control::ControllerOptions options;
  options.horizon = 1;
  CHECK_THROWS_AS(OnlineController(space, options), std::invalid_argument);
}

TEST_CASE("with a horizon the model believes a lasting change within a few dozen steps") {
  // Two micro-batches 7 % faster than the whole batch for 100 steps, then 25 % slower. Most steps
  // run the faster as the model sees it, one in five the other, as a controller settled on one
  // configuration would. How many steps after the change until the model's mean says the whole
  // batch is the faster?
  const ConfigSpace space({Knob{"microbatches", {1, 2}, 1, ""}});
  const auto stepsToBelieve = [&](double horizon) {
    AdditiveModel model(space, 1.0, 0.05);
    model.setHorizon(horizon);
    std::mt19937_64 rng(3);
    std::normal_distribution<double> noise(0.0, 0.06);
    for (int step = 0; step < 300; ++step) {
      const auto post = model.posterior();
      const double whole = model.predict(model.features(microbatches(1)), post.mean);
      const double two = model.predict(model.features(microbatches(2)), post.mean);
      if (step >= 100 && whole < two)
        return step - 100;
      const bool runTwo = (two < whole) != (step % 5 == 4);
      const double twoEffect = std::log(step < 100 ? 0.93 : 1.25);
      model.observe(model.features(microbatches(runTwo ? 2 : 1)),
                    (runTwo ? twoEffect : 0.0) + noise(rng));
    }
    return 200;
  };
  const int plain = stepsToBelieve(0), faded = stepsToBelieve(40);
  MESSAGE("steps after the change until the whole batch is believed the faster: every step alike ",
          plain, ", a horizon of 40 ", faded);
  CHECK(faded <= 15);
  CHECK(plain >= 2 * faded);
}

TEST_CASE("a model with a horizon restored from its state goes on as the one it was taken from") {
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4}, 1, ""}});
  AdditiveModel model(space, 1.0, 0.05);
  model.setHorizon(10);
  for (int i = 0; i < 30; ++i)
    model.observe(model.features(microbatches(1 << (i % 3))), 0.01 * i + (i % 3) * 0.1);
  CHECK(model.counted() < 10.5);  // 1 + 0.9 + 0.81 + ... stays under the horizon
  AdditiveModel restored(space, 1.0, 0.05);
  restored.setHorizon(10);
  restored.restore(model.state());
  CHECK(restored.counted() == model.counted());
  CHECK(restored.noise() == model.noise());
  for (AdditiveModel* m : {&model, &restored})
    m->observe(m->features(microbatches(2)), 0.5);
  CHECK(restored.state() == model.state());
}

TEST_CASE("a state whose context names a term not its own is refused, the model unchanged") {
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4}, 1, ""}});
  AdditiveModel model(space, 1.0, 0.05);
  model.addContext("float32 [<=32]");
  model.observe(model.features(microbatches(2), "float32 [<=32]"), 0.5);
  const std::string good = model.state();
  auto corrupt = nlohmann::json::parse(good);
  const auto at = corrupt["contexts"]["float32 [<=32]"].get<size_t>();
  for (const size_t term : {size_t{99999}, size_t{0}}) {  // past x's end; a knob's term
    INFO(term);
    corrupt["contexts"]["float32 [<=32]"] = term;
    AdditiveModel restored(space, 1.0, 0.05);
    CHECK_THROWS_WITH_AS(restored.restore(corrupt.dump()),
                         doctest::Contains("context \"float32 [<=32]\" has term"),
                         std::invalid_argument);
    CHECK(restored.features(microbatches(2), "float32 [<=32]").size() < at + 1);  // unchanged
  }
  AdditiveModel restored(space, 1.0, 0.05);
  restored.restore(good);
  CHECK(restored.state() == good);
}

TEST_CASE("with a horizon the controller leaves a configuration that became slower") {
  // Two micro-batches run 8 % faster than the whole batch until step 90, then 20 % slower (the
  // tagger's phases on this project's 2-vCPU machine, docs/benchmarks.md). Sixteen runs each:
  // the windows of 20 steps, from the warm-up on, under 0.97 of the whole batch's throughput.
  int plainBelow = 0, fadedBelow = 0;
  std::vector<double> plainOver, fadedOver, steadyPlain, steadyFaded;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    const Windows plain = run(0, seed, 90, 0.925, 1.2);
    const Windows faded = run(40, seed, 90, 0.925, 1.2);
    plainBelow += plain.below;
    fadedBelow += faded.below;
    plainOver.push_back(plain.overDefault);
    fadedOver.push_back(faded.overDefault);
    // Where nothing changes (two micro-batches 8 % faster throughout), what the horizon costs.
    steadyPlain.push_back(run(0, seed, 1000, 0.925, 0.925).overDefault);
    steadyFaded.push_back(run(40, seed, 1000, 0.925, 0.925).overDefault);
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  MESSAGE("after the change, windows under 0.97 of the default in 16 runs: every step alike ",
          plainBelow, ", a horizon of 40 ", fadedBelow, "; the runs' median over the default ",
          median(plainOver), " and ", median(fadedOver), "; where nothing changes ",
          median(steadyPlain), " and ", median(steadyFaded));
  // The window the change falls in is lost either way (16 of the 128); the horizon saves most of
  // those after it.
  CHECK(fadedBelow * 3 <= plainBelow * 2);
  CHECK(median(fadedOver) > median(plainOver) + 0.02);
  CHECK(median(steadyFaded) >= median(steadyPlain) - 0.02);
}
