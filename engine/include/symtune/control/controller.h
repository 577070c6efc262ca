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
// A contextual bandit over the configuration space. Its context: the batch's shape bucket, and the
// step features that describe the batch before it runs (the signals: batch_size and
// sequence_length, docs/features.md); the other features are what a configuration brings about —
// the step's time is the reward, its peak the memory constraint, the loss the divergence
// constraint. Its model: the log of a step's seconds per sample is a sum of one term per knob value
// and one per bucket (knobs act as factors on the time, a bucket sets its scale), plus, for each
// signal (as the log of its ratio to the first batch's), its value times a term of its own and one
// per knob value (a longer sequence may favour more micro-batches: what it learns on one length
// carries to a length it has not seen), fitted by Bayesian linear regression (ridge prior, noise
// estimated from the residuals). Each step teaches it about every
// knob value it used, so the space's size does not multiply the exploration: a grid of 48
// configurations (6 x 2 x 4 knob values) has 12 knob terms to learn, and one per bucket. It chooses
// by Thompson sampling — a draw of the terms from their posterior, the configuration fastest under
// the draw — so it explores while the terms are uncertain and settles as they firm up. Every
// configuration of the space keeps within the run's memory budget (the remat budget knob only
// tightens the session's, and the budget is enforced), so exploring breaks no constraint;
// micro-batches, threads and recomputation do not change what the step computes, beyond rounding. A
// pinned knob keeps its value.
//
// Note [A longer sample takes longer]
// A signal's own term says how the time per sample moves with the batch's signal, the same for
// every configuration; its prior's mean is what is known before a step is measured: a sample
// twice as long takes about twice as long (`sequence_length`, slope 1 in the log of its ratio to
// the first batch's), and a sample takes as long in a larger batch (`batch_size`, slope 0). With
// a mean of 0 the model took the length's effect to be nothing until it had learnt otherwise, and
// what a run's first steps measured went partly to the knob values they ran. On Transformer-XL
// (4 segments of 24-48 tokens, two shape buckets; per sample the shorter bucket runs about 1.6
// times as fast) the first step on the shorter bucket ran two micro-batches, whose terms took part
// of that speed, so the trend predicted four faster still, and two steps later four ran, at 0.71
// of the best's speed; a slow first step on two threads against a faster batch on one made one
// thread look the faster for steps on end (one thread on 7-21 of 150 steps, docs/benchmarks.md,
// "What did not fit"). Where the batches' lengths are why, the prior now says so. It is a prior,
// not a rule: the steps correct the slope as they would any term (a GRU's loop scales about so,
// attention faster; images and trees have no sequence_length, and the term is then unused).
//
// Note [Divergence constraint]
// The loss must not diverge. A step's loss diverges when it is not finite or exceeds `divergence`
// times the average of the losses before it (an exponential average, weight 0.1, of the finite
// losses that did not diverge, from the `divergenceWarmup`-th step on; an average below zero, as
// a `loss.method` may give, is exceeded by `divergence - 1` times its size). When the loss diverges
// on a step whose configuration differs from the step before it, and that step's loss did not
// diverge, the change is what broke it: the configuration is excluded from then on (a binding
// explored, a rounding that grew). A loss that diverges under the configuration that ran before
// it is the model's, not a configuration's: noted, nothing excluded. A finite loss over the bound
// for `divergenceWarmup` steps in a row has moved to a new level: the average starts again. (So the
// configuration that ran before stays: the space never runs out.) The configuration excluded when
// that run of high losses began is let back in: the loss went on high under the one before it, so
// it moved by itself. Pins that leave only excluded configurations are released, and a pin that
// would is refused. The configurations compared are those the steps ran: a step the trainer split
// further than chosen (Note [Predicted not to fit]) ran its split, which notFit() records as
// Decision::ran when told the count; the one excluded is what was chosen (a split count, 2 split
// to 3, is no configuration of the grid, and would bar nothing). Until 2026-12-07 such a step
// counted as having run the choice, so the next step on its bucket, choosing the count it had split
// to, counted as a change though it ran as the step before it, and a loss that jumped there
// excluded that count for the run. Told no count, notFit() still takes the choice to have run: a
// change missed would let a configuration that broke the loss run on.
//
// Note [Explored outward]
// An ordinal knob (Note [Ordinal knobs] in additive_model.h) is explored one value at a time from
// what was measured: a configuration may be chosen only when each of its ordinal knobs takes a
// value some learnt step ran, or the next to one. From the whole batch, two micro-batches first;
// four only once two has been learnt from; sixteen after eight. The trend predicts the values
// beyond a measured one, but its slope is uncertain until two values are measured, and the spread
// of a draw grows with the distance along the knob: an uncertain slope reaches its far end as
// readily as the near one. On the MoE's costs (engine.control.controller, "micro-batches are
// explored outward", eight runs of 150 steps) the run kept 0.92-0.97 of the fastest
// configuration's throughput with the trend alone, 0.95-0.97 with the trend explored outward, and
// 0.91-0.97 with independent terms.
// A pinned knob is not held to it, and where nothing outward is allowed (the exclusions of
// Note [Divergence constraint]) every allowed configuration may run.
//
// Note [Around the leader]
// Explored outward alone, a knob walks to its far end as soon as each value before it has been
// learnt from once: on Transformer-XL under its budget (docs/benchmarks.md) the controller ran 4,
// 8 and 16 micro-batches within its first 15 steps though two were already slower than one, and
// each such step, a new shape bucket besides, costs several ordinary ones. So a configuration may
// run only when each of its ordinal knobs takes the *leader's* value or the next to it, the
// leader being the configuration fastest by the model's mean for this batch among those whose
// ordinal values have all been learnt: a count next to one that measured slower than its other
// neighbour is not tried until the fastest count moves. This is unimodal Thompson sampling
// (Paladino et al., "Unimodal Thompson Sampling for Graph-Structured Arms", 2017) on the grid of
// the ordinal knobs, where the time is taken to fall and then rise along each knob; the knobs of
// two values (threads on two cores, binding exploration) stay free. A fastest value at the far
// end is still reached, one step at a time as each becomes the leader. On simulated runs with the
// costs measured on Transformer-XL, the tree network and the MoE (engine.control.controller,
// "explored around the fastest measured count, ...": 16 runs of 150 steps each, noise and the
// one-off cost of a new count as measured) the run's throughput over the fastest configuration's
// rose from a median of 0.90, 0.93 and 0.92 to 0.97, 0.98 and 0.97, and where the fastest count
// is 8 micro-batches (times falling 1.6, 1.3, 1.1, 1.0 from 1 to 8) it stayed at 0.90.
//
// Note [Predicted not to fit]
// The controller explores safely: it never chooses a configuration the run knows breaks the
// memory budget. When a step's configuration did not fit its budget on a batch of some shape
// bucket (no remat plan fitted it, so the trainer split the step further, Note [Splitting
// further] in trainer.h), notFit() records it, and from then on on that bucket no configuration
// holding as much runs: none with as few micro-batches or fewer, a remat budget as small or
// smaller, the same binding exploration (threads hold no memory of their own). Other buckets may
// still try it: a smaller batch may fit. The step itself is logged with the budget as the
// constraint it broke, not learnt from: what it took (a plan searched for in vain, a new
// bucket's counting forward) is the configuration's on that bucket only, which no longer runs.
// Before, the tree network under 0.6 of its plain peak (which no plan fits whole) chose the
// whole batch on 17 and 51 of 150 steps in two runs, each of them split at about 0.8 of the speed
// of two micro-batches on the same batch (docs/benchmarks.md, "What did not fit"). A new memory
// budget that holds more (Trainer::setRematBudget) forgets the records (Note [A new memory
// budget]).
//
// Note [A budget the run refused]
// The trainer checks a remat budget it is asked to set against every shape bucket it has met:
// where the planner predicts that even the plan holding least peaks above it on one of them, it
// refuses the budget, and the step runs the configuration before it. Before, the controller went
// on drawing such budgets: none was ever measured, so the model stayed unsure of them, and on the
// tree network under a budget_fraction of 0.6 (smallest feasible 0.68) 22 of 60 decisions chose
// 0.3-0.5, each logged as explored while its step ran the configuration before it. refused()
// records the largest budget refused: from then on no configuration whose budget is as small or
// smaller is chosen (the check holds for any micro-batch count, thread count or binding
// exploration, and a smaller budget fits less), and the decision holds what ran, with the choice
// and the reason as what it held back, not explored. A new memory budget keeps the record: a
// share of the plain peak no plan fits fits no better under another budget for the session.
// Where no configuration the pins allow passes both records on a bucket, they are let go one at a
// time: what did not fit first (such a step runs, split further), then the budget refused (the
// trainer refuses it again, and the step runs the one before), then both. Until 2026-12-07 both
// went at once, and a bucket where nothing fitted could be given a budget the run had refused.
//
// Note [A new memory budget]
// A budget set on the running job (the studio's set_budget, Trainer::setRematBudget) changes the
// space when the session's budget is a fraction: the remat_budget knob takes 0.3, 0.4, ... up to
// it, and a budget in megabytes has no such knob. The controller had kept the space it began
// with and went on drawing the budgets of the old one; each was refused as outside the run's space
// and its step learnt as the configuration before, under the knob value the old space stood at.
// So newBudget() moves it to the run's new space. Its speed model's terms are of the old space's
// knob values, and every time it learnt was measured under the old budget's plans, so over another
// space it learns the speeds afresh; it keeps the pins, the exclusions of Note [Divergence
// constraint] and the budget refused, where the new space has their values, and its random
// generator. What did not fit (Note [Predicted not to fit]) at a share of its own is kept (a share
// is of the plain peak, whatever the session's budget); at the session's budget it is kept when
// that did not grow (what did not fit under more does not fit under less), at the largest share
// the new space takes below it, and forgotten when it did. With the knob unchanged (megabytes
// before and after), the model keeps what it learnt.
//
// Note [A knob that changes nothing]
// binding_explore decides whether the binder measures a (site, bucket) it meets unsettled; on a
// batch that meets none, 0 and 1 run alike. The model learns them alike too, and the draws then
// fell on either as a coin would: in twelve bound runs of 200 steps on the tree network and the
// tagger (2026-12-06), 6-79 of a run's 13-84 explored steps ran the default's micro-batches and
// threads, which the mean chose on nearly every step, and differed from it in binding_explore
// alone: the decision log named as exploring what changed nothing. So choose() takes the knobs
// idle for the step, each with the value it keeps; the trainer names binding_explore idle at 1
// on a shape bucket whose last step met nothing unsettled (Binder::unsettledMet), while the
// binder explores and no choice made without exploring waits to be decided again. Another
// bucket, or a micro-batch count that meets new site buckets, measures as exploring always did;
// a pin outranks it, and where the exclusions leave nothing at that value it is let go.
//
// Note [Conservative exploration]
// Exploring costs the steps it spends on slower configurations. With `conservative` above 0 (off
// by default: the reckoning below trusts the model's view of the baseline, and a model that
// misjudges it lets a slower configuration run, docs/control.md), after its first `warmupSteps`
// decisions the controller explores only as far as the run can afford: the seconds its measured
// steps took since then must stay within 1/`conservative` of what the configuration the run began
// with (its baseline) would have taken on the same batches — that configuration's measured time
// on the steps it ran, and on the others the step's time less as much as the model allows the
// baseline to have been faster (a saving counts only as far as the model is sure of it; a cost
// in full). A configuration the draw chooses
// runs only if, taken as slow as the model says it may be (its mean relative to the baseline
// plus `pessimism` standard deviations of that difference), the run would still keep to it;
// otherwise the mean's best runs when it passes the same test, and else the baseline. So the run's
// throughput from the warm-up on stays at `conservative` of the baseline's or above as far as
// the model's uncertainty is right, exploration goes on from what faster configurations save (a
// configuration 3 % faster than the baseline pays for exploring 6 % of a step, each step), and a
// configuration held back is named in the decision (Decision::heldBack). This is the conservative
// bandit's rule (Kazerouni et al., "Conservative contextual linear bandits", 2017) on the time.

