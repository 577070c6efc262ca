#include "symtune/exec/executor.h"

#include <utility>

namespace symtune {

torch::Tensor forwardOutput(const c10::IValue& out) {
  TORCH_CHECK(out.isTensor(), "the model's forward returned ", out.tagKind(),
              ", expected a Tensor");
  return out.toTensor();
}

ScriptModuleExecutor::ScriptModuleExecutor(torch::jit::Module module, std::string graphName)
    : module_(std::move(module)), graphName_(std::move(graphName)) {
}

ScriptModuleExecutor::~ScriptModuleExecutor() = default;

ForwardResult ScriptModuleExecutor::run(const std::vector<torch::jit::IValue>& inputs,
                                        const ForwardRequest& request) {
  ForwardResult result;
  if (!request.measured()) {
    result.output = forwardOutput(module_.forward(inputs));
    return result;
  }
  ForwardOptions options;
  options.record = request.record;
  EvaluatorRun run = symugen()->forward(inputs, options);
  result.output = forwardOutput(run.output);
  result.owners = std::move(run.owners);
  result.branches = std::move(run.branches);
  return result;
}

SyMuGen* ScriptModuleExecutor::symugen() {
  if (!gen_)
    gen_ = std::make_unique<SyMuGen>(module_, graphName_);
  return gen_.get();
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
