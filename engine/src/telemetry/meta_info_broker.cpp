#include "symtune/telemetry/meta_info_broker.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace symtune {

MetaInfoBroker::MetaInfoBroker(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                               MetaInfoBrokerOptions options)
    : options_(options), gradients_(parameters) {
  for (const auto& [name, p] : parameters)
    cudaModel_ = cudaModel_ || p.is_cuda();
}

MetaInfoBroker::~MetaInfoBroker() = default;

std::unique_ptr<c10::DebugInfoGuard> MetaInfoBroker::beginStep(bool perOpMemory) {
  gradients_.beginStep();
  // A step's CPU memory comes from the allocation counter whenever it is in use, per-node steps
  // included: a sampled step's peak is then measured as an unsampled one's, and the reports
  // (requested sizes, this thread and autograd's) serve the per-op figures alone.
  countedStep_ = !cudaModel_ && CpuAllocationCounter::active();
  if (countedStep_) {
    CpuAllocationCounter::resetPeak();
    const MemoryCounters now = CpuAllocationCounter::counters();
    cpuBase_ = now.current;
    cpuAllocationsBase_ = now.allocations;
  }
  if (countedStep_ && !perOpMemory)
    return nullptr;
  auto guard = memory_.activate();
  memory_.resetPeak();
  if (!countedStep_)
    cpuBase_ = memory_.counters(c10::DeviceType::CPU).current;
  cudaBase_ = memory_.counters(c10::DeviceType::CUDA).current;
  return guard;
}

bool MetaInfoBroker::wantsUpdateRatio() const {
  return options_.updateRatioEvery > 0 && step_ % options_.updateRatioEvery == 0;
}

// Note [The loss's average]
// loss_ema is an exponential average, weight 0.1, of the finite losses of the steps that were not
// skipped: a NaN or infinite loss would hold it at NaN or infinity for the rest of the run (and
// the spike guard, `loss > 3 * loss_ema`, blind), and a spike a rule skipped would raise it for
// tens of steps. The first such loss seeds it; until then, and on a step whose loss is not
// finite, it is what it was. What a step's rules read includes that step's loss, so
// `loss > 3 * loss_ema` fires above 3 / 0.7 = 3.86 times the average before the step.
double MetaInfoBroker::averageWith(double loss) const {
  if (!std::isfinite(loss))
    return lossEma_;
  return std::isnan(lossEma_) ? loss : 0.9 * lossEma_ + 0.1 * loss;
}

void MetaInfoBroker::fillLossAndGradients(StepFeatures& f, double loss) const {
  const double previous = history_.empty() ? loss : history_.back()[Feature::Loss];
  f[Feature::Loss] = loss;
  f[Feature::LossDelta] = loss - previous;
  f[Feature::LossEma] = averageWith(loss);

  double maxNorm = 0, minNorm = std::numeric_limits<double>::infinity(), absSum = 0;
  double elements = 0;
  int64_t nans = 0, infs = 0, without = 0;
  for (const auto& s : gradients_.stats()) {
    if (!s.hasGradient) {
      ++without;
      continue;
    }
    maxNorm = std::max(maxNorm, s.norm);
    minNorm = std::min(minNorm, s.norm);
    absSum += s.meanAbs * static_cast<double>(s.numel - s.nanCount - s.infCount);
    elements += static_cast<double>(s.numel - s.nanCount - s.infCount);
    nans += s.nanCount;
    infs += s.infCount;
  }
  f[Feature::GradGlobalNorm] = gradients_.globalNorm();
  f[Feature::GradMaxParamNorm] = maxNorm;
  f[Feature::GradMinParamNorm] = std::isinf(minNorm) ? 0.0 : minNorm;
  f[Feature::GradMeanAbs] = elements > 0 ? absSum / elements : 0.0;
  f[Feature::GradNanCount] = static_cast<double>(nans);
  f[Feature::GradInfCount] = static_cast<double>(infs);
  f[Feature::ParamsWithoutGrad] = static_cast<double>(without);
}

