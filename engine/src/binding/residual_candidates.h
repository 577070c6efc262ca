#pragma once
// The candidates for the residual stream's sites: a residual add and the layer norm of its sum
// (kAddLayerNorm in symtune/binding/op_site.h), computed by kernels/' fused op.

#include <memory>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

// "add-layer-norm": symtune::add_layer_norm, the sum and its norm in one pass each way.
std::unique_ptr<Candidate> makeAddLayerNorm();

}  // namespace symtune::binding