#include <cstdint>
#include <deque>
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
  // The batch's signals, by the name of their feature (docs/features.md), and their terms' prior
  // variance.
  std::vector<std::string> signalNames = {"batch_size", "sequence_length"};
  double signalVariance = 0.25;
  // Note [A longer sample takes longer]: the prior mean of each signal's own term, in the order
  // of signalNames (missing ones 0): a sample's time as its length, whatever the batch's size.
  std::vector<double> signalSlopes = {0.0, 1.0};
  // Note [Ordinal knobs] (additive_model.h): the prior variances of an ordinal knob's trend and
  // of its values' deviations from it ({0, 0}: independent terms), and Note [Explored outward].
  OrdinalPrior ordinal = {0.25, 0.05};
  bool outward = true;
  // Note [Around the leader].
  bool aroundLeader = true;
  // Note [Old steps fade] (additive_model.h): how many observations the model remembers (a step
  // this many old counts about 1/e of a new one); 0: all alike.
  double horizon = 0;
  // Note [A level that moves] (additive_model.h): this many steps of one configuration in a row
  // beyond `shiftThreshold` times the recent residuals' scale on one side, and the model lets
  // that configuration's own terms go by `shiftSpread`; 0: off.
  int shiftRun = 0;
  double shiftThreshold = 2.5;
  double shiftSpread = 0.25;
  // Note [Divergence constraint].
  double divergence = 3.0;
  int divergenceWarmup = 5;
  // Note [Conservative exploration]: the share of the baseline's throughput the run keeps to
  // after `warmupSteps` decisions (0, the default: explores freely throughout; off until its
  // reckoning survives a model that misjudges the baseline, docs/control.md), and how many
  // standard deviations slower than its mean a configuration may be taken to be.
  double conservative = 0;
  int64_t warmupSteps = 30;
  double pessimism = 1.0;
  // How many decisions log() keeps, the latest: a run of millions of steps does not keep them all
  // (a decision, with its alternatives and drivers, is a few hundred bytes).
  size_t logKept = 10000;
};

