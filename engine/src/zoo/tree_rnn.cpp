// Builds the recursive tree network of resources/models/tree_rnn.py.

#include "module_factory.h"
#include "symtune/zoo/zoo_data.h"
#include "zoo_models.h"

namespace symtune::zoo {

namespace {

struct TreePreset {
  int64_t dim, hidden, classes, batchSize;
  SizeRange leaves;
};

TreePreset presetNamed(const std::string& name) {
  if (name == "ci")
    return {32, 64, 4, 32, {2, 6}};
  if (name == "cpu")
    return {128, 256, 4, 64, {2, 24}};
  if (name == "gpu")
    return {512, 1024, 4, 512, {2, 64}};
  TORCH_CHECK(false, "tree_rnn: unknown preset \"", name, "\" (known: ci, cpu, gpu)");
}

}  // namespace

ZooModel buildTreeRnn(const ZooOptions& options) {
  const TreePreset p = presetNamed(options.preset);
  ModuleFactory f("symtune.zoo.tree_rnn", "resources/models/tree_rnn.py",
                  splitModelSource(embeddedModelSource("tree_rnn.py")));
  auto gen = batchGenerator(options.seed, -2);
  const int64_t D = p.dim, F = p.hidden;

  auto leaf = f.create("Embed");
  ModuleFactory::param(leaf, "weight", torch::randn({p.classes + 1, D}, gen) * 0.5);
  f.finish(leaf, "Embed");

  auto cell = f.create("Compose");
  ModuleFactory::param(cell, "w1", fanInUniform({2 * D, F}, 2 * D, gen));
  ModuleFactory::param(cell, "b1", torch::zeros({F}));
  ModuleFactory::param(cell, "w2", fanInUniform({F, D}, F, gen));
  ModuleFactory::param(cell, "b2", torch::zeros({D}));
  f.finish(cell, "Compose");

  auto head = f.create("Dense");
  ModuleFactory::param(head, "weight", fanInUniform({p.classes, D}, D, gen));
  ModuleFactory::param(head, "bias", torch::zeros({p.classes}));
  f.finish(head, "Dense");

  auto root = f.create("TreeNet");
  root.register_module("leaf", leaf);
  root.register_module("cell", cell);
  root.register_module("head", head);
  f.finish(root, "TreeNet");

  ZooModel model;
  model.module = root;
  makeTrainable(model.module);
  const int64_t batch = options.batchSize.value_or(p.batchSize);
  model.data = std::make_unique<RandomTrees>(p.classes, batch, p.leaves, options.seed);
  model.description = "tree composition of width " + std::to_string(D) + " (hidden " +
                      std::to_string(F) + "), trees of " + std::to_string(p.leaves.first) + "-" +
                      std::to_string(p.leaves.second) + " leaves, sum mod " +
                      std::to_string(p.classes);
  return model;
}

}  // namespace symtune::zoo
