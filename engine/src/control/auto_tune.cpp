#include "symtune/control/auto_tune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "symtune/control/additive_model.h"

namespace symtune::control {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// The log of an estimate's relative seconds; nullopt where it is no estimate: not finite or not
// above 0. Taken as it came, a NaN made the configuration's offset NaN (the first's, every
// offset), and a prediction of NaN is never likely to beat the best: until 2026-12-07 the search
// stopped there as converged, and measured, such a configuration put NaN in the model. An infinite
// one made the offsets infinite, and 0 or below was taken as 1e-12 times the first's time.
std::optional<double> logRelative(const Estimate& e) {
  if (!(std::isfinite(e.relativeSeconds) && e.relativeSeconds > 0))
    return std::nullopt;
  return std::log(e.relativeSeconds);
}

// A tree node: the knobs above it fixed (Note [auto_tune]).
struct Node {
  std::vector<size_t> children;
  std::vector<size_t> leaves;  // the configurations below it (indices into the grid)
  std::optional<size_t> leaf;  // a configuration: the node where every knob is fixed
  int64_t visits = 0;
  double total = 0;  // of the rewards backed up through it
};

class Search {
 public:
  Search(const ConfigSpace& space, const TuneOptions& options)
      : options_(options),
        grid_(space.grid()),
        model_(space, options.priorVariance, options.priorNoise),
        rng_(options.seed) {
    feasible_.assign(grid_.size(), true);
    measured_.assign(grid_.size(), std::nullopt);
    offset_.assign(grid_.size(), 0.0);
    for (const Configuration& c : grid_)
      features_.push_back(model_.features(c));
    nodes_.emplace_back();
    build(space, 0, 0, Configuration{});
  }

  const std::vector<Configuration>& grid() const { return grid_; }

  std::optional<size_t> indexOf(const Configuration& c) const {
    const auto at = std::find(grid_.begin(), grid_.end(), c);
    return at == grid_.end() ? std::nullopt : std::optional<size_t>(at - grid_.begin());
  }

  void prune(size_t leaf) { feasible_[leaf] = false; }
  TermPosterior posterior() const { return model_.posterior(); }
  bool learnt() const { return model_.observations() > 0; }
  bool feasible(size_t leaf) const { return feasible_[leaf]; }
  bool measured(size_t leaf) const { return measured_[leaf].has_value(); }
  void setOffset(size_t leaf, double logRelative) { offset_[leaf] = logRelative; }

  void learn(size_t leaf, double logSecondsPerSample) {
    measured_[leaf] = logSecondsPerSample;
    model_.observe(features_[leaf], logSecondsPerSample - offset_[leaf]);
    best_ = std::min(best_.value_or(logSecondsPerSample), logSecondsPerSample);
  }

  // The model's mean log seconds per sample of `leaf`, and its standard deviation.
  std::pair<double, double> predicted(size_t leaf, const TermPosterior& post) const {
    return {offset_[leaf] + model_.predict(features_[leaf], post.mean),
            std::sqrt(post.variance(features_[leaf]))};
  }

  std::vector<size_t> unmeasured() const {
    std::vector<size_t> out;
    for (size_t i = 0; i < grid_.size(); ++i) {
      if (feasible_[i] && !measured_[i])
        out.push_back(i);
    }
    return out;
  }

  // Whether some unmeasured configuration may still beat the best measured by `enough`.
  bool promising(const TermPosterior& post) const {
    if (!best_)
      return true;
    const double target = *best_ + std::log(1 - options_.enough);
    for (size_t leaf : unmeasured()) {
      const auto [mean, sd] = predicted(leaf, post);
      const double p = 0.5 * std::erfc((mean - target) / (std::sqrt(2.0) * std::max(sd, 1e-9)));
      if (p >= options_.stopProbability)
        return true;
    }
    return false;
  }

  // `options_.simulations` descents, then the configuration to measure next (none when nothing
  // unmeasured is left).
  std::optional<size_t> next(const TermPosterior& post, int64_t* simulations) {
    if (unmeasured().empty())
      return std::nullopt;
    for (Node& n : nodes_) {
      n.visits = 0;
      n.total = 0;
    }
    for (int s = 0; s < options_.simulations; ++s) {
      simulate(post.draw(rng_));
      ++*simulations;
    }
    size_t at = 0;
    while (!nodes_[at].leaf) {
      std::optional<size_t> pick;
      for (size_t child : nodes_[at].children) {
        if (!holdsUnmeasured(child))
          continue;
        if (!pick || nodes_[child].visits > nodes_[*pick].visits ||
            (nodes_[child].visits == nodes_[*pick].visits && mean(child) > mean(*pick)))
          pick = child;
      }
      at = *pick;  // the root holds an unmeasured leaf, so each node on the way has a child that
                   // does
    }
    return nodes_[at].leaf;
  }

