#pragma once
// One builder per zoo model; buildZooModel() dispatches to them by name. Shared initialisers.

#include <cmath>
#include <vector>

#include "symtune/model_zoo.h"

namespace symtune::zoo {

ZooModel buildDynamicResNet(const ZooOptions& options);
ZooModel buildTransformerXL(const ZooOptions& options);
ZooModel buildDynamicTagger(const ZooOptions& options);
ZooModel buildMoETopK(const ZooOptions& options);
ZooModel buildEarlyExit(const ZooOptions& options);
ZooModel buildTreeRnn(const ZooOptions& options);

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