// One reason the chosen configuration beat the next best by the model's mean: a knob value it
// took instead of the other's, or a signal's value, and the factor it multiplies the predicted
// samples per second by (over 1: for the chosen). On a step that explored, the first alternative
// is the mean's best, and the factors (their product under 1) say what exploring gave up.
struct Driver {
  std::string what;  // "microbatches 4 rather than 2", "sequence_length 512"
  double factor = 1;
};

// One decision: what was chosen for a step and why, and what came of it.
struct Decision {
  int64_t step = 0;
  std::string bucket;  // the context: the batch's shape bucket
  Configuration chosen;
  // What the step ran where that was not `chosen`: the trainer split it further (notFit(), Note
  // [Divergence constraint]); nullopt: `chosen`, or not known.
  std::optional<Configuration> ran;
  // The model's mean for the chosen configuration (samples per second), and whether the draw
  // chose other than the mean's best (exploring).
  double predictedSamplesPerSecond = 0;
  bool explored = false;
  // The next best by the model's mean, with their predicted samples per second.
  std::vector<std::pair<Configuration, double>> alternatives;
  // The batch's signals (name, value) and why the chosen beat alternatives.front(), largest
  // factor first (none before anything is measured).
  std::vector<std::pair<std::string, double>> batchSignals;
  std::vector<Driver> drivers;
  std::optional<double> samplesPerSecond;  // measured, once observed
  // The constraint the step broke, one line (Note [Divergence constraint]); empty: none.
  std::string violation;
  // The configuration the draw chose and Note [Conservative exploration] held back, and why, one
  // line; empty: none.
  std::string heldBack;
  // Whether the step's time made the model believe its configuration's speed had moved (Note [A
  // level that moves] in additive_model.h): the earlier steps count less from here on.
  bool levelMoved = false;
  // The knobs kept at a value because on this step it changes nothing (Note [A knob that changes
  // nothing]): neither drawn nor among the alternatives.
  std::vector<std::pair<std::string, double>> idle;
};

