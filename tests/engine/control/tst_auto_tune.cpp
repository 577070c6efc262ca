// auto_tune's search (Note [auto_tune] in symtune/control/auto_tune.h): on spaces whose times it
// has to measure, it finds the fastest configuration with a quarter of the grid's evaluations,
// prunes what the estimate says cannot run, survives a configuration that fails, and stops when
// nothing unmeasured is worth measuring.

#include "doctest_text.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "symtune/control/auto_tune.h"

using symtune::control::AutoTuner;
using symtune::control::ConfigSpace;
using symtune::control::Configuration;
using symtune::control::Estimate;
using symtune::control::Knob;
using symtune::control::Measurement;
using symtune::control::TuneOptions;
using symtune::control::TuneResult;

namespace {

// 4 × 2 × 4 = 32 configurations; the session's is microbatches 1, threads 2, remat_budget 0.6.
ConfigSpace threeKnobs() {
  return ConfigSpace({Knob{"microbatches", {1, 2, 4, 8}, 1, ""}, Knob{"threads", {1, 2}, 2, ""},
                      Knob{"remat_budget", {0.3, 0.4, 0.5, 0.6}, 0.6, ""}});
}

// Seconds per sample, without noise: a factor per knob value and an interaction the additive
// model does not know (8 micro-batches on 1 thread is slower than its factors say). The fastest:
// 2 micro-batches, 1 thread, budget 0.6.
double trueSeconds(const Configuration& c) {
  const std::map<int, double> micro{{1, 1.25}, {2, 1.0}, {4, 1.08}, {8, 1.6}};
  const double threads = c.threads == 1 ? 1.0 : 1.12;
  const double budget = 1.0 + (0.6 - c.rematBudget.value_or(0.6)) * 0.8;
  const double interaction = c.microbatches == 8 && c.threads == 1 ? 1.2 : 1.0;
  return 1e-3 * micro.at(c.microbatches) * threads * budget * interaction;
}

double bestSeconds(const ConfigSpace& space) {
  double best = 1e9;
  for (const auto& c : space.grid())
    best = std::min(best, trueSeconds(c));
  return best;
}

}  // namespace

TEST_CASE("auto_tune finds the fastest within 3 % using a quarter of the grid's evaluations") {
  const ConfigSpace space = threeKnobs();
  const double best = bestSeconds(space);
  int within = 0, runs = 0;
  double evaluationsSpent = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 noise(seed * 7919);
    std::lognormal_distribution<double> jitter(0.0, 0.03);
    TuneOptions options;
    options.evaluations = static_cast<int>(space.grid().size() / 4);  // 8
    options.seed = seed;
    AutoTuner tuner(space, options);
    std::set<std::string> seen;
    const TuneResult r = tuner.run([&](const Configuration& c) {
      // Each configuration is measured at most once.
      CHECK(seen.insert(c.text()).second);
      return Measurement{1 / (trueSeconds(c) * jitter(noise)), 4, ""};
    });
    REQUIRE(r.best.has_value());
    CHECK(r.evaluations.size() <= 8);
    CHECK(r.evaluations.front().configuration == space.current());
    CHECK(r.configurations == 32);
    CHECK(r.simulations > 0);
    CHECK(r.steps == 4 * static_cast<int64_t>(r.evaluations.size()));
    const double found = trueSeconds(r.evaluations[*r.best].configuration);
    within += found <= best * 1.03;
    evaluationsSpent += static_cast<double>(r.evaluations.size());
    ++runs;
    if (r.runnerUp) {
      CHECK(r.evaluations[*r.runnerUp].samplesPerSecond <= r.evaluations[*r.best].samplesPerSecond);
    }
  }
  MESSAGE("within 3 % of the best in ", within, " of ", runs, " searches, ",
          evaluationsSpent / runs, " evaluations on average of 32 configurations");
  // Before the dominance prune, over seeds 1 to 40 it found it in 33 (the interaction misleads
  // the additive model; pure expected improvement over the same model does no better).
  CHECK(within >= 8);
}

