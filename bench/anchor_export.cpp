// Everything bench/python/anchor.py needs to train the same model on the same batches.

#include "anchor_export.h"

#include <torch/serialize.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "symtune/core/atomic_file.h"

namespace symtune::bench {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

void exportForAnchor(const std::string& model, Trainer& trainer, const Session& session,
                     const RunConfig& config) {
  const fs::path dir = fs::path(config.exportDir) / model;
  fs::create_directories(dir);
  torch::jit::Module& module = *trainer.executor().scriptModule();
  // The model, like the batches below, whole or not at all (the anchor reads what it finds).
  writeFileAtomically(dir / "module.pt", [&](std::ostream& out) { module.save(out); });

  c10::impl::GenericList batches(c10::AnyType::get());
  for (int i = 0; i < config.warmup + config.steps; ++i) {
    Batch b = trainer.batch(i);
    c10::impl::GenericList inputs(c10::AnyType::get());
    for (const auto& in : b.inputs)
      inputs.push_back(in.isTensor() ? c10::IValue(in.toTensor().cpu()) : in);
    batches.push_back(c10::ivalue::Tuple::create({inputs, b.target.cpu()}));
  }
  // Written whole or not at all, and a failure said (an unchecked stream left the anchor a
  // truncated export to misread).
  const std::vector<char> bytes = torch::pickle_save(batches);
  writeFileAtomically(dir / "batches.pt", std::string(bytes.begin(), bytes.end()));

  json modules = json::array();
  for (const auto& m : module.named_modules()) {
    json entry{{"path", m.name}, {"class", m.value.type()->name()->name()}};
    json children = json::array();
    for (const auto& c : m.value.named_children())
      children.push_back(c.name);
    entry["children"] = children;
    json attributes = json::object();
    const auto& type = m.value.type();
    for (size_t i = 0; i < type->numAttributes(); ++i) {
      const std::string& name = type->getAttributeName(i);
      if (type->is_parameter(i) || type->is_buffer(i) || name == "training")
        continue;
      const c10::IValue value = m.value.attr(name);
      if (value.isInt())
        attributes[name] = value.toInt();
      else if (value.isDouble())
        attributes[name] = value.toDouble();
      else if (value.isBool())
        attributes[name] = value.toBool();
    }
    entry["attributes"] = attributes;
    modules.push_back(entry);
  }
  const json manifest{{"model", model},
                      {"preset", config.preset},
                      {"description", trainer.modelDescription()},
                      {"seed", config.seed},
                      {"batch_size", trainer.batchSize()},
                      {"optimizer",
                       {{"name", session.optimizer.name},
                        // The engine's one-pass step (the CUDA default): the anchor takes
                        // PyTorch's fused step then, not its foreach one.
                        {"fused", trainer.session().optimizer.fused.value_or(false)},
                        {"lr", session.optimizer.lr},
                        {"weight_decay", session.optimizer.weightDecay},
                        {"momentum", session.optimizer.momentum}}},
                      {"steps", config.steps},
                      {"warmup", config.warmup},
                      {"cpu_memory", config.cpuMemory},
                      {"modules", modules}};
  writeFileAtomically(dir / "session.json", manifest.dump(2) + "\n");
}

}  // namespace symtune::bench
