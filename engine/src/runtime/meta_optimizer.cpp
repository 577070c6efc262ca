#include "symtune/runtime/meta_optimizer.h"

#include <chrono>
#include <utility>

#include "symtune/profiling/nvtx.h"

namespace symtune {

namespace {
using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

MetaOptimizer::MetaOptimizer(std::unique_ptr<torch::optim::Optimizer> inner,
                             MetaOptimizerOptions options)
    : inner_(std::move(inner)), options_(options) {
  TORCH_CHECK(inner_ != nullptr, "MetaOptimizer needs an optimizer to wrap");
}

MetaStepStats MetaOptimizer::step(const std::function<torch::Tensor()>& closure,
                                  const control::BatchFacts& facts) {
  std::vector<std::string> broken = guards_.admit(facts);
  if (!broken.empty()) {
    control::OptimizeRequired required{steps_, std::move(broken)};
    if (replan_)
      replan_(required);
    if (options_.raiseOptimizeRequired) {
      required_.push_back(required);
      throw control::OptimizeRequiredError(std::move(required));
    }
    broken_ = std::move(required.reasons);
  }
  return step(closure);
}

void MetaOptimizer::noteBranches(const std::vector<RegionId>& taken,
                                 const std::function<std::string(RegionId)>& name) {
  noteBroken(guards_.admitBranches(taken, name));
}

void MetaOptimizer::noteFacts(const control::BatchFacts& facts) {
  noteBroken(guards_.admit(facts));
}

void MetaOptimizer::noteBroken(std::vector<std::string> broken) {
  if (broken.empty())
    return;
  if (replan_)
    replan_(control::OptimizeRequired{steps_, broken});
  broken_.insert(broken_.end(), broken.begin(), broken.end());
}

MetaStepStats MetaOptimizer::step(const std::function<torch::Tensor()>& closure) {
  MetaStepStats stats;
  stats.step = steps_;
  if (options_.zeroGradBeforeClosure) {
    inner_->zero_grad();
  }
  // Whatever ends the step — its update, or an error on the way — what it broke is on record
  // (re-planned for, even when the step did not complete), and not carried to the next step.
  struct Record {
    MetaOptimizer& self;
    MetaStepStats& stats;
    ~Record() {
      if (self.broken_.empty())
        return;
      self.required_.push_back(
          control::OptimizeRequired{self.steps_, std::exchange(self.broken_, {})});
      stats.optimizeRequired = self.required_.back();
    }
  };
  {
    Record record{*this, stats};
    auto t0 = Clock::now();
    const torch::Tensor loss = closure();
    TORCH_CHECK(loss.defined(), "the MetaOptimizer closure returned an undefined tensor");
    stats.closureSeconds = secondsSince(t0);
    {
      nvtx::Range range("update");  // the rules' gate and the optimizer's step
      stats.skipped = gate_ && !gate_(loss);
      t0 = Clock::now();
      if (!stats.skipped) {
        // The optimizer gets the closure: one that evaluates again (LBFGS, which refuses a step
        // without one) has its first call answered with the loss above, and the others run the
        // closure again, gradients zeroed first as for the first. Adam and the rest call it
        // once, or not at all.
        bool first = true;
        inner_->step([&]() -> torch::Tensor {
          if (std::exchange(first, false))
            return loss;
          if (options_.zeroGradBeforeClosure)
            inner_->zero_grad();
          return closure();
        });
      }
      stats.updateSeconds = secondsSince(t0);
    }
    stats.loss = loss.detach();
  }
  ++steps_;
  return stats;
}

}  // namespace symtune