TEST_CASE("with an exact cost model auto_tune measures little and stops converged") {
  const ConfigSpace space = threeKnobs();
  const Configuration first = space.current();
  TuneOptions options;
  options.evaluations = 8;
  AutoTuner tuner(space, options);
  const TuneResult r = tuner.run(
      [&](const Configuration& c) {
        return Measurement{1 / trueSeconds(c), 2, ""};
      },
      [&](const Configuration& c) {
        return Estimate{std::nullopt, trueSeconds(c) / trueSeconds(first)};
      });
  REQUIRE(r.best.has_value());
  CHECK(trueSeconds(r.evaluations[*r.best].configuration) == doctest::Approx(bestSeconds(space)));
  MESSAGE(r.evaluations.size(), " evaluations; stopped: ", r.stopped);
  CHECK(r.evaluations.size() < 8);
  CHECK(r.stopped.rfind("converged", 0) == 0);
  // What it predicted before measuring is what it measured: the estimate was exact.
  for (size_t i = 1; i < r.evaluations.size(); ++i)
    CHECK(r.evaluations[i].predictedSamplesPerSecond ==
          doctest::Approx(r.evaluations[i].samplesPerSecond).epsilon(1e-6));
}

// Until 2026-12-07 an estimate of NaN ended the search as converged (the first's at once), and
// one infinite, 0 or below put a prediction off by as much.
TEST_CASE("an estimate not finite or not above 0 is taken as none") {
  const ConfigSpace space = threeKnobs();
  const Configuration first = space.current();
  Configuration slowest = first;  // of the eight at the largest budget: 8 micro-batches, 2 threads
  slowest.microbatches = 8;
  struct Row {
    const char* what;
    Configuration estimated;
    double relativeSeconds;
  };
  const double infinite = std::numeric_limits<double>::infinity();
  const std::vector<Row> rows = {
      {"one configuration's estimate NaN", slowest, std::nan("")},
      {"one configuration's estimate infinite", slowest, infinite},
      {"one configuration's estimate 0", slowest, 0.0},
      {"one configuration's estimate below 0", slowest, -1.0},
      {"the first's own estimate NaN", first, std::nan("")},
      {"the first's own estimate infinite", first, infinite},
  };
  for (const Row& row : rows) {
    INFO(row.what);
    TuneOptions options;
    options.evaluations = 32;
    options.stopProbability = 0;  // it stops when everything feasible is measured, and only then
    AutoTuner tuner(space, options);
    const TuneResult r = tuner.run(
        [](const Configuration& c) {
          return Measurement{1 / trueSeconds(c), 1, ""};
        },
        [&](const Configuration& c) {
          if (c == row.estimated)
            return Estimate{std::nullopt, row.relativeSeconds};
          return Estimate{std::nullopt, trueSeconds(c) / trueSeconds(first)};  // exact
        });
    // The 24 below the largest budget are dominated by their twins at it; the 8 there measured.
    CHECK(r.stopped == "every feasible configuration measured");
    CHECK(r.evaluations.size() == 8);
    // Each predicted within a factor of 2 of what it measured before it ran: the configuration
    // with no estimate as fast as the first (1.28 times its speed), the others as estimated.
    for (size_t i = 1; i < r.evaluations.size(); ++i) {
      const auto& e = r.evaluations[i];
      INFO(e.configuration.text(), ": predicted ", e.predictedSamplesPerSecond, ", measured ",
           e.samplesPerSecond);
      CHECK(std::isfinite(e.predictedSamplesPerSecond));
      CHECK(e.predictedSamplesPerSecond > e.samplesPerSecond / 2);
      CHECK(e.predictedSamplesPerSecond < e.samplesPerSecond * 2);
    }
  }
}

// Until 2026-12-07 a space at a value its knob did not take had the grid's first configuration
// measured as the space's own.
TEST_CASE("auto_tune measures the space's configuration first, and refuses one its knobs lack") {
  const ConfigSpace three({Knob{"microbatches", {1, 2, 4}, 3, ""}, Knob{"threads", {1, 2}, 2, ""}});
  CHECK_THROWS_WITH_AS(AutoTuner(three, TuneOptions{}),
                       "auto_tune: knob microbatches is at 3, not one of its values 1, 2, 4: the "
                       "search's first evaluation is the configuration the space is at",
                       std::invalid_argument);
  // A value the knob takes, to rounding, is that value.
  const ConfigSpace rounded({Knob{"remat_budget", {0.3, 0.6}, 0.6 + 1e-12, ""}});
  AutoTuner tuner(rounded);
  const TuneResult r = tuner.run([](const Configuration&) { return Measurement{100, 1, ""}; });
  REQUIRE_FALSE(r.evaluations.empty());
  CHECK(r.evaluations.front().configuration.rematBudget == 0.6);
}

