// Builds the dynamic-length sequence tagger of resources/models/dynamic_tagger.py.

#include "module_factory.h"
#include "symtune/zoo/zoo_data.h"
#include "zoo_models.h"

namespace symtune::zoo {

namespace {

struct TaggerPreset {
  int64_t vocab, embed, hidden, tags, batchSize;
  SizeRange length;
};

TaggerPreset presetNamed(const std::string& name) {
  if (name == "ci")
    return {64, 16, 32, 8, 16, {4, 16}};
  if (name == "cpu")
    return {1000, 64, 256, 16, 32, {16, 96}};
  if (name == "gpu")
    return {32000, 256, 1024, 32, 128, {32, 256}};
  TORCH_CHECK(false, "dynamic_tagger: unknown preset \"", name, "\" (known: ci, cpu, gpu)");
}

}  // namespace

ZooModel buildDynamicTagger(const ZooOptions& options) {
  const TaggerPreset p = presetNamed(options.preset);
  ModuleFactory f("symtune.zoo.dynamic_tagger", "resources/models/dynamic_tagger.py",
                  splitModelSource(embeddedModelSource("dynamic_tagger.py")));
  auto gen = batchGenerator(options.seed, -2);
  const int64_t D = p.embed, H = p.hidden;

  auto embed = f.create("Embed");
  auto table = torch::randn({p.vocab, D}, gen);
  table[0].zero_();  // the padding token
  ModuleFactory::param(embed, "weight", table);
  f.finish(embed, "Embed");

  auto rnn = f.create("GRU");
  ModuleFactory::param(rnn, "w_ih", fanInUniform({D, 3 * H}, H, gen));
  ModuleFactory::param(rnn, "w_hh", fanInUniform({H, 3 * H}, H, gen));
  ModuleFactory::param(rnn, "b_ih", fanInUniform({3 * H}, H, gen));
  ModuleFactory::param(rnn, "b_hh", fanInUniform({3 * H}, H, gen));
  ModuleFactory::attr(rnn, "hidden", H);
  f.finish(rnn, "GRU");

  auto head = f.create("TagHead");
  ModuleFactory::param(head, "weight", fanInUniform({p.tags, H + D}, H + D, gen));
  ModuleFactory::param(head, "bias", torch::zeros({p.tags}));
  f.finish(head, "TagHead");

  auto root = f.create("Tagger");
  root.register_module("embed", embed);
  root.register_module("rnn", rnn);
  root.register_module("head", head);
  f.finish(root, "Tagger");

  ZooModel model;
  model.module = root;
  makeTrainable(model.module);
  const int64_t batch = options.batchSize.value_or(p.batchSize);
  model.data = std::make_unique<TaggedSentences>(p.vocab, p.tags, batch, p.length, options.seed);
  model.description = "GRU " + std::to_string(H) + ", embedding " + std::to_string(D) +
                      ", vocabulary " + std::to_string(p.vocab) + ", " + std::to_string(p.tags) +
                      " tags, sentences of " + std::to_string(p.length.first) + "-" +
                      std::to_string(p.length.second) + " tokens";
  return model;
}

}  // namespace symtune::zoo
