#include "symtune/runtime/meta_optimizer.h"

#include <chrono>

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

MetaStepStats MetaOptimizer::step(const std::function<torch::Tensor()>& closure) {
  MetaStepStats stats;
  stats.step = steps_;
  if (options_.zeroGradBeforeClosure) {
    inner_->zero_grad();
  }
  auto t0 = Clock::now();
  torch::Tensor loss = closure();
  TORCH_CHECK(loss.defined(), "the MetaOptimizer closure returned an undefined tensor");
  stats.closureSeconds = secondsSince(t0);
  {
    nvtx::Range range("update");  // the rules' gate and the optimizer's step
    stats.skipped = gate_ && !gate_(loss);
    t0 = Clock::now();
    if (!stats.skipped)
      inner_->step();
    stats.updateSeconds = secondsSince(t0);
  }
  stats.loss = loss.detach();
  ++steps_;
  return stats;
}

}  // namespace symtune
