// Builds the dynamic-branch ResNet of resources/models/dynamic_resnet.py.

#include <cmath>

#include "module_factory.h"
#include "zoo_models.h"

namespace symtune::zoo {

namespace {

struct ResNetPreset {
  int64_t width;                // channels of stage 1's bottleneck (64 in ResNet-152)
  std::vector<int64_t> blocks;  // blocks per stage (3, 8, 36, 3 in ResNet-152)
  int64_t image;                // input height = width
  int64_t stemKernel, stemStride;
  bool stemPool;
  int64_t classes, batchSize;
};

ResNetPreset presetNamed(const std::string& name) {
  if (name == "ci")
    return {4, {2, 2, 2, 2}, 16, 3, 1, false, 10, 16};
  if (name == "cpu")
    return {8, {3, 8, 36, 3}, 32, 3, 1, false, 10, 16};
  if (name == "gpu")
    return {64, {3, 8, 36, 3}, 224, 7, 2, true, 100, 64};
  TORCH_CHECK(false, "dynamic_resnet: unknown preset \"", name, "\" (known: ci, cpu, gpu)");
}

constexpr int64_t kExpansion = 4;

class Builder {
 public:
  Builder(ModuleFactory& factory, at::Generator gen) : f_(factory), gen_(std::move(gen)) {}

  torch::jit::Module convBn(int64_t in, int64_t out, int64_t k, int64_t stride, bool zeroGamma) {
    auto m = f_.create("ConvBn");
    const double std = std::sqrt(2.0 / static_cast<double>(in * k * k));  // He et al. (fan-in)
    m.register_parameter("weight", torch::randn({out, in, k, k}, gen_) * std, false);
    m.register_parameter("bn_weight", zeroGamma ? torch::zeros({out}) : torch::ones({out}), false);
    m.register_parameter("bn_bias", torch::zeros({out}), false);
    m.register_buffer("running_mean", torch::zeros({out}));
    m.register_buffer("running_var", torch::ones({out}));
    m.register_attribute("stride", c10::IntType::get(), stride);
    m.register_attribute("padding", c10::IntType::get(), k / 2);
    return f_.finish(m, "ConvBn");
  }

  // Zero-initialised last BN scale: every residual branch starts as the identity, which keeps a
  // 152-layer network trainable from the first step (Goyal et al., "zero-gamma").
  torch::jit::Module bottleneck(int64_t in, int64_t width, int64_t stride) {
    auto m = f_.create("Bottleneck");
    m.register_module("conv1", convBn(in, width, 1, 1, false));
    m.register_module("conv2", convBn(width, width, 3, stride, false));
    m.register_module("conv3", convBn(width, width * kExpansion, 1, 1, true));
    return f_.finish(m, "Bottleneck");
  }

  torch::jit::Module downBlock(int64_t in, int64_t width, int64_t stride) {
    auto m = f_.create("DownBlock");
    m.register_module("body", bottleneck(in, width, stride));
    m.register_module("down", convBn(in, width * kExpansion, 1, stride, false));
    return f_.finish(m, "DownBlock");
  }

  torch::jit::Module gatedBlock(int64_t width) {
    const int64_t channels = width * kExpansion;
    auto m = f_.create("GatedBlock");
    m.register_module("body", bottleneck(channels, width, 1));
    m.register_parameter(
        "gate_w", torch::randn({channels}, gen_) / std::sqrt(static_cast<double>(channels)), false);
    m.register_parameter("gate_b", torch::zeros({1}), false);
    return f_.finish(m, "GatedBlock");
  }

  torch::jit::Module stage(int64_t in, int64_t width, int64_t stride, int64_t blocks) {
    std::vector<std::pair<std::string, torch::jit::Module>> chain;
    chain.emplace_back("0", downBlock(in, width, stride));
    for (int64_t b = 1; b < blocks; ++b) {
      chain.emplace_back(std::to_string(b), gatedBlock(width));
    }
    return f_.sequential(chain);
  }

  torch::jit::Module resnet(const ResNetPreset& p) {
    auto m = f_.create("DynamicResNet");
    m.register_module("stem", convBn(3, p.width, p.stemKernel, p.stemStride, false));
    int64_t in = p.width;
    for (size_t s = 0; s < p.blocks.size(); ++s) {
      const int64_t width = p.width << s;
      m.register_module("layer" + std::to_string(s + 1),
                        stage(in, width, s == 0 ? 1 : 2, p.blocks[s]));
      in = width * kExpansion;
    }
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    m.register_parameter("fc_w", (torch::rand({p.classes, in}, gen_) * 2 - 1) * bound, false);
    m.register_parameter("fc_b", torch::zeros({p.classes}), false);
    m.register_attribute("stem_pool", c10::BoolType::get(), p.stemPool);
    return f_.finish(m, "DynamicResNet");
  }

 private:
  ModuleFactory& f_;
  at::Generator gen_;
};

}  // namespace

ZooModel buildDynamicResNet(const ZooOptions& options) {
  const ResNetPreset p = presetNamed(options.preset);
  ModuleFactory factory("symtune.zoo.dynamic_resnet", "resources/models/dynamic_resnet.py",
                        splitModelSource(embeddedModelSource("dynamic_resnet.py")));
  Builder builder(factory, batchGenerator(options.seed, -2));
  ZooModel model;
  model.module = builder.resnet(p);
  makeTrainable(model.module);
  const int64_t batch = options.batchSize.value_or(p.batchSize);
  model.data = std::make_unique<ClassTemplateImages>(
      p.classes, std::vector<int64_t>{3, p.image, p.image}, batch, options.seed);
  int64_t depth = 2;  // stem and fc
  for (auto b : p.blocks)
    depth += 3 * b;
  model.description = "ResNet-" + std::to_string(depth) + ", width " + std::to_string(p.width) +
                      ", " + std::to_string(p.image) + "x" + std::to_string(p.image) + " images, " +
                      std::to_string(p.classes) + " classes";
  return model;
}

}  // namespace symtune::zoo
