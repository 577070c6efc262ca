#include "symtune/control/controller.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>

namespace symtune::control {

namespace {

std::string number(double v) {
  if (std::isnan(v))
    return "nan";  // whatever its sign
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// What `decision`'s step ran (Note [Divergence constraint]).
const Configuration& ranBy(const Decision& decision) {
  return decision.ran ? *decision.ran : decision.chosen;
}

// `options`, each checked against its range before the model is made from them: a variance or
// noise of 0 or below makes a term's prior precision infinite or negative, and an option not
// finite makes the posterior, or the bound a choice is held to, NaN from the first choice on.
const ControllerOptions& checked(const ControllerOptions& options) {
  const auto require = [](bool inRange, const std::string& name, const std::string& range,
                          double got) {
    if (!inRange)
      throw std::invalid_argument("the online controller's " + name + " must be " + range +
                                  ", got " + number(got));
  };
  const auto positive = [&](double v, const std::string& name) {
    require(std::isfinite(v) && v > 0, name, "finite and above 0", v);
  };
  const auto notNegative = [&](double v, const std::string& name) {
    require(std::isfinite(v) && v >= 0, name, "finite and 0 or above", v);
  };
  positive(options.priorVariance, "priorVariance");
  positive(options.priorNoise, "priorNoise");
  positive(options.signalVariance, "signalVariance");
  for (const double slope : options.signalSlopes)
    require(std::isfinite(slope), "signalSlopes", "finite", slope);
  notNegative(options.ordinal.trend, "ordinal.trend");
  notNegative(options.ordinal.deviation, "ordinal.deviation");
  require(std::isfinite(options.divergence) && options.divergence > 1, "divergence",
          "finite and above 1", options.divergence);
  require(options.divergenceWarmup >= 1, "divergenceWarmup", "at least 1",
          options.divergenceWarmup);
  require(options.alternatives >= 0, "alternatives", "0 or above", options.alternatives);
  require(options.conservative >= 0 && options.conservative < 1, "conservative share", "in [0, 1)",
          options.conservative);
  notNegative(options.pessimism, "pessimism");
  return options;
}

}  // namespace

OnlineController::OnlineController(ConfigSpace space, ControllerOptions options)
    : space_(std::move(space)),
      options_(checked(options)),
      model_(space_, options.priorVariance, options.priorNoise, options.signalNames.size(),
             options.signalVariance, options.ordinal),
      rng_(options.seed) {
  model_.setSignalSlopes(options_.signalSlopes);
  model_.setHorizon(options_.horizon);
  model_.setShiftDetection(options_.shiftRun, options_.shiftThreshold, options_.shiftSpread);
  grid_ = space_.grid();
  if (grid_.empty() || space_.knobs().empty())
    throw std::invalid_argument("the online controller needs a configuration space with knobs");
  baseline_ = space_.current();
}

double OnlineController::slowerAtMost(const Configuration& c, const std::string& bucket,
                                      const std::vector<double>& z,
                                      const TermPosterior& post) const {
  if (c == baseline_)
    return 0;
  const std::vector<double> x = model_.features(c, bucket, z);
  const std::vector<double> xb = model_.features(baseline_, bucket, z);
  // The difference's mean and spread: the bucket's and the signals' own terms, the same for
  // both, cancel.
  std::vector<double> dx(x.size());
  for (size_t k = 0; k < x.size(); ++k)
    dx[k] = x[k] - xb[k];
  return dot(dx, post.mean) + options_.pessimism * std::sqrt(post.variance(dx));
}

bool OnlineController::affordable(size_t i, const std::string& bucket, const std::vector<double>& z,
                                  const TermPosterior& post) const {
  if (grid_[i] == baseline_)
    return true;
  const double baseline =
      std::exp(model_.predict(model_.features(baseline_, bucket, z), post.mean)) *
      static_cast<double>(lastSamples_);
  return spent_ + baseline * std::exp(slowerAtMost(grid_[i], bucket, z, post)) <=
         (baselineSpent_ + baseline) / options_.conservative;
}

bool OnlineController::allowed(const Configuration& c) const {
  for (const auto& [name, value] : pins_) {
    const Knob* k = space_.knob(name);
    if (k != nullptr && !sameValue(valueOf(c, *k), value))
      return false;
  }
  return std::find(excluded_.begin(), excluded_.end(), c) == excluded_.end();
}

namespace {

// Where knob `knob`'s value in `c` lies among the knob's values (values.size(): none of them).
size_t indexOf(const Configuration& c, const Knob& knob) {
  const auto at = std::find_if(knob.values.begin(), knob.values.end(),
                               [&](double v) { return sameValue(v, valueOf(c, knob)); });
  return static_cast<size_t>(at - knob.values.begin());
}

}  // namespace

bool OnlineController::notFitting(const Configuration& c, const std::string& bucket) const {
  const auto found = notFitting_.find(bucket);
  if (found == notFitting_.end())
    return false;
  const Knob* budget = space_.knob("remat_budget");
  const auto budgetOf = [&](const Configuration& x) {
    return budget != nullptr ? valueOf(x, *budget) : 0.0;
  };
  return std::any_of(found->second.begin(), found->second.end(), [&](const Configuration& r) {
    return c.microbatches <= r.microbatches && budgetOf(c) <= budgetOf(r) + 1e-9 &&
           c.bindingExplore == r.bindingExplore;
  });
}

void OnlineController::notFit(Decision& decision, const std::string& why,
                              std::optional<int> ranMicrobatches) {
  std::vector<Configuration>& records = notFitting_[decision.bucket];
  if (!notFitting(decision.chosen, decision.bucket))
    records.push_back(decision.chosen);
  decision.violation = "the memory budget: " + why +
                       "; on this bucket, no configuration holding as much runs from now on";
  // Note [Divergence constraint]: the next step is judged against what this one ran.
  if (ranMicrobatches && *ranMicrobatches != decision.chosen.microbatches) {
    decision.ran = decision.chosen;
    decision.ran->microbatches = *ranMicrobatches;
  }
}

bool OnlineController::newBudget(const ConfigSpace& run, bool grew) {
  // The knobs as this controller has them (the run's space may have gained a micro-batch count
  // it split to), standing where the run's stand, but for remat_budget, which follows the budget.
  std::vector<Knob> knobs;
  for (const Knob& k : run.knobs()) {
    const Knob* own = k.name == "remat_budget" ? nullptr : space_.knob(k.name);
    Knob kept = own != nullptr ? *own : k;
    if (std::any_of(kept.values.begin(), kept.values.end(),
                    [&](double v) { return sameValue(v, k.current); }))
      kept.current = k.current;
    knobs.push_back(std::move(kept));
  }
  ConfigSpace space(std::move(knobs));
  const Knob* was = space_.knob("remat_budget");
  const Knob* now = space.knob("remat_budget");
  const bool same =
      (was == nullptr) == (now == nullptr) &&
      (was == nullptr || std::equal(was->values.begin(), was->values.end(), now->values.begin(),
                                    now->values.end(), sameValue)) &&
      space.knobs().size() == space_.knobs().size();
  // What did not fit: a record of the old space, as the new one has it. A record at a share of
  // its own holds whatever the session's budget (a share is of the plain peak); one at the
  // session's budget (the old knob's last value, or no knob) holds under a budget no larger, at
  // the largest share the new space takes below it, and is dropped under a larger one.
  const auto carried = [&](Configuration c) -> std::optional<Configuration> {
    const bool sessions = was == nullptr || sameValue(valueOf(c, *was), was->values.back());
    if (sessions && grew)
      return std::nullopt;
    const double held = sessions ? std::numeric_limits<double>::infinity() : valueOf(c, *was);
    if (now != nullptr) {
      const auto below = std::find_if(now->values.rbegin(), now->values.rend(),
                                      [&](double v) { return v <= held + 1e-9; });
      if (below == now->values.rend())
        return std::nullopt;  // every budget the new space takes is larger
      c.rematBudget = *below;
    } else {
      if (!sessions)
        return std::nullopt;  // a share: nothing is known of it against megabytes
      c.rematBudget.reset();
    }
    return !space.outside(c) ? std::optional<Configuration>(c) : std::nullopt;
  };
  std::map<std::string, std::vector<Configuration>> notFitting;
  for (const auto& [bucket, records] : notFitting_) {
    for (const Configuration& r : records) {
      if (const std::optional<Configuration> c = carried(r))
        notFitting[bucket].push_back(*c);
    }
  }
  if (same) {
    space_ = std::move(space);  // where the knobs stand
    notFitting_ = std::move(notFitting);
    return false;
  }
  OnlineController next(std::move(space), options_);
  const auto inside = [&](const Configuration& c) { return !next.space_.outside(c); };
  next.rng_ = rng_;
  next.signalReference_ = signalReference_;
  for (const auto& [name, value] : pins_) {
    const Knob* k = next.space_.knob(name);
    if (k != nullptr && std::any_of(k->values.begin(), k->values.end(),
                                    [&](double v) { return sameValue(v, value); }))
      next.pins_[name] = value;
  }
  std::copy_if(excluded_.begin(), excluded_.end(), std::back_inserter(next.excluded_), inside);
  // The pins and exclusions leave something to run (they did before), or the pins go.
  if (std::none_of(next.grid_.begin(), next.grid_.end(),
                   [&](const Configuration& c) { return next.allowed(c); }))
    next.pins_.clear();
  next.notFitting_ = std::move(notFitting);
  if (next.space_.knob("remat_budget") != nullptr)
    next.refusedBudget_ = refusedBudget_;
  next.lossAverage_ = lossAverage_;
  next.losses_ = losses_;
  next.lastDiverged_ = lastDiverged_;
  next.highInARow_ = highInARow_;
  if (blamed_ && inside(*blamed_))
    next.blamed_ = blamed_;
  next.log_ = std::move(log_);
  next.decisions_ = decisions_;
  *this = std::move(next);
  return true;
}

void OnlineController::refused(Decision& decision, const Configuration& ran, const std::string& why,
                               std::optional<double> rematBudget) {
  if (rematBudget)
    refusedBudget_ = std::max(refusedBudget_.value_or(*rematBudget), *rematBudget);
  decision.heldBack = decision.chosen.text() + ": the run refused it: " + why;
  decision.chosen = ran;
  decision.explored = false;
  decision.drivers.clear();
  std::vector<double> batchSignals;
  for (const auto& [name, value] : decision.batchSignals)
    batchSignals.push_back(value);
  decision.predictedSamplesPerSecond =
      predictedSamplesPerSecond(decision.chosen, decision.bucket, batchSignals);
}

bool OnlineController::outward(const Configuration& c) const {
  if (!options_.outward || model_.observations() == 0)
    return true;
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) {
    if (!model_.trended(k) || pins_.count(knobs[k].name) != 0)
      continue;
    const size_t i = indexOf(c, knobs[k]);
    if (i == knobs[k].values.size())
      continue;
    const size_t from = model_.knobOffset(k);
    const bool near = model_.learnt(from + i) || (i > 0 && model_.learnt(from + i - 1)) ||
                      (i + 1 < knobs[k].values.size() && model_.learnt(from + i + 1));
    if (!near)
      return false;
  }
  return true;
}

bool OnlineController::measured(const Configuration& c) const {
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) {
    if (!model_.trended(k))
      continue;
    const size_t i = indexOf(c, knobs[k]);
    if (i == knobs[k].values.size() || !model_.learnt(model_.knobOffset(k) + i))
      return false;
  }
  return true;
}

