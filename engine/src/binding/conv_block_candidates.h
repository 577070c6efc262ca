#pragma once
// The candidates for convolution block regions (symtune/binding/op_site.h): a batch norm, its ReLU
// and the next convolution (kBatchNormReluConv), computed by kernels/' lean block; and two blocks
// in a row (kConvBlockPair), with the lean block inside or run again in the backward.

#include <memory>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

// "bn-relu-conv": symtune::kernels::batchNormReluConv2d, which keeps one activation where the
// three ops keep two.
std::unique_ptr<Candidate> makeBatchNormReluConv();
// "conv-block-pair": the first convolution, the lean block, the second batch norm and ReLU: three
// activations kept where the six ops keep four.
std::unique_ptr<Candidate> makeConvBlockPair();
// "conv-block-pair-again": symtune::kernels::convBlockPairAgain, which keeps its input alone and
// runs the blocks again in its backward.
std::unique_ptr<Candidate> makeConvBlockPairAgain();

}  // namespace symtune::binding
