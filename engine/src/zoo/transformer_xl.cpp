// Builds the Transformer-XL style language model of resources/models/transformer_xl.py.

#include <cmath>

#include "module_factory.h"
#include "symtune/zoo/zoo_data.h"
#include "zoo_models.h"

namespace symtune::zoo {

namespace {

struct XLPreset {
  int64_t vocab, dim, heads, layers, ff;
  int64_t batchSize, segments;
  SizeRange segLen, memLen;
  int64_t maxRel;  // relative distances beyond this share one bias
};

XLPreset presetNamed(const std::string& name) {
  if (name == "ci")
    return {64, 32, 2, 2, 64, 8, 3, {6, 10}, {4, 12}, 32};
  if (name == "cpu")
    return {256, 128, 4, 4, 512, 16, 4, {24, 48}, {32, 64}, 128};
  if (name == "gpu")
    return {8192, 512, 8, 12, 2048, 32, 4, {96, 192}, {128, 256}, 512};
  TORCH_CHECK(false, "transformer_xl: unknown preset \"", name, "\" (known: ci, cpu, gpu)");
}

}  // namespace

ZooModel buildTransformerXL(const ZooOptions& options) {
  const XLPreset p = presetNamed(options.preset);
  ModuleFactory f("symtune.zoo.transformer_xl", "resources/models/transformer_xl.py",
                  splitModelSource(embeddedModelSource("transformer_xl.py")));
  auto gen = batchGenerator(options.seed, -2);
  const int64_t L = p.layers, D = p.dim, F = p.ff;

  auto decoder = f.create("XLDecoder");
  ModuleFactory::param(decoder, "ln1_w", torch::ones({L, D}));
  ModuleFactory::param(decoder, "ln1_b", torch::zeros({L, D}));
  ModuleFactory::param(decoder, "ln2_w", torch::ones({L, D}));
  ModuleFactory::param(decoder, "ln2_b", torch::zeros({L, D}));
  ModuleFactory::param(decoder, "w_qkv", fanInUniform({L, D, 3 * D}, D, gen));
  // Residual branches start small (GPT-2's scaling by depth), so a deep stack trains from step 0.
  const double residual = 1.0 / std::sqrt(2.0 * static_cast<double>(L));
  ModuleFactory::param(decoder, "w_o", fanInUniform({L, D, D}, D, gen) * residual);
  ModuleFactory::param(decoder, "w_ff1", fanInUniform({L, D, F}, D, gen));
  ModuleFactory::param(decoder, "b_ff1", torch::zeros({L, F}));
  ModuleFactory::param(decoder, "w_ff2", fanInUniform({L, F, D}, F, gen) * residual);
  ModuleFactory::param(decoder, "b_ff2", torch::zeros({L, D}));
  ModuleFactory::param(decoder, "rel_bias", torch::zeros({L, p.heads, p.maxRel}));
  ModuleFactory::attr(decoder, "n_layers", L);
  ModuleFactory::attr(decoder, "n_heads", p.heads);
  ModuleFactory::attr(decoder, "max_rel", p.maxRel);
  ModuleFactory::attr(decoder, "scale", 1.0 / std::sqrt(static_cast<double>(D / p.heads)));
  f.finish(decoder, "XLDecoder");

  auto root = f.create("TransformerXL");
  ModuleFactory::param(root, "embed", torch::randn({p.vocab, D}, gen) * 0.5);
  root.register_module("decoder", decoder);
  ModuleFactory::param(root, "lnf_w", torch::ones({D}));
  ModuleFactory::param(root, "lnf_b", torch::zeros({D}));
  ModuleFactory::param(root, "out_w", fanInUniform({p.vocab, D}, D, gen));
  ModuleFactory::param(root, "out_b", torch::zeros({p.vocab}));
  ModuleFactory::attr(root, "n_layers", L);
  f.finish(root, "TransformerXL");

  ZooModel model;
  model.module = root;
  makeTrainable(model.module);
  const int64_t batch = options.batchSize.value_or(p.batchSize);
  model.data =
      std::make_unique<MarkovText>(p.vocab, batch, p.segments, p.segLen, p.memLen, options.seed);
  model.description =
      std::to_string(L) + " layers, width " + std::to_string(D) + ", " + std::to_string(p.heads) +
      " heads, vocabulary " + std::to_string(p.vocab) + ", " + std::to_string(p.segments) +
      " segments of " + std::to_string(p.segLen.first) + "-" + std::to_string(p.segLen.second) +
      " tokens, memory " + std::to_string(p.memLen.first) + "-" + std::to_string(p.memLen.second);
  return model;
}

}  // namespace symtune::zoo