bool OnlineController::nextTo(const Configuration& c, const Configuration& leader) const {
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) {
    if (!model_.trended(k) || pins_.count(knobs[k].name) != 0)
      continue;
    const size_t i = indexOf(c, knobs[k]), l = indexOf(leader, knobs[k]);
    if (i == knobs[k].values.size() || l == knobs[k].values.size())
      continue;
    if (i + 1 < l || l + 1 < i)
      return false;
  }
  return true;
}

std::vector<double> OnlineController::scaled(const std::vector<double>& batchSignals) const {
  std::vector<double> z(options_.signalNames.size(), 0.0);
  for (size_t j = 0; j < z.size() && j < batchSignals.size() && j < signalReference_.size(); ++j) {
    if (batchSignals[j] >= 0 && signalReference_[j] >= 0)
      z[j] = std::log((batchSignals[j] + 1) / (signalReference_[j] + 1));
  }
  return z;
}

double OnlineController::predictedSamplesPerSecond(const Configuration& c,
                                                   const std::string& bucket,
                                                   const std::vector<double>& batchSignals) const {
  if (model_.observations() == 0)
    return 0;
  return std::exp(
      -model_.predict(model_.features(c, bucket, scaled(batchSignals)), model_.posterior().mean));
}

std::vector<Driver> OnlineController::drivers(const Configuration& chosen,
                                              const Configuration& other,
                                              const std::vector<double>& z,
                                              const std::vector<double>& theta) const {
  // The predicted log seconds per sample of `other` less `chosen`'s, split by term: a knob's
  // terms where the two differ, each signal's interaction terms (the signal's own term and the
  // context's are the same for both).
  std::vector<Driver> out;
  const std::vector<double> xc = model_.features(chosen, "", z);
  const std::vector<double> xo = model_.features(other, "", z);
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) {
    const double vc = valueOf(chosen, knobs[k]), vo = valueOf(other, knobs[k]);
    if (sameValue(vc, vo))
      continue;
    double gain = 0;
    for (size_t i = 0; i < model_.knobWidth(k); ++i) {
      const size_t at = model_.knobOffset(k) + i;
      gain += (xo[at] - xc[at]) * theta[at];
    }
    out.push_back(
        {knobs[k].name + " " + number(vc) + " rather than " + number(vo), std::exp(gain)});
  }
  for (size_t j = 0; j < z.size(); ++j) {
    if (z[j] == 0)
      continue;
    double gain = 0;
    const size_t from = model_.interactionOffset(j);
    for (size_t i = from; i < from + model_.knobTerms(); ++i)
      gain += (xo[i] - xc[i]) * theta[i];
    const double value = std::exp(z[j]) * (signalReference_[j] + 1) - 1;
    out.push_back({options_.signalNames[j] + " " + number(std::round(value)), std::exp(gain)});
  }
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const Driver& d) { return std::abs(std::log(d.factor)) < 1e-3; }),
            out.end());
  std::sort(out.begin(), out.end(), [](const Driver& a, const Driver& b) {
    return std::abs(std::log(a.factor)) > std::abs(std::log(b.factor));
  });
  return out;
}

