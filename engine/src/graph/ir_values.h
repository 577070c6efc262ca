#pragma once
// Helpers shared by SyMuGen's static and step capture: describing IR values and nodes.

#include <string>

#include <torch/csrc/jit/ir/ir.h>

#include "symtune/core/graph.h"

namespace symtune::detail {

// The value as the IR types it: tensor shape and dtype when the type says, ints when constant.
ValueInfo describeIrValue(const torch::jit::Value* value);

// The same value with its runtime contents (shape, dtype, int values) from `v`.
ValueInfo describeRuntimeValue(const torch::jit::Value* value, const c10::IValue& v);

// "layer3.1.body.conv1": the path of the module whose code the node is, as nameModuleCalls
// named it (in a graph it did not name: the module instance names on the inlined call stack).
std::string modulePathOf(const torch::jit::Node* node);

// Names the module path of every node of `inlined` (made by torch::jit::Inline from `method`,
// the graph as compiled, its first input the module) in the node's scope, which TorchScript
// leaves blank in a scripted graph. The inliner's call stack names each call by the last
// attribute read only, and a call of the module's own method "SELF": `self.stem.inner(x)` is
// "inner", each trip of `for b in self.blocks` "0", "1", and every node under
// `self._forward_impl(x)` starts "SELF.". Here the calls are "stem.inner", "blocks.0",
// "blocks.1" and nothing: each call's path from its caller's module, read off the attribute
// reads the compiled graphs make before the call.
void nameModuleCalls(const torch::jit::Graph& method, torch::jit::Graph& inlined);

SourceLocation sourceOf(const torch::jit::Node* node, const std::string& method);

// The prim::Enter of the innermost `with` block `node` runs in (its own block's or, for a node of
// a branch or loop body, its owner's), or nullptr outside every `with` block. The block runs from
// its Enter to the matching prim::Exit, both in one block: a `with torch.no_grad():` sets the grad
// mode between them, so a span recomputed or a site run apart from them would run under another.
const torch::jit::Node* enclosingWith(const torch::jit::Node* node);

// Whether the node becomes a graph node (constants, attribute reads and list/tuple plumbing do
// not; data flows through them).
bool isGraphNode(const torch::jit::Node* node);

// Whether the node draws random numbers, or may, itself or in a block it owns (a dropout in a
// branch): aten's and prim's random ops say so (Node::isNondeterministic), another namespace's op
// (symtune::bias_dropout_add) may draw without saying.
bool mayDraw(const torch::jit::Node* node);

}  // namespace symtune::detail