 private:
  void build(const ConfigSpace& space, size_t node, size_t depth, Configuration c) {
    const auto& knobs = space.knobs();
    if (depth == knobs.size()) {
      const auto leaf = indexOf(c);
      nodes_[node].leaf = leaf;
      nodes_[node].leaves = {*leaf};
      return;
    }
    for (double v : knobs[depth].values) {
      Configuration below = c;
      setValue(below, knobs[depth].name, v);
      const size_t child = nodes_.size();
      nodes_.emplace_back();
      nodes_[node].children.push_back(child);
      build(space, child, depth + 1, below);
      const std::vector<size_t> leaves = nodes_[child].leaves;
      nodes_[node].leaves.insert(nodes_[node].leaves.end(), leaves.begin(), leaves.end());
    }
  }

  bool open(size_t node) const {
    const auto& leaves = nodes_[node].leaves;
    return std::any_of(leaves.begin(), leaves.end(), [&](size_t l) { return feasible_[l]; });
  }
  bool holdsUnmeasured(size_t node) const {
    const auto& leaves = nodes_[node].leaves;
    return std::any_of(leaves.begin(), leaves.end(),
                       [&](size_t l) { return feasible_[l] && !measured_[l]; });
  }
  double mean(size_t node) const {
    return nodes_[node].visits == 0 ? 0 : nodes_[node].total / nodes_[node].visits;
  }

  // One descent: UCT down to a node met for the first time (or a leaf), a random rollout below
  // it, and its reward backed up the path.
  void simulate(const std::vector<double>& terms) {
    std::vector<size_t> path{0};
    size_t at = 0;
    while (!nodes_[at].leaf) {
      std::vector<size_t> fresh, alive;
      for (size_t child : nodes_[at].children) {
        if (!open(child))
          continue;
        alive.push_back(child);
        if (nodes_[child].visits == 0)
          fresh.push_back(child);
      }
      if (alive.empty())
        return;  // nothing feasible: the root's own check keeps the search from here
      if (!fresh.empty()) {
        at = fresh[std::uniform_int_distribution<size_t>(0, fresh.size() - 1)(rng_)];
        path.push_back(at);
        break;
      }
      const double logN = std::log(static_cast<double>(nodes_[at].visits));
      size_t best = alive.front();
      double bestScore = -std::numeric_limits<double>::infinity();
      for (size_t child : alive) {
        const double score =
            mean(child) +
            options_.exploration * std::sqrt(logN / static_cast<double>(nodes_[child].visits));
        if (score > bestScore) {
          bestScore = score;
          best = child;
        }
      }
      at = best;
      path.push_back(at);
    }
    // The rollout: a configuration below `at`, at random among the feasible.
    std::vector<size_t> below;
    for (size_t l : nodes_[at].leaves) {
      if (feasible_[l])
        below.push_back(l);
    }
    const size_t leaf = below[std::uniform_int_distribution<size_t>(0, below.size() - 1)(rng_)];
    const double logTime =
        measured_[leaf] ? *measured_[leaf] : offset_[leaf] + model_.predict(features_[leaf], terms);
    // Relative to the best measured (or to the first's reference before anything is).
    const double reward =
        std::clamp(std::exp(best_.value_or(model_.reference()) - logTime) - 1, 0.0, 1.0);
    for (size_t n : path) {
      ++nodes_[n].visits;
      nodes_[n].total += reward;
    }
  }

  TuneOptions options_;
  std::vector<Configuration> grid_;
  AdditiveModel model_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> features_;
  std::vector<bool> feasible_;
  std::vector<std::optional<double>> measured_;  // log seconds per sample
  std::vector<double> offset_;                   // the cost model's log relative seconds
  std::optional<double> best_;                   // the smallest measured log seconds per sample
  std::vector<Node> nodes_;                      // nodes_[0]: the root
};

}  // namespace

AutoTuner::AutoTuner(ConfigSpace space, TuneOptions options)
    : space_(std::move(space)), options_(options) {
  if (space_.knobs().empty() || space_.grid().empty())
    throw std::invalid_argument("auto_tune needs a configuration space with knobs");
  if (options_.evaluations < 1 || options_.simulations < 1)
    throw std::invalid_argument("auto_tune needs at least one evaluation and one simulation");
  if (!(options_.priorVariance > 0) || !(options_.priorNoise > 0) || options_.exploration < 0 ||
      !(options_.enough >= 0 && options_.enough < 1) ||
      !(options_.stopProbability >= 0 && options_.stopProbability <= 1))
    throw std::invalid_argument("auto_tune: an option out of range");
  // The first evaluation is the configuration the space is at (Note [auto_tune]): each knob's
  // current value one of its values, held as the grid holds it. Until 2026-12-07 a space at a
  // value its knob did not take had the grid's first configuration measured in its place.
  std::vector<Knob> knobs = space_.knobs();
  for (Knob& k : knobs) {
    const auto at = std::find_if(k.values.begin(), k.values.end(),
                                 [&](double v) { return sameValue(v, k.current); });
    if (at == k.values.end()) {
      std::string values;
      for (const double v : k.values)
        values += (values.empty() ? "" : ", ") + number(v);
      throw std::invalid_argument("auto_tune: knob " + k.name + " is at " + number(k.current) +
                                  ", not one of its values " + values +
                                  ": the search's first evaluation is the configuration the "
                                  "space is at");
    }
    k.current = *at;
  }
  space_ = ConfigSpace(std::move(knobs));
}