StepFeatures MetaInfoBroker::featuresSoFar(double loss, double learningRate) const {
  StepFeatures f = history_.empty() ? StepFeatures{} : history_.back();
  f[Feature::Step] = static_cast<double>(step_);
  fillLossAndGradients(f, loss);
  f[Feature::UpdateRatioMax] = std::numeric_limits<double>::quiet_NaN();
  f[Feature::LearningRate] = learningRate;
  return f;
}

const StepFeatures& MetaInfoBroker::endStep(const StepTimings& t, double loss, double learningRate,
                                            int64_t batchSize, int64_t sequenceLength,
                                            std::optional<int64_t> peakBeforeResets, bool skipped) {
  StepFeatures f;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  f[Feature::Step] = static_cast<double>(step_);
  f[Feature::StepTime] = t.total;
  f[Feature::DataTime] = t.data;
  f[Feature::ForwardTime] = t.forward;
  f[Feature::BackwardTime] = t.backward;
  f[Feature::OptimizerTime] = t.optimizer;
  f[Feature::SamplesPerSecond] = t.total > 0 ? static_cast<double>(batchSize) / t.total : 0.0;
  f[Feature::BatchSize] = static_cast<double>(batchSize);
  f[Feature::SequenceLength] = static_cast<double>(sequenceLength);

  MemoryCounters cpu =
      countedStep_ ? CpuAllocationCounter::counters() : memory_.counters(c10::DeviceType::CPU);
  if (countedStep_ && peakBeforeResets)
    cpu.peak = std::max(cpu.peak, *peakBeforeResets);  // Note [A step's peak across resets]
  // The counter counts on through the resets of a step (micro-batches, the binder's lifted
  // limits): until 2026-12-07 each zeroed it, and a step of four micro-batches told a quarter.
  if (countedStep_)
    cpu.allocations -= cpuAllocationsBase_;
  const MemoryCounters cuda = memory_.counters(c10::DeviceType::CUDA);
  // On top of what was live when the step began (the counters count from when counting began).
  f[Feature::PeakMemory] = static_cast<double>(
      std::max<int64_t>({cpu.peak - cpuBase_, cuda.peak - cudaBase_, int64_t{0}}));
  f[Feature::LiveMemory] = static_cast<double>(cpu.current + cuda.current);
  f[Feature::Allocations] = static_cast<double>(cpu.allocations + cuda.allocations);

  if (!skipped)
    lossEma_ = averageWith(loss);
  fillLossAndGradients(f, loss);
  f[Feature::LossEma] = lossEma_;  // without a skipped step's loss
  // A parameter whose ratio is not finite (its weights NaN after the update) is the largest: NaN
  // here means "not measured", and std::max passed a NaN ratio over for another's finite one.
  double maxRatio = nan;
  for (const auto& st : gradients_.stats()) {
    if (!st.hasGradient || !st.updateRatio)
      continue;
    const double ratio =
        std::isfinite(*st.updateRatio) ? *st.updateRatio : std::numeric_limits<double>::infinity();
    maxRatio = std::isnan(maxRatio) ? ratio : std::max(maxRatio, ratio);
  }
  f[Feature::UpdateRatioMax] = maxRatio;
  f[Feature::LearningRate] = learningRate;

  history_.push_back(f);
  while (history_.size() > std::max<size_t>(options_.historySize, 1))  // 0 kept none: back() UB
    history_.pop_front();
  ++step_;
  for (const auto& [id, subscriber] : subscribers_)
    subscriber(history_.back());
  return history_.back();
}

int MetaInfoBroker::subscribe(Subscriber subscriber) {
  subscribers_.emplace(nextSubscriber_, std::move(subscriber));
  return nextSubscriber_++;
}

void MetaInfoBroker::unsubscribe(int id) {
  subscribers_.erase(id);
}

}  // namespace symtune
