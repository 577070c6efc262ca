#include "symtune/control/additive_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace symtune::control {

namespace {

// The terms of the symmetric n × n matrix `a` (row-major) that share an entry off the diagonal
// with another, ascending.
std::vector<size_t> coupledTerms(const std::vector<double>& a, size_t n) {
  std::vector<size_t> coupled;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (j != i && (a[i * n + j] != 0 || a[j * n + i] != 0)) {
        coupled.push_back(i);
        break;
      }
    }
  }
  return coupled;
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

// (L Lᵀ)⁻¹ from the Cholesky factor L of an n × n matrix (row-major).
std::vector<double> inverseOf(const std::vector<double>& l, size_t n) {
  std::vector<double> out(n * n);
  for (size_t j = 0; j < n; ++j) {
    std::vector<double> unit(n, 0.0);
    unit[j] = 1.0;
    const std::vector<double> col = solveLower(l, n, solveLower(l, n, unit, false), true);
    for (size_t i = 0; i < n; ++i)
      out[i * n + j] = col[i];
  }
  return out;
}

}  // namespace

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    sum += a[i] * b[i];
  return sum;
}

std::vector<double> TermPosterior::solve(std::vector<double> v, bool transposed) const {
  // Note [Terms no step used]: a term outside `coupled` has only its diagonal in L; those in it
  // are solved in the block, their order kept (the sums skip only exact zeros).
  const size_t m = coupled.size();
  for (size_t i = 0, next = 0; i < v.size(); ++i) {
    if (next < m && coupled[next] == i)
      ++next;
    else
      v[i] /= diagonal[i];
  }
  if (!transposed) {
    for (size_t p = 0; p < m; ++p) {
      double& vi = v[coupled[p]];
      for (size_t q = 0; q < p; ++q)
        vi -= block[p * m + q] * v[coupled[q]];
      vi /= block[p * m + p];
    }
  } else {
    for (size_t p = m; p-- > 0;) {
      double& vi = v[coupled[p]];
      for (size_t q = p + 1; q < m; ++q)
        vi -= block[q * m + p] * v[coupled[q]];
      vi /= block[p * m + p];
    }
  }
  return v;
}

std::vector<double> TermPosterior::factor() const {
  const size_t n = mean.size(), m = coupled.size();
  std::vector<double> l(n * n, 0.0);
  for (size_t i = 0; i < n; ++i)
    l[i * n + i] = diagonal[i];
  for (size_t p = 0; p < m; ++p) {
    for (size_t q = 0; q <= p; ++q)
      l[coupled[p] * n + coupled[q]] = block[p * m + q];
  }
  return l;
}

std::vector<double> TermPosterior::draw(std::mt19937_64& rng) const {
  const size_t n = mean.size();
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> z(n);
  for (double& v : z)
    v = normal(rng);
  std::vector<double> out = solve(std::move(z), true);
  for (size_t i = 0; i < n; ++i)
    out[i] += mean[i];
  return out;
}

double TermPosterior::variance(const std::vector<double>& x) const {
  // xᵀ (L Lᵀ)⁻¹ x = |L⁻¹ x|².
  const std::vector<double> y = solve(x, false);
  return dot(y, y);
}

AdditiveModel::AdditiveModel(const ConfigSpace& space, double priorVariance, double priorNoise,
                             size_t signalCount, double signalVariance, OrdinalPrior ordinal)
    : space_(space), priorVariance_(priorVariance), priorNoise_(priorNoise), signals_(signalCount) {
  for (const Knob& k : space_.knobs()) {
    // Note [Ordinal knobs].
    const bool trended =
        ordinal.trend > 0 && ordinal.deviation > 0 && k.values.size() >= 3 &&
        std::all_of(k.values.begin(), k.values.end(), [](double v) { return v > 0; });
    knobOffset_.push_back(knobTerms_);
    trended_.push_back(trended);
    for (size_t i = 0; i < k.values.size(); ++i)
      prior_.push_back(1.0 / (trended ? ordinal.deviation : priorVariance_));
    if (trended)
      prior_.push_back(1.0 / ordinal.trend);
    knobTerms_ += k.values.size() + (trended ? 1 : 0);
  }
  dim_ = knobTerms_ + signals_ * (knobTerms_ + 1);
  prior_.resize(dim_, 1.0 / signalVariance);
  precision_.assign(dim_ * dim_, 0.0);
  for (size_t i = 0; i < dim_; ++i)
    precision_[i * dim_ + i] = prior_[i];
  moment_.assign(dim_, 0.0);
}

