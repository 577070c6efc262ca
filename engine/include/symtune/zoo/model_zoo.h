#pragma once
// The bundled models (resources/models/): TorchScript source compiled at run time, with their
// presets and synthetic data. The names and presets are listed in zoo_catalog.h.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <torch/script.h>

#include "symtune/data/data_source.h"

namespace symtune {

struct ZooModel {
  torch::jit::Module module;
  std::unique_ptr<DataSource> data;
  std::string description;  // the preset's shape, for reports and logs
};

struct ZooOptions {
  std::string preset = "ci";
  uint64_t seed = 0;                 // parameter initialisation and data
  std::optional<int64_t> batchSize;  // the preset's batch size when unset
};

// Builds zoo model `name` (see zooCatalog()). Throws c10::Error for an unknown name or preset.
//   ZooOptions options;
//   options.preset = "ci";
//   auto m = buildZooModel("dynamic_resnet", options);
ZooModel buildZooModel(const std::string& name, const ZooOptions& options);

// The methods of one class of a model source file, dedented, `__init__` left out. Line 1 of
// `text` is line `firstLine` of the file.
struct ClassSource {
  std::string text;
  int firstLine = 1;
};

// The TorchScript source of each class of a model source file (resources/models/NAME.py), by
// class name.
std::map<std::string, ClassSource> splitModelSource(const std::string& text);

// The embedded text of resources/models/<file> (compiled into the engine). Throws when unknown.
const std::string& embeddedModelSource(const std::string& file);

}  // namespace symtune
