// DynaCompiler's sites of more than one node (docs/binding.md, "Sites"): a bias add feeding only
// a GELU is one site whose second node passes the pair's result on, bound to kernels' fused
// bias_gelu within its tolerance; and a model's image inputs are one site measured as the whole
// model, channels-last or as given, leaving the model as it found it.

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>

#include "symtune/binding/binder.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/graph/symugen.h"
#include "tensor_compare.h"

namespace {

using symtune::binding::Binder;
using symtune::binding::BinderOptions;

symtune::MachineFingerprint here() {
  return symtune::binding::currentMachine(torch::kCPU);
}

// Linear layers' bias adds feeding GELUs (exact and tanh): two bias-GELU sites. The third add
// has a second use, so it and its GELU stay two ATen ops (its input is no matmul's: no bias
// matmul site either).
torch::jit::Module biasGelus() {
  torch::jit::Module m("BiasGelus");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor, b: Tensor):
    h = torch.gelu(torch.matmul(x, w) + b)
    u = torch.gelu(torch.matmul(h, w) + b, approximate='tanh')
    v = u * 2.0 + b
    return torch.gelu(v) + v
)");
  return m;
}

}  // namespace

namespace {

struct BiasGeluRun {
  torch::Tensor out, gx, gw, gb;
};

BiasGeluRun biasGeluStep(symtune::SyMuGen& gen, symtune::OpBinder* binder, int64_t rows,
                         int64_t width) {
  torch::manual_seed(rows * 7 + width);
  auto x = torch::randn({rows, width}).requires_grad_(true);
  auto w =
      (torch::randn({width, width}) / std::sqrt(static_cast<double>(width))).requires_grad_(true);
  auto b = torch::randn({width}).requires_grad_(true);
  symtune::ForwardOptions options;
  options.binder = binder;
  BiasGeluRun r;
  r.out = gen.forward({x, w, b}, options).output.toTensor();
  r.out.backward(torch::linspace(-1, 1, r.out.numel()).view_as(r.out));
  r.gx = x.grad();
  r.gw = w.grad();
  r.gb = b.grad();
  return r;
}

}  // namespace

TEST_CASE("a bias add feeding only a GELU is one site; its second node passes the pair's result") {
  symtune::SyMuGen gen(biasGelus(), "bias_gelus");
  BinderOptions quiet;
  quiet.measure = false;  // every site on the reference: the ATen pair, then the GELU passing on
  Binder reference(gen.staticGraph(), here(), quiet);
  const BiasGeluRun plain = biasGeluStep(gen, nullptr, 6, 16);
  const BiasGeluRun paired = biasGeluStep(gen, &reference, 6, 16);
  CHECK(torch::equal(paired.out, plain.out));
  CHECK(torch::equal(paired.gx, plain.gx));
  CHECK(torch::equal(paired.gw, plain.gw));
  CHECK(torch::equal(paired.gb, plain.gb));
  const auto sites = reference.sites();
  REQUIRE(sites.size() == 2);
  std::set<std::string> approximations;
  for (const auto& site : sites) {
    INFO(site.name);
    CHECK(site.pattern == std::string(symtune::binding::kBiasGelu));
    CHECK(site.name.find("aten::add") != std::string::npos);
    REQUIRE(site.follower != nullptr);
    CHECK(site.follower->kind() == c10::aten::gelu);
    CHECK(symtune::binding::biasGeluProducer(site.follower) == site.node);
    approximations.insert(site.approximate);
  }
  CHECK(approximations == std::set<std::string>{"none", "tanh"});

  // With the fused candidate disabled the sites have nothing to choose: unbound, both nodes ATen.
  BinderOptions without;
  without.disable = {"bias-gelu"};
  Binder none(gen.staticGraph(), here(), without);
  const BiasGeluRun unbound = biasGeluStep(gen, &none, 6, 16);
  CHECK(none.sites().empty());
  CHECK(torch::equal(unbound.out, plain.out));
  CHECK(torch::equal(unbound.gb, plain.gb));
  // Bit-for-bit candidates only: bias-gelu (tolerance 1e-5) is not one.
  BinderOptions exactOnly;
  exactOnly.exact = true;
  Binder exact(gen.staticGraph(), here(), exactOnly);
  CHECK(torch::equal(biasGeluStep(gen, &exact, 6, 16).out, plain.out));
  CHECK(exact.sites().empty());
}

