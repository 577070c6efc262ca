#include "symtune/executor.h"

#include <utility>

namespace symtune {

ScriptModuleExecutor::ScriptModuleExecutor(torch::jit::Module module) : module_(std::move(module)) {
}

torch::Tensor ScriptModuleExecutor::forward(const std::vector<torch::jit::IValue>& inputs) {
  auto out = module_.forward(inputs);
  TORCH_CHECK(out.isTensor(), "the model's forward returned ", out.tagKind(),
              ", expected a Tensor");
  return out.toTensor();
}

std::vector<torch::Tensor> ScriptModuleExecutor::parameters() {
  std::vector<torch::Tensor> params;
  for (const auto& p : module_.parameters()) {
    params.push_back(p);
  }
  return params;
}

std::vector<std::pair<std::string, torch::Tensor>> ScriptModuleExecutor::namedParameters() {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : module_.named_parameters())
    params.emplace_back(p.name, p.value);
  return params;
}

void ScriptModuleExecutor::setTraining(bool on) {
  module_.train(on);
}

void ScriptModuleExecutor::to(const torch::Device& device) {
  module_.to(device);
}

}  // namespace symtune