void AdditiveModel::addContext(const std::string& name) {
  if (contexts_.count(name) != 0)
    return;
  // A new term: the precision grows by a row and a column holding only the prior.
  const size_t n = dim_ + 1;
  std::vector<double> grown(n * n, 0.0);
  for (size_t i = 0; i < dim_; ++i)
    std::copy(precision_.begin() + static_cast<std::ptrdiff_t>(i * dim_),
              precision_.begin() + static_cast<std::ptrdiff_t>((i + 1) * dim_),
              grown.begin() + static_cast<std::ptrdiff_t>(i * n));
  grown[dim_ * n + dim_] = 1.0 / priorVariance_;
  precision_ = std::move(grown);
  prior_.push_back(1.0 / priorVariance_);
  moment_.push_back(0.0);
  contexts_[name] = dim_++;
  posteriorFresh_ = false;
  for (Recent& r : recent_)
    r.x.push_back(0.0);  // the newer observations' had no term for it
}

std::vector<double> AdditiveModel::features(const Configuration& c, const std::string& context,
                                            const std::vector<double>& signalValues) const {
  std::vector<double> x;
  features(c, context, signalValues, x);
  return x;
}

void AdditiveModel::features(const Configuration& c, const std::string& context,
                             const std::vector<double>& signalValues,
                             std::vector<double>& x) const {
  x.assign(dim_, 0.0);
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) {
    const double v = valueOf(c, knobs[k]);
    for (size_t i = 0; i < knobs[k].values.size(); ++i) {
      if (sameValue(knobs[k].values[i], v))
        x[knobOffset_[k] + i] = 1.0;
    }
    if (trended_[k] && v > 0)
      x[knobOffset_[k] + knobs[k].values.size()] = std::log2(v / knobs[k].values.front());
  }
  for (size_t j = 0; j < signals_ && j < signalValues.size(); ++j) {
    const size_t at = interactionOffset(j);
    x[at - 1] = signalValues[j];
    for (size_t i = 0; i < knobTerms_; ++i)
      x[at + i] = x[i] * signalValues[j];
  }
  const auto found = contexts_.find(context);
  if (found != contexts_.end())
    x[found->second] = 1.0;
}

void AdditiveModel::setHorizon(double horizon) {
  if (!(horizon == 0 || horizon >= 2)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", horizon);
    throw std::invalid_argument(
        std::string("the speed model's horizon must be 0 (none) or at least 2 steps, got ") + text);
  }
  horizon_ = horizon;
}

bool AdditiveModel::learnt(size_t term) const {
  return term < dim_ && precision_[term * dim_ + term] > prior_[term];
}

double AdditiveModel::noise() const {
  return (2 * priorNoise_ + residualSum_) / (2 + counted_);
}

const TermPosterior& AdditiveModel::posterior() const {
  if (posteriorFresh_)
    return posterior_;
  const size_t n = dim_;
  const double s2 = noise();
  // The posterior precision P + XᵀX/s², over the terms some observation used together (Note
  // [Terms no step used]; its lower triangle, all the factor reads); the others' is their prior's.
  TermPosterior& p = posterior_;
  p.coupled = coupledTerms(precision_, n);
  const size_t m = p.coupled.size();
  std::vector<double> a(m * m, 0.0);
  for (size_t r = 0; r < m; ++r) {
    for (size_t q = 0; q <= r; ++q) {
      const size_t i = p.coupled[r], j = p.coupled[q];
      a[r * m + q] = i == j ? prior_[i] + (precision_[i * n + i] - prior_[i]) / s2
                            : precision_[i * n + j] / s2;
    }
  }
  p.block = cholesky(a, m);
  p.diagonal.resize(n);
  for (size_t i = 0; i < n; ++i)
    p.diagonal[i] =
        std::sqrt(std::max(prior_[i] + (precision_[i * n + i] - prior_[i]) / s2, 1e-12));
  for (size_t r = 0; r < m; ++r)
    p.diagonal[p.coupled[r]] = p.block[r * m + r];
  // The mean solves (that) mean = P m + Xᵀy/s², m the prior's mean: 0 but for the signals' own
  // terms (Note [A longer sample takes longer] in controller.h).
  std::vector<double> b(moment_);
  for (double& v : b)
    v /= s2;
  for (size_t j = 0; j < signals_ && j < slopes_.size(); ++j) {
    const size_t own = interactionOffset(j) - 1;
    b[own] += prior_[own] * slopes_[j];
  }
  p.mean = p.solve(p.solve(std::move(b), false), true);
  posteriorFresh_ = true;
  return posterior_;
}