TEST_CASE("bias-gelu computes the ATen pair within its tolerance, forward and backward") {
  symtune::SyMuGen gen(biasGelus(), "bias_gelus");
  BinderOptions quiet;
  quiet.measure = false;
  Binder finder(gen.staticGraph(), here(), quiet);
  biasGeluStep(gen, &finder, 2, 8);
  const auto* fused = symtune::binding::findCandidate("bias-gelu");
  REQUIRE(fused != nullptr);
  for (const auto& site : finder.sites()) {
    REQUIRE(fused->applies(site));
    // The reference: the add, then the gelu on its result (what the binder runs for the site).
    auto add = site.node->getOperation();
    auto gelu = site.follower->getOperation();
    for (const auto& [shape, biasShape] :
         std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
             {{5, 8}, {8}}, {{2, 3, 16}, {16}}, {{1, 1}, {1}}, {{4, 8}, {4, 8}}}) {
      INFO(site.approximate, " on ", c10::IntArrayRef(shape), " + ", c10::IntArrayRef(biasShape));
      torch::manual_seed(shape.back());
      const auto x0 = torch::randn(shape);
      const auto b0 = torch::randn(biasShape);
      const auto gradOut = torch::randn(shape);
      std::vector<torch::Tensor> results;
      for (int fusedRun = 0; fusedRun < 2; ++fusedRun) {
        auto x = x0.clone().requires_grad_(true);
        auto b = b0.clone().requires_grad_(true);
        torch::jit::Stack stack{x, b, c10::IValue(int64_t{1})};
        if (fusedRun == 1) {
          torch::jit::Operation pair([&](torch::jit::Stack& st) {
            add(st);
            st.emplace_back(site.approximate);
            gelu(st);
          });
          symtune::LoopFrames frames;
          fused->run(site, pair, stack, frames);
        } else {
          add(stack);
          stack.emplace_back(site.approximate);
          gelu(stack);
        }
        REQUIRE(stack.size() == 1);
        const auto out = stack[0].toTensor();
        const auto grads = torch::autograd::grad({out}, {x, b}, {gradOut});
        results.insert(results.end(), {out, grads[0], grads[1]});
      }
      symtune::test::checkScaledError("output", results[3], results[0], fused->tolerance());
      symtune::test::checkScaledError("input gradient", results[4], results[1], fused->tolerance());
      symtune::test::checkScaledError("bias gradient", results[5], results[2], fused->tolerance());
    }
  }
}

TEST_CASE("a measured bias-GELU site keeps both candidates' times and agrees with the ATen pair") {
  symtune::SyMuGen gen(biasGelus(), "bias_gelus");
  Binder binder(gen.staticGraph(), here());
  for (const auto& [rows, width] : std::vector<std::pair<int64_t, int64_t>>{{64, 128}, {3, 8}}) {
    INFO(rows, " rows of ", width);
    const BiasGeluRun plain = biasGeluStep(gen, nullptr, rows, width);
    const BiasGeluRun bound = biasGeluStep(gen, &binder, rows, width);
    symtune::test::checkScaledError("output", bound.out, plain.out, 1e-5);
    symtune::test::checkScaledError("x gradient", bound.gx, plain.gx, 1e-5);
    symtune::test::checkScaledError("w gradient", bound.gw, plain.gw, 1e-5);
    symtune::test::checkScaledError("b gradient", bound.gb, plain.gb, 1e-5);
  }
  int measured = 0;
  for (const auto& b : binder.table().bindings) {
    INFO(b.site, " [", b.bucket, "]");
    CHECK(b.pattern == std::string(symtune::binding::kBiasGelu));
    if (b.predicted)
      continue;
    ++measured;
    REQUIRE(b.candidates.size() == 2);
    CHECK(b.candidates[1].name == "bias-gelu");
    CHECK(b.candidates[1].refused.empty());
    CHECK(b.candidates[1].maxError <= 1e-5);
    CHECK(b.candidates[1].seconds() > 0);
    CHECK(b.nodes.size() == 1);  // the GELU, for the studio's overlay
  }
  CHECK(measured == 4);  // two sites, two buckets each
}

