#pragma once
// The online meta-controller: per batch, the configuration the next step runs with
// (docs/control.md, "The online controller").
//
//   control::OnlineController controller(trainer.configSpace());
//   control::Decision d = controller.choose(step, bucket);
//   trainer.configure(d.chosen);
//   ... run the step ...
//   controller.observe(d, stepSeconds, samples);
//
// Note [Online controller]
// A contextual bandit over the configuration space, the batch's shape bucket as the context. Its
// model: the log of a step's seconds per sample is a sum of one term per knob value and one per
// bucket (knobs act as factors on the time, a bucket sets its scale), fitted by Bayesian linear
// regression (ridge prior, noise estimated from the residuals). Each step teaches it about every
// knob value it used, so the space's size does not multiply the exploration: a grid of 48
// configurations (6 x 2 x 4 knob values) has 12 knob terms to learn, and one per bucket. It chooses
// by Thompson sampling — a draw of the terms from their posterior, the configuration fastest under
// the draw — so it explores while the terms are uncertain and settles as they firm up. Every
// configuration of the space keeps within the run's memory budget (the remat budget knob only
// tightens the session's, and the budget is enforced), so exploring breaks no constraint;
// micro-batches, threads and recomputation do not change what the step computes, beyond rounding. A
// pinned knob keeps its value.

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "symtune/control/additive_model.h"
#include "symtune/control/config_space.h"

namespace symtune::control {

struct ControllerOptions {
  uint64_t seed = 0;
  // Prior variance of each term (log seconds per sample, squared): how far a knob value is
  // thought to move the time before anything is measured (1: by a factor of e).
  double priorVariance = 1.0;
  // The noise's variance before the residuals say otherwise.
  double priorNoise = 0.05;
  // How many alternatives a decision lists, best first by the model's mean.
  int alternatives = 3;
};

// One decision: what was chosen for a step and why, and what came of it.
struct Decision {
  int64_t step = 0;
  std::string bucket;  // the context: the batch's shape bucket
  Configuration chosen;
  // The model's mean for the chosen configuration (samples per second), and whether the draw
  // chose other than the mean's best (exploring).
  double predictedSamplesPerSecond = 0;
  bool explored = false;
  // The next best by the model's mean, with their predicted samples per second.
  std::vector<std::pair<Configuration, double>> alternatives;
  std::optional<double> samplesPerSecond;  // measured, once observed
};

class OnlineController {
 public:
  // Throws std::invalid_argument for an empty space.
  explicit OnlineController(ConfigSpace space, ControllerOptions options = {});

  // The configuration for step `step` on a batch of `bucket`.
  Decision choose(int64_t step, const std::string& bucket);
  // What the step took: its seconds (without building the batch) and samples. Logs the decision.
  void observe(Decision decision, double stepSeconds, int64_t samples);

  // From now on knob `name` keeps `value` (one of its values); unpin() lets it go again. Throws
  // std::invalid_argument for a knob or value outside the space.
  void pin(const std::string& name, double value);
  void unpin(const std::string& name);
  const std::map<std::string, double>& pins() const { return pins_; }

  const std::vector<Decision>& log() const { return log_; }
  const ConfigSpace& space() const { return space_; }
  // The model's mean samples per second of `c` on `bucket` (the bucket's term 0 when unseen).
  double predictedSamplesPerSecond(const Configuration& c, const std::string& bucket) const;

 private:
  bool allowed(const Configuration& c) const;  // by the pins

  ConfigSpace space_;
  ControllerOptions options_;
  std::vector<Configuration> grid_;
  AdditiveModel model_;  // the buckets are its contexts
  std::map<std::string, double> pins_;
  std::mt19937_64 rng_;
  std::vector<Decision> log_;
};

}  // namespace symtune::control
