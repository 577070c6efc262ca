#pragma once
// MetaOptimizer: the user-facing wrapper around any torch::optim::Optimizer. `step(closure)` runs
// the closure (forward, loss, backward) and the update; later parts (telemetry, rules, bindings,
// remat, the controller) hook into this same step.
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

#include <torch/optim/optimizer.h>

namespace symtune {

struct MetaOptimizerOptions {
  // Zero the gradients before running the closure (so the closure holds only the model's code).
  // Default: true.
  bool zeroGradBeforeClosure = true;
};

struct MetaStepStats {
  int64_t step = 0;           // 0-based index of this step
  torch::Tensor loss;         // what the closure returned (detached)
  double closureSeconds = 0;  // forward + loss + backward
  double updateSeconds = 0;   // the inner optimizer's update
  bool skipped = false;       // the update gate held the update back (no parameter changed)
};

class MetaOptimizer {
 public:
  explicit MetaOptimizer(std::unique_ptr<torch::optim::Optimizer> inner,
                         MetaOptimizerOptions options = {});

  // Runs `closure`, which must compute the loss, call backward() on it and return it, then applies
  // the inner optimizer's update. Throws c10::Error when the closure returns an undefined tensor.
  MetaStepStats step(const std::function<torch::Tensor()>& closure);

  // Called after the closure with its loss, before the update: false skips this step's update
  // (parameters and optimizer state stay as they are). Rules use it (`skip step`).
  void setUpdateGate(std::function<bool(const torch::Tensor& loss)> gate) {
    gate_ = std::move(gate);
  }

  torch::optim::Optimizer& inner() { return *inner_; }
  int64_t stepCount() const { return steps_; }

 private:
  std::unique_ptr<torch::optim::Optimizer> inner_;
  MetaOptimizerOptions options_;
  std::function<bool(const torch::Tensor&)> gate_;
  int64_t steps_ = 0;
};

}  // namespace symtune
