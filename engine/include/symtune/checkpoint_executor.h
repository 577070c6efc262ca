#pragma once
// Full activation checkpointing: every top-level block of the model (SyMuGen::checkpointBlocks())
// keeps no activations in the forward and recomputes them in the backward (Note [Checkpointed
// spans]). The benchmark's "checkpoint" baseline; remat's planner chooses among the same spans.
//
//   auto& script = dynamic_cast<symtune::ScriptModuleExecutor&>(trainer.executor());
//   trainer.setExecutor(std::make_unique<symtune::CheckpointExecutor>(script.module()));

#include <torch/script.h>

#include "symtune/executor.h"
#include "symtune/symugen.h"

namespace symtune {

class CheckpointExecutor final : public Executor {
 public:
  explicit CheckpointExecutor(torch::jit::Module module);

  // Under grad mode, through SyMuGen's evaluator with checkpointing; otherwise the module's own.
  torch::Tensor forward(const std::vector<torch::jit::IValue>& inputs) override;
  std::vector<torch::Tensor> parameters() override { return inner_.parameters(); }
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override {
    return inner_.namedParameters();
  }
  void setTraining(bool on) override { inner_.setTraining(on); }
  void to(const torch::Device& device) override { inner_.to(device); }
  torch::jit::Module* scriptModule() override { return inner_.scriptModule(); }
  const char* name() const override { return "checkpoint"; }

  // The top-level blocks, and how many block calls the last forward checkpointed.
  std::vector<std::string> blocks() const { return gen_.checkpointBlocks(); }
  int64_t lastCheckpointed() const { return lastCheckpointed_; }

 private:
  ScriptModuleExecutor inner_;
  SyMuGen gen_;
  int64_t lastCheckpointed_ = 0;
};

}  // namespace symtune
