#pragma once
// The candidate that batches a recurrent projection's weight gradient over a loop's trips (Note
// [Batched weight gradient] in batched_projection.cpp).

#include <memory>

#include <ATen/core/Tensor.h>

#include "symtune/binding/candidate.h"

namespace symtune::binding {

// "addmm-batched": each trip's matmul bias as one addmm, the weight's and the bias's gradients
// summed over the trips of a loop execution in one GEMM.
std::unique_ptr<Candidate> makeBatchedProjection();

// Whether a matmul bias's input `x` (at least 2-d), weight (a matrix) and bias (a vector of its
// columns) can be one addmm: one floating dtype, one device.
bool addmmFits(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

}  // namespace symtune::binding