class OnlineController {
 public:
  // Throws std::invalid_argument for an empty space, or an option out of its range (named: a
  // variance or noise of 0 or below, or not finite, would make every posterior NaN).
  explicit OnlineController(ConfigSpace space, ControllerOptions options = {});

  // The configuration for step `step` on a batch of `bucket` whose signals have `signals` (in
  // the order of ControllerOptions::signalNames; missing ones count as the first batch's).
  // `idle`: knobs whose value makes no difference to this step, each with the value it keeps
  // (Note [A knob that changes nothing]); a pinned knob keeps its pin instead, and where the
  // exclusions leave nothing with those values they are let go.
  Decision choose(int64_t step, const std::string& bucket,
                  const std::vector<double>& batchSignals = {},
                  const std::map<std::string, double>& idle = {});
  // What the step took: its seconds (without building the batch) and samples, and its loss (NaN:
  // not finite; nullopt: not known, no constraint checked). Logs the decision.
  void observe(Decision decision, double stepSeconds, int64_t samples,
               std::optional<double> loss = std::nullopt);

  // From now on knob `name` keeps `value` (one of its values); unpin() lets it go again. Throws
  // std::invalid_argument for a knob or value outside the space, or a value the exclusions
  // (Note [Divergence constraint]) leave no configuration for with the other pins.
  void pin(const std::string& name, double value);
  void unpin(const std::string& name);
  const std::map<std::string, double>& pins() const { return pins_; }

