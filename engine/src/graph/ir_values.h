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

// "layer3.1.body.conv1": the module instance names on the node's inlined call stack.
std::string modulePathOf(const torch::jit::Node* node);

SourceLocation sourceOf(const torch::jit::Node* node, const std::string& method);

// Whether the node becomes a graph node (constants, attribute reads and list/tuple plumbing do
// not; data flows through them).
bool isGraphNode(const torch::jit::Node* node);

}  // namespace symtune::detail
