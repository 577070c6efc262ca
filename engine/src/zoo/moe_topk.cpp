// Builds the mixture-of-experts model of resources/models/moe_topk.py.

#include "module_factory.h"
#include "symtune/zoo/zoo_data.h"
#include "zoo_models.h"

namespace symtune::zoo {

namespace {

struct MoEPreset {
  int64_t input, dim, ff, experts, kMax, blocks;
  int64_t batchSize, tokens, classes, clusters;
};

MoEPreset presetNamed(const std::string& name) {
  if (name == "ci")
    return {16, 32, 64, 4, 2, 2, 8, 16, 8, 8};
  if (name == "cpu")
    return {64, 128, 256, 8, 3, 4, 16, 64, 16, 16};
  if (name == "gpu")
    return {256, 1024, 4096, 16, 4, 8, 32, 512, 16, 32};
  TORCH_CHECK(false, "moe_topk: unknown preset \"", name, "\" (known: ci, cpu, gpu)");
}

torch::jit::Module dense(ModuleFactory& f, int64_t in, int64_t out, at::Generator& gen) {
  auto m = f.create("Dense");
  ModuleFactory::param(m, "weight", fanInUniform({out, in}, in, gen));
  ModuleFactory::param(m, "bias", torch::zeros({out}));
  return f.finish(m, "Dense");
}

}  // namespace

ZooModel buildMoETopK(const ZooOptions& options) {
  const MoEPreset p = presetNamed(options.preset);
  ModuleFactory f("symtune.zoo.moe_topk", "resources/models/moe_topk.py",
                  splitModelSource(embeddedModelSource("moe_topk.py")));
  auto gen = batchGenerator(options.seed, -2);
  const int64_t D = p.dim, F = p.ff, E = p.experts;

  std::vector<std::pair<std::string, torch::jit::Module>> chain;
  for (int64_t b = 0; b < p.blocks; ++b) {
    auto layer = f.create("MoELayer");
    ModuleFactory::param(layer, "ln_w", torch::ones({D}));
    ModuleFactory::param(layer, "ln_b", torch::zeros({D}));
    ModuleFactory::param(layer, "router", fanInUniform({D, E}, D, gen));
    ModuleFactory::param(layer, "w1", fanInUniform({E, D, F}, D, gen));
    ModuleFactory::param(layer, "b1", torch::zeros({E, F}));
    ModuleFactory::param(layer, "w2", fanInUniform({E, F, D}, F, gen));
    ModuleFactory::param(layer, "b2", torch::zeros({E, D}));
    ModuleFactory::attr(layer, "n_experts", E);
    ModuleFactory::attr(layer, "k_max", p.kMax);
    ModuleFactory::attr(layer, "p_threshold", 0.6);
    chain.emplace_back(std::to_string(b), f.finish(layer, "MoELayer"));
  }

  auto root = f.create("MoENet");
  root.register_module("inp", dense(f, p.input, D, gen));
  root.register_module("blocks", f.sequential(chain));
  root.register_module("head", dense(f, D, p.classes, gen));
  f.finish(root, "MoENet");

  ZooModel model;
  model.module = root;
  makeTrainable(model.module);
  const int64_t batch = options.batchSize.value_or(p.batchSize);
  model.data = std::make_unique<ClusteredTokens>(p.input, p.clusters, p.classes, batch, p.tokens,
                                                 options.seed);
  model.description = std::to_string(p.blocks) + " MoE layers of " + std::to_string(E) +
                      " experts (up to " + std::to_string(p.kMax) + " per token), width " +
                      std::to_string(D) + ", expert hidden " + std::to_string(F) + ", " +
                      std::to_string(p.tokens) + " tokens per sample";
  return model;
}

}  // namespace symtune::zoo