namespace {

// Three bias-GELU pairs of one shape: three sites of one pattern meeting one bucket.
torch::jit::Module threeGelus() {
  torch::jit::Module m("ThreeGelus");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor, b: Tensor):
    h = torch.gelu(torch.matmul(x, w) + b)
    h = torch.gelu(torch.matmul(h, w) + b)
    return torch.gelu(torch.matmul(h, w) + b)
)");
  return m;
}

}  // namespace

TEST_CASE("the cost model binds a site from the other sites of its pattern in its bucket") {
  symtune::SyMuGen gen(threeGelus(), "three_gelus");
  BinderOptions measureAll;
  measureAll.predict = false;
  Binder probe(gen.staticGraph(), here(), measureAll);
  biasGeluStep(gen, &probe, 64, 128);
  const auto sites = probe.sites();
  REQUIRE(sites.size() == 3);
  REQUIRE(probe.table().bindings.size() == 3);
  // The first two sites measured with bias-gelu `ratio` times faster than the ATen pair; the
  // third not measured.
  const auto tableWith = [&](double ratio) {
    symtune::BindingTable t = probe.table();
    t.bindings.erase(std::remove_if(t.bindings.begin(), t.bindings.end(),
                                    [&](const auto& b) { return b.site == sites[2].name; }),
                     t.bindings.end());
    for (auto& b : t.bindings) {
      b.winner = "bias-gelu";
      b.candidates = {{"aten", ratio * 1e-5, 0, 0, ""}, {"bias-gelu", 1e-5, 0, 0, ""}};
    }
    return t;
  };
  const BiasGeluRun plain = biasGeluStep(gen, nullptr, 64, 128);
  Binder settled(gen.staticGraph(), here());
  REQUIRE_FALSE(settled.adopt(tableWith(3.0)).has_value());
  const BiasGeluRun predicted = biasGeluStep(gen, &settled, 64, 128);
  CHECK(settled.measurements() == 0);
  CHECK(settled.predictions() == 1);
  const auto third = settled.table().ofSite(sites[2].name);
  REQUIRE(third.size() == 1);
  CHECK(third.front()->predicted);
  CHECK(third.front()->winner == "bias-gelu");
  symtune::test::checkScaledError("output", predicted.out, plain.out, 1e-5);
  // Siblings that won narrowly settle nothing: the third site is measured.
  Binder close(gen.staticGraph(), here());
  REQUIRE_FALSE(close.adopt(tableWith(1.2)).has_value());
  biasGeluStep(gen, &close, 64, 128);
  CHECK(close.predictions() == 0);
  CHECK(close.measurements() == 1);
}

namespace {

// An image model: convolution, batch norm (training, with running statistics), ReLU, and a
// second convolution whose activation is the output.
torch::jit::Module convNet() {
  torch::manual_seed(11);
  torch::jit::Module m("ConvNet");
  m.register_parameter("w1", (torch::randn({8, 3, 3, 3}) * 0.3).requires_grad_(), false);
  m.register_parameter("g1", torch::ones({8}).requires_grad_(), false);
  m.register_parameter("b1", torch::zeros({8}).requires_grad_(), false);
  m.register_buffer("mean1", torch::zeros({8}));
  m.register_buffer("var1", torch::ones({8}));
  m.register_parameter("w2", (torch::randn({4, 8, 3, 3}) * 0.2).requires_grad_(), false);
  m.define(R"(
def forward(self, x: Tensor):
    y = torch.conv2d(x, self.w1, None, [1, 1], [1, 1])
    y = torch.batch_norm(y, self.g1, self.b1, self.mean1, self.var1, True, 0.1, 1e-5, False)
    return torch.conv2d(torch.relu(y), self.w2, None, [1, 1], [1, 1])
)");
  return m;
}

std::vector<torch::jit::IValue> images(int64_t batch) {
  torch::manual_seed(batch);
  return {torch::randn({batch, 3, 12, 12})};
}

// The image-input site alone: its batch norm and ReLU left unbound.
BinderOptions imageSiteOnly() {
  BinderOptions options;
  options.disable = {"bn-relu", "bn-relu-conv", "torchscript"};
  return options;
}

}  // namespace

