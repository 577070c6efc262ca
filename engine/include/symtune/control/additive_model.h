#pragma once
// What the online controller and auto_tune know of a configuration's speed (docs/control.md):
// the log of a step's seconds per sample as a sum of one term per knob value and one per context
// (a shape bucket), and for each signal (a number describing the batch, as the log of its ratio to
// a reference) its value times a term of its own and a term per knob value (how the signal moves
// that knob value's effect), fitted by Bayesian linear regression.
//
// Note [Posterior of the terms]
// The model keeps the prior precision plus XᵀX and Xᵀy of the observations (y less the first
// observation's, which the terms are relative to). With the noise's variance s², the terms'
// posterior has precision P + XᵀX/s² (P the prior precision, diagonal) and mean (that)⁻¹ Xᵀy/s²: a
// term no observation used keeps its prior variance whatever the noise, so an untried knob value is
// drawn as widely as the prior says (by a factor of e at variance 1) and gets tried, while a term
// measured n times narrows to about s²/n. The noise's variance is estimated from the one-step-
// ahead residuals (each observation against the mean before it), starting from priorNoise.
//
// Note [Terms no step used]
// A term no observation used — an untried knob value's, a signal's where the batches never vary
// it (the tree network has no sequence length), a context not yet observed — shares no entry off
// the diagonal of the precision with any other; its row and column of the Cholesky factor are
// then zero off the diagonal too, and its posterior is its prior. So the factor is worked out over
// the terms in use only, the others' diagonal being the prior's root: the factor the whole matrix
// gives, bit for bit (what is left out would add exact zeros). The posterior is worked out once per
// observation (posterior()): before, choose() and observe() each worked it out whole. On
// simulated steps (symtune-bench-controller, docs/benchmarks.md) the choice took 10-15 us instead
// of 22-29 with warm caches, and weighing the step after it about 1 us instead of 13-17; with the
// caches cold, as after a model's step, the choice is about as before (26-36 us against 28-37:
// cache misses), weighing the step 9-11 us instead of 19-28.
//
// Note [Steps at half speed]
// A step's time on a shared machine now and then doubles for no reason of its configuration
// (another tenant's burst): the tagger's steps on this project's 2-vCPU machine ran at under
// 0.75x the same configuration's speed in a second trainer on up to 16 of 200 steps, and learnt at
// full weight such steps are the likeliest reason the controller held its fastest configuration
// 20 % slower than it was and let a 12 % slower one run. So an observation is weighed as a
// Student-t likelihood of `tails` degrees of freedom weighs it (its EM weight), at most fully:
// with r its residual over its predictive spread (the square root of the noise's variance plus
// the posterior variance of its prediction, so the first observation of an untried term, whose
// spread is the prior's, is hardly doubted), the weight is min(1, (tails + 1) / (tails + r²)),
// in XᵀX, Xᵀy and the noise's estimate alike, fixed when it comes in: at the default 4, a step
// 2 spreads off counts 0.63, one at half speed among steps 5 % apart about 0.2.
//
// Note [Ordinal knobs]
// A knob whose values are counts or shares in order — micro-batches 1, 2, 4, …, 16, threads 1, 2,
// 4, remat budgets 0.3 … 0.6 — does not act on the time value by value at random: each doubling
// of the micro-batches adds about as much per-micro-batch overhead as the one before. With
// independent terms, an untried value is drawn as widely as the prior says around the reference,
// whatever the values beside it measured, so the MoE under its budget, 1.15x slower in two
// micro-batches and 1.5x in four, still drew sixteen on one thread (4x slower) and eight, and
// its exploring cost it 12-17 % of a 150-step run (docs/benchmarks.md). So, given an OrdinalPrior,
// a knob of three values or more, all positive, has besides its value terms a trend term, its
// feature log2(value / its first value), with prior variance `trend`, and its value terms narrow to
// `deviation`: the values' effect is a slope in the log of the value plus a deviation of each value
// from it. Two values measured give the slope (less what their deviations take), and what lies
// beyond them is predicted along it: sixteen micro-batches, unmeasured, are predicted slow from
// what two and four measured. Knobs of two values keep independent terms at the prior's variance (a
// slope through two values is their difference: nothing to extrapolate).
//
// Note [Old steps fade]
// A configuration's speed relative to another's does not hold still for a whole run: on the
// tagger on this project's 2-vCPU machine two micro-batches ran 1.03-1.08x the whole batch's
// speed for 20-100 steps and then 0.80x, in both trainers that ran them (docs/benchmarks.md,
// "Freed CPU memory kept"). Weighing all past steps alike, the model took 60 steps to believe the
// change, and the Student-t weights (Note [Steps at half speed]) slowed it further, since the first
// steps of a new level look like outliers of the old; meanwhile the controller ran the slower
// configuration. So with a horizon h (setHorizon; 0: none, every step weighs alike), each
// observation's weight in XᵀX, Xᵀy and the noise's estimate shrinks by 1 - 1/h with each later
// one: a step h observations old counts about 1/e of a new one, and a term no recent step used
// drifts back towards its prior, so its configuration is drawn more widely and tried again. This
// is discounted Thompson sampling (Raj and Kalyani, "Taming non-stationary bandits: a Bayesian
// approach", 2017) on the additive model's terms. It is off unless a session asks for it: trying
// again what faded cost Transformer-XL, whose default is its fastest configuration, 1-2 % of its
// throughput at h = 40, and on the tagger, whose speeds changed every 20-40 steps in those rounds,
// it did not make the windows below 0.97 of the default fewer (docs/benchmarks.md, "Old steps
// fade"); engine.control.horizon shows what it does for a change that lasts.