double AdditiveModel::predict(const std::vector<double>& x,
                              const std::vector<double>& terms) const {
  return reference_ + dot(x, terms);
}

void AdditiveModel::setShiftDetection(int run, double threshold, double spread) {
  if (run < 0 || run == 1 || !(threshold > 0) || !(spread > 0 && std::isfinite(spread))) {
    char text[96];
    std::snprintf(text, sizeof text, "run %d, threshold %g, spread %g", run, threshold, spread);
    throw std::invalid_argument(
        std::string("the speed model's shift detection needs a run of 0 (off) or at least 2 "
                    "steps, a threshold above 0 and a spread above 0, got ") +
        text);
  }
  shiftRun_ = run;
  shiftThreshold_ = threshold;
  shiftSpread_ = spread;
  if (run == 0)
    recent_.clear();
}

std::vector<size_t> AdditiveModel::ownTerms(const std::vector<double>& x) const {
  // The value terms of the knobs on which the configuration differs from the space's current
  // configuration (what it is measured against); all its value terms when it is that one.
  std::vector<size_t> own, all;
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) {
    for (size_t i = 0; i < knobs[k].values.size(); ++i) {
      const size_t term = knobOffset_[k] + i;
      if (x[term] == 0)
        continue;
      all.push_back(term);
      if (!sameValue(knobs[k].values[i], knobs[k].current))
        own.push_back(term);
    }
  }
  return own.empty() ? all : own;
}

void AdditiveModel::letGo(const std::vector<size_t>& terms) {
  // The posterior's covariance grows by shiftSpread_ on each of `terms` (a random walk's step,
  // as a Kalman filter adds process noise), its mean staying; written back as the prior
  // precision plus evidence that posterior() turns into it at the noise's variance now.
  const size_t n = dim_;
  const double s2 = noise();
  const TermPosterior post = posterior();  // a copy: the loop below changes what it is of
  std::vector<double> cov = inverseOf(post.factor(), n);
  for (size_t t : terms)
    cov[t * n + t] += shiftSpread_;
  const std::vector<double> grown = inverseOf(cholesky(cov, n), n);  // the new precision
  for (size_t i = 0; i < n; ++i) {
    double held = 0;  // (cov⁻¹ mean)_i
    for (size_t j = 0; j < n; ++j) {
      const double a = 0.5 * (grown[i * n + j] + grown[j * n + i]);  // symmetric to rounding
      held += a * post.mean[j];
      const double prior = i == j ? prior_[i] : 0.0;
      precision_[i * n + j] = prior + s2 * (a - prior);
    }
    // posterior() solves (that) mean = P m + moment/s², m the prior's mean.
    double priorMean = 0;
    for (size_t k = 0; k < signals_ && k < slopes_.size(); ++k) {
      if (i == interactionOffset(k) - 1)
        priorMean = slopes_[k];
    }
    moment_[i] = s2 * (held - prior_[i] * priorMean);
  }
  posteriorFresh_ = false;
}

void AdditiveModel::accumulate(const std::vector<double>& x, double centred, double amount) {
  posteriorFresh_ = false;
  for (size_t i = 0; i < dim_; ++i) {
    if (x[i] == 0)
      continue;
    moment_[i] += amount * x[i] * centred;
    for (size_t j = 0; j < dim_; ++j)
      precision_[i * dim_ + j] += amount * x[i] * x[j];
  }
}

