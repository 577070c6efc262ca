#include "symtune/model_zoo.h"

#include "zoo_models.h"

namespace symtune {

ZooModel buildZooModel(const std::string& name, const ZooOptions& options) {
  if (name == "dynamic_resnet")
    return zoo::buildDynamicResNet(options);
  if (name == "transformer_xl")
    return zoo::buildTransformerXL(options);
  if (name == "dynamic_tagger")
    return zoo::buildDynamicTagger(options);
  if (name == "moe_topk")
    return zoo::buildMoETopK(options);
  if (name == "early_exit")
    return zoo::buildEarlyExit(options);
  if (name == "tree_rnn")
    return zoo::buildTreeRnn(options);
  TORCH_CHECK(false, "unknown zoo model \"", name, "\"");
}

}  // namespace symtune
