#pragma once
// The argument checks the CPU and CUDA add_layer_norm kernels share. Private to kernels/.

#include <optional>

#include <ATen/ATen.h>

namespace symtune::kernels {

inline void checkAddLayerNormArguments(const at::Tensor& input, const at::Tensor& residual,
                                       const std::optional<at::Tensor>& weight,
                                       const std::optional<at::Tensor>& bias, double eps) {
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) > 0,
              "symtune::add_layer_norm: the input needs a last dimension to normalize, got ",
              input.sizes());
  TORCH_CHECK(residual.sizes() == input.sizes(), "symtune::add_layer_norm: the residual has ",
              "shape ", residual.sizes(), ", the input ", input.sizes());
  TORCH_CHECK(residual.scalar_type() == input.scalar_type(),
              "symtune::add_layer_norm: the residual is ", residual.scalar_type(), ", the input ",
              input.scalar_type());
  TORCH_CHECK(eps > 0, "symtune::add_layer_norm: eps must be positive, got ", eps);
  for (const auto* t : {&weight, &bias}) {
    if (*t && (*t)->defined()) {
      TORCH_CHECK((*t)->dim() == 1 && (*t)->size(0) == input.size(-1),
                  "symtune::add_layer_norm: weight and bias must be [", input.size(-1), "], got ",
                  (*t)->sizes());
      TORCH_CHECK((*t)->scalar_type() == input.scalar_type(),
                  "symtune::add_layer_norm: weight and bias must be ", input.scalar_type(),
                  ", got ", (*t)->scalar_type());
    }
  }
}

inline const std::optional<at::Tensor> definedOrNone(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? t : std::nullopt;
}

}  // namespace symtune::kernels
