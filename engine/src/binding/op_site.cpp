#include "symtune/binding/op_site.h"

#include <limits>

#include <torch/csrc/jit/ir/constants.h>

namespace symtune::binding {

namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// The constant `v` holds, if it is one.
std::optional<c10::IValue> constant(const Value* v) {
  return torch::jit::toIValue(v);
}

bool isNoneOrInt(const Value* v, int64_t expected) {
  const auto c = constant(v);
  return c.has_value() && (c->isNone() || (c->isInt() && c->toInt() == expected));
}

bool isTensor(const Value* v) {
  return v->type()->isSubtypeOf(*c10::TensorType::get());
}

// Whether `node` lies in `block` or in a block nested in it.
bool inside(const Node* node, const Block* block) {
  for (const Block* b = node->owningBlock(); b != nullptr;) {
    if (b == block)
      return true;
    const Node* owner = b->owningNode();
    b = owner != nullptr ? owner->owningBlock() : nullptr;
  }
  return false;
}

bool identitySlice(const Node* node) {
  // aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None,
  //                    SymInt step=1)
  if (node->kind() != c10::aten::slice || node->inputs().size() != 5 ||
      node->outputs().size() != 1 || !isTensor(node->input(0)))
    return false;
  const auto end = constant(node->input(3));
  const bool fullEnd =
      end.has_value() &&
      (end->isNone() || (end->isInt() && end->toInt() == std::numeric_limits<int64_t>::max()));
  return constant(node->input(1)).has_value() && isNoneOrInt(node->input(2), 0) && fullEnd &&
         isNoneOrInt(node->input(4), 1) && !constant(node->input(4))->isNone();
}

// The loop whose counter `v` is, if it is one.
const Node* counterOf(const Value* v) {
  const Node* param = v->node();
  if (param->kind() != c10::prim::Param || v->offset() != 0)
    return nullptr;
  const Block* body = param->owningBlock();
  const Node* loop = body != nullptr ? body->owningNode() : nullptr;
  return loop != nullptr && loop->kind() == c10::prim::Loop ? loop : nullptr;
}

}  // namespace

std::string siteName(const Node* node, NodeId id, const Graph& graph) {
  std::string name = "#" + std::to_string(id.value()) + " " + node->kind().toQualString();
  if (id.valid() && static_cast<size_t>(id.value()) < graph.nodes().size()) {
    const std::string& path = graph.node(id).modulePath;
    if (!path.empty())
      name += " " + path;
  }
  return name;
}

bool mutatesTensors(const Block* block) {
  for (const Node* node : block->nodes()) {
    if (node->kind() == c10::prim::SetAttr)
      return true;
    for (const Block* inner : node->blocks()) {
      if (mutatesTensors(inner))
        return true;
    }
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr || !schema->is_mutable())
      continue;
    for (const auto& arg : schema->arguments()) {
      const auto* alias = arg.alias_info();
      if (alias != nullptr && alias->isWrite() && arg.type()->isSubtypeOf(*c10::TensorType::get()))
        return true;
    }
  }
  return false;
}

bool loopInvariant(const Value* value, const Block* body) {
  const Node* node = value->node();
  if (!inside(node, body))
    return true;
  if (node->kind() == c10::prim::Param || !node->blocks().empty())
    return false;
  if (node->kind() != c10::prim::Constant && node->kind() != c10::prim::GetAttr) {
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr || schema->is_mutable() || node->isNondeterministic())
      return false;
  }
  for (const Value* in : node->inputs()) {
    if (!loopInvariant(in, body))
      return false;
  }
  return true;
}

std::optional<OpSite> findOpSite(const Node* node, NodeId id, const Graph& graph) {
  OpSite site;
  site.node = node;
  site.id = id;
  if (identitySlice(node)) {
    site.pattern = kIdentitySlice;
  } else if (node->kind() == c10::aten::select && node->inputs().size() == 3 &&
             isTensor(node->input(0)) && constant(node->input(1)).has_value()) {
    // aten::select.int(Tensor(a) self, int dim, SymInt index)
    const Node* loop = counterOf(node->input(2));
    if (loop == nullptr)
      return std::nullopt;
    const Block* body = loop->blocks()[0];
    if (!loopInvariant(node->input(0), body) || mutatesTensors(body))
      return std::nullopt;
    site.pattern = kLoopIndexedSelect;
    site.loop = loop;
    site.counterInput = 2;
  } else {
    return std::nullopt;
  }
  site.name = siteName(node, id, graph);
  return site;
}

}  // namespace symtune::binding
