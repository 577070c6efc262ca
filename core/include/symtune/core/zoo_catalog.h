#pragma once
// The names of the bundled models and their size presets. Part of symtune::core: the session
// validator and the studio use it without LibTorch; engine/src/zoo/ builds the models.

#include <cstdint>
#include <string>
#include <vector>

namespace symtune {

struct ZooEntry {
  std::string name;                  // e.g. "dynamic_resnet"
  std::string description;           // one line
  std::vector<std::string> presets;  // e.g. {"ci", "cpu", "gpu"}
};

const std::vector<ZooEntry>& zooCatalog();
const ZooEntry* findZooEntry(const std::string& name);

}  // namespace symtune