TEST_CASE("auto_tune prunes what the estimate rules out and survives a failing configuration") {
  const ConfigSpace space = threeKnobs();
  TuneOptions options;
  options.evaluations = 32;
  AutoTuner tuner(space, options);
  int estimates = 0;
  const TuneResult r = tuner.run(
      [&](const Configuration& c) {
        // The estimate ruled these out: never measured.
        CHECK(c.rematBudget.value_or(0.6) > 0.35);
        if (c.microbatches == 2 && c.threads == 1)
          throw std::runtime_error("out of memory");
        return Measurement{1 / trueSeconds(c), 1, ""};
      },
      [&](const Configuration& c) {
        ++estimates;
        if (c.rematBudget.value_or(0.6) < 0.35)
          return Estimate{std::string("no remat plan fits 0.3 of the plain peak"), 1};
        return Estimate{};
      });
  CHECK(estimates == 32);  // every configuration once, the first included
  // The 8 at budget 0.3 by the estimate; the 16 at 0.4 and 0.5 by their twins at 0.6 (Note [A
  // smaller remat budget is never faster]).
  CHECK(r.pruned.size() == 24);
  int ruledOut = 0, dominated = 0;
  for (const auto& [c, why] : r.pruned) {
    if (c.rematBudget.value_or(0.6) < 0.35) {
      ++ruledOut;
      CHECK(why == "no remat plan fits 0.3 of the plain peak");
    } else {
      ++dominated;
      Configuration twin = c;
      twin.rematBudget = 0.6;
      CHECK(why == "dominated by " + twin.text() + ": a larger remat budget recomputes no more");
    }
  }
  CHECK(ruledOut == 8);
  CHECK(dominated == 16);
  REQUIRE(r.best.has_value());
  const auto& best = r.evaluations[*r.best];
  // The fastest that runs: 2 micro-batches on 1 thread failed, so 4 on 1 thread.
  CHECK(best.configuration.microbatches == 4);
  CHECK(best.configuration.threads == 1);
  CHECK(best.failed.empty());
  int failed = 0;
  for (const auto& e : r.evaluations) {
    if (!e.failed.empty()) {
      ++failed;
      CHECK(e.failed == "out of memory");
      CHECK(e.configuration.microbatches == 2);
      CHECK(e.configuration.threads == 1);
    }
  }
  CHECK(failed == 1);                // at 0.6: its smaller budgets were pruned before anything ran
  CHECK(r.evaluations.size() <= 8);  // never more than the configurations left
}

TEST_CASE(
    "a smaller remat budget is measured only as the run's own or where the larger cannot run") {
  // The session's configuration is at 0.4: measured first, as it is.
  const ConfigSpace space({Knob{"microbatches", {1, 2}, 1, ""}, Knob{"threads", {1, 2}, 2, ""},
                           Knob{"remat_budget", {0.3, 0.4, 0.5, 0.6}, 0.4, ""}});
  TuneOptions options;
  options.evaluations = 16;
  AutoTuner tuner(space, options);
  std::vector<std::string> measured;
  const TuneResult r = tuner.run(
      [&](const Configuration& c) {
        measured.push_back(c.text());
        return Measurement{1 / trueSeconds(c), 1, ""};
      },
      [&](const Configuration& c) {
        // Say the estimate rules out two micro-batches on one thread at 0.6 only.
        if (c.microbatches == 2 && c.threads == 1 && c.rematBudget.value_or(0.4) > 0.55)
          return Estimate{std::string("no remat plan fits"), 1};
        return Estimate{};
      });
  REQUIRE(!measured.empty());
  CHECK(measured.front() == "microbatches 1, threads 2, remat_budget 0.4");
  for (const auto& text : measured) {
    const bool own = text == measured.front();
    const bool atLargest = text.find("remat_budget 0.6") != std::string::npos;
    const bool twinRuledOut = text.rfind("microbatches 2, threads 1,", 0) == 0;
    CHECK_MESSAGE((own || atLargest || twinRuledOut), text);
  }
  // The twin at 0.6 of two micro-batches on one thread cannot run: its smaller budgets stay.
  for (const auto& [c, why] : r.pruned)
    CHECK_FALSE((c.microbatches == 2 && c.threads == 1 && c.rematBudget.value_or(0) < 0.55));
  // The run's own, three at 0.6 and two micro-batches on one thread at 0.3, 0.4 and 0.5.
  CHECK(measured.size() <= 7);
  CHECK(r.pruned.size() == 9);  // 0.6 of 2 on 1 by the estimate; 8 dominated
}

