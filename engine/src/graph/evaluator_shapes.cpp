// A forward on shapes alone (Note [Shapes only] in evaluator.h): the batch, the module's tensor
// attributes and the graph's tensor constants on the meta device, and the ops LibTorch's C++ build
// has no meta kernel for.

#include <algorithm>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "evaluator.h"

namespace symtune {

void SyMuGen::Evaluator::runOnShapes(const Node* node, torch::jit::Stack& stack) {
  if (shapedWithoutMeta(node, stack))
    return;
  if (!onZerosWithoutMeta(node)) {
    operation(node)(stack);
    return;
  }
  torch::jit::Stack zeros = stack;
  if (!lacksMeta(node->kind())) {
    try {
      operation(node)(stack);
      return;
    } catch (const c10::NotImplementedError&) {
      lacksMeta(node->kind(), true);
    }
  }
  for (auto& v : zeros) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_meta()) {
      const at::Tensor& t = v.toTensor();
      v = at::zeros(t.sizes(), t.options().device(at::kCPU));
    }
  }
  operation(node)(zeros);
  for (auto& v : zeros) {
    if (v.isTensor() && v.toTensor().defined())
      v = v.toTensor().to(at::kMeta);
  }
  stack = std::move(zeros);
}

bool SyMuGen::Evaluator::lacksMeta(c10::Symbol kind, bool found) {
  static std::mutex lock;
  static std::unordered_set<c10::Symbol> kinds;
  std::lock_guard<std::mutex> guard(lock);
  if (found)
    kinds.insert(kind);
  return kinds.count(kind) > 0;
}

bool SyMuGen::Evaluator::shapedWithoutMeta(const Node* node, torch::jit::Stack& stack) {
  using namespace c10;
  static const std::unordered_set<Symbol> asInput = {
      aten::layer_norm, aten::batch_norm, aten::group_norm, aten::relu,   aten::gelu,
      aten::tanh,       aten::sigmoid,    aten::leaky_relu, aten::dropout};
  const Symbol kind = node->kind();
  if (node->outputs().size() != 1 || stack.empty() || !stack[0].isTensor())
    return false;
  const at::Tensor first = stack[0].toTensor();
  if (!first.defined() || !first.is_meta())
    return false;
  at::Tensor out;
  if (kind == aten::dropout && stack.size() == 3 && stack[1].isDouble() && stack[2].isBool() &&
      (!stack[2].toBool() || stack[1].toDouble() == 0)) {
    out = first;  // as ATen's: the input itself, when it drops nothing
  } else if (asInput.count(kind) > 0) {
    out = at::empty_like(first);
  } else if (kind == aten::index_select && stack.size() == 3 && stack[1].isInt() &&
             stack[2].isTensor()) {
    std::vector<int64_t> sizes = first.sizes().vec();
    if (!sizes.empty())
      sizes[c10::maybe_wrap_dim(stack[1].toInt(), first.dim())] = stack[2].toTensor().numel();
    out = at::empty(sizes, first.options());
  } else if (kind == aten::embedding && stack.size() >= 2 && stack[1].isTensor() &&
             first.dim() == 2) {
    std::vector<int64_t> sizes = stack[1].toTensor().sizes().vec();
    sizes.push_back(first.size(1));
    out = at::empty(sizes, first.options());
  } else {
    return false;
  }
  stack.clear();
  stack.emplace_back(std::move(out));
  return true;
}

bool SyMuGen::Evaluator::onZerosWithoutMeta(const Node* node) {
  using namespace c10;
  static const std::unordered_set<Symbol> ops = {aten::conv1d, aten::conv2d, aten::conv3d};
  const Symbol kind = node->kind();
  // where(condition) alone is nonzero(condition): its shape is the condition's values.
  return ops.count(kind) > 0 || (kind == aten::where && node->inputs().size() == 3);
}

c10::IValue SyMuGen::Evaluator::onMeta(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (!t.defined() || t.is_meta())
      return value;
    auto found = metaCopies_.find(t.unsafeGetTensorImpl());
    if (found == metaCopies_.end()) {
      at::Tensor meta = t.to(at::kMeta);
      if (t.has_storage()) {
        const auto& params = parameterStorages();
        const bool parameter = std::any_of(params.begin(), params.end(), [&](const SeenStorage& p) {
          return p.unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl();
        });
        if (parameter)
          parameterStorages_.push_back(meta.storage());
      }
      found = metaCopies_.emplace(t.unsafeGetTensorImpl(), std::move(meta)).first;
    }
    return found->second;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorVector())
      list.push_back(onMeta(t).toTensor());
    return list;
  }
  if (value.isList()) {
    auto list = value.toList().copy();
    for (size_t i = 0; i < list.size(); ++i)
      list.set(i, onMeta(list.get(i)));
    return list;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& item : value.toTupleRef().elements())
      items.push_back(onMeta(item));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return value;
}

}  // namespace symtune
