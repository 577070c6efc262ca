// A level that moves (Note [A level that moves] in symtune/control/additive_model.h): the speed
// model notices when a configuration's speed jumps, within a few of its steps, and the online
// controller leaves a configuration that became slower; where nothing jumps it costs nothing.

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "symtune/control/additive_model.h"
#include "symtune/control/controller.h"

using symtune::control::AdditiveModel;
using symtune::control::ConfigSpace;
using symtune::control::Configuration;
using symtune::control::Knob;
using symtune::control::OnlineController;

namespace {

Configuration microbatches(int m, int threads = 2) {
  Configuration c;
  c.microbatches = m;
  c.threads = threads;
  return c;
}

ConfigSpace space() {
  return ConfigSpace(
      {Knob{"microbatches", {1, 2, 4, 8, 16}, 1, ""}, Knob{"threads", {1, 2}, 2, ""}});
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Where two micro-batches stand against the whole batch at each step: seconds per sample over
// the whole batch's.
using Level = std::function<double(int64_t step)>;

struct Reading {
  int below = 0;           // windows of 20 steps from step 30 whose median ratio is under 0.97
  double lowest = 10;      // the lowest window
  double overDefault = 0;  // the default's time over the run's, from step 30
  int64_t shifts = 0;
};

// A controlled run of 200 steps, read as bench/python/controller_windows.py reads the harness's:
// step i is the same batch for the run and for the default (the whole batch on two threads), a
// window is the median of its steps' ratios. A step's time is the batch's base time (lognormal,
// 0.06 apart) times its configuration's factor (four micro-batches 1.3, eight 1.7, sixteen 2.4,
// one thread 1.5 times; two micro-batches `two(step)`) times noise of its own (lognormal, 0.04
// apart: how far two trainers of one configuration differ on one batch with freed memory kept).
Reading run(int shiftRun, uint64_t seed, const Level& two) {
  symtune::control::ControllerOptions options;
  options.seed = seed;
  options.shiftRun = shiftRun;
  OnlineController controller(space(), options);
  std::mt19937_64 rng(seed + 9000);
  std::lognormal_distribution<double> batch(0.0, 0.06), own(0.0, 0.04);
  const auto factor = [&](const Configuration& c, int64_t step) {
    const double m = c.microbatches == 1   ? 1.0
                     : c.microbatches == 2 ? two(step)
                     : c.microbatches == 4 ? 1.3
                     : c.microbatches == 8 ? 1.7
                                           : 2.4;
    return m * (c.threads == 1 ? 1.5 : 1.0);
  };
  Reading out;
  std::vector<double> window;
  double ran = 0, byDefault = 0;
  for (int64_t step = 0; step < 200; ++step) {
    const double base = 1e-3 * batch(rng);
    const auto d = controller.choose(step, "bucket");
    const double took = base * factor(d.chosen, step) * own(rng) * 32;
    const double defaultTook = base * own(rng) * 32;
    controller.observe(d, took, 32);
    if (step < 30)
      continue;
    ran += took;
    byDefault += defaultTook;
    window.push_back(defaultTook / took);
    if (window.size() == 20) {
      const double m = median(window);
      out.below += m < 0.97;
      out.lowest = std::min(out.lowest, m);
      window.clear();
    }
  }
  out.overDefault = byDefault / ran;
  out.shifts = controller.shifts();
  return out;
}

// Two micro-batches 1.04x the whole batch's speed and 0.72x, in turns of 20-100 steps (the
// tagger's on this project's 2-vCPU machine, freed memory kept: docs/benchmarks.md), the first
// turn fast.
Level toggling(uint64_t seed) {
  std::mt19937_64 rng(seed + 500);
  std::uniform_int_distribution<int> length(20, 100);
  auto turns = std::make_shared<std::vector<int64_t>>();
  for (int64_t at = length(rng); at < 200; at += length(rng))
    turns->push_back(at);
  return [turns](int64_t step) {
    const auto passed = std::upper_bound(turns->begin(), turns->end(), step) - turns->begin();
    return passed % 2 == 0 ? 1 / 1.04 : 1 / 0.72;
  };
}

}  // namespace

TEST_CASE("shift detection refuses a run of one step, a threshold of 0 and a spread of 0") {
  AdditiveModel model(space(), 1.0, 0.05);
  CHECK_THROWS_WITH_AS(model.setShiftDetection(1),
                       "the speed model's shift detection needs a run of 0 (off) or at least 2 "
                       "steps, a threshold above 0 and a spread above 0, got run 1, threshold "
                       "2.5, spread 0.25",
                       std::invalid_argument);
  CHECK_THROWS_AS(model.setShiftDetection(3, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(model.setShiftDetection(3, 2.0, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(model.setShiftDetection(-2), std::invalid_argument);
  model.setShiftDetection(0);
  model.setShiftDetection(3, 2.5, 1.0);
  CHECK(model.shiftRun() == 3);
  symtune::control::ControllerOptions options;
  options.shiftRun = 1;
  CHECK_THROWS_AS(OnlineController(space(), options), std::invalid_argument);
}

TEST_CASE("the model believes a jump within a few steps, and a steady run never jumps") {
  // Two micro-batches 7 % faster than the whole batch for 100 steps, then 25 % slower; most steps
  // run the one the model's mean says is faster, one in five the other.
  const auto stepsToBelieve = [&](int shiftRun, int64_t& shifts) {
    AdditiveModel model(space(), 1.0, 0.05);
    model.setShiftDetection(shiftRun);
    std::mt19937_64 rng(3);
    std::normal_distribution<double> noise(0.0, 0.06);
    int believed = 200;
    for (int step = 0; step < 300; ++step) {
      const auto post = model.posterior();
      const double whole = model.predict(model.features(microbatches(1)), post.mean);
      const double two = model.predict(model.features(microbatches(2)), post.mean);
      if (step >= 100 && whole < two && believed == 200)
        believed = step - 100;
      const bool runTwo = (two < whole) != (step % 5 == 4);
      const double twoEffect = std::log(step < 100 ? 0.93 : 1.25);
      model.observe(model.features(microbatches(runTwo ? 2 : 1)),
                    (runTwo ? twoEffect : 0.0) + noise(rng));
    }
    shifts = model.shifts();
    return believed;
  };
  int64_t plainShifts = 0, watchedShifts = 0;
  const int plain = stepsToBelieve(0, plainShifts), watched = stepsToBelieve(3, watchedShifts);
  MESSAGE("steps after the jump until the whole batch is believed the faster: without detection ",
          plain, ", with it ", watched, " (", watchedShifts, " jump believed)");
  CHECK(watched <= 5);
  CHECK(plain >= 4 * watched);
  CHECK(plainShifts == 0);
  CHECK(watchedShifts == 1);

  // Steady: 300 steps of noise 0.06 apart (Student-t tails as well), no jump believed.
  AdditiveModel steady(space(), 1.0, 0.05);
  steady.setShiftDetection(3);
  std::mt19937_64 rng(11);
  std::student_t_distribution<double> t(4.0);
  for (int step = 0; step < 300; ++step) {
    const int m = step % 3 == 0 ? 2 : 1;
    steady.observe(steady.features(microbatches(m)), (m == 2 ? -0.07 : 0.0) + 0.06 * t(rng));
  }
  CHECK(steady.shifts() == 0);
}

TEST_CASE(
    "a model watching for jumps restored from its state goes on as the one it was taken "
    "from") {
  AdditiveModel model(space(), 1.0, 0.05);
  model.setShiftDetection(3);
  for (int i = 0; i < 40; ++i) {
    model.addContext(i < 20 ? "short" : "long");  // a context that comes after some are recent
    const int m = 1 << (i % 2);
    model.observe(model.features(microbatches(m), i < 20 ? "short" : "long"),
                  0.01 * (i % 5) + (m == 2 ? (i < 30 ? -0.1 : 0.4) : 0.0));
  }
  CHECK(model.shifts() >= 1);
  AdditiveModel restored(space(), 1.0, 0.05);
  restored.setShiftDetection(3);
  restored.addContext("short");
  restored.addContext("long");
  restored.restore(model.state());
  CHECK(restored.shifts() == model.shifts());
  for (int i = 0; i < 6; ++i) {
    for (AdditiveModel* m : {&model, &restored})
      m->observe(m->features(microbatches(2), "long"), 0.45 + 0.01 * i);
  }
  CHECK(restored.state() == model.state());
}

TEST_CASE("watching for jumps, the controller leaves a configuration that became slower") {
  // Sixteen runs each way on the tagger's turns, and two steady cases: two micro-batches 8 %
  // faster throughout (the controller should stay on them) and 10 % slower throughout (the
  // default is the fastest, as on Transformer-XL).
  int plainBelow = 0, watchedBelow = 0;
  int64_t steadyShifts = 0;
  std::vector<double> plainOver, watchedOver, plainLowest, watchedLowest;
  std::vector<double> fastPlain, fastWatched, slowPlain, slowWatched;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    const Level turns = toggling(seed);
    const Reading plain = run(0, seed, turns), watched = run(3, seed, turns);
    plainBelow += plain.below;
    watchedBelow += watched.below;
    plainOver.push_back(plain.overDefault);
    watchedOver.push_back(watched.overDefault);
    plainLowest.push_back(plain.lowest);
    watchedLowest.push_back(watched.lowest);
    const Level fast = [](int64_t) { return 0.925; }, slow = [](int64_t) { return 1.1; };
    fastPlain.push_back(run(0, seed, fast).overDefault);
    const Reading fastRun = run(3, seed, fast), slowRun = run(3, seed, slow);
    fastWatched.push_back(fastRun.overDefault);
    slowPlain.push_back(run(0, seed, slow).overDefault);
    slowWatched.push_back(slowRun.overDefault);
    steadyShifts += fastRun.shifts + slowRun.shifts;
  }
  MESSAGE(
      "two micro-batches in turns 1.04x and 0.72x the whole batch, 16 runs of 200 steps: "
      "windows under 0.97 of the default ",
      plainBelow, " without detection, ", watchedBelow, " with; median lowest window ",
      median(plainLowest), " and ", median(watchedLowest), "; median over the default ",
      median(plainOver), " and ", median(watchedOver),
      ". Steady, two micro-batches 8 % faster: ", median(fastPlain), " and ", median(fastWatched),
      "; 10 % slower: ", median(slowPlain), " and ", median(slowWatched),
      " (jumps believed in the steady runs: ", steadyShifts, ")");
  CHECK(watchedBelow * 2 <= plainBelow);
  CHECK(median(watchedOver) >= median(plainOver));
  CHECK(median(fastWatched) >= median(fastPlain) - 0.01);
  CHECK(median(slowWatched) >= median(slowPlain) - 0.01);
}
