#pragma once
// What the online controller's test cases share: a space of three knobs and the times a step
// takes in it, and the session of the trainers it drives.

#include <map>
#include <random>
#include <string>

#include "symtune/control/config_space.h"
#include "symtune/core/session.h"

namespace symtune::test::control {

// 1-8 micro-batches, 1 or 2 threads, a remat budget of 0.3-0.6 of the plain peak; the run begins
// at 1 micro-batch, 2 threads and 0.6.
inline symtune::control::ConfigSpace threeKnobs() {
  using symtune::control::Knob;
  return symtune::control::ConfigSpace({Knob{"microbatches", {1, 2, 4, 8}, 1, ""},
                                        Knob{"threads", {1, 2}, 2, ""},
                                        Knob{"remat_budget", {0.3, 0.4, 0.5, 0.6}, 0.6, ""}});
}

// A step's seconds per sample: a bucket's scale times a factor per knob value, with noise. The
// fastest: 2 micro-batches, 1 thread, remat budget 0.6.
inline double secondsPerSample(const symtune::control::Configuration& c, int bucket,
                               std::mt19937_64& rng) {
  const std::map<int, double> micro{{1, 1.25}, {2, 1.0}, {4, 1.15}, {8, 1.6}};
  const double threads = c.threads == 1 ? 1.0 : 1.12;
  const double budget = 1.0 + (0.6 - c.rematBudget.value_or(0.6)) * 0.8;
  std::lognormal_distribution<double> noise(0.0, 0.05);
  return (1 + bucket) * 1e-3 * micro.at(c.microbatches) * threads * budget * noise(rng);
}

// The ci tagger, unbound, trained by SGD: the sessions the controller drives trainers with.
inline symtune::Session taggerSession(const std::string& name) {
  symtune::Session s;
  s.name = name;
  s.model.zoo = "dynamic_tagger";
  s.model.preset = "ci";
  s.data.seed = 11;
  s.binding.enabled = false;
  s.optimizer.name = "sgd";
  s.optimizer.lr = 0.05;
  return s;
}

}  // namespace symtune::test::control
