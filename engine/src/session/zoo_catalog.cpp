#include "symtune/zoo_catalog.h"

namespace symtune {

const std::vector<ZooEntry>& zooCatalog() {
  static const std::vector<ZooEntry> entries = {
      {"dynamic_resnet",
       "ResNet-152 layout whose residual blocks are gated by a data-dependent condition",
       {"ci", "cpu", "gpu"}},
      {"transformer_xl",
       "Transformer-XL style language model: segment recurrence memory, segment and memory "
       "lengths drawn per batch",
       {"ci", "cpu", "gpu"}},
      {"dynamic_tagger",
       "GRU sequence tagger over padded sentences whose lengths are drawn per batch",
       {"ci", "cpu", "gpu"}},
      {"moe_topk",
       "mixture of experts with dynamic top-k routing: experts per token and tokens per expert "
       "vary",
       {"ci", "cpu", "gpu"}},
      {"early_exit",
       "early-exit CNN: later stages run only for the images the first head is unsure of",
       {"ci", "cpu", "gpu"}},
      {"tree_rnn",
       "recursive network over each input's binary tree, computed level by level",
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
