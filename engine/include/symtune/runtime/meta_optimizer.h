#pragma once
// MetaOptimizer: the user-facing wrapper around any torch::optim::Optimizer. `step(closure)` runs
// the closure (forward, loss, backward) and the update; later parts (telemetry, rules, bindings,
// remat, the controller) hook into this same step. An optimizer that evaluates the loss more than
// once a step (torch::optim::LBFGS) runs the closure again from its update.
//
//   symtune::MetaOptimizer opt(std::make_unique<torch::optim::AdamW>(params, 1e-3));
//   auto stats = opt.step([&] {
//     auto loss = torch::cross_entropy_loss(model.forward(x), y);
//     loss.backward();
//     return loss;
//   });

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <torch/optim/optimizer.h>

#include "symtune/control/guards.h"

namespace symtune {

struct MetaOptimizerOptions {
  // Zero the gradients before running the closure (so the closure holds only the model's code).
  // Default: true.
  bool zeroGradBeforeClosure = true;
  // A batch that breaks a guard before its closure runs (Note [Guards]: a new shape bucket, budget
  // or device): raise control::OptimizeRequiredError and run nothing — call step() again, the
  // guards hold now — rather than return OptimizeRequired in the step's stats (the default). A
  // break seen only once the closure ran (a new branch pattern) is always returned.
  bool raiseOptimizeRequired = false;
};

struct MetaStepStats {
  int64_t step = 0;           // 0-based index of this step
  torch::Tensor loss;         // what the closure returned (detached)
  double closureSeconds = 0;  // forward + loss + backward
  double updateSeconds = 0;   // the inner optimizer's update
  bool skipped = false;       // the update gate held the update back (no parameter changed)
  // The guards the step's batch broke, and so what the optimizers re-planned for.
  std::optional<control::OptimizeRequired> optimizeRequired;
};

class MetaOptimizer {
 public:
  explicit MetaOptimizer(std::unique_ptr<torch::optim::Optimizer> inner,
                         MetaOptimizerOptions options = {});

  // Runs `closure`, which must compute the loss, call backward() on it and return it, then applies
  // the inner optimizer's update. Throws c10::Error when the closure returns an undefined tensor.
  MetaStepStats step(const std::function<torch::Tensor()>& closure);
  // step() for a batch the optimizers plan for: `facts` are checked against the guards before the
  // closure runs, and a break calls the re-planner, then raises or returns OptimizeRequired
  // (MetaOptimizerOptions::raiseOptimizeRequired).
  MetaStepStats step(const std::function<torch::Tensor()>& closure,
                     const control::BatchFacts& facts);
  // From inside the closure: the branch pattern a forward ran, and facts that changed on the way
  // (a step split again: new micro-batch buckets), checked against the guards. What they break
  // is returned with the step, which has run.
  void noteBranches(const std::vector<RegionId>& taken,
                    const std::function<std::string(RegionId)>& name = {});
  void noteFacts(const control::BatchFacts& facts);
  // Called with what a batch broke, before its step goes on: the optimizers re-plan for it.
  void setReplanner(std::function<void(const control::OptimizeRequired&)> replan) {
    replan_ = std::move(replan);
  }
  // Every OptimizeRequired so far, oldest first.
  const std::vector<control::OptimizeRequired>& optimizeRequired() const { return required_; }
  const control::Guards& guards() const { return guards_; }

  // Called after the closure with its loss, before the update: false skips this step's update
  // (parameters and optimizer state stay as they are). Rules use it (`skip step`).
  void setUpdateGate(std::function<bool(const torch::Tensor& loss)> gate) {
    gate_ = std::move(gate);
  }

  torch::optim::Optimizer& inner() { return *inner_; }
  int64_t stepCount() const { return steps_; }
  // A resumed run's count: the steps its checkpoint holds.
  void resumeAt(int64_t steps) { steps_ = steps; }

 private:
  std::unique_ptr<torch::optim::Optimizer> inner_;
  MetaOptimizerOptions options_;
  std::function<bool(const torch::Tensor&)> gate_;
  std::function<void(const control::OptimizeRequired&)> replan_;
  control::Guards guards_;
  std::vector<control::OptimizeRequired> required_;
  std::vector<std::string> broken_;  // this step's, so far
  int64_t steps_ = 0;

  void noteBroken(std::vector<std::string> broken);
};

}  // namespace symtune
