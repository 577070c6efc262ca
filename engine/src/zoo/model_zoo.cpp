#include "symtune/model_zoo.h"

#include "zoo_models.h"

namespace symtune {

ZooModel buildZooModel(const std::string& name, const ZooOptions& options) {
  if (name == "dynamic_resnet")
    return zoo::buildDynamicResNet(options);
  TORCH_CHECK(false, "unknown zoo model \"", name, "\"");
}

}  // namespace symtune
