#include "symtune/zoo_catalog.h"

namespace symtune {

const std::vector<ZooEntry>& zooCatalog() {
  static const std::vector<ZooEntry> entries = {
      {"dynamic_resnet",
       "ResNet-152 layout whose residual blocks are gated by a data-dependent condition",
       {"ci", "cpu", "gpu"}},
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
