// What a recomputed span runs otherwise than the forward did (Note [Recomputed batch norms] in
// evaluator.h, and the one below).

#include "evaluator.h"

namespace symtune {

// Note [Module state written once]
// An op that writes a module's tensor attribute in place (a batch norm's
// `self.num_batches_tracked.add_(1)`) did so in the forward; run again in a recomputed span it
// counted twice a step, and under `momentum=None` the running statistics' factor,
// 1 / num_batches_tracked, went wrong with it (3 steps checkpointed: 6 batches tracked, the
// running mean 3 % off). Recomputing passes it over: its output is its input, as in place.
// Such an op is one whose schema says it writes its first input, that input an attribute read
// by prim::GetAttr (through an Optional's unchecked_cast: a batch norm's counter is
// Optional[Tensor]).
bool SyMuGen::Evaluator::writesModuleState(const Node* node) {
  const torch::jit::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr || schema->arguments().empty() || node->inputs().empty() ||
      node->outputs().size() != 1)
    return false;
  const c10::AliasInfo* alias = schema->arguments()[0].alias_info();
  if (alias == nullptr || !alias->isWrite())
    return false;
  const Node* from = node->inputs()[0]->node();
  while (from->kind() == c10::prim::unchecked_cast)
    from = from->inputs()[0]->node();
  return from->kind() == c10::prim::GetAttr;
}

}  // namespace symtune