  // The last options.logKept decisions, oldest first; decisions() counts every one.
  const std::deque<Decision>& log() const { return log_; }
  int64_t decisions() const { return decisions_; }
  // Note [Conservative exploration]: the configuration the run began with, and the seconds the
  // steps since the warm-up took and the baseline is reckoned to have taken on them.
  const Configuration& baseline() const { return baseline_; }
  std::pair<double, double> secondsSinceWarmup() const { return {spent_, baselineSpent_}; }
  const ConfigSpace& space() const { return space_; }
  // How many times its model believed a configuration's speed moved (Note [A level that moves]).
  int64_t shifts() const { return model_.shifts(); }
  // The configurations a broken constraint excluded, in the order excluded.
  const std::vector<Configuration>& excluded() const { return excluded_; }
  // Note [Predicted not to fit]: `decision`'s configuration did not fit the memory budget on
  // its bucket, for the reason `why` (one line), which becomes the decision's violation (so the
  // step is not learnt from). `ranMicrobatches`: the micro-batches the step ran in, split further
  // (StepResult::microbatches), which the decision then holds as what ran (Decision::ran, Note
  // [Divergence constraint]); nullopt: not known, the choice taken to have run.
  // notFitting(c, bucket): whether a record rules `c` out on `bucket`.
  void notFit(Decision& decision, const std::string& why,
              std::optional<int> ranMicrobatches = std::nullopt);
  bool notFitting(const Configuration& c, const std::string& bucket) const;
  // Note [A new memory budget]: the run's budget changed, the session's `grew` (or cannot be
  // told not to have), and the run's space is now `run`, whose remat_budget knob the controller
  // takes (its other knobs stay its own). Returns whether it learns the speeds afresh (that knob
  // changed).
  bool newBudget(const ConfigSpace& run, bool grew);
  // The run could not set `decision`'s configuration, for the reason `why` (one line), and its
  // step runs `ran` instead, which `decision` then holds, with what was chosen and why as what it
  // held back (not explored). `rematBudget`: the refused configuration's remat budget was the
  // reason, and no configuration with one as small or smaller is chosen again (Note [A budget the
  // run refused]); nullopt: the refusal is the step's alone.
  void refused(Decision& decision, const Configuration& ran, const std::string& why,
               std::optional<double> rematBudget = std::nullopt);
  // The largest remat budget refused(), or nullopt.
  std::optional<double> refusedBudget() const { return refusedBudget_; }
  // What it has learnt and where it stands, as JSON text (a checkpoint's; Note [Checkpoints] in
  // trainer.h): the model's terms, the random generator, the first batch's signals, the pins,
  // the exclusions, what did not fit on which bucket, the largest budget refused, the loss's
  // average, the count of decisions and the last decision (what it chose and ran). restore() on a
  // controller of the same space goes on as this one would have; its log starts again from that
  // last decision, decisions() counting on from the state's (a state written before 2026-12-07
  // has no count: its last decision alone is counted). Throws std::invalid_argument for a state
  // of another space or malformed text.
  std::string state() const;
  void restore(const std::string& state);

