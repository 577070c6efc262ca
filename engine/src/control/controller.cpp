#include "symtune/control/controller.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace symtune::control {

namespace {

// The value configuration `c` gives knob `name` (ConfigSpace's knob names).
double valueOf(const Configuration& c, const std::string& name, double current) {
  if (name == "microbatches")
    return c.microbatches;
  if (name == "threads")
    return c.threads > 0 ? c.threads : current;
  if (name == "remat_budget")
    return c.rematBudget.value_or(current);
  return current;
}

bool same(double a, double b) {
  return std::abs(a - b) <= 1e-9;
}

// Cholesky factor L of the symmetric positive-definite n × n matrix `a` (row-major): a = L Lᵀ.
std::vector<double> cholesky(const std::vector<double>& a, size_t n) {
  std::vector<double> l(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      double sum = a[i * n + j];
      for (size_t k = 0; k < j; ++k)
        sum -= l[i * n + k] * l[j * n + k];
      l[i * n + j] = i == j ? std::sqrt(std::max(sum, 1e-12)) : sum / l[j * n + j];
    }
  }
  return l;
}

// Solves L y = v (lower), then, when `transposed`, Lᵀ x = v instead.
std::vector<double> solveLower(const std::vector<double>& l, size_t n, std::vector<double> v,
                               bool transposed) {
  if (!transposed) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < i; ++k)
        v[i] -= l[i * n + k] * v[k];
      v[i] /= l[i * n + i];
    }
  } else {
    for (size_t i = n; i-- > 0;) {
      for (size_t k = i + 1; k < n; ++k)
        v[i] -= l[k * n + i] * v[k];
      v[i] /= l[i * n + i];
    }
  }
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    sum += a[i] * b[i];
  return sum;
}

}  // namespace

OnlineController::OnlineController(ConfigSpace space, ControllerOptions options)
    : space_(std::move(space)), options_(options), rng_(options.seed) {
  grid_ = space_.grid();
  if (grid_.empty() || space_.knobs().empty())
    throw std::invalid_argument("the online controller needs a configuration space with knobs");
  for (const Knob& k : space_.knobs()) {
    knobOffset_.push_back(knobTerms_);
    knobTerms_ += k.values.size();
  }
  dim_ = knobTerms_;
  precision_.assign(dim_ * dim_, 0.0);
  for (size_t i = 0; i < dim_; ++i)
    precision_[i * dim_ + i] = 1.0 / options_.priorVariance;
  moment_.assign(dim_, 0.0);
}

size_t OnlineController::bucketIndex(const std::string& bucket) {
  auto found = buckets_.find(bucket);
  if (found != buckets_.end())
    return found->second;
  // A new term: the precision grows by a row and a column holding only the prior.
  const size_t n = dim_ + 1;
  std::vector<double> grown(n * n, 0.0);
  for (size_t i = 0; i < dim_; ++i)
    std::copy(precision_.begin() + static_cast<std::ptrdiff_t>(i * dim_),
              precision_.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim_),
              grown.begin() + static_cast<std::ptrdiff_t>(i * n));
  grown[dim_ * n + dim_] = 1.0 / options_.priorVariance;
  precision_ = std::move(grown);
  moment_.push_back(0.0);
  buckets_[bucket] = dim_;
  return dim_++;
}

std::vector<double> OnlineController::features(const Configuration& c,
                                               const std::string& bucket) const {
  std::vector<double> x(dim_, 0.0);
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) {
    const double v = valueOf(c, knobs[k].name, knobs[k].current);
    for (size_t i = 0; i < knobs[k].values.size(); ++i) {
      if (same(knobs[k].values[i], v))
        x[knobOffset_[k] + i] = 1.0;
    }
  }
  auto found = buckets_.find(bucket);
  if (found != buckets_.end())
    x[found->second] = 1.0;
  return x;
}

namespace {

// Note [Posterior of the terms]
// precision_ holds I/priorVariance + XᵀX and moment_ Xᵀy. With the noise's variance s², the
// terms' posterior has precision I/priorVariance + XᵀX/s² and mean (that)⁻¹ Xᵀy/s²: a term no
// step has used keeps its prior variance whatever the noise, so an untried knob value is drawn
// as widely as the prior says (by a factor of e at variance 1) and gets tried, while a term
// measured n times narrows to about s²/n.
struct Posterior {
  std::vector<double> factor;  // Cholesky factor of the posterior precision
  std::vector<double> mean;
};

Posterior posterior(const std::vector<double>& precision, const std::vector<double>& moment,
                    size_t n, double priorVariance, double noise) {
  std::vector<double> a(precision.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const double prior = i == j ? 1.0 / priorVariance : 0.0;
      a[i * n + j] = prior + (precision[i * n + j] - prior) / noise;
    }
  }
  std::vector<double> b(moment);
  for (double& v : b)
    v /= noise;
  Posterior p;
  p.factor = cholesky(a, n);
  p.mean = solveLower(p.factor, n, solveLower(p.factor, n, b, false), true);
  return p;
}

}  // namespace

