// Operator schemas of symtune::gru_cell, its autograd and the C++ entry point.

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "once_differentiable.h"
#include "symtune/kernels/gru_cell.h"

TORCH_LIBRARY_FRAGMENT(symtune, m) {
  m.def(
      "gru_cell_forward(Tensor gates_in, Tensor gates_hidden, Tensor hidden, Tensor? keep) -> "
      "Tensor");
  m.def(
      "gru_cell_backward(Tensor grad, Tensor gates_in, Tensor gates_hidden, Tensor hidden, "
      "Tensor? keep) -> (Tensor grad_gates_in, Tensor grad_gates_hidden, Tensor grad_hidden)");
}

namespace symtune::kernels {

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

const auto& forwardOp() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::gru_cell_forward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const std::optional<at::Tensor>&)>();
  return op;
}

const auto& backwardOp() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::gru_cell_backward", "")
                             .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const at::Tensor&, const std::optional<at::Tensor>&)>();
  return op;
}

// Note [GRU cell]
// Written out, a GRU cell's gates are a dozen elementwise ops on [B, H] or [B, 3H] slices (two
// sigmoids, a tanh, their sums and products, the (1 - z) n + z h blend, the length mask's
// where), each with its own autograd node: per time step, about 14 small kernels forward and 20
// backward, with zero-filled gradients for the slices and the where. Fused: one pass forward,
// saving only the two projections and the state it read (which the matmuls producing them keep
// anyway); one pass backward that recomputes r, z and n from them and writes the three
// gradients. The input projection's and the hidden one's gradients are the same for r and z,
// and differ by the factor r for n.
class GruCellFunction : public torch::autograd::Function<GruCellFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gatesIn,
                            const at::Tensor& gatesHidden, const at::Tensor& hidden,
                            const std::optional<at::Tensor>& keep) {
    at::AutoDispatchBelowADInplaceOrView below;
    at::Tensor out = forwardOp().call(gatesIn, gatesHidden, hidden, keep);
    ctx->save_for_backward({gatesIn, gatesHidden, hidden});
    // The mask is copied, not kept: a caller that reuses one mask buffer across time steps
    // (`keep.copy_(lengths > t)`) rewrote the mask the earlier steps' backwards read, and their
    // gradients came out silently wrong. save_for_backward would catch the rewrite by its version
    // and refuse the backward (as ATen's where does); a copy of B bools costs next to nothing and
    // lets that loop train, and it also holds when a writer moves no version.
    if (keep.has_value() && keep->defined())
      ctx->saved_data["keep"] = keep->clone();
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    refuseDoubleBackward("gru_cell");
    if (!grads[0].defined())
      return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    std::optional<at::Tensor> keep;
    if (ctx->saved_data.count("keep") != 0)
      keep = ctx->saved_data["keep"].toTensor();
    auto [gradIn, gradHidden, gradState] =
        backwardOp().call(grads[0], saved[0], saved[1], saved[2], keep);
    return {gradIn, gradHidden, gradState, at::Tensor()};
  }
};

}  // namespace

at::Tensor gruCell(const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
                   const at::Tensor& hidden, const at::Tensor& keep) {
  // The mask as an optional: an undefined tensor is no autograd input.
  return GruCellFunction::apply(
      gatesIn, gatesHidden, hidden,
      keep.defined() ? std::optional<at::Tensor>(keep) : std::optional<at::Tensor>());
}

}  // namespace symtune::kernels