TEST_CASE("a configuration that runs out of memory prunes those that need as much") {
  // One micro-batch runs out of memory under every budget; two fit from 0.5 up, four at any.
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4}, 1, ""},
                           Knob{"remat_budget", {0.3, 0.4, 0.5, 0.6}, 0.6, ""}});
  TuneOptions options;
  options.evaluations = 12;
  options.stopProbability = 0;
  AutoTuner tuner(space, options);
  const auto fits = [](const Configuration& c) {
    return c.microbatches == 4 || (c.microbatches == 2 && *c.rematBudget >= 0.45);
  };
  int ranOut = 0;
  const TuneResult r = tuner.run([&](const Configuration& c) {
    if (!fits(c)) {
      ++ranOut;
      return Measurement{0, 1, "ran out of its budget", true};
    }
    return Measurement{100.0 / c.microbatches * (1 + *c.rematBudget), 2, "", false};
  });
  // The first (1 at 0.6) prunes 1 at every tighter budget; two and four micro-batches below 0.6
  // are dominated by their twins at 0.6 (Note [A smaller remat budget is never faster]), so
  // nothing else runs out.
  CHECK(r.evaluations.front().failed == "ran out of its budget");
  CHECK(ranOut == 1);
  for (const auto& e : r.evaluations)
    CHECK(e.configuration.rematBudget == 0.6);
  int prunedOnes = 0, dominated = 0;
  for (const auto& [c, why] : r.pruned) {
    if (why.rfind("dominated by", 0) == 0) {
      ++dominated;
      CHECK(c.microbatches != 1);
      CHECK(*c.rematBudget < 0.6);
      continue;
    }
    CHECK_FALSE(fits(c));
    prunedOnes += c.microbatches == 1;
    CHECK(why.find("which ran out of it") != std::string::npos);
  }
  CHECK(prunedOnes == 3);
  CHECK(dominated == 6);
  REQUIRE(r.best.has_value());
  CHECK(r.evaluations[*r.best].configuration.text() ==
        "microbatches 2, threads as begun, remat_budget 0.6");
}

TEST_CASE("a configuration that runs out of memory does not prune one measured running") {
  // One thread runs out (as if it did); what it prunes, whatever its threads, leaves out the
  // configurations that ran with two: the first among them (until 2026-12-07 it was pruned as
  // needing the memory that ran out, and was the result's best).
  const ConfigSpace space({Knob{"microbatches", {1, 2}, 2, ""}, Knob{"threads", {1, 2}, 2, ""}});
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    TuneOptions options;
    options.evaluations = 4;
    options.stopProbability = 0;
    options.seed = seed;
    AutoTuner tuner(space, options);
    const TuneResult r = tuner.run([&](const Configuration& c) {
      if (c.threads == 1)
        return Measurement{0, 1, "ran out of its budget", true};
      return Measurement{100.0 * c.microbatches, 2, "", false};
    });
    REQUIRE(r.best.has_value());
    CHECK(r.evaluations[*r.best].configuration.threads == 2);
    for (const auto& e : r.evaluations) {
      if (!e.failed.empty())
        continue;
      for (const auto& [c, why] : r.pruned) {
        INFO(c.text(), ": ", why);
        CHECK(c != e.configuration);
      }
    }
  }
}

TEST_CASE("a binder that does not measure running out of memory prunes nothing that measures") {
  // As early exit bound with a memory slack under 0.6 of its plain peak: the binder that
  // measures binds the lean blocks and fits; one that binds by its table alone (an empty one:
  // the ATen ops) holds more and runs out, whatever the threads.
  const ConfigSpace space({Knob{"threads", {1, 2}, 2, ""}, Knob{"binding_explore", {0, 1}, 1, ""}});
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    TuneOptions options;
    options.evaluations = 4;
    options.seed = seed;
    options.stopProbability = 0;
    AutoTuner tuner(space, options);
    const TuneResult r = tuner.run([](const Configuration& c) {
      if (!c.bindingExplore.value_or(true))
        return Measurement{0, 1, "ran out of its budget", true};
      return Measurement{c.threads == 2 ? 1200.0 : 700.0, 2, "", false};
    });
    for (const auto& [c, why] : r.pruned)
      CHECK_FALSE(c.bindingExplore.value_or(true));  // only what binds without measuring
    REQUIRE(r.best.has_value());
    CHECK(r.evaluations[*r.best].configuration.text() ==
          "microbatches 1, threads 2, remat_budget as the session, binding_explore 1");
  }
}