TuneResult AutoTuner::run(const Evaluator& evaluate, const Estimator& estimate,
                          const std::function<void(const Evaluation&)>& progress) {
  const auto started = Clock::now();
  Search search(space_, options_);
  TuneResult result;
  result.configurations = static_cast<int64_t>(search.grid().size());

  // Measures grid()[leaf]; returns whether it ran out of memory.
  const auto measure = [&](size_t leaf, double predicted) {
    Evaluation e;
    e.configuration = search.grid()[leaf];
    e.predictedSamplesPerSecond = predicted;
    const auto begun = Clock::now();
    bool outOfMemory = false;
    try {
      const Measurement m = evaluate(e.configuration);
      e.samplesPerSecond = m.samplesPerSecond;
      e.steps = m.steps;
      e.failed = m.failed;
      outOfMemory = !m.failed.empty() && m.outOfMemory;
      if (e.failed.empty() && !(m.samplesPerSecond > 0 && std::isfinite(m.samplesPerSecond)))
        e.failed = "measured no throughput";
    } catch (const std::exception& error) {
      e.failed = error.what();
    }
    e.seconds = secondsSince(begun);
    result.steps += e.steps;
    if (e.failed.empty())
      search.learn(leaf, -std::log(e.samplesPerSecond));
    else
      search.prune(leaf);
    if (outOfMemory) {
      // What needs at least as much memory fails too: as many micro-batches or fewer, no more
      // budget (a smaller one holds the step to less), and the same binding_explore. The binder
      // that measures may bind leaner candidates than the ATen ops it binds without measuring (a
      // memory slack's), or fatter ones (a channels-last copy), so a configuration of the other
      // value says nothing of it: under 0.6 of early exit's plain peak, binding_explore 0 ran out
      // and 1 fits at 0.42. The thread count is taken to change what a step holds too little to
      // matter.
      const Knob* budget = space_.knob("remat_budget");
      const auto budgetOf = [&](const Configuration& c) {
        return budget == nullptr ? 0.0 : valueOf(c, *budget);
      };
      for (size_t other = 0; other < search.grid().size(); ++other) {
        const Configuration& c = search.grid()[other];
        // One that ran (and fitted: a leaf that ran out is pruned) stays what it measured.
        if (other == leaf || !search.feasible(other) || search.measured(other) ||
            c.microbatches > e.configuration.microbatches ||
            budgetOf(c) > budgetOf(e.configuration) + 1e-9 ||
            c.bindingExplore != e.configuration.bindingExplore)
          continue;
        search.prune(other);
        result.pruned.emplace_back(
            c, "needs at least the memory of " + e.configuration.text() + ", which ran out of it");
      }
    }
    result.evaluations.push_back(e);
    if (progress)
      progress(e);
    return outOfMemory;
  };

  // The first: the configuration the space is at, what the search has to beat (in the grid: the
  // constructor holds each knob at one of its values).
  const size_t first = search.indexOf(space_.current()).value();
  const bool firstRanOut = measure(first, 0);

  if (estimate) {
    // Relative to the first's own estimate, which is 1 by Estimate's definition where it gives
    // none. A configuration with no estimate keeps an offset of 0, as without an estimator.
    const double reference = logRelative(estimate(search.grid()[first])).value_or(0.0);
    for (size_t leaf = 0; leaf < search.grid().size(); ++leaf) {
      if (leaf == first)
        continue;
      const Estimate e = estimate(search.grid()[leaf]);
      if (!search.feasible(leaf))
        continue;  // pruned already, by what the first ran out of
      if (e.infeasible) {
        search.prune(leaf);
        result.pruned.emplace_back(search.grid()[leaf], *e.infeasible);
        continue;
      }
      if (const std::optional<double> logSeconds = logRelative(e))
        search.setOffset(leaf, *logSeconds - reference);
    }
  }

  // Note [A smaller remat budget is never faster]
  // Under a larger remat budget the planner may choose any plan a smaller one allows, and it
  // chooses the cheapest that fits: it recomputes no more, and no step fits a smaller budget that
  // does not fit the larger. The session's budget is the constraint and every value of the knob
  // keeps to it, so a configuration whose budget is below the knob's largest value, with its
  // twin at the largest still feasible, is dominated by that twin: pruned before anything
  // measures it (the first evaluation, the run as configured, excepted). Head to head, for 32
  // steps side by side, such twins differed by noise or in the larger's favour (the ResNet at
  // 52.0 MB 1.19x itself at 26.0, Transformer-XL's whole batch at 111.3 MB 1.06x itself at 74.2,
  // the MoE within 1 %), where the grid's eight steps or the tuner's own side by side had put the
  // smaller first (docs/benchmarks.md, "auto_tune beside the grid, the order shuffled"),
  // and the tuner spent its evaluations telling such twins apart. Should the twin fail, its
  // smaller budgets stay pruned: what runs out of memory under the larger budget does under the
  // smaller, and a failure that is not the budget's is the smaller's too.
  if (const Knob* budget = space_.knob("remat_budget");
      budget != nullptr && budget->values.size() > 1) {
    const double largest = *std::max_element(budget->values.begin(), budget->values.end());
    for (size_t leaf = 0; leaf < search.grid().size(); ++leaf) {
      const Configuration& c = search.grid()[leaf];
      if (leaf == first || !search.feasible(leaf) || valueOf(c, *budget) >= largest - 1e-9)
        continue;
      Configuration twin = c;
      setValue(twin, budget->name, largest);
      const std::optional<size_t> at = search.indexOf(twin);
      if (!at || !search.feasible(*at))
        continue;
      search.prune(leaf);
      result.pruned.emplace_back(
          c, "dominated by " + twin.text() + ": a larger remat budget recomputes no more");
    }
  }

  // It ran out of memory: the next is the first split into the fewest micro-batches more that may
  // run, its other knobs as they are (Note [auto_tune]).
  if (firstRanOut && result.evaluations.size() < static_cast<size_t>(options_.evaluations)) {
    const Configuration& own = search.grid()[first];
    std::optional<size_t> split;
    for (size_t leaf = 0; leaf < search.grid().size(); ++leaf) {
      Configuration c = search.grid()[leaf];
      if (!search.feasible(leaf) || c.microbatches <= own.microbatches)
        continue;
      const int count = c.microbatches;
      c.microbatches = own.microbatches;
      if (c == own && (!split || count < search.grid()[*split].microbatches))
        split = leaf;
    }
    // The split as it is may be pruned as dominated by its twin at the knob's largest budget
    // (above): then that twin, which a larger budget makes no slower (until 2026-12-07 nothing
    // split was measured second when the session's budget was below the largest).
    const Knob* budget = space_.knob("remat_budget");
    if (!split && budget != nullptr && !budget->values.empty()) {
      const double largest = *std::max_element(budget->values.begin(), budget->values.end());
      for (size_t leaf = 0; leaf < search.grid().size(); ++leaf) {
        Configuration c = search.grid()[leaf];
        if (!search.feasible(leaf) || c.microbatches <= own.microbatches ||
            valueOf(c, *budget) < largest - 1e-9)
          continue;
        const int count = c.microbatches;
        c.microbatches = own.microbatches;
        setValue(c, budget->name, valueOf(own, *budget));
        if (c == own && (!split || count < search.grid()[*split].microbatches))
          split = leaf;
      }
    }
    if (split)
      measure(*split, 0);
  }

  while (true) {
    if (result.evaluations.size() >= static_cast<size_t>(options_.evaluations)) {
      result.stopped = "the budget: " + std::to_string(options_.evaluations) + " evaluations";
      break;
    }
    const TermPosterior post = search.posterior();
    if (search.unmeasured().empty()) {
      result.stopped = "every feasible configuration measured";
      break;
    }
    if (!search.promising(post)) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "converged: no configuration left unmeasured is likely (%g) to be %g%% "
                    "faster than the best",
                    options_.stopProbability, 100 * options_.enough);
      result.stopped = text;
      break;
    }
    const std::optional<size_t> leaf = search.next(post, &result.simulations);
    measure(*leaf, search.learnt() ? std::exp(-search.predicted(*leaf, post).first) : 0);
  }
  // The fastest two measured.
  for (size_t i = 0; i < result.evaluations.size(); ++i) {
    const Evaluation& e = result.evaluations[i];
    if (!e.failed.empty())
      continue;
    if (!result.best || e.samplesPerSecond > result.evaluations[*result.best].samplesPerSecond) {
      result.runnerUp = result.best;
      result.best = i;
    } else if (!result.runnerUp ||
               e.samplesPerSecond > result.evaluations[*result.runnerUp].samplesPerSecond) {
      result.runnerUp = i;
    }
  }
  result.seconds = secondsSince(started);
  return result;
}

}  // namespace symtune::control
