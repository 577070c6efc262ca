#include "symtune/checkpoint_executor.h"

namespace symtune {

CheckpointExecutor::CheckpointExecutor(torch::jit::Module module)
    : inner_(module), gen_(module, "checkpoint") {
}

torch::Tensor CheckpointExecutor::forward(const std::vector<torch::jit::IValue>& inputs) {
  if (!at::GradMode::is_enabled())
    return inner_.forward(inputs);
  EvaluatorRun run = gen_.forward(inputs, ForwardOptions{/*checkpoint=*/true});
  lastCheckpointed_ = run.checkpointed;
  TORCH_CHECK(run.output.isTensor(), "the model's forward returned ", run.output.tagKind(),
              ", expected a Tensor");
  return run.output.toTensor();
}

}  // namespace symtune
