#include "symtune/remat/rematerializer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include <ATen/Context.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "../binding/measurement.h"
#include "plan_cost.h"
#include "symtune/binding/shape_bucket.h"

namespace symtune::remat {

namespace {

// A plan is reused while the plain peak it was made for, and the limit it was made under, move
// by less than this share.
constexpr double kPlanTolerance = 0.02;
// The plans a bucket keeps, one per limit (Note [Plans per limit]).
constexpr size_t kPlansPerBucket = 4;

// Whether a plan made under `made` may run under `now` (Note [Plans per limit]).
bool sameLimit(const std::optional<int64_t>& made, const std::optional<int64_t>& now) {
  if (!made || !now)
    return made.has_value() == now.has_value();
  return std::abs(static_cast<double>(*made - *now)) <=
         kPlanTolerance * static_cast<double>(std::max(*made, *now));
}

const at::Tensor* firstTensor(const std::vector<c10::IValue>& inputs) {
  for (const auto& in : inputs) {
    if (in.isTensor() && in.toTensor().defined())
      return &in.toTensor();
  }
  return nullptr;
}

// The ints among `inputs`, in order.
std::vector<int64_t> intsOf(const std::vector<c10::IValue>& inputs) {
  std::vector<int64_t> ints;
  for (const auto& in : inputs) {
    if (in.isInt())
      ints.push_back(in.toInt());
  }
  return ints;
}

// The shortest of three timed runs of `fn`, after one untimed.
double shortestSeconds(const torch::Device& device, const std::function<void()>& fn) {
  const auto sync = [&] {
    if (device.is_cuda())
      torch::cuda::synchronize(device.index());
  };
  fn();
  sync();
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

std::string formatBytes(double bytes) {
  char text[32];
  if (std::abs(bytes) >= 1e6)
    std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  else if (std::abs(bytes) >= 1e3)
    std::snprintf(text, sizeof text, "%.0f kB", bytes / 1e3);
  else
    std::snprintf(text, sizeof text, "%.0f bytes", bytes);
  return text;
}

const char* strategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::Plan:
      return "plan";
    case Strategy::Checkpoint:
      return "checkpoint";
    case Strategy::Selective:
      return "selective";
  }
  return "plan";
}

namespace {

void checkOptions(const RematOptions& options_) {
  TORCH_CHECK(!(options_.budgetBytes && options_.budgetFraction),
              "remat: a budget in bytes or a fraction of the plain peak, not both");
  TORCH_CHECK(!options_.budgetBytes || *options_.budgetBytes > 0,
              "remat: the budget must be more than 0 bytes, got ",
              options_.budgetBytes.value_or(0));
  TORCH_CHECK(
      !options_.budgetFraction || (*options_.budgetFraction > 0 && *options_.budgetFraction <= 1),
      "remat: the budget fraction must be in (0, 1], got ", options_.budgetFraction.value_or(0));
  TORCH_CHECK(
      options_.strategy != Strategy::Plan || options_.budgetBytes || options_.budgetFraction,
      "remat: the planner needs a budget (in bytes or as a fraction of the plain peak)");
  TORCH_CHECK(options_.strategy == Strategy::Plan || !options_.budgetFraction, "remat: the ",
              strategyName(options_.strategy),
              " strategy takes a budget in bytes, not a fraction (it runs no plain step to measure "
              "what the fraction is of)");
  TORCH_CHECK(!options_.plainPeakBytes || *options_.plainPeakBytes > 0,
              "remat: the plain peak must be more than 0 bytes, got ",
              options_.plainPeakBytes.value_or(0));
  TORCH_CHECK(options_.calibrationSteps >= 1, "remat: at least one calibration step, got ",
              options_.calibrationSteps);
  TORCH_CHECK(options_.margin >= 0 && options_.margin < 1,
              "remat: the margin must be in [0, 1), got ", options_.margin);
  TORCH_CHECK(options_.profileShare > 0 && options_.profileShare <= 1,
              "remat: the share of a step a profile per batch may take must be in (0, 1], got ",
              options_.profileShare);
}

}  // namespace

Rematerializer::Rematerializer(RematOptions options, std::vector<at::Tensor> buffers)
    : options_(options), buffers_(std::move(buffers)) {
  checkOptions(options_);
}

void Rematerializer::setBudget(std::optional<int64_t> bytes, std::optional<double> fraction,
                               bool check) {
  RematOptions next = options_;
  next.budgetBytes = bytes;
  next.budgetFraction = fraction;
  checkOptions(next);
  const auto fit = predictor_.fit();
  // A fraction needs the plain peak: without a plain step measured (the run began with bytes),
  // the predicted one. A run part-way through its calibration steps finishes them.
  const bool uncalibrated = plainSteps_ == 0;
  // The predicted plain peak stands for the calibration's measured one: kept as it, or a fit let
  // go after (forgetPeaks) left the fraction of nothing, a limit of 0 bytes (until 2026-12-07).
  double predictedPlainPeak = 0;
  if (fit) {
    for (const auto& [key, bucket] : buckets_)
      predictedPlainPeak = std::max(predictedPlainPeak, predictedPlain(bucket, *fit));
  }
  const double calibratedPlain = calibratedPlain_;
  // Each bucket's budget before the change, to tell which overruns still say something.
  const auto budgetOf = [&](const Bucket& bucket) {
    return budgetFor(fit ? predictedPlain(bucket, *fit) : 0.0);
  };
  std::map<std::string, std::optional<int64_t>> before;
  for (const auto& [key, bucket] : buckets_)
    before[key] = budgetOf(bucket);
  if (check && fit && (next.budgetBytes || next.budgetFraction)) {
    std::swap(options_, next);
    const size_t plainSteps = plainSteps_;
    if (fraction && uncalibrated) {
      plainSteps_ = static_cast<size_t>(options_.calibrationSteps);
      calibratedPlain_ = predictedPlainPeak;
    }
    try {
      for (const auto& [key, bucket] : buckets_) {
        const auto bytesNow = budgetFor(predictedPlain(bucket, *fit));
        if (!bytesNow)
          continue;  // a fraction part-way through the calibration: nothing to check it by yet
        const double budget = static_cast<double>(*bytesNow);
        const double smallest = leastByFit(bucket, *fit).second;
        if (smallest > budget)
          throw RematInfeasible("remat: the budget of " + formatBytes(budget) +
                                    " is below what any plan fits: even with the plan that "
                                    "holds least the step on " +
                                    key + " is predicted to peak at " + formatBytes(smallest) +
                                    ", the smallest feasible budget",
                                smallest);
      }
    } catch (...) {
      std::swap(options_, next);
      plainSteps_ = plainSteps;
      calibratedPlain_ = calibratedPlain;
      throw;
    }
  } else {
    options_ = next;
    if (fraction && uncalibrated && fit) {
      plainSteps_ = static_cast<size_t>(options_.calibrationSteps);
      calibratedPlain_ = predictedPlainPeak;
    }
  }
  // The plans made for the old budget go. Under a larger one the plans that overran may fit: until
  // 2026-12-07 they stayed barred, and a budget raised on the running job still ran the plan that
  // recomputes all it can. Under a smaller or the same one they would overrun again, and stay
  // barred. The margins stay: they are what the fit missed by, whatever the budget.
  for (auto& [key, bucket] : buckets_) {
    bucket.plans.clear();
    const std::optional<int64_t> old = before[key], now = budgetOf(bucket);
    if (!old || (now && *now > *old))
      bucket.overran.clear();
  }
}

namespace {

// What a checkpointed span costs beyond its ops: an autograd function that keeps its input and
// whose backward runs the op again in a nested backward.
struct SpanProbe : torch::autograd::Function<SpanProbe> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x) {
    ctx->save_for_backward({x});
    return {x.detach() * 2};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    {
      at::AutoGradMode grad(true);
      torch::autograd::backward({x * 2}, {grads[0]});
    }
    return {x.grad()};
  }
};

}  // namespace