TEST_CASE("image inputs: the whole model measured both ways, and nothing of it changed") {
  torch::jit::Module module = convNet();
  symtune::SegmentExecutor plain(module.clone(), "conv");
  symtune::SegmentExecutor bound(module, "conv");
  auto binder = std::make_shared<Binder>(bound.symugen()->staticGraph(), here(), imageSiteOnly());
  bound.setBinder(binder);
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto rng = generator.get_state();
  const auto want = plain.run(images(6), symtune::ForwardRequest{}).output;
  generator.set_state(rng);
  const auto got = bound.run(images(6), symtune::ForwardRequest{}).output;
  symtune::test::checkScaledError("output", got, want, symtune::binding::kImageFormatTolerance);
  // One training forward's update of the running statistics, not the measurement's as well.
  symtune::test::checkScaledError("running mean", module.attr("mean1").toTensor(),
                                  plain.scriptModule()->attr("mean1").toTensor(), 1e-5);
  symtune::test::checkScaledError("running var", module.attr("var1").toTensor(),
                                  plain.scriptModule()->attr("var1").toTensor(), 1e-5);
  for (const auto& p : bound.parameters())
    CHECK_FALSE(p.grad().defined());  // measured with autograd::grad: nothing accumulated
  REQUIRE(binder->table().bindings.size() == 1);
  const auto& b = binder->table().bindings.front();
  CHECK(b.site == std::string(symtune::binding::kImageInputs));
  CHECK(b.bucket.find("nograd") == std::string::npos);  // the parameters' gradients flow
  CHECK(bound.symugen()->staticGraph().node(symtune::NodeId(b.node)).kind == "aten::conv2d");
  REQUIRE(b.candidates.size() == 2);
  CHECK(b.candidates[1].name == symtune::binding::kChannelsLast);
  for (const auto& c : b.candidates) {
    INFO(c.name);
    CHECK(c.refused.empty());
    CHECK(c.maxError <= symtune::binding::kImageFormatTolerance);
    CHECK(c.seconds() > 0);
  }
  // The same bucket again: looked up.
  bound.run(images(6), symtune::ForwardRequest{});
  CHECK(binder->measurements() == 1);
}

TEST_CASE("image inputs bound channels-last run the model channels-last; disabled, untouched") {
  torch::jit::Module module = convNet();
  symtune::SegmentExecutor exec(module, "conv");
  auto measuring = std::make_shared<Binder>(exec.symugen()->staticGraph(), here(), imageSiteOnly());
  exec.setBinder(measuring);
  const auto want = exec.run(images(4), symtune::ForwardRequest{}).output;
  for (const char* winner : {symtune::binding::kChannelsLast, symtune::binding::kAten}) {
    INFO(winner);
    symtune::BindingTable table = measuring->table();
    REQUIRE(table.bindings.size() == 1);
    table.bindings.front().winner = winner;
    auto binder = std::make_shared<Binder>(exec.symugen()->staticGraph(), here(), imageSiteOnly());
    REQUIRE_FALSE(binder->adopt(table).has_value());
    exec.setBinder(binder);
    const auto got = exec.run(images(4), symtune::ForwardRequest{}).output;
    CHECK(binder->measurements() == 0);
    CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast) ==
          (std::string(winner) == symtune::binding::kChannelsLast));
    symtune::test::checkScaledError("output", got, want, symtune::binding::kImageFormatTolerance);
  }
  BinderOptions options;
  options.disable = {symtune::binding::kChannelsLast};
  Binder disabled(exec.symugen()->staticGraph(), here(), options);
  CHECK_FALSE(disabled.bindInputs(images(4), nullptr).has_value());
  CHECK(disabled.table().bindings.empty());
  BinderOptions exactOnly;  // channels-last is not bit for bit
  exactOnly.exact = true;
  Binder exact(exec.symugen()->staticGraph(), here(), exactOnly);
  CHECK_FALSE(exact.bindInputs(images(4), nullptr).has_value());
  // A model without convolutions has no image-input site.
  symtune::SyMuGen gen(biasGelus(), "bias_gelus");
  Binder none(gen.staticGraph(), here());
  CHECK_FALSE(none.bindInputs(images(4), nullptr).has_value());
}

