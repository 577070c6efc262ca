#include "symtune/control/controller.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace symtune::control {

OnlineController::OnlineController(ConfigSpace space, ControllerOptions options)
    : space_(std::move(space)),
      options_(options),
      model_(space_, options.priorVariance, options.priorNoise),
      rng_(options.seed) {
  grid_ = space_.grid();
  if (grid_.empty() || space_.knobs().empty())
    throw std::invalid_argument("the online controller needs a configuration space with knobs");
}

bool OnlineController::allowed(const Configuration& c) const {
  for (const auto& [name, value] : pins_) {
    const Knob* k = space_.knob(name);
    if (k != nullptr && !sameValue(valueOf(c, *k), value))
      return false;
  }
  return true;
}

double OnlineController::predictedSamplesPerSecond(const Configuration& c,
                                                   const std::string& bucket) const {
  if (model_.observations() == 0)
    return 0;
  return std::exp(-model_.predict(model_.features(c, bucket), model_.posterior().mean));
}

Decision OnlineController::choose(int64_t step, const std::string& bucket) {
  model_.addContext(bucket);
  Decision d;
  d.step = step;
  d.bucket = bucket;
  // A draw of the terms from their posterior (Note [Posterior of the terms]).
  const TermPosterior post = model_.posterior();
  const std::vector<double>& theta = post.mean;
  const std::vector<double> draw = post.draw(rng_);
  const int64_t observations = model_.observations();

  std::vector<std::pair<double, size_t>> byMean;
  size_t best = grid_.size();
  double bestDrawn = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < grid_.size(); ++i) {
    if (!allowed(grid_[i]))
      continue;
    const std::vector<double> x = model_.features(grid_[i], bucket);
    byMean.emplace_back(model_.predict(x, theta), i);
    const double drawn = dot(x, draw);
    if (drawn < bestDrawn) {
      bestDrawn = drawn;
      best = i;
    }
  }
  std::sort(byMean.begin(), byMean.end());
  if (observations == 0) {
    // Nothing measured: the configuration the run began with, when the pins allow it.
    const Configuration current = space_.current();
    const auto at = std::find(grid_.begin(), grid_.end(), current);
    if (at != grid_.end() && allowed(current))
      best = static_cast<size_t>(at - grid_.begin());
  }
  if (best == grid_.size())  // the pins allow nothing in the grid
    throw std::invalid_argument("the pinned knobs leave no configuration of the space");
  d.chosen = grid_[best];
  d.explored = observations > 0 && byMean.front().second != best;
  if (observations > 0)
    d.predictedSamplesPerSecond =
        std::exp(-model_.predict(model_.features(d.chosen, bucket), theta));
  for (const auto& [value, i] : byMean) {
    if (d.alternatives.size() >= static_cast<size_t>(options_.alternatives))
      break;
    if (i != best && observations > 0)
      d.alternatives.emplace_back(grid_[i], std::exp(-value));
  }
  return d;
}

void OnlineController::observe(Decision decision, double stepSeconds, int64_t samples) {
  // stepSeconds 0: logged, not learnt from.
  if (stepSeconds > 0 && samples > 0) {
    model_.addContext(decision.bucket);
    model_.observe(model_.features(decision.chosen, decision.bucket),
                   std::log(stepSeconds / static_cast<double>(samples)));
    decision.samplesPerSecond = static_cast<double>(samples) / stepSeconds;
  }
  log_.push_back(std::move(decision));
}

void OnlineController::pin(const std::string& name, double value) {
  const Knob* k = space_.knob(name);
  if (k == nullptr)
    throw std::invalid_argument("no knob " + name + " in this run's configuration space");
  if (std::none_of(k->values.begin(), k->values.end(),
                   [&](double allowedValue) { return sameValue(allowedValue, value); }))
    throw std::invalid_argument("knob " + name + " cannot take " + std::to_string(value));
  pins_[name] = value;
}

void OnlineController::unpin(const std::string& name) {
  pins_.erase(name);
}

}  // namespace symtune::control