void Rematerializer::measureRates(const std::vector<c10::IValue>& inputs) {
  if (options_.secondsPerFlop > 0 && options_.secondsPerByte > 0 && options_.secondsPerSpan > 0)
    return;
  const at::Tensor* first = firstTensor(inputs);
  const torch::Device device = first != nullptr ? first->device() : torch::Device(torch::kCPU);
  torch::NoGradGuard noGrad;
  const auto on = torch::TensorOptions(device);
  if (options_.secondsPerFlop <= 0) {
    // Constant matrices: a draw from the run's generator would move its dropout masks.
    const int64_t n = 256;
    auto a = torch::full({n, n}, 0.5, on), b = torch::full({n, n}, 0.25, on),
         c = torch::empty({n, n}, on);
    options_.secondsPerFlop =
        shortestSeconds(device, [&] { torch::mm_out(c, a, b); }) / (2.0 * n * n * n);
  }
  if (options_.secondsPerByte <= 0) {
    const int64_t elements = int64_t{1} << 22;
    auto src = torch::ones({elements}, on), dst = torch::empty({elements}, on);
    options_.secondsPerByte =
        shortestSeconds(device, [&] { dst.copy_(src); }) / (2.0 * elements * sizeof(float));
  }
  if (options_.secondsPerSpan <= 0) {
    auto x = torch::ones({1}, on.requires_grad(true));
    options_.secondsPerSpan = shortestSeconds(device, [&] {
      at::AutoGradMode grad(true);
      SpanProbe::apply(x)[0].sum().backward();
    });
  }
}