bool AdditiveModel::levelMoved(std::vector<size_t>& run) const {
  run.clear();
  if (shiftRun_ < 2 || recent_.empty())
    return false;
  // One configuration: the same knob values (the terms before the signals' and contexts').
  const Recent& newest = recent_.back();
  const auto same = [&](const Recent& r) {
    return std::equal(r.x.begin(), r.x.begin() + static_cast<std::ptrdiff_t>(knobTerms_),
                      newest.x.begin());
  };
  for (size_t i = recent_.size(); i-- > 0 && run.size() < static_cast<size_t>(shiftRun_);) {
    if (same(recent_[i]))
      run.push_back(i);
  }
  if (run.size() < static_cast<size_t>(shiftRun_) || recent_.size() - run.size() < kShiftBaseline)
    return false;
  // The scale the run is read against: the other recent residuals' (their median distance from
  // 0, as a normal's standard deviation), not the noise's estimate, which still carries the
  // residuals of the model's first, untaught steps.
  std::vector<double> others;
  for (size_t i = 0; i < recent_.size(); ++i) {
    if (std::find(run.begin(), run.end(), i) == run.end())
      others.push_back(std::abs(recent_[i].residual));
  }
  const auto middle = others.begin() + static_cast<std::ptrdiff_t>(others.size() / 2);
  std::nth_element(others.begin(), middle, others.end());
  const double scale = std::max(1.4826 * *middle, kShiftLeast);
  const double side = newest.residual > 0 ? 1.0 : -1.0;
  return std::all_of(run.begin(), run.end(), [&](size_t i) {
    return side * recent_[i].residual > shiftThreshold_ * scale;
  });
}

double AdditiveModel::observe(const std::vector<double>& x, double y) {
  if (observations_ == 0)
    reference_ = y;  // the terms are of the time relative to the first observation's
  const double centred = y - reference_;
  const TermPosterior& post = posterior();  // what choose() drew from, as a rule
  const double residual = centred - dot(x, post.mean);
  // Note [Steps at half speed].
  const double r2 = residual * residual / (noise() + post.variance(x));
  posteriorFresh_ = false;  // the noise's estimate moves, and the observations
  double weight = std::isinf(tails_) ? 1.0 : std::min(1.0, (tails_ + 1) / (tails_ + r2));
  if (horizon_ > 0) {
    // Note [Old steps fade]: what the observations before this one put in shrinks; the prior's
    // part of the precision stays.
    const double keep = 1.0 - 1.0 / horizon_;
    for (size_t i = 0; i < dim_; ++i) {
      for (size_t j = 0; j < dim_; ++j) {
        const double prior = i == j ? prior_[i] : 0.0;
        precision_[i * dim_ + j] = prior + keep * (precision_[i * dim_ + j] - prior);
      }
      moment_[i] *= keep;
    }
    residualSum_ *= keep;
    counted_ *= keep;
    for (Recent& r : recent_)
      r.scale *= keep;
  }
  residualSum_ += weight * residual * residual;
  counted_ += 1;
  accumulate(x, centred, weight);
  ++observations_;
  if (shiftRun_ >= 2) {
    // Note [A level that moves].
    recent_.push_back({x, centred, residual, weight, 1.0});
    while (recent_.size() > kShiftWindow)
      recent_.pop_front();
    std::vector<size_t> run;
    if (levelMoved(run)) {
      // The run's steps out of XᵀX and Xᵀy (as they count now), so that the mean is the old
      // level's; what makes this configuration itself let go; the run back at full weight, which
      // the let-go terms now follow. The noise's estimate keeps them as they came.
      for (size_t i : run)
        accumulate(recent_[i].x, recent_[i].centred, -recent_[i].scale * recent_[i].weight);
      letGo(ownTerms(recent_.back().x));
      for (size_t k = run.size(); k-- > 0;)  // oldest first
        accumulate(recent_[run[k]].x, recent_[run[k]].centred, 1.0);
      recent_.clear();
      ++shifts_;
      weight = 1.0;
    }
  }
  return weight;
}

}  // namespace symtune::control