Decision OnlineController::choose(int64_t step, const std::string& bucket,
                                  const std::vector<double>& batchSignals,
                                  const std::map<std::string, double>& idle) {
  model_.addContext(bucket);
  if (signalReference_.empty()) {
    signalReference_.assign(options_.signalNames.size(), -1.0);
    for (size_t j = 0; j < signalReference_.size() && j < batchSignals.size(); ++j)
      signalReference_[j] = batchSignals[j];
  }
  const std::vector<double> z = scaled(batchSignals);
  Decision d;
  d.step = step;
  d.bucket = bucket;
  for (size_t j = 0; j < options_.signalNames.size() && j < batchSignals.size(); ++j)
    d.batchSignals.emplace_back(options_.signalNames[j], batchSignals[j]);
  // A draw of the terms from their posterior (Note [Posterior of the terms]).
  const TermPosterior& post = model_.posterior();
  const std::vector<double>& theta = post.mean;
  const std::vector<double> draw = post.draw(rng_);
  const int64_t observations = model_.observations();

  // What may run: the allowed configurations that are not known not to fit this bucket (Note
  // [Predicted not to fit]) nor of a budget the run refused (where none is, below), of them those
  // outward (Note [Explored outward]) and next to the leader (Note [Around the leader]: of the
  // configurations whose ordinal values were all learnt, the fastest by the mean for this batch)
  // when there are any. Note [A knob that changes nothing]: an idle knob of the space (not pinned)
  // keeps its value, unless that leaves nothing allowed.
  std::vector<std::pair<const Knob*, double>> kept;
  for (const auto& [name, value] : idle) {
    const Knob* k = space_.knob(name);
    if (k != nullptr && pins_.count(name) == 0)
      kept.emplace_back(k, value);
  }
  const auto keepsIdle = [&](const Configuration& c) {
    return std::all_of(kept.begin(), kept.end(), [&](const std::pair<const Knob*, double>& k) {
      return sameValue(valueOf(c, *k.first), k.second);
    });
  };
  const bool idleAllows =
      !kept.empty() && std::any_of(grid_.begin(), grid_.end(), [&](const Configuration& c) {
        return allowed(c) && keepsIdle(c);
      });
  // Note [A budget the run refused]: ruled out as what does not fit is.
  const Knob* budget = space_.knob("remat_budget");
  const auto refusedByRun = [&](const Configuration& c) {
    return budget != nullptr && refusedBudget_ && valueOf(c, *budget) <= *refusedBudget_ + 1e-9;
  };
  // Where nothing the pins allow passes both records, they are let go one at a time: what did not
  // fit first, then the budget refused, then both (Note [A budget the run refused]). Each pair:
  // whether what did not fit is held to, and whether the budget refused is.
  std::vector<bool> usable(grid_.size());
  const std::pair<bool, bool> holding[] = {
      {true, true}, {false, true}, {true, false}, {false, false}};
  for (const auto& [byFit, byRefusal] : holding) {
    bool any = false;
    for (size_t i = 0; i < grid_.size(); ++i) {
      usable[i] = allowed(grid_[i]) && (!idleAllows || keepsIdle(grid_[i])) &&
                  !(byFit && notFitting(grid_[i], bucket)) &&
                  !(byRefusal && refusedByRun(grid_[i]));
      any = any || usable[i];
    }
    if (any)
      break;
  }
  // Each usable configuration's predicted log seconds per sample for this batch, by the mean and
  // by the draw.
  std::vector<double> mean(grid_.size()), byDraw(grid_.size()), x;
  for (size_t i = 0; i < grid_.size(); ++i) {
    if (!usable[i])
      continue;
    model_.features(grid_[i], bucket, z, x);
    mean[i] = model_.predict(x, theta);
    byDraw[i] = dot(x, draw);
  }
  const Configuration* leader = nullptr;
  if (options_.aroundLeader && observations > 0) {
    double leaderMean = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < grid_.size(); ++i) {
      if (usable[i] && mean[i] < leaderMean && measured(grid_[i])) {
        leaderMean = mean[i];
        leader = &grid_[i];
      }
    }
  }
  std::vector<bool> eligible(grid_.size());
  bool anyOutward = false;
  for (size_t i = 0; i < grid_.size(); ++i) {
    eligible[i] =
        usable[i] && outward(grid_[i]) && (leader == nullptr || nextTo(grid_[i], *leader));
    anyOutward = anyOutward || eligible[i];
  }
  for (size_t i = 0; i < grid_.size() && !anyOutward; ++i)
    eligible[i] = usable[i];

  std::vector<std::pair<double, size_t>> byMean;
  size_t best = grid_.size();
  double bestDrawn = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < grid_.size(); ++i) {
    if (!eligible[i])
      continue;
    byMean.emplace_back(mean[i], i);
    if (byDraw[i] < bestDrawn) {
      bestDrawn = byDraw[i];
      best = i;
    }
  }
  std::sort(byMean.begin(), byMean.end());
  if (observations == 0) {
    // Nothing measured: the configuration the run began with, or where the pins or Note
    // [Predicted not to fit] rule it out, the one nearest to it along the knobs.
    const Configuration current = space_.current();
    size_t nearest = std::numeric_limits<size_t>::max();
    for (size_t i = 0; i < grid_.size(); ++i) {
      if (!usable[i])
        continue;
      size_t distance = 0;
      for (const Knob& knob : space_.knobs()) {
        const size_t a = indexOf(grid_[i], knob), b = indexOf(current, knob);
        distance += a > b ? a - b : b - a;
      }
      if (distance < nearest) {
        nearest = distance;
        best = i;
      }
    }
  }
  if (best == grid_.size())  // the pins allow nothing in the grid
    throw std::invalid_argument("the pinned knobs leave no configuration of the space");
  if (options_.conservative > 0 && observations > 0 && observed_ >= options_.warmupSteps &&
      !affordable(best, bucket, z, post)) {
    // Note [Conservative exploration]: the mean's best if the run can afford it, else the
    // baseline (when the pins and exclusions allow it).
    const size_t drawn = best;
    const auto baseline = std::find(grid_.begin(), grid_.end(), baseline_);
    if (affordable(byMean.front().second, bucket, z, post))
      best = byMean.front().second;
    else if (baseline != grid_.end() && usable[static_cast<size_t>(baseline - grid_.begin())])
      best = static_cast<size_t>(baseline - grid_.begin());
    else
      best = byMean.front().second;
    if (best != drawn) {
      d.heldBack = grid_[drawn].text() +
                   ": as slow as it may be, it could take the run "
                   "below " +
                   number(options_.conservative) + " of the throughput of " + baseline_.text() +
                   " since the warm-up";
    }
  }
  d.chosen = grid_[best];
  if (idleAllows) {
    for (const auto& [knob, value] : kept)
      d.idle.emplace_back(knob->name, value);
  }
  // Held back to the baseline is not exploring.
  d.explored = observations > 0 && byMean.front().second != best && d.heldBack.empty();
  if (observations > 0)
    d.predictedSamplesPerSecond = std::exp(-mean[best]);
  for (const auto& [value, i] : byMean) {
    if (d.alternatives.size() >= static_cast<size_t>(options_.alternatives))
      break;
    if (i != best && observations > 0)
      d.alternatives.emplace_back(grid_[i], std::exp(-value));
  }
  if (!d.alternatives.empty())
    d.drivers = drivers(d.chosen, d.alternatives.front().first, z, theta);
  return d;
}

