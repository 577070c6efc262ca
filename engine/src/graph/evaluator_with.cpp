// `with` blocks in SyMuGen's evaluator (Note [With blocks] in evaluator.h).

#include "evaluator.h"

namespace symtune {

void SyMuGen::Evaluator::runWith(const Node* node) {
  const bool enter = node->kind() == c10::prim::Enter;
  auto object = valueOf(node->input(0)).toObject();
  torch::jit::Stack stack{c10::IValue(object)};
  if (!enter) {
    TORCH_INTERNAL_ASSERT(!entered_.empty() && entered_.back().get() == object.get(),
                          "SyMuGen: prim::Exit of an object not the last entered");
    entered_.pop_back();
    stack.insert(stack.end(), 3, c10::IValue());  // exc_type, exc_value, traceback
  }
  object->type()->getMethod(enter ? "__enter__" : "__exit__").run(stack);
  if (enter)
    entered_.push_back(object);
  env_[node->output()] = stack.empty() ? c10::IValue() : std::move(stack.back());
}

void SyMuGen::Evaluator::exitAll() noexcept {
  while (!entered_.empty()) {
    const auto object = entered_.back();
    entered_.pop_back();
    try {
      torch::jit::Stack stack{c10::IValue(object), c10::IValue(), c10::IValue(), c10::IValue()};
      object->type()->getMethod("__exit__").run(stack);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the forward's own error is the one to tell
    }
  }
}

}  // namespace symtune