double OnlineController::noise() const {
  return (2 * options_.priorNoise + residualSum_) / (2 + static_cast<double>(observations_));
}

std::vector<double> OnlineController::mean() const {
  return posterior(precision_, moment_, dim_, options_.priorVariance, noise()).mean;
}

bool OnlineController::allowed(const Configuration& c) const {
  for (const auto& [name, value] : pins_) {
    const Knob* k = space_.knob(name);
    if (k != nullptr && !same(valueOf(c, name, k->current), value))
      return false;
  }
  return true;
}

double OnlineController::predictedSamplesPerSecond(const Configuration& c,
                                                   const std::string& bucket) const {
  if (observations_ == 0)
    return 0;
  return std::exp(-(reference_ + dot(features(c, bucket), mean())));
}

Decision OnlineController::choose(int64_t step, const std::string& bucket) {
  bucketIndex(bucket);
  Decision d;
  d.step = step;
  d.bucket = bucket;
  // A draw of the terms from their posterior (Note [Posterior of the terms]): mean + L^-T z,
  // with the posterior precision L Lᵀ.
  const Posterior post = posterior(precision_, moment_, dim_, options_.priorVariance, noise());
  const std::vector<double>& theta = post.mean;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> z(dim_);
  for (double& v : z)
    v = normal(rng_);
  std::vector<double> draw = solveLower(post.factor, dim_, z, true);
  for (size_t i = 0; i < dim_; ++i)
    draw[i] += theta[i];

  std::vector<std::pair<double, size_t>> byMean;
  size_t best = grid_.size();
  double bestDrawn = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < grid_.size(); ++i) {
    if (!allowed(grid_[i]))
      continue;
    const std::vector<double> x = features(grid_[i], bucket);
    byMean.emplace_back(dot(x, theta), i);
    const double drawn = dot(x, draw);
    if (drawn < bestDrawn) {
      bestDrawn = drawn;
      best = i;
    }
  }
  std::sort(byMean.begin(), byMean.end());
  if (observations_ == 0) {
    // Nothing measured: the configuration the run began with, when the pins allow it.
    const Configuration current = space_.current();
    const auto at = std::find(grid_.begin(), grid_.end(), current);
    if (at != grid_.end() && allowed(current))
      best = static_cast<size_t>(at - grid_.begin());
  }
  if (best == grid_.size())  // the pins allow nothing in the grid
    throw std::invalid_argument("the pinned knobs leave no configuration of the space");
  d.chosen = grid_[best];
  d.explored = observations_ > 0 && byMean.front().second != best;
  d.predictedSamplesPerSecond = predictedSamplesPerSecond(d.chosen, bucket);
  for (const auto& [value, i] : byMean) {
    if (d.alternatives.size() >= static_cast<size_t>(options_.alternatives))
      break;
    if (i != best && observations_ > 0)
      d.alternatives.emplace_back(grid_[i], std::exp(-(reference_ + value)));
  }
  return d;
}

void OnlineController::observe(Decision decision, double stepSeconds, int64_t samples) {
  // stepSeconds 0: logged, not learnt from.
  if (stepSeconds > 0 && samples > 0) {
    const double y = std::log(stepSeconds / static_cast<double>(samples));
    if (observations_ == 0)
      reference_ = y;  // the terms are of the time relative to the first step's
    const double centred = y - reference_;
    const std::vector<double> x = features(decision.chosen, decision.bucket);
    const double residual = centred - dot(x, mean());
    residualSum_ += residual * residual;
    for (size_t i = 0; i < dim_; ++i) {
      if (x[i] == 0)
        continue;
      moment_[i] += x[i] * centred;
      for (size_t j = 0; j < dim_; ++j)
        precision_[i * dim_ + j] += x[i] * x[j];
    }
    ++observations_;
    decision.samplesPerSecond = static_cast<double>(samples) / stepSeconds;
  }
  log_.push_back(std::move(decision));
}

void OnlineController::pin(const std::string& name, double value) {
  const Knob* k = space_.knob(name);
  if (k == nullptr)
    throw std::invalid_argument("no knob " + name + " in this run's configuration space");
  if (std::none_of(k->values.begin(), k->values.end(),
                   [&](double allowedValue) { return same(allowedValue, value); }))
    throw std::invalid_argument("knob " + name + " cannot take " + std::to_string(value));
  pins_[name] = value;
}

void OnlineController::unpin(const std::string& name) {
  pins_.erase(name);
}

}  // namespace symtune::control
