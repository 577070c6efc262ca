// Builds the early-exit network of resources/models/early_exit.py.

#include <cmath>

#include "module_factory.h"
#include "zoo_models.h"

namespace symtune::zoo {

namespace {

struct ExitPreset {
  int64_t image;
  std::vector<int64_t> widths;  // channels of stages 1, 2, 3
  int64_t classes, batchSize;
  std::pair<double, double> noise;  // per-sample noise scale: easy and hard images
};

ExitPreset presetNamed(const std::string& name) {
  if (name == "ci")
    return {16, {8, 16, 32}, 10, 16, {0.3, 3.0}};
  if (name == "cpu")
    return {32, {16, 48, 96}, 10, 32, {0.3, 3.0}};
  if (name == "gpu")
    return {64, {64, 192, 384}, 100, 256, {0.3, 3.0}};
  TORCH_CHECK(false, "early_exit: unknown preset \"", name, "\" (known: ci, cpu, gpu)");
}

torch::jit::Module convBnRelu(ModuleFactory& f, int64_t in, int64_t out, int64_t stride,
                              at::Generator& gen) {
  auto m = f.create("ConvBnRelu");
  const double std = std::sqrt(2.0 / static_cast<double>(in * 9));
  ModuleFactory::param(m, "weight", torch::randn({out, in, 3, 3}, gen) * std);
  ModuleFactory::param(m, "bn_weight", torch::ones({out}));
  ModuleFactory::param(m, "bn_bias", torch::zeros({out}));
  m.register_buffer("running_mean", torch::zeros({out}));
  m.register_buffer("running_var", torch::ones({out}));
  ModuleFactory::attr(m, "stride", stride);
  return f.finish(m, "ConvBnRelu");
}

// Two 3x3 convolutions; the first carries the stride.
torch::jit::Module stage(ModuleFactory& f, int64_t in, int64_t out, int64_t stride,
                         at::Generator& gen) {
  return f.sequential(
      {{"0", convBnRelu(f, in, out, stride, gen)}, {"1", convBnRelu(f, out, out, 1, gen)}});
}

torch::jit::Module exitHead(ModuleFactory& f, int64_t channels, int64_t classes,
                            at::Generator& gen) {
  auto m = f.create("ExitHead");
  ModuleFactory::param(m, "fc_w", fanInUniform({classes, channels}, channels, gen));
  ModuleFactory::param(m, "fc_b", torch::zeros({classes}));
  return f.finish(m, "ExitHead");
}

}  // namespace

ZooModel buildEarlyExit(const ZooOptions& options) {
  const ExitPreset p = presetNamed(options.preset);
  ModuleFactory f("symtune.zoo.early_exit", "resources/models/early_exit.py",
                  splitModelSource(embeddedModelSource("early_exit.py")));
  auto gen = batchGenerator(options.seed, -2);
  const auto& w = p.widths;

  auto root = f.create("EarlyExitNet");
  root.register_module("stage1", stage(f, 3, w[0], 1, gen));
  root.register_module("exit1", exitHead(f, w[0], p.classes, gen));
  root.register_module("stage2", stage(f, w[0], w[1], 2, gen));
  root.register_module("stage3", stage(f, w[1], w[2], 2, gen));
  root.register_module("exit2", exitHead(f, w[2], p.classes, gen));
  ModuleFactory::attr(root, "threshold", 0.8);
  f.finish(root, "EarlyExitNet");

  ZooModel model;
  model.module = root;
  makeTrainable(model.module);
  const int64_t batch = options.batchSize.value_or(p.batchSize);
  model.data = std::make_unique<ClassTemplateImages>(
      p.classes, std::vector<int64_t>{3, p.image, p.image}, batch, options.seed, p.noise);
  model.description = "3 stages of " + std::to_string(w[0]) + "/" + std::to_string(w[1]) + "/" +
                      std::to_string(w[2]) + " channels, exit after stage 1 at 0.8 " +
                      "confidence or more, " + std::to_string(p.image) + "x" +
                      std::to_string(p.image) + " images, " + std::to_string(p.classes) +
                      " classes";
  return model;
}

}  // namespace symtune::zoo
