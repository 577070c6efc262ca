#include "symtune/core/zoo_catalog.h"

namespace symtune {

const std::vector<ZooEntry>& zooCatalog() {
  static const std::vector<ZooEntry> entries = {
#define SYMTUNE_ZOO_MODEL(name, builder, description) {#name, description, {"ci", "cpu", "gpu"}},
#include "symtune/core/zoo_models.def"
#undef SYMTUNE_ZOO_MODEL
  };
  return entries;
}

const ZooEntry* findZooEntry(const std::string& name) {
  for (const auto& e : zooCatalog()) {
    if (e.name == name) {
      return &e;
    }
  }
  return nullptr;
}

}  // namespace symtune