namespace {

// Convolution blocks: batch norm (training as the module says) and ReLU; a second batch norm
// whose result is also added back is no site.
torch::jit::Module convBlocks(bool training) {
  torch::manual_seed(3);
  torch::jit::Module m("ConvBlocks");
  // Parameters without requires_grad, so that clones of the module have leaves (blockStep asks
  // for their gradients).
  m.register_parameter("w1", torch::randn({8, 3, 3, 3}) * 0.3, false);
  m.register_parameter("w2", torch::randn({8, 8, 3, 3}) * 0.2, false);
  for (const char* bn : {"1", "2"}) {
    m.register_parameter(std::string("g") + bn, torch::rand({8}) + 0.5, false);
    m.register_parameter(std::string("b") + bn, torch::randn({8}) * 0.1, false);
    m.register_buffer(std::string("mean") + bn, torch::zeros({8}));
    m.register_buffer(std::string("var") + bn, torch::ones({8}));
  }
  m.register_attribute("train_bn", c10::BoolType::get(), training);
  m.define(R"(
def forward(self, x: Tensor):
    y = torch.conv2d(x, self.w1, None, [1, 1], [1, 1])
    y = torch.relu(torch.batch_norm(y, self.g1, self.b1, self.mean1, self.var1, self.train_bn,
                                    0.1, 1e-5, False))
    z = torch.conv2d(y, self.w2, None, [1, 1], [1, 1])
    z = torch.batch_norm(z, self.g2, self.b2, self.mean2, self.var2, self.train_bn, 0.1, 1e-5,
                         False)
    return torch.relu(z) + z
)");
  return m;
}

struct BlockRun {
  torch::Tensor out, gx, gw1, gg1, mean1, var1;
};

// One forward and backward through `exec` (a fresh executor of the blocks' module).
BlockRun blockStep(symtune::SegmentExecutor& exec, bool channelsLast) {
  for (auto& p : exec.parameters())
    p.requires_grad_(true);  // a clone of the module's parameters needs none
  torch::manual_seed(9);
  auto x = torch::randn({4, 3, 10, 10});
  if (channelsLast)
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
  x.requires_grad_(true);
  BlockRun r;
  r.out = exec.run({x}, symtune::ForwardRequest{}).output;
  r.out.backward(torch::linspace(-1, 1, r.out.numel()).view_as(r.out));
  r.gx = x.grad();
  for (const auto& [name, p] : exec.namedParameters()) {
    if (name == "w1")
      r.gw1 = p.grad().clone();
    if (name == "g1")
      r.gg1 = p.grad().clone();
  }
  torch::jit::Module& m = *exec.scriptModule();
  r.mean1 = m.attr("mean1").toTensor().clone();
  r.var1 = m.attr("var1").toTensor().clone();
  return r;
}

// A binder of `exec`'s graph, the image-input site and the region of the first block's pair and
// the next convolution left out (these tests are about the pair; tst_conv_block_sites.cpp is
// about the region).
std::shared_ptr<Binder> pairBinder(symtune::SegmentExecutor& exec, BinderOptions options = {}) {
  options.disable.push_back(symtune::binding::kChannelsLast);
  options.disable.push_back("bn-relu-conv");
  options.disable.push_back("torchscript");
  auto binder = std::make_shared<Binder>(exec.symugen()->staticGraph(), here(), options);
  exec.setBinder(binder);
  return binder;
}

}  // namespace