void OnlineController::checkLoss(Decision& decision, double loss) {
  const bool finite = std::isfinite(loss);
  // Over the average by (divergence - 1) times its size: the same bound for an average above
  // zero, and one for an average below it (a `loss.method` may give negative losses).
  const bool diverged =
      !finite || (losses_ >= options_.divergenceWarmup && lossAverage_ != 0 &&
                  loss - lossAverage_ > (options_.divergence - 1) * std::abs(lossAverage_));
  if (!diverged) {
    lossAverage_ = losses_ == 0 ? loss : 0.9 * lossAverage_ + 0.1 * loss;
    ++losses_;
    lastDiverged_ = false;
    highInARow_ = 0;
    blamed_.reset();
    return;
  }
  // After the memory budget's violation (Trainer's notFit), not in its place.
  decision.violation += (decision.violation.empty() ? "" : "; ") +
                        std::string("the loss diverged (") + number(loss) +
                        (losses_ > 0 ? " against its average " + number(lossAverage_) : "") + ")";
  highInARow_ = finite ? highInARow_ + 1 : 0;
  const bool changed = !log_.empty() && ranBy(log_.back()) != ranBy(decision);
  const bool broke = changed && !lastDiverged_;
  lastDiverged_ = true;
  if (highInARow_ >= options_.divergenceWarmup) {
    // Finite and high for as many steps as the average waits for: the loss's new level, which
    // the average starts again from.
    decision.violation += ", " + std::to_string(highInARow_) +
                          " steps in a row: a new level, its average starts again";
    losses_ = 0;
    highInARow_ = 0;
    if (blamed_) {
      // It was blamed for a jump the loss then kept under the configuration before it.
      excluded_.erase(std::remove(excluded_.begin(), excluded_.end(), *blamed_), excluded_.end());
      decision.violation += "; the configuration excluded when it began is allowed again";
      blamed_.reset();
    }
  }
  if (!broke) {
    decision.violation += log_.empty() ? "; on the run's first step: not a change's"
                          : changed    ? "; as on the step before: not the configuration's"
                                    : "; under the configuration that ran before: not a change's";
    return;
  }
  // The step before ran another configuration, not excluded (it did not diverge): one is left.
  // What the controller chose is what it can keep from running: a split count (2 split to 3) is
  // no configuration of its grid, and excluded would bar nothing.
  excluded_.push_back(decision.chosen);
  blamed_ = decision.chosen;
  decision.violation += "; when the configuration changed: excluded from now on";
  if (std::none_of(grid_.begin(), grid_.end(),
                   [&](const Configuration& c) { return allowed(c); })) {
    // The pins held it to what is now excluded: the constraint wins.
    std::string released;
    for (const auto& [name, value] : pins_)
      released += (released.empty() ? "" : ", ") + name + " " + number(value);
    pins_.clear();
    decision.violation += "; pins released: " + released;
  }
}

