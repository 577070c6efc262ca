#pragma once
// torch::optim optimizers whose step is one fused pass over all parameters (fused_optim.h):
// drop-in replacements with the same options, the same per-parameter state (AdamParamState,
// AdamWParamState, SGDParamState: step counts, exp_avg, exp_avg_sq, momentum_buffer), the same
// arithmetic, save() and load() — so MetaOptimizer, rules and checkpoints see no difference but
// the time. New state tensors are views into one flat buffer per step that creates them
// (parameters that get their first gradient together), so the state is contiguous in memory.
//
//   symtune::MetaOptimizer opt(std::make_unique<symtune::optim::FusedAdamW>(
//       model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-2)));
//
// Not supported (refused with a message): amsgrad, sparse gradients.

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <vector>

namespace symtune::optim {

// Adam and AdamW share one implementation: weight decay added to the gradient (Adam) or applied
// to the parameter before the update (AdamW).
template <typename Options, typename State, bool Decoupled>
class FusedAdamStep : public torch::optim::Optimizer {
 public:
  explicit FusedAdamStep(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                         Options defaults = {});
  explicit FusedAdamStep(std::vector<torch::Tensor> params, Options defaults = {})
      : FusedAdamStep({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {
  }
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

using FusedAdam = FusedAdamStep<torch::optim::AdamOptions, torch::optim::AdamParamState, false>;
using FusedAdamW = FusedAdamStep<torch::optim::AdamWOptions, torch::optim::AdamWParamState, true>;
extern template class FusedAdamStep<torch::optim::AdamOptions, torch::optim::AdamParamState, false>;
extern template class FusedAdamStep<torch::optim::AdamWOptions, torch::optim::AdamWParamState,
                                    true>;

class FusedSGD : public torch::optim::Optimizer {
 public:
  explicit FusedSGD(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                    torch::optim::SGDOptions defaults);
  explicit FusedSGD(std::vector<torch::Tensor> params, torch::optim::SGDOptions defaults)
      : FusedSGD({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace symtune::optim
