#pragma once
// The shape checks of symtune::gru_cell, shared by its kernels. Private to kernels/.

#include <optional>

#include <ATen/ATen.h>

namespace symtune::kernels {

// B rows of H values; every operand's row i at data + i * its row stride.
struct GruCellShape {
  int64_t rows = 0, hidden = 0;
};

inline GruCellShape gruCellShape(const at::Tensor& gatesIn, const at::Tensor& gatesHidden,
                                 const at::Tensor& hidden, const std::optional<at::Tensor>& keep) {
  const char* op = "symtune::gru_cell";
  TORCH_CHECK(hidden.dim() == 2, op, ": the hidden state must be [B, H], got ", hidden.sizes());
  GruCellShape s{hidden.size(0), hidden.size(1)};
  TORCH_CHECK(hidden.scalar_type() == at::kFloat || hidden.scalar_type() == at::kDouble, op,
              ": float or double, got ", hidden.scalar_type());
  for (const at::Tensor* gates : {&gatesIn, &gatesHidden}) {
    TORCH_CHECK(gates->dim() == 2 && gates->size(0) == s.rows && gates->size(1) == 3 * s.hidden, op,
                ": the gates must be [", s.rows, ", ", 3 * s.hidden, "] for a state of ",
                hidden.sizes(), ", got ", gates->sizes());
    TORCH_CHECK(gates->scalar_type() == hidden.scalar_type() && gates->device() == hidden.device(),
                op, ": the gates must be ", hidden.scalar_type(), " on ", hidden.device());
  }
  if (keep.has_value() && keep->defined()) {
    TORCH_CHECK(keep->scalar_type() == at::kBool && keep->numel() == s.rows &&
                    keep->device() == hidden.device() &&
                    (keep->dim() == 1 || (keep->dim() == 2 && keep->size(1) == 1)),
                op, ": keep must be a bool [", s.rows, "] or [", s.rows, ", 1] on ",
                hidden.device(), ", got ", keep->scalar_type(), " ", keep->sizes());
  }
  return s;
}

// `t` with each row's values contiguous (a view when they are).
inline at::Tensor rowsContiguous(const at::Tensor& t) {
  return t.size(1) <= 1 || t.stride(1) == 1 ? t : t.contiguous();
}

}  // namespace symtune::kernels