Rematerializer::Bucket& Rematerializer::bucketOf(SyMuGen& gen,
                                                 const std::vector<c10::IValue>& inputs,
                                                 const std::string& key) {
  // The rates units are priced at, and the units that never come back whole: once a run.
  measureRates(inputs);
  if (loops_.empty()) {
    loops_ = gen.loopSpans();
    runs_ = gen.opRuns();
    loops_.insert(loops_.end(), runs_.begin(), runs_.end());
  }
  if (options_.profilePerBatch && shapesRun_ != false) {
    // Note [A profile per batch]: each batch planned on its own count, where the model's forward
    // runs on shapes alone.
    auto found = buckets_.find(key);
    Bucket fresh;
    Bucket& bucket = found != buckets_.end() ? found->second : fresh;
    if (countShapes(gen, inputs, bucket)) {
      if (found != buckets_.end())
        return found->second;
      fresh.margin = options_.margin;
      ++stats_.buckets;
      return buckets_.emplace(key, std::move(fresh)).first->second;
    }
  }
  int64_t elements = 0;
  for (const auto& in : inputs) {
    if (in.isTensor() && in.toTensor().defined())
      elements += in.toTensor().numel();
  }
  const std::vector<int64_t> ints = intsOf(inputs);
  auto found = buckets_.find(key);
  if (found != buckets_.end() && elements <= found->second.inputElements) {
    // Larger ints (a longer memory) count as a larger batch too.
    bool larger = false;
    for (size_t i = 0; i < ints.size() && i < found->second.inputInts.size(); ++i)
      larger = larger || ints[i] > found->second.inputInts[i];
    if (!larger)
      return found->second;
  }
  // A new bucket, or a batch larger than the one its profile was counted on (a bucket spans up
  // to twice the size in each dimension, and each int up to twice its value): the profile stands
  // for the largest batch seen.
  // The counting forward must leave the run as it found it, also when it throws: the random
  // states its dropouts draw from (the CPU's and each CUDA device's of the inputs) and the
  // statistics its batch norms update.
  torch::NoGradGuard noGrad;
  struct Restore {
    binding::detail::KeptRandomState random;
    std::vector<at::Tensor>& buffers;
    std::vector<at::Tensor> kept;
    ~Restore() {
      random.restore();
      for (size_t i = 0; i < buffers.size(); ++i)
        buffers[i].copy_(kept[i]);
    }
  } restore{binding::detail::KeptRandomState(inputs), buffers_, {}};
  for (const auto& b : buffers_)
    restore.kept.push_back(b.clone());
  ForwardOptions counting;
  counting.countCost = true;
  Bucket bucket;
  bucket.profile = gen.forward(inputs, counting).cost;
  bucket.units = rematUnits(gen, bucket.profile, 1.0, options_.secondsPerFlop,
                            options_.secondsPerByte, options_.secondsPerSpan);
  bucket.inputElements = elements;
  bucket.inputInts = ints;
  if (found != buckets_.end()) {
    // A batch larger in one respect and smaller in another: the profile that saves more stands,
    // for the largest of each seen (so the two do not take turns being counted; the margin and
    // the back-off cover a batch larger in both).
    if (found->second.profile.savedBytes > bucket.profile.savedBytes) {
      bucket.profile = found->second.profile;
      bucket.units = found->second.units;
    }
    bucket.inputElements = std::max(elements, found->second.inputElements);
    for (size_t i = 0; i < ints.size() && i < found->second.inputInts.size(); ++i)
      bucket.inputInts[i] = std::max(ints[i], found->second.inputInts[i]);
  }
  ++stats_.profiles;
  if (found != buckets_.end()) {
    bucket.margin = found->second.margin;
    if (found->second.inputElements == 0) {
      // Profiled per batch until now (Note [What a profile per batch may cost]): its plans, made
      // for the batches it met, and the plans that overran on it stay.
      bucket.plans = std::move(found->second.plans);
      bucket.overran = std::move(found->second.overran);
    }
    found->second = std::move(bucket);  // else its plans go: made for a smaller batch
    return found->second;
  }
  bucket.margin = options_.margin;
  ++stats_.buckets;
  return buckets_.emplace(key, std::move(bucket)).first->second;
}