// Note [A level that moves]
// The horizon forgets at one pace whatever happens; the tagger's configurations on this project's
// 2-vCPU machine instead keep their speed for 20-100 steps and then jump, two micro-batches from
// 1.04x the whole batch's speed to 0.80x and back (docs/benchmarks.md, "Freed CPU memory kept"),
// while the Student-t weights (Note [Steps at half speed]) take the first steps of the new level
// for outliers and count them at a quarter. So, with shift detection on (setShiftDetection), the
// model keeps its last 32 observations' residuals and, after each, reads the newest `run` of the
// configuration just observed against the others: when all of them lie more than `threshold`
// times the others' scale (their median absolute residual times 1.4826, a normal's standard
// deviation; at least 0.01) off on the same side, it believes that configuration's speed moved.
// The scale is the recent residuals', not the noise's estimate: that one still carries the
// model's first, untaught steps, and on the tagger it hid a jump of 0.27 in the log as under two
// spreads. What moved is put down to what makes that configuration itself: the terms of its knob
// values that differ from the space's current configuration (all its value terms when it is
// that one). Their posterior variance grows by `spread`, the mean staying, as a Kalman filter adds
// process noise to a state that walks (letGo); the run's steps are taken out first, so the mean
// is the old level's, and put back at full weight, so the let-go terms follow them. The rest of
// the model keeps what it knew. Letting everything go instead (every earlier step shrunk to 5 %,
// tried first) sent the controller back to configurations long known slow — one thread, four
// micro-batches — for 10 steps at 0.65x the default on the tagger. shifts() counts what it
// believed; the recent observations are part of state().

#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "symtune/control/config_space.h"

