#include "symtune/zoo/model_zoo.h"

#include "zoo_models.h"

namespace symtune {

ZooModel buildZooModel(const std::string& name, const ZooOptions& options) {
#define SYMTUNE_ZOO_MODEL(model, builder, description) \
  if (name == #model)                                  \
    return zoo::builder(options);
#include "symtune/core/zoo_models.def"
#undef SYMTUNE_ZOO_MODEL
  TORCH_CHECK(false, "unknown zoo model \"", name, "\"");
}

}  // namespace symtune