double Rematerializer::comesBack(const Bucket& bucket, const SegmentPlan& plan) const {
  double most = 0;
  for (const auto& name : plan.recompute) {
    if (std::find(loops_.begin(), loops_.end(), name) != loops_.end())
      continue;
    if (const auto share = shareOf(bucket.units, name))
      most = std::max(most, share->comesBack);
  }
  return most;
}

double Rematerializer::keptBytes(const Bucket& bucket, const SegmentPlan& plan) const {
  double kept = bucket.profile.savedBytes;
  for (const auto& name : plan.recompute) {
    if (const auto share = shareOf(bucket.units, name))
      kept -= share->freedBytes;
  }
  return std::max(0.0, kept);
}

void Rematerializer::setRefusedUnits(std::set<std::string> refused) {
  if (refused == refused_)
    return;
  refused_ = std::move(refused);
  for (auto& [key, bucket] : buckets_) {
    auto& plans = bucket.plans;
    plans.erase(
        std::remove_if(plans.begin(), plans.end(),
                       [&](const StepPlan& p) {
                         return std::any_of(
                             p.segments.recompute.begin(), p.segments.recompute.end(),
                             [&](const std::string& name) { return refused_.count(name) != 0; });
                       }),
        plans.end());
  }
}

Forecast Rematerializer::forecast(double fraction) const {
  Forecast out;
  const auto fit = predictor_.fit();
  if (!fit || buckets_.empty() || plainSteps_ == 0) {
    out.note = "remat: nothing measured yet to forecast from";
    return out;
  }
  for (const auto& [key, bucket] : buckets_) {
    const double plain = predictedPlain(bucket, *fit);
    const double budget = fraction * fractionOf(plain);
    try {
      const StepPlan plan = planUnder(bucket, key, *fit, budget, fraction);
      out.costSeconds = std::max(out.costSeconds.value_or(0), plan.cost);
    } catch (const RematInfeasible& e) {
      out.infeasible = e.what();
      out.costSeconds.reset();
      return out;
    }
  }
  return out;
}

StepPlan Rematerializer::prepareStep(SyMuGen& gen, const std::vector<c10::IValue>& inputs,
                                     int64_t reserved) {
  ++stats_.steps;
  reserved_ = std::max<int64_t>(reserved, 0);
  const std::string key = binding::inputsBucketKey(inputs);
  Bucket& bucket = bucketOf(gen, inputs, key);
  const auto fit = predictor_.fit();
  if (options_.strategy == Strategy::Checkpoint) {
    // Every top-level block, held to the budget when there is one to hold to.
    return planOfSegments(bucket, key, everyBlock(bucket));
  }
  if (options_.strategy == Strategy::Selective)
    return planOfSegments(bucket, key, cheapOps(bucket));
  if (options_.budgetFraction && plainSteps_ < static_cast<size_t>(options_.calibrationSteps)) {
    // The plain peak the fraction is of: measured on the first steps, run plain and unenforced.
    StepPlan plain;
    plain.bucket = key;
    plain.keptSavedBytes = bucket.profile.savedBytes;
    plain.calibrating = true;
    return plain;
  }
  if (!fit || !budgetedSeen_) {
    // No plan measured yet: the one that frees most, which fits surely if anything does (and
    // gives the fit a second size).
    StepPlan most = mostFreeing(bucket, key);
    if (fit)
      most.predictedPlain = fit->intercept + fit->slope * bucket.profile.savedBytes;
    return most;
  }
  const double plain = predictedPlain(bucket, *fit);
  for (auto made = bucket.plans.rbegin(); made != bucket.plans.rend(); ++made) {
    if (!made->predictedPlain || std::abs(plain - *made->predictedPlain) > kPlanTolerance * plain)
      continue;
    const std::optional<int64_t> limit = limitFor(*made->predictedPlain);
    if (!sameLimit(made->limitBytes, limit))
      continue;
    StepPlan step = *made;
    step.cached = true;
    step.limitBytes = limit;  // the step's own: what is held before it moves a little
    // What the plan keeps and brings back of this batch (with a profile per batch, not quite the
    // batch it was made for), and what the fit says of it now: it has learnt from the steps since
    // the plan was made (the first steps under a plan of a kind not seen before miss by most).
    step.keptSavedBytes = keptBytes(bucket, step.segments);
    step.recomputedBytes = comesBack(bucket, step.segments);
    step.cost = costOf(bucket.units, step.segments);
    step.predictedPlain = plain;
    step.predictedPeak = predictedPeak(bucket, step.segments, *fit);
    // A plan made under its target that the fit has since learnt to predict over it is planned
    // anew, not run into an overrun and a back-off. (One made over it, for want of any under it,
    // is what a new plan would be again.)
    if (limit) {
      const double target = static_cast<double>(*limit) * (1 - bucket.margin);
      if (made->predictedPeak <= target && step.predictedPeak > target)
        continue;
    }
    ++stats_.cacheHits;
    return step;
  }
  if (bucket.plans.size() >= kPlansPerBucket)
    bucket.plans.erase(bucket.plans.begin());
  bucket.plans.push_back(planFor(bucket, key, *fit));
  return bucket.plans.back();
}