TEST_CASE("a training batch norm feeding only a ReLU is one site, bound to kernels' bn-relu") {
  for (const bool channelsLast : {false, true}) {
    INFO("channels-last ", channelsLast);
    const torch::jit::Module module = convBlocks(true);
    symtune::SegmentExecutor plainExec(module.clone(), "blocks");
    symtune::SegmentExecutor exec(module.clone(), "blocks");
    auto binder = pairBinder(exec);
    const BlockRun plain = blockStep(plainExec, channelsLast);
    const BlockRun bound = blockStep(exec, channelsLast);
    const auto sites = binder->sites();
    REQUIRE(sites.size() == 1);  // the second batch norm's result has two uses
    CHECK(sites.front().pattern == std::string(symtune::binding::kBatchNormRelu));
    REQUIRE(sites.front().follower != nullptr);
    CHECK(sites.front().follower->kind() == c10::aten::relu);
    CHECK(symtune::binding::pairProducer(sites.front().follower) == sites.front().node);
    REQUIRE(binder->table().bindings.size() == 1);
    const auto& b = binder->table().bindings.front();
    REQUIRE(b.candidates.size() == 2);
    CHECK(b.candidates[1].name == "bn-relu");
    CHECK(b.candidates[1].refused.empty());
    CHECK(b.candidates[1].maxError <= 1e-5);
    // The measurement replays ran on copies of the running statistics: one forward's update.
    symtune::test::checkScaledError("running mean", bound.mean1, plain.mean1, 1e-6);
    symtune::test::checkScaledError("running var", bound.var1, plain.var1, 1e-6);
    symtune::test::checkScaledError("output", bound.out, plain.out, 1e-5);
    symtune::test::checkScaledError("input gradient", bound.gx, plain.gx, 1e-5);
    symtune::test::checkScaledError("conv gradient", bound.gw1, plain.gw1, 1e-5);
    symtune::test::checkScaledError("bn weight gradient", bound.gg1, plain.gg1, 1e-5);

    // Forced to the fused op: the same within its tolerance, running statistics included.
    symtune::BindingTable table = binder->table();
    table.bindings.front().winner = "bn-relu";
    BinderOptions quiet;
    quiet.measure = false;
    symtune::SegmentExecutor forcedExec(module.clone(), "blocks");
    auto forced = pairBinder(forcedExec, quiet);
    REQUIRE_FALSE(forced->adopt(table).has_value());
    const BlockRun fused = blockStep(forcedExec, channelsLast);
    CHECK(forced->boundExecutions() == 1);
    symtune::test::checkScaledError("forced output", fused.out, plain.out, 1e-5);
    symtune::test::checkScaledError("forced input gradient", fused.gx, plain.gx, 1e-5);
    symtune::test::checkScaledError("forced running var", fused.var1, plain.var1, 1e-6);
  }
}

TEST_CASE("bn-relu leaves an evaluation-mode batch norm to ATen; the reference pair is exact") {
  const torch::jit::Module evaluating = convBlocks(false);
  symtune::SegmentExecutor plainExec(evaluating.clone(), "blocks");
  symtune::SegmentExecutor exec(evaluating.clone(), "blocks");
  auto binder = pairBinder(exec);
  const BlockRun plain = blockStep(plainExec, false);
  const BlockRun bound = blockStep(exec, false);
  // Evaluation mode: the candidate runs the ATen pair, so it agrees exactly and gains nothing.
  CHECK(torch::equal(bound.out, plain.out));
  CHECK(torch::equal(bound.gx, plain.gx));
  REQUIRE(binder->table().bindings.size() == 1);
  CHECK(binder->table().bindings.front().candidates.at(1).maxError == 0);
  // Every site on its reference: the two ATen ops one after the other, bit for bit.
  BinderOptions quiet;
  quiet.measure = false;
  const torch::jit::Module training = convBlocks(true);
  symtune::SegmentExecutor wantExec(training.clone(), "blocks");
  symtune::SegmentExecutor gotExec(training.clone(), "blocks");
  pairBinder(gotExec, quiet);
  const BlockRun want = blockStep(wantExec, false);
  const BlockRun got = blockStep(gotExec, false);
  CHECK(torch::equal(got.out, want.out));
  CHECK(torch::equal(got.gx, want.gx));
  CHECK(torch::equal(got.var1, want.var1));
}