namespace symtune::control {

// Note [Ordinal knobs]: the prior variances of an ordinal knob's trend and of each value's
// deviation from it (log seconds per sample, squared); trend 0: no trend terms.
struct OrdinalPrior {
  double trend = 0;
  double deviation = 0;
};

// The terms' posterior at one moment.
struct TermPosterior {
  std::vector<double> mean;
  // The Cholesky factor L of the posterior precision (Note [Terms no step used]): over the terms
  // some observation used together (`coupled`, ascending) a lower triangle (`block`, row-major,
  // coupled.size() square); every term's diagonal entry in `diagonal`; nothing else.
  std::vector<size_t> coupled;
  std::vector<double> block, diagonal;
  // A draw of the terms: mean + L⁻ᵀ z, z standard normal (as many draws from `rng` as terms).
  std::vector<double> draw(std::mt19937_64& rng) const;
  // The posterior variance of x · terms.
  double variance(const std::vector<double>& x) const;
  // L whole (terms × terms, row-major).
  std::vector<double> factor() const;
  // L⁻¹ v, or with `transposed` L⁻ᵀ v.
  std::vector<double> solve(std::vector<double> v, bool transposed) const;
};

class AdditiveModel {
 public:
  // `signalCount` numbers describe a batch; their terms' prior variance is `signalVariance`.
  AdditiveModel(const ConfigSpace& space, double priorVariance, double priorNoise,
                size_t signalCount = 0, double signalVariance = 0.25, OrdinalPrior ordinal = {});

  // Note [Steps at half speed]: the degrees of freedom of the likelihood the observations are
  // weighed by (default 4); infinity weighs every observation fully, as the normal's would.
  void setTails(double tails) { tails_ = tails; }
  // Note [Old steps fade]: the horizon in observations (0, the default: none); throws
  // std::invalid_argument for a horizon that is negative or under 2 (a step that counts nothing
  // after the next).
  void setHorizon(double horizon);
  double horizon() const { return horizon_; }
  // Note [A level that moves]: `run` observations of one configuration in a row beyond
  // `threshold` times the recent residuals' scale on one side (run 0: off, the default) let its
  // own terms go by `spread` (a variance, log seconds squared); throws std::invalid_argument for a
  // run of 1 or negative, a threshold not above 0 or a spread not above 0.
  void setShiftDetection(int run, double threshold = 2.5, double spread = 0.25);
  int shiftRun() const { return shiftRun_; }
  // How many times the model believed a level moved.
  int64_t shifts() const { return shifts_; }
  // Note [A longer sample takes longer] (controller.h): the prior mean of each signal's own term
  // (missing ones 0), which the posterior's mean leans towards until the observations say
  // otherwise.
  void setSignalSlopes(std::vector<double> slopes) {
    slopes_ = std::move(slopes);
    posteriorFresh_ = false;
  }

  // Adds a term for context `name` (with its prior) unless it has one.
  void addContext(const std::string& name);
  // The features of `c` on `context` with signal values `signalValues` (one per signal, missing
  // ones 0): a one-hot per knob, the context's (none when the context has no term), and each
  // signal's value on its own term and on the term of each knob value `c` takes.
  std::vector<double> features(const Configuration& c, const std::string& context = "",
                               const std::vector<double>& signalValues = {}) const;
  // The same into `x` (its storage reused: the controller weighs every configuration per step).
  void features(const Configuration& c, const std::string& context,
                const std::vector<double>& signalValues, std::vector<double>& x) const;
  // Where the terms of knob `knob` (its index in the space) begin: one per value, then its trend
  // when it has one (Note [Ordinal knobs]); those of signal `signal` on knob values begin at
  // interactionOffset(signal), its own term one before.
  size_t knobOffset(size_t knob) const { return knobOffset_[knob]; }
  size_t knobWidth(size_t knob) const {
    return space_.knobs()[knob].values.size() + (trended_[knob] ? 1 : 0);
  }
  bool trended(size_t knob) const { return trended_[knob]; }
  // Whether any observation used term `term` (weighed above nothing).
  bool learnt(size_t term) const;
  size_t knobTerms() const { return knobTerms_; }
  size_t interactionOffset(size_t signal) const {
    return knobTerms_ + signal * (knobTerms_ + 1) + 1;
  }
  // An observation: features `x`, `y` the log of seconds per sample (less whatever the caller's
  // own estimate explains). Returns the weight it counts with (Note [Steps at half speed]).
  double observe(const std::vector<double>& x, double y);

