#pragma once
// Builds torch::jit::Module trees from a model source file's classes. Instances of one class share
// one TorchScript class type, so each class's methods compile once however many instances a model
// has (ResNet-152 has 155 ConvBn modules).

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/script.h>

#include "symtune/zoo/model_zoo.h"

namespace symtune::zoo {

class ModuleFactory {
 public:
  // `ns`: the TorchScript namespace of the classes; `sources`: from splitModelSource() of `file`
  // (the name source ranges carry, e.g. "resources/models/dynamic_resnet.py").
  ModuleFactory(std::string ns, std::string file, std::map<std::string, ClassSource> sources);

  // A new instance of class `cls`, with its "training" attribute; register its parameters,
  // buffers, attributes and submodules, then pass it to finish().
  torch::jit::Module create(const std::string& cls);
  // Compiles the class's methods when this is its first instance. Returns `module`.
  torch::jit::Module finish(torch::jit::Module module, const std::string& cls);

  // Registers `value` as trainable parameter `name` of `module`.
  static void param(torch::jit::Module& module, const std::string& name, torch::Tensor value);
  // Registers an int, float or bool attribute.
  static void attr(torch::jit::Module& module, const std::string& name, int64_t value);
  static void attr(torch::jit::Module& module, const std::string& name, double value);
  static void attr(torch::jit::Module& module, const std::string& name, bool value);

  // A "Sequential": submodules named by `chain` called in order by a generated forward.
  torch::jit::Module sequential(
      const std::vector<std::pair<std::string, torch::jit::Module>>& chain);

 private:
  std::string ns_;
  std::string file_;
  std::map<std::string, ClassSource> sources_;
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  std::map<std::string, c10::ClassTypePtr> types_;
  std::map<std::string, bool> defined_;
};

}  // namespace symtune::zoo