const std::vector<RematUnit>* Rematerializer::unitsOf(const std::string& bucket) const {
  const auto found = buckets_.find(bucket);
  return found != buckets_.end() ? &found->second.units : nullptr;
}

std::optional<int64_t> Rematerializer::budgetFor(double predictedPlain) const {
  if (options_.budgetBytes)
    return options_.budgetBytes;
  if (options_.budgetFraction && plainSteps_ >= static_cast<size_t>(options_.calibrationSteps)) {
    return static_cast<int64_t>(
        std::llround(*options_.budgetFraction * fractionOf(predictedPlain)));
  }
  return std::nullopt;
}

double Rematerializer::fractionOf(double plain) const {
  return std::max(
      {calibratedPlain_, static_cast<double>(options_.plainPeakBytes.value_or(0)), plain});
}

std::optional<int64_t> Rematerializer::limitFor(double predictedPlain) const {
  const std::optional<int64_t> budget = budgetFor(predictedPlain);
  if (!budget)
    return budget;
  return std::max<int64_t>(*budget - reserved_, 0);
}

Rematerializer::Measurements Rematerializer::measurements() const {
  return {static_cast<int64_t>(plainSteps_), calibratedPlain_, budgetedSeen_,
          predictor_.observed()};
}

void Rematerializer::restore(const Measurements& measured) {
  MemoryPredictor predictor;  // what observe() refuses leaves this one as it was
  for (const auto& [saved, peak, recomputed] : measured.steps)
    predictor.observe(saved, peak, recomputed);
  predictor_ = std::move(predictor);
  plainSteps_ = static_cast<size_t>(std::max<int64_t>(measured.plainSteps, 0));
  calibratedPlain_ = measured.plainPeak;
  budgetedSeen_ = measured.budgetedSeen;
}

void Rematerializer::forgetPeaks() {
  predictor_ = MemoryPredictor();
  budgetedSeen_ = false;
  for (auto& [key, bucket] : buckets_) {
    bucket.plans.clear();
    bucket.margin = options_.margin;
    bucket.overran.clear();
  }
}

void Rematerializer::endStep() {
  if (calibratedThisStep_)
    ++plainSteps_;
  calibratedThisStep_ = false;
}

void Rematerializer::observe(const StepPlan& plan, double peakBytes, double reserved,
                             bool settled) {
  if (!settled) {
    // Note [Steps the binder settles in]. A run whose binder settles in on every step calibrates
    // on them all the same, after as many again as it calibrates on.
    if (!plan.calibrating || ++unsettledPlain_ <= static_cast<size_t>(options_.calibrationSteps))
      return;
  }
  if (plan.calibrating) {
    if (stepwise_)
      calibratedThisStep_ = true;
    else
      ++plainSteps_;
    calibratedPlain_ = std::max(calibratedPlain_, peakBytes + reserved);
  } else {
    budgetedSeen_ = true;
  }
  predictor_.observe(plan.keptSavedBytes, std::max(0.0, peakBytes), plan.recomputedBytes);
}

}  // namespace symtune::remat
