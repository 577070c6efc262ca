#pragma once
// One builder per zoo model (symtune/core/zoo_models.def); buildZooModel() dispatches to them by
// name. Shared initialisers.

#include <cmath>
#include <vector>

#include "symtune/zoo/model_zoo.h"

namespace symtune::zoo {

#define SYMTUNE_ZOO_MODEL(name, builder, description) ZooModel builder(const ZooOptions& options);
#include "symtune/core/zoo_models.def"
#undef SYMTUNE_ZOO_MODEL

// Uniform in ±1/sqrt(fanIn): torch.nn.Linear's default initialisation.
inline torch::Tensor fanInUniform(std::vector<int64_t> shape, int64_t fanIn, at::Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fanIn));
  return (torch::rand(shape, gen) * 2 - 1) * bound;
}

// What torch.nn.Parameter does in Python: every parameter of `module` requires grad.
inline void makeTrainable(torch::jit::Module& module) {
  for (auto p : module.parameters())
    p.requires_grad_(true);
}

}  // namespace symtune::zoo