  // The terms' posterior now, worked out once for each change of what the model knows (an
  // observation, a new context, a level let go, a restore) and kept until the next: the controller
  // draws from it before a step and weighs the step against it after. The reference holds until
  // the model next changes; not for concurrent use.
  const TermPosterior& posterior() const;
  // The log seconds per sample the terms predict for features `x`.
  double predict(const std::vector<double>& x, const std::vector<double>& terms) const;
  // The noise's variance, from the residuals so far.
  double noise() const;
  int64_t observations() const { return observations_; }
  // How many observations the noise's estimate counts now: observations(), each shrunk by the
  // horizon since (Note [Old steps fade]).
  double counted() const { return counted_; }
  // The first observation's y, which the terms are relative to (0 before any).
  double reference() const { return reference_; }
  size_t terms() const { return dim_; }

  // Everything it has learnt, as JSON text (a checkpoint's), and back: restore() on a model of
  // the same space and signals gives the same posterior, bit for bit. Throws
  // std::invalid_argument for a state of another space or malformed text.
  std::string state() const;
  void restore(const std::string& state);

 private:
  ConfigSpace space_;
  double priorVariance_, priorNoise_;
  std::vector<size_t> knobOffset_;  // where each knob's terms begin
  std::vector<bool> trended_;       // whether each knob has a trend term (Note [Ordinal knobs])
  size_t knobTerms_ = 0;            // the knobs' terms; each signal's 1 + knobTerms_ follow
  size_t signals_ = 0;
  std::map<std::string, size_t> contexts_;
  size_t dim_ = 0;
  std::vector<double> prior_;               // each term's prior precision
  std::vector<double> precision_, moment_;  // diag(prior_) + XᵀX (row-major), Xᵀy
  double residualSum_ = 0;                  // the observations' weighted squared residuals
  double counted_ = 0;                      // their count, after the horizon's shrinking
  std::vector<double> slopes_;              // the prior mean of each signal's own term
  double tails_ = 4.0;
  double horizon_ = 0;  // Note [Old steps fade]
  // Note [A level that moves]: the last observations (the newest last), what each put in as it is
  // now (its weight times the horizon's shrinking since), and the detector's settings.
  struct Recent {
    std::vector<double> x;
    double centred = 0, residual = 0, weight = 0, scale = 1;
  };
  static constexpr size_t kShiftWindow = 32;
  // The fewest other recent observations the run is read against, and the least scale taken
  // (log seconds: a jump of a few per cent is not one to follow).
  static constexpr size_t kShiftBaseline = 12;
  static constexpr double kShiftLeast = 0.01;
  std::deque<Recent> recent_;  // at most kShiftWindow
  int shiftRun_ = 0;
  double shiftThreshold_ = 2.5, shiftSpread_ = 0.25;
  int64_t shifts_ = 0;
  // Whether the newest observation ends a run of its configuration's beyond the threshold on one
  // side (the run's indices in recent_, newest first, into `run`).
  bool levelMoved(std::vector<size_t>& run) const;
  // The terms a jump of the configuration with features `x` is put down to, and letting them go
  // (Note [A level that moves]).
  std::vector<size_t> ownTerms(const std::vector<double>& x) const;
  void letGo(const std::vector<size_t>& terms);
  // Adds (amount > 0) or takes out (amount < 0) `amount` times an observation's terms.
  void accumulate(const std::vector<double>& x, double centred, double amount);
  double reference_ = 0;  // the first observation's y: what the terms add to
  int64_t observations_ = 0;
  mutable TermPosterior posterior_;  // posterior(), while posteriorFresh_
  mutable bool posteriorFresh_ = false;
};

double dot(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace symtune::control