void OnlineController::observe(Decision decision, double stepSeconds, int64_t samples,
                               std::optional<double> loss) {
  if (loss)
    checkLoss(decision, *loss);
  // A step of 0 s, or of no finite time, is logged, not learnt from (its log would poison every
  // posterior); nor is a step whose loss diverged.
  const bool timed = std::isfinite(stepSeconds) && stepSeconds > 0 && samples > 0;
  // Note [Conservative exploration]: the time since the warm-up, and the baseline's on the same
  // batches (its mean before this step teaches the model, where it did not run).
  if (timed && observed_ >= options_.warmupSteps) {
    // The baseline is taken to have been as much faster than the step's configuration as the
    // model allows: a saving is counted only as far as the model is sure of it.
    double baseline = stepSeconds;
    if (decision.chosen != baseline_ && model_.observations() > 0) {
      std::vector<double> batchSignals;
      for (const auto& [name, value] : decision.batchSignals)
        batchSignals.push_back(value);
      baseline = stepSeconds * std::exp(-slowerAtMost(decision.chosen, decision.bucket,
                                                      scaled(batchSignals), model_.posterior()));
    }
    spent_ += stepSeconds;
    baselineSpent_ += baseline;
  }
  ++observed_;
  if (timed)
    lastSamples_ = samples;
  if (timed) {
    decision.samplesPerSecond = static_cast<double>(samples) / stepSeconds;
    if (decision.violation.empty()) {
      model_.addContext(decision.bucket);
      std::vector<double> batchSignals;
      for (const auto& [name, value] : decision.batchSignals)
        batchSignals.push_back(value);
      const int64_t shifts = model_.shifts();
      model_.observe(model_.features(decision.chosen, decision.bucket, scaled(batchSignals)),
                     std::log(stepSeconds / static_cast<double>(samples)));
      decision.levelMoved = model_.shifts() != shifts;
    }
  }
  log_.push_back(std::move(decision));
  ++decisions_;
  while (log_.size() > std::max<size_t>(options_.logKept, 1))
    log_.pop_front();
}

void OnlineController::pin(const std::string& name, double value) {
  const Knob* k = space_.knob(name);
  if (k == nullptr)
    throw std::invalid_argument("no knob " + name + " in this run's configuration space");
  if (std::none_of(k->values.begin(), k->values.end(),
                   [&](double allowedValue) { return sameValue(allowedValue, value); }))
    throw std::invalid_argument("knob " + name + " cannot take " + std::to_string(value));
  std::map<std::string, double> before = pins_;
  pins_[name] = value;
  if (std::none_of(grid_.begin(), grid_.end(),
                   [&](const Configuration& c) { return allowed(c); })) {
    pins_ = std::move(before);
    throw std::invalid_argument("knob " + name + " " + number(value) +
                                ": every configuration with it (and the other pins) broke a "
                                "constraint");
  }
}

void OnlineController::unpin(const std::string& name) {
  pins_.erase(name);
}

}  // namespace symtune::control
