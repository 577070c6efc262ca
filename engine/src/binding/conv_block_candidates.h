#pragma once
// The candidate for a convolution block's batch norm, its ReLU and the next convolution
// (kBatchNormReluConv, symtune/binding/op_site.h): computed by kernels/' lean block.

#include <memory>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

// "bn-relu-conv": symtune::kernels::batchNormReluConv2d, which keeps one activation where the
// three ops keep two.
std::unique_ptr<Candidate> makeBatchNormReluConv();

}  // namespace symtune::binding
