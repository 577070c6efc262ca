#pragma once
// The candidates for the residual stream's sites (symtune/binding/op_site.h): a residual add and
// the layer norm of its sum (kAddLayerNorm); a bias add, its dropout and the residual add
// (kBiasDropoutAdd) — each computed by kernels/' fused op.

#include <memory>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

// "add-layer-norm": symtune::add_layer_norm, the sum and its norm in one pass each way.
std::unique_ptr<Candidate> makeAddLayerNorm();
// "bias-dropout-add": symtune::bias_dropout_add, with a dropout mask of its own (ownDraws).
std::unique_ptr<Candidate> makeBiasDropoutAdd();

}  // namespace symtune::binding
