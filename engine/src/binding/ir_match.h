#pragma once
// Small predicates on SyMuGen's inlined IR that the site patterns share (op_site.cpp,
// cell_sites.cpp). Private to engine/src/binding/.

#include <optional>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

namespace symtune::binding::detail {

// The constant `v` holds, if it is one.
std::optional<c10::IValue> constant(const torch::jit::Value* v);
bool isNoneOrInt(const torch::jit::Value* v, int64_t expected);
bool isTensor(const torch::jit::Value* v);
// aten::slice over the whole of a dimension (start 0 or None, end None or the largest int64,
// step 1): TorchScript writes one for every `:` in an index.
bool identitySlice(const torch::jit::Node* node);
// A slice of part of a tensor: constant dimension, constant step 1, not the whole dimension.
bool partialSlice(const torch::jit::Node* node);
// Whether an aten::view reads `v`, or a value made of it by ops that keep its layout (elementwise
// ops, pooling, a loop or an if handing it on): the view needs the strides the ATen ops would have
// given `v`, and a candidate that returns another layout hands it a tensor it refuses (until
// 2026-12-07 only a view of `v` itself was seen, and conv-block-pair's channels-last result,
// pooled, failed the view after it). Walks the rest of the graph: a region keeps the answer
// (CellRegion::viewedAfter).
bool viewed(const torch::jit::Value* v);

}  // namespace symtune::binding::detail