namespace {

struct LossRun {
  torch::Tensor loss, grad;
};

LossRun lossStep(Binder* binder, const std::vector<int64_t>& shape, int64_t classes,
                 int64_t seed = 3) {
  torch::manual_seed(seed);
  auto logits = (torch::randn(shape) * 3).requires_grad_(true);
  std::vector<int64_t> targetShape = shape;
  targetShape.erase(targetShape.begin() + 1);
  auto target = torch::randint(0, classes, targetShape);
  if (target.numel() > 2)
    target.view(-1)[1] = -100;  // an ignored row
  LossRun r;
  r.loss =
      binder != nullptr ? binder->loss(logits, target) : at::cross_entropy_loss(logits, target);
  r.loss.backward();
  r.grad = logits.grad();
  return r;
}

}  // namespace

TEST_CASE("the loss is a site: ATen's cross-entropy or kernels' fused one, within its tolerance") {
  symtune::SyMuGen gen(biasGelus(), "bias_gelus");
  Binder binder(gen.staticGraph(), here());
  const LossRun plain = lossStep(nullptr, {64, 10}, 10);
  const LossRun measured = lossStep(&binder, {64, 10}, 10);
  symtune::test::checkScaledError("loss", measured.loss, plain.loss, 1e-5);
  symtune::test::checkScaledError("logits gradient", measured.grad, plain.grad, 1e-5);
  const auto bindings = binder.table().ofSite(symtune::binding::kLossSite);
  REQUIRE(bindings.size() == 1);
  CHECK(bindings.front()->pattern == std::string(symtune::binding::kSoftmaxCrossEntropy));
  REQUIRE(bindings.front()->candidates.size() == 2);
  CHECK(bindings.front()->candidates[1].name == "softmax-cross-entropy");
  CHECK(bindings.front()->candidates[1].refused.empty());
  CHECK(bindings.front()->candidates[1].maxError <= 1e-5);
  const int64_t measurements = binder.measurements();
  lossStep(&binder, {64, 10}, 10, 4);  // the same bucket: looked up
  CHECK(binder.measurements() == measurements);

  // Bound either way, it computes the ATen loss; logits of another rank go to ATen.
  for (const char* winner : {"aten", "softmax-cross-entropy"}) {
    INFO(winner);
    symtune::BindingTable table = binder.table();
    for (auto& b : table.bindings)
      b.winner = winner;
    BinderOptions quiet;
    quiet.measure = false;
    Binder forced(gen.staticGraph(), here(), quiet);
    REQUIRE_FALSE(forced.adopt(std::move(table)).has_value());
    const LossRun got = lossStep(&forced, {64, 10}, 10);
    symtune::test::checkScaledError("loss", got.loss, plain.loss, 1e-5);
    symtune::test::checkScaledError("logits gradient", got.grad, plain.grad, 1e-5);
    CHECK(forced.boundExecutions() == (std::string(winner) == "aten" ? 0 : 1));
  }
  const LossRun images = lossStep(&binder, {4, 5, 3}, 5);  // [N, C, d]: ATen's only
  const LossRun imagesPlain = lossStep(nullptr, {4, 5, 3}, 5);
  CHECK(torch::equal(images.loss, imagesPlain.loss));
  CHECK(torch::equal(images.grad, imagesPlain.grad));

  // Bit-for-bit binding: the loss is ATen's, no site.
  BinderOptions exactOnly;
  exactOnly.exact = true;
  Binder exact(gen.staticGraph(), here(), exactOnly);
  const LossRun e = lossStep(&exact, {64, 10}, 10);
  CHECK(torch::equal(e.loss, plain.loss));
  CHECK(torch::equal(e.grad, plain.grad));
  CHECK(exact.table().bindings.empty());
}
