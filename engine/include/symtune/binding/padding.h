#pragma once
// Padded buckets (docs/binding.md, "Buckets").
//
// Note [Padded buckets]
// A site whose rows are independent of each other — each output row computed from the same row of
// its inputs, and nothing summed over the rows but what a zero row leaves unchanged — can run on
// inputs padded along their rows (dimension 0) to the bucket's row count and have its output cut
// back: then one implementation, and on a GPU one captured CUDA graph (cuda_graph.h), serves every
// row count of the bucket. The padded rows hold values that cannot reach the real ones:
//   bias GELU      x padded with zeros; the bias's gradient sums the padded rows' zero gradients
//   GRU cell       the projections and the state with zeros, the length mask with false
//   matmul bias    the matmul's input with zeros (its weight's gradient sums zero rows)
//   loss           the logits with zeros and the targets with the ignore index (-100): the mean
//                  is over the targets not ignored, so the loss is the unpadded one
// The rest are a cache key only: a batch norm's statistics are over its rows, a rows site's
// indices address the rows of its tensor, a slice or select is a view, and the image-input site
// is the whole model (its batch norms).

#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/stack.h>
#include <c10/core/Scalar.h>

#include "symtune/binding/candidate.h"
#include "symtune/binding/op_site.h"

namespace symtune::binding {

struct RowPadding {
  struct Input {
    size_t index = 0;    // among the site's inputs
    c10::Scalar fill;    // what the new rows hold
    int64_t minDim = 2;  // fewer dimensions: dimension 0 is not rows, nothing is padded
  };
  std::vector<Input> inputs;
  // Inputs that must broadcast over the rows rather than have them (a bias, a weight matrix): at
  // most this many dimensions, else nothing is padded.
  struct Broadcast {
    size_t index = 0;
    int64_t maxDim = 1;
  };
  std::vector<Broadcast> broadcast;
  bool outputRows = true;  // false: the output has no rows to cut (a mean)
};

// The padding `site`'s semantics allow; nullopt: its bucket is a cache key only.
std::optional<RowPadding> rowPaddingOf(const OpSite& site);

// The row count the padded inputs of a site's execution share (its inputs: the top `arity` values
// of `stack`); nullopt when they do not share one, have too few dimensions, or an input that
// should broadcast has too many (then they are run as they are).
std::optional<int64_t> paddedRows(const torch::jit::Stack& stack, size_t arity,
                                  const RowPadding& padding);

// Pads the site's inputs (the top `arity` values of `stack`) from `rows` to `to` rows, through
// ops autograd differentiates (the real rows' gradients flow back to the real inputs).
void padRows(torch::jit::Stack& stack, size_t arity, const RowPadding& padding, int64_t rows,
             int64_t to);
// Cuts a padded execution's output (the top of `stack`) back to `rows` rows.
void cutRows(torch::jit::Stack& stack, const RowPadding& padding, int64_t rows);

// `inner` run on its site's inputs padded to their bucket's row count (bucketDim), its output cut
// back: "padded:<inner>". Where the site has no padding or its inputs no shared rows, `inner` as
// it is. What cuda_graph.h's candidates do, without the graph; tests compare it with `inner`.
std::unique_ptr<Candidate> makePadded(std::shared_ptr<const Candidate> inner);

}  // namespace symtune::binding
