#pragma once
// The op sites DynaCompiler can bind (Note [Op sites] in symtune/graph/op_binder.h): operator
// nodes of SyMuGen's inlined IR that match a pattern some candidate implementation computes.

#include <optional>
#include <string>

#include <torch/csrc/jit/ir/ir.h>

#include "symtune/core/graph.h"

namespace symtune::binding {

// Patterns (docs/binding.md, "Sites").
// A full-range aten::slice: start 0 or None, end None, step 1 — TorchScript writes one for every
// `:` in an index (`x[:, t]`), and its backward fills a zero gradient the size of the whole
// tensor to copy the gradient into.
inline constexpr const char* kIdentitySlice = "identity slice";
// aten::select(x, dim, i) where i is the counter of a loop around it and x does not change in
// that loop (`gi_all[:, t]` over time steps, `self.w1[e]` over experts, `self.w_qkv[l]` over
// layers): every trip's backward fills a zero gradient the size of x.
inline constexpr const char* kLoopIndexedSelect = "loop-indexed select";

struct OpSite {
  const torch::jit::Node* node = nullptr;
  NodeId id;
  std::string name;     // "#31 aten::select rnn": node id, op, module path
  std::string pattern;  // kIdentitySlice, kLoopIndexedSelect
  // Loop-indexed sites: the loop whose counter is the node's input `counterInput`.
  const torch::jit::Node* loop = nullptr;
  size_t counterInput = 0;
};

// The site `node` is, or nullopt when no pattern matches. `graph` is SyMuGen's static graph
// (names); `id` the node's id in it (invalid for nodes it does not show).
std::optional<OpSite> findOpSite(const torch::jit::Node* node, NodeId id, const Graph& graph);

// "#31 aten::select rnn"
std::string siteName(const torch::jit::Node* node, NodeId id, const Graph& graph);

// Whether `value`, read inside `body` (a loop's body block), has the same value on every trip:
// defined outside the body, or computed in it by pure ops from such values.
bool loopInvariant(const torch::jit::Value* value, const torch::jit::Block* body);

// Whether anything in `block` (nested blocks included) writes to a tensor in place or sets a
// module attribute.
bool mutatesTensors(const torch::jit::Block* block);

}  // namespace symtune::binding
