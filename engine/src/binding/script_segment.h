#pragma once
// The candidate that runs a region site through TorchScript's executor (Note [Script segments] in
// script_segment.cpp).

#include <memory>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

// "torchscript": a region's nodes as a graph of their own, run by a torch::jit::GraphExecutor.
std::unique_ptr<Candidate> makeScriptSegment();

}  // namespace symtune::binding
