#pragma once
// The session's training loss (LossSpec, docs/session-format.md "loss") between a model's output
// and a batch's target, the mean over the target entries it counts.
//   torch::Tensor l = trainingLoss(session.loss, output, batch.target);

#include <torch/types.h>

#include "symtune/core/session.h"

namespace symtune {

// Class-index losses (cross_entropy, nll) take logits [N, C] against [N], or per-position
// outputs [N, T, C] (or flattened, [N*T, C]) against [N, T] (or [N*T]); the others a target
// shaped as the output (also [N] against an output [N, 1]). Throws std::invalid_argument, one
// line naming both shapes, when they do not pair.
torch::Tensor trainingLoss(const LossSpec& loss, const torch::Tensor& output,
                           const torch::Tensor& target);

// How many entries of `target` the loss's mean averages over: those a class-index target does
// not ignore; every entry of a float target.
int64_t countedTargets(const LossSpec& loss, const torch::Tensor& target);

}  // namespace symtune
