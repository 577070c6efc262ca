#pragma once
// MetaInfoBroker: the 24-number feature vector of every training step (docs/features.md), built
// from step timings, the MemoryTracker and the GradientMonitor, published to subscribers and kept
// in a bounded history. The trainer drives it; rules, the controller and the studio read it.
//
//   symtune::MetaInfoBroker broker(namedParameters);
//   auto id = broker.subscribe([](const symtune::StepFeatures& f) { ... f[symtune::Feature::Loss]
//   ... });

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "symtune/core/features.h"
#include "symtune/telemetry/gradient_monitor.h"
#include "symtune/telemetry/memory_tracker.h"
#include "symtune/telemetry/op_tracer.h"

namespace symtune {

struct MetaInfoBrokerOptions {
  size_t historySize = 4096;      // steps kept; the oldest is dropped first
  int64_t updateRatioEvery = 10;  // measure the update/weight ratio every N steps (it copies the
                                  // weights); 0: never
};

// What the trainer knows of a step besides what the broker measures itself.
struct StepTimings {
  double data = 0, forward = 0, backward = 0, optimizer = 0, total = 0;  // seconds
  double decide = 0;  // the online controller's choice and its configuring the step (in total)
};

class MetaInfoBroker {
 public:
  using Subscriber = std::function<void(const StepFeatures&)>;

  MetaInfoBroker(const std::vector<std::pair<std::string, torch::Tensor>>& parameters,
                 MetaInfoBrokerOptions options = {});
  ~MetaInfoBroker();

  // The step's bracket: beginStep() before the batch is fetched; the guard it returns keeps the
  // memory tracker active (keep it alive through backward and the update). perOpMemory: per-op
  // memory reports are wanted (per-node telemetry); otherwise a CPU model's step memory comes
  // from the allocation counter (Note [Step memory without reports]) and the guard is empty.
  [[nodiscard]] std::unique_ptr<c10::DebugInfoGuard> beginStep(bool perOpMemory = false);
  // Right after backward, before anything changes the gradients: their statistics. After
  // several backwards whose gradients add up (micro-batches), `accumulated`: of the parameters'
  // gradients as they stand, not of the last backward's.
  void afterBackward(bool accumulated = false) {
    if (accumulated)
      gradients_.readAccumulated();
    gradients_.stats();
  }
  bool wantsUpdateRatio() const;  // whether to call before/afterUpdate around this step's update
  void beforeUpdate() { gradients_.beforeUpdate(); }
  void afterUpdate() { gradients_.afterUpdate(); }
  // Computes the step's features, keeps them and hands them to every subscriber.
  // `peakBeforeResets`: the highest CPU allocation counter peak the trainer reset during the step
  // (StepResult::peakBeforeResets), which the step's peak includes. `skipped`: a rule skipped the
  // step (Note [The loss's average]).
  const StepFeatures& endStep(const StepTimings& timings, double loss, double learningRate,
                              int64_t batchSize, int64_t sequenceLength,
                              std::optional<int64_t> peakBeforeResets = std::nullopt,
                              bool skipped = false);

  // What rules read during a step, after afterBackward(): the previous step's features with this
  // step's index, loss (and its delta and moving average), gradient statistics and learning
  // rate filled in.
  StepFeatures featuresSoFar(double loss, double learningRate) const;

  int subscribe(Subscriber subscriber);
  void unsubscribe(int id);

  // Off: no gradient hooks (the trainer does not drive a disabled broker).
  void setEnabled(bool on) { gradients_.setEnabled(on); }

  const std::deque<StepFeatures>& history() const { return history_; }

  // What a resumed run goes on from (Note [Checkpoints] in symtune/runtime/trainer.h): the steps
  // counted, the loss's moving average and the last step's features, as the run that saved them
  // had them. Rules read them (`step`, `loss_ema`, `loss_delta`): a resume that began them again
  // fired `when step == 10` at step 10 of the resumed part.
  struct Resumable {
    int64_t step = 0;
    double lossEma = std::numeric_limits<double>::quiet_NaN();  // none yet: the next loss seeds it
    std::optional<StepFeatures> last;
  };
  Resumable resumable() const {
    return {step_, lossEma_,
            history_.empty() ? std::nullopt : std::optional<StepFeatures>(history_.back())};
  }
  void resume(const Resumable& from) {
    step_ = from.step;
    lossEma_ = from.lossEma;
    history_.clear();
    if (from.last)
      history_.push_back(*from.last);
  }
  const GradientMonitor& gradients() const { return gradients_; }

 private:
  MetaInfoBrokerOptions options_;
  GradientMonitor gradients_;
  MemoryTracker memory_;
  bool cudaModel_ = false;
  bool countedStep_ = false;  // this step's memory comes from CpuAllocationCounter
  // What was live when the step began (CPU, CUDA), which its peak is counted on top of; and the
  // allocation counter's count then (a counted step's allocations are those after it).
  int64_t cpuBase_ = 0, cudaBase_ = 0;
  int64_t cpuAllocationsBase_ = 0;
  void fillLossAndGradients(StepFeatures& f, double loss) const;
  double averageWith(double loss) const;  // Note [The loss's average]

  std::deque<StepFeatures> history_;
  std::map<int, Subscriber> subscribers_;
  int nextSubscriber_ = 0;
  int64_t step_ = 0;
  double lossEma_ = std::numeric_limits<double>::quiet_NaN();  // Note [The loss's average]
};

}  // namespace symtune
