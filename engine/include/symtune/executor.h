#pragma once
// The one seam through which the trainer runs a model (docs/architecture.md, "The execution
// seam"): later parts (DynaCompiler, remat) take over execution behind it without touching the
// training loop.

#include <string>
#include <utility>
#include <vector>

#include <torch/script.h>

namespace symtune {

class Executor {
 public:
  virtual ~Executor() = default;

  // Runs the model's forward on `inputs` and returns its output tensor.
  virtual torch::Tensor forward(const std::vector<torch::jit::IValue>& inputs) = 0;
  virtual std::vector<torch::Tensor> parameters() = 0;
  // Parameters with their dotted names ("layer1.0.body.conv1.weight").
  virtual std::vector<std::pair<std::string, torch::Tensor>> namedParameters() = 0;
  virtual void setTraining(bool on) = 0;
  virtual void to(const torch::Device& device) = 0;
  // The TorchScript module it runs, if any (graph capture and per-node telemetry need one).
  virtual torch::jit::Module* scriptModule() { return nullptr; }
  // A short name for reports: "torchscript", "checkpoint", ...
  virtual const char* name() const = 0;
};

// Runs a TorchScript module's `forward` with TorchScript's default (profiling) executor.
class ScriptModuleExecutor final : public Executor {
 public:
  explicit ScriptModuleExecutor(torch::jit::Module module);

  torch::Tensor forward(const std::vector<torch::jit::IValue>& inputs) override;
  std::vector<torch::Tensor> parameters() override;
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override;
  void setTraining(bool on) override;
  void to(const torch::Device& device) override;
  torch::jit::Module* scriptModule() override { return &module_; }
  const char* name() const override { return "torchscript"; }

  torch::jit::Module& module() { return module_; }

 private:
  torch::jit::Module module_;
};

}  // namespace symtune
