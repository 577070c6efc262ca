#pragma once
// symtune::gru_cell — the elementwise part of a GRU cell (gates r, z, n as torch.nn.GRUCell
// orders them) and the length mask of a padded batch in one pass each way. From the input
// projection `gates_in` = x W_ih + b_ih and the hidden projection `gates_hidden` = h W_hh + b_hh,
// both [B, 3H], and the state `hidden` [B, H]:
//   r = sigmoid(in_r + hidden_r)    z = sigmoid(in_z + hidden_z)
//   n = tanh(in_n + r * hidden_n)   step = (1 - z) * n + z * hidden
//   output = keep ? step : hidden   (per row; no `keep`: step)
// With autograd; the backward recomputes the gates from the saved inputs and writes the three
// gradients in one pass. Registered as
//   symtune::gru_cell_forward(Tensor gates_in, Tensor gates_hidden, Tensor hidden, Tensor? keep)
//       -> Tensor
//   symtune::gru_cell_backward(Tensor grad, Tensor gates_in, Tensor gates_hidden, Tensor hidden,
//       Tensor? keep) -> (Tensor grad_gates_in, Tensor grad_gates_hidden, Tensor grad_hidden)
// CPU and CUDA. Float or double; rows may be strided, each row's values contiguous; `keep` a bool
// tensor of B values ([B] or [B, 1]).

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>

namespace symtune::kernels {

// `keep` undefined: every row takes the step.
at::Tensor gruCell(const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
                   const at::Tensor& hidden, const at::Tensor& keep = {});

}  // namespace symtune::kernels