  // The model's mean samples per second of `c` on `bucket` with `signals` (as choose() takes
  // them; the bucket's term 0 when unseen).
  double predictedSamplesPerSecond(const Configuration& c, const std::string& bucket,
                                   const std::vector<double>& batchSignals = {}) const;

 private:
  bool allowed(const Configuration& c) const;  // by the pins and the exclusions
  // Note [Explored outward]: whether each ordinal knob of `c` takes a learnt value or the next to
  // one (pinned knobs aside).
  bool outward(const Configuration& c) const;
  // Note [Around the leader]: whether every ordinal knob of `c` takes a learnt value, and whether
  // each one of `c` (pinned knobs aside) is the leader's or the next to it.
  bool measured(const Configuration& c) const;
  bool nextTo(const Configuration& c, const Configuration& leader) const;
  // The signals as the model takes them: the log of each one's ratio (plus one) to the first
  // batch's.
  std::vector<double> scaled(const std::vector<double>& batchSignals) const;
  // Why `chosen` beats `other` under the terms `theta`, for a batch of scaled signals `z`.
  std::vector<Driver> drivers(const Configuration& chosen, const Configuration& other,
                              const std::vector<double>& z, const std::vector<double>& theta) const;
  void read(const std::string& state);  // restore()'s work, done on a copy
  // Checks the step's loss against Note [Divergence constraint].
  void checkLoss(Decision& decision, double loss);
  // Note [Conservative exploration]: how much slower than the baseline (the log of the ratio of
  // their times) `c` may be on a batch of `bucket` and scaled signals `z` under the terms'
  // posterior `post` — its mean plus `pessimism` standard deviations — and whether grid_[i] may
  // run on such a batch.
  double slowerAtMost(const Configuration& c, const std::string& bucket,
                      const std::vector<double>& z, const TermPosterior& post) const;
  bool affordable(size_t i, const std::string& bucket, const std::vector<double>& z,
                  const TermPosterior& post) const;

  ConfigSpace space_;
  ControllerOptions options_;
  std::vector<Configuration> grid_;
  AdditiveModel model_;  // the buckets are its contexts
  std::map<std::string, double> pins_;
  std::vector<Configuration> excluded_;
  std::map<std::string, std::vector<Configuration>> notFitting_;  // by bucket
  std::optional<double> refusedBudget_;                           // Note [A budget the run refused]
  std::vector<double> signalReference_;                           // the first batch's signals
  std::mt19937_64 rng_;
  std::deque<Decision> log_;
  int64_t decisions_ = 0;
  // Note [Divergence constraint]: the losses' average and count, whether the last step diverged.
  double lossAverage_ = 0;
  int64_t losses_ = 0;
  bool lastDiverged_ = false;
  int64_t highInARow_ = 0;               // finite losses over the bound, in a row
  std::optional<Configuration> blamed_;  // excluded when this run of diverged losses began
  // Note [Conservative exploration].
  Configuration baseline_;
  int64_t observed_ = 0;      // decisions observed
  double spent_ = 0;          // seconds of the measured steps since the warm-up
  double baselineSpent_ = 0;  // what the baseline took, or would have, on them
  int64_t lastSamples_ = 1;   // the last measured step's samples
};

}  // namespace symtune::control