TEST_CASE("when the session's configuration runs out of memory, the next measured splits it") {
  // As the tree network under 0.6 of its plain peak: the whole batch fits no budget, two
  // micro-batches fit at the session's budget only and are the fastest by far; the other counts
  // fit everywhere, faster the more memory they have. The search's second evaluation is the
  // session's configuration split in two, whatever the seed.
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4, 8, 16}, 1, ""},
                           Knob{"threads", {1, 2}, 2, ""},
                           Knob{"remat_budget", {0.3, 0.4, 0.5, 0.6}, 0.6, ""}});
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    TuneOptions options;
    options.evaluations = 10;
    options.seed = seed;
    AutoTuner tuner(space, options);
    const TuneResult r = tuner.run([](const Configuration& c) {
      if (c.microbatches == 1 || (c.microbatches == 2 && *c.rematBudget < 0.55))
        return Measurement{0, 1, "ran out of its budget", true};
      const double perSecond = c.microbatches == 2 ? 1800 : 1000 - 40.0 * c.microbatches;
      return Measurement{perSecond * (0.7 + *c.rematBudget / 2), 2, "", false};
    });
    REQUIRE(r.evaluations.size() >= 2);
    CHECK(r.evaluations[1].configuration.text() == "microbatches 2, threads 2, remat_budget 0.6");
    REQUIRE(r.best.has_value());
    CHECK(r.evaluations[*r.best].configuration.microbatches == 2);
  }
}

TEST_CASE("a session's budget below the largest: the split measured second is at the largest") {
  // As a tuned session tuned again (its remat budget 0.4): one micro-batch runs out; two at 0.4
  // are dominated by two at 0.6, which is then the split measured second.
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4}, 1, ""},
                           Knob{"remat_budget", {0.3, 0.4, 0.5, 0.6}, 0.4, ""}});
  TuneOptions options;
  options.evaluations = 4;
  options.stopProbability = 0;
  AutoTuner tuner(space, options);
  const TuneResult r = tuner.run([&](const Configuration& c) {
    if (c.microbatches == 1)
      return Measurement{0, 1, "ran out of its budget", true};
    return Measurement{100.0 / c.microbatches, 2, "", false};
  });
  REQUIRE(r.evaluations.size() >= 2u);
  CHECK(r.evaluations[0].configuration == space.current());
  CHECK(r.evaluations[0].failed == "ran out of its budget");
  CHECK(r.evaluations[1].configuration.text() ==
        "microbatches 2, threads as begun, remat_budget 0.6");
}

TEST_CASE("auto_tune on a space it can measure whole stops when everything is measured") {
  const ConfigSpace space({Knob{"microbatches", {1, 2}, 1, ""}});
  TuneOptions options;
  options.evaluations = 10;
  options.stopProbability = 0;  // never converged: only the space's end stops it
  AutoTuner tuner(space, options);
  const TuneResult r = tuner.run([](const Configuration& c) {
    return Measurement{c.microbatches == 2 ? 200.0 : 100.0, 3, ""};
  });
  CHECK(r.evaluations.size() == 2);
  CHECK(r.stopped == "every feasible configuration measured");
  REQUIRE(r.best.has_value());
  CHECK(r.evaluations[*r.best].configuration.microbatches == 2);
  REQUIRE(r.runnerUp.has_value());
  CHECK(r.evaluations[*r.runnerUp].configuration.microbatches == 1);
}

TEST_CASE("auto_tune refuses an empty space and options out of range") {
  CHECK_THROWS_AS(AutoTuner(ConfigSpace{}), std::invalid_argument);
  TuneOptions none;
  none.evaluations = 0;
  CHECK_THROWS_AS(AutoTuner(threeKnobs(), none), std::invalid_argument);
}
