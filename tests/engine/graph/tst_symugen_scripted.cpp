// SyMuGen on models users make themselves with Python's torch.jit.script (written by the
// fixtures.scripted_models test): a data-dependent if, a loop over a variable-length input, and
// submodules nested three deep; models whose IR the evaluator runs in part.

#include "doctest_torch.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "symtune/core/session.h"
#include "symtune/graph/symugen.h"
#include "symtune/runtime/trainer.h"

using namespace symtune;

namespace {

torch::jit::Module load(const char* name) {
  return torch::jit::load(std::string(SYMTUNE_FIXTURES_DIR) + "/" + name + ".pt");
}

std::vector<const GraphNode*> nodesOf(const Graph& g, const std::string& kind,
                                      GraphSide side = GraphSide::Forward) {
  std::vector<const GraphNode*> out;
  for (const auto& n : g.nodes()) {
    if (n.kind == kind && n.side == side)
      out.push_back(&n);
  }
  return out;
}

const GraphRegion* regionOf(const Graph& g, RegionKind kind) {
  for (const auto& r : g.regions()) {
    if (r.kind == kind)
      return &r;
  }
  return nullptr;
}

// Every autograd node that has a forward op is linked to it: all but AccumulateGrad and the nodes
// of the loss (computed outside the model).
void checkEveryBackwardNodeIsLinked(const Graph& g, const std::set<std::string>& lossKinds) {
  for (const auto& n : g.nodes()) {
    if (n.side != GraphSide::Backward || n.kind == "torch::autograd::AccumulateGrad")
      continue;
    INFO("autograd node ", n.id.value(), " ", n.kind);
    if (lossKinds.count(n.kind)) {
      CHECK(!n.forward.valid());
      continue;
    }
    REQUIRE(n.forward.valid());
    const auto& back = g.node(n.forward).backward;
    CHECK(std::find(back.begin(), back.end(), n.id) != back.end());
  }
}

StepCapture capture(SyMuGen& gen, const torch::Tensor& x) {
  return gen.captureStep({x}, [](const c10::IValue& out) { return out.toTensor().pow(2).mean(); });
}

const std::set<std::string> kLossKinds = {"MeanBackward0", "PowBackward0"};

}  // namespace

TEST_CASE("a data-dependent if: its heads sit in their branches, and a step takes one") {
  SyMuGen gen(load("if_model"), "if_model");
  const Graph& g = gen.staticGraph();
  CHECK(nodesOf(g, "prim::If").size() == 1u);
  CHECK(nodesOf(g, "aten::linear").size() == 3u);
  const GraphRegion* then = regionOf(g, RegionKind::IfThen);
  const GraphRegion* otherwise = regionOf(g, RegionKind::IfElse);
  REQUIRE((then && otherwise));
  // The heads sit in their branches, under their module paths.
  for (const GraphNode* n : nodesOf(g, "aten::linear")) {
    INFO(n->modulePath);
    if (n->modulePath == "fc")
      CHECK(n->features.controlDepth == 0);
    if (n->modulePath == "pos")
      CHECK((g.region(g.region(n->region).parent).kind == RegionKind::IfThen));
    if (n->modulePath == "neg")
      CHECK((g.region(g.region(n->region).parent).kind == RegionKind::IfElse));
  }

  // A positive batch takes "then"; its autograd graph reaches pos, not neg.
  StepCapture step = capture(gen, torch::ones({4, 8}));
  const Graph& s = step.graph;
  CHECK(s.region(then->id).taken == true);
  CHECK(s.region(otherwise->id).taken == false);
  checkEveryBackwardNodeIsLinked(s, kLossKinds);
  for (const GraphNode* n : nodesOf(s, "aten::linear")) {
    INFO(n->modulePath);
    CHECK(!n->backward.empty() == (n->modulePath != "neg"));
  }
  // A negative batch takes "else".
  const Graph negative = capture(gen, -torch::ones({4, 8})).graph;
  CHECK(negative.region(otherwise->id).taken == true);
}

TEST_CASE("a loop over a variable-length input: each step records its own trip count") {
  SyMuGen gen(load("loop_model"), "loop_model");
  const Graph& g = gen.staticGraph();
  CHECK(nodesOf(g, "prim::Loop").size() == 1u);
  const GraphRegion* body = regionOf(g, RegionKind::Loop);
  REQUIRE(body != nullptr);
  CHECK(!body->tripCount.has_value());  // the trip count is the input's length: unknown
  for (const GraphNode* n : nodesOf(g, "aten::linear")) {
    INFO(n->modulePath);
    CHECK(n->features.controlDepth == (n->modulePath == "out" ? 0 : 1));
  }

  // Two inputs of different lengths: the step records its own trip count, and each op in the
  // body created one autograd node per trip, all linked to it.
  for (int64_t length : {5, 9}) {
    INFO("length ", length);
    const StepCapture step = capture(gen, torch::randn({2, length, 6}));
    const Graph& s = step.graph;
    CHECK(s.region(body->id).tripCount.value_or(-1) == length);
    checkEveryBackwardNodeIsLinked(s, kLossKinds);
    for (const GraphNode* n : nodesOf(s, "aten::tanh")) {
      REQUIRE(n->backward.size() == static_cast<size_t>(length));
      CHECK(s.node(n->backward[0]).kind == "TanhBackward0");
    }
  }
}

TEST_CASE("submodules nested three deep: module regions nest, and a known layer gets its cost") {
  SyMuGen gen(load("nested_model"), "nested_model");
  const Graph& g = gen.staticGraph();
  const GraphNode* fc = nullptr;
  for (const GraphNode* n : nodesOf(g, "aten::linear")) {
    if (n->modulePath == "block.inner.fc")
      fc = n;
  }
  REQUIRE(fc != nullptr);
  // Module regions nest like the modules: block.inner.fc inside block.inner inside block.
  RegionId r = fc->region;
  std::vector<std::string> chain;
  while (g.region(r).kind == RegionKind::Module) {
    chain.push_back(g.region(r).label);
    r = g.region(r).parent;
  }
  CHECK(chain == std::vector<std::string>{"block.inner.fc", "block.inner", "block"});
  CHECK(nodesOf(g, "aten::layer_norm").size() == 1u);

  const StepCapture step = capture(gen, torch::randn({7, 10}));
  const Graph& s = step.graph;
  checkEveryBackwardNodeIsLinked(s, kLossKinds);
  // The template of a known layer on the step's shapes: linear 10 -> 10 on a batch of 7 is
  // 2*7*10*10 + 7*10 FLOPs, reading x, W and b and writing y (float32).
  const GraphNode& lin = s.node(fc->id);
  REQUIRE((!lin.inputs.empty() && lin.inputs[0].shape.has_value()));
  CHECK(*lin.inputs[0].shape == std::vector<int64_t>{7, 10});
  CHECK(lin.features.flops.value_or(-1) == doctest::Approx(2.0 * 7 * 10 * 10 + 7 * 10));
  CHECK(lin.features.bytesRead.value_or(-1) == doctest::Approx((70.0 + 100 + 10) * 4));
  CHECK(lin.features.bytesWritten.value_or(-1) == doctest::Approx(70.0 * 4));
  CHECK(s.node(lin.backward.at(0)).kind == "AddmmBackward0");
  CHECK(s.node(lin.backward.at(0)).modulePath == "block.inner.fc");
}

// TorchScript's inliner names a call by its last attribute read, and a call of the model's own
// method "SELF": these paths were "SELF.inner.fc", "SELF.0.fc" and "SELF.head", so a plan found
// no block of such a model (torchvision's ResNet among them) to recompute.
TEST_CASE("module paths follow the calls: own methods, attribute chains, a ModuleList's members") {
  torch::jit::Module module = load("calls_model");
  SyMuGen gen(module, "calls_model");
  const Graph& g = gen.staticGraph();
  std::vector<std::string> paths;
  for (const GraphNode* n : nodesOf(g, "aten::linear"))
    paths.push_back(n->modulePath);
  CHECK(paths == std::vector<std::string>{"stem.inner.fc", "blocks.0.fc", "blocks.1.fc",
                                          "blocks.1.fc", "head"});
  for (const GraphNode* n : nodesOf(g, "aten::relu"))
    CHECK((n->modulePath == "stem.inner" || n->modulePath.rfind("blocks.", 0) == 0));
  CHECK(gen.segmentBlocks() == std::vector<std::string>{"stem", "blocks.0", "blocks.1", "head"});
  const auto units = gen.unitNodes();
  for (const char* block : {"stem", "blocks.0", "blocks.1", "head"}) {
    INFO(block);
    CHECK(units.count(block) == 1u);
    CHECK(!units.at(block).empty());
  }

  // Recomputing a member of the list: that call keeps no activations, and the gradients are
  // the plain run's.
  auto gradients = [&](const SegmentPlan* plan) {
    for (const auto& p : module.parameters())
      p.mutable_grad() = torch::Tensor();
    torch::manual_seed(3);
    ForwardOptions options;
    options.plan = plan;
    const EvaluatorRun run = gen.forward({torch::randn({5, 10})}, options);
    run.output.toTensor().pow(2).sum().backward();
    std::vector<torch::Tensor> grads{run.output.toTensor().detach()};
    for (const auto& p : module.parameters())
      grads.push_back(p.grad().clone());
    return std::make_pair(grads, run.recomputed);
  };
  SegmentPlan plan;
  plan.recompute = {"blocks.0"};
  const auto plain = gradients(nullptr);
  const auto planned = gradients(&plan);
  CHECK(plain.second == 0);
  CHECK(planned.second == 1);
  REQUIRE(plain.first.size() == planned.first.size());
  for (size_t i = 0; i < plain.first.size(); ++i) {
    INFO("tensor ", i);
    CHECK(torch::allclose(plain.first[i], planned.first[i]));
  }
}

// `with torch.no_grad():` in forward (Note [With blocks]): an object made in forward whose
// __enter__ and __exit__ the evaluator calls as TorchScript's interpreter does. Until 2026-12-07 a
// model holding one was not run through the evaluator at all: unbound, remat refused.
TEST_CASE("a with block runs as TorchScript runs it: no gradient through it, the mode restored") {
  torch::jit::Module module = load("with_model");
  SyMuGen gen(module, "with_model");
  CHECK(!gen.unrunnable().has_value());
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({6, 4});
  // The model as TorchScript runs it: the gradient reaches x through the Linear after the block
  // only, not through the scale the block computed.
  auto reference = [&](const torch::Tensor& input) {
    for (const auto& p : module.parameters())
      p.mutable_grad() = torch::Tensor();
    const torch::Tensor in = input.clone().requires_grad_();
    const torch::Tensor out = module.forward({in}).toTensor();
    out.pow(2).sum().backward();
    std::vector<torch::Tensor> grads{out.detach(), in.grad()};
    for (const auto& p : module.parameters())
      grads.push_back(p.grad().clone());
    return grads;
  };
  auto evaluated = [&](const torch::Tensor& input, const SegmentPlan* plan) {
    for (const auto& p : module.parameters())
      p.mutable_grad() = torch::Tensor();
    const torch::Tensor in = input.clone().requires_grad_();
    ForwardOptions options;
    options.plan = plan;
    const EvaluatorRun run = gen.forward({in}, options);
    CHECK(torch::GradMode::is_enabled());
    run.output.toTensor().pow(2).sum().backward();
    std::vector<torch::Tensor> grads{run.output.toTensor().detach(), in.grad()};
    for (const auto& p : module.parameters())
      grads.push_back(p.grad().clone());
    return std::make_pair(grads, run.recomputed);
  };
  const auto expected = reference(x);
  // Had the block run with gradients, x would get them through x.abs().max() and fc(x) too.
  torch::Tensor throughBlock;
  {
    const torch::Tensor in = x.clone().requires_grad_();
    const torch::Tensor scale =
        in.abs().max() + module.attr("fc").toModule().forward({in}).toTensor().abs().mean() + 1.0;
    module.attr("fc").toModule().forward({in / scale}).toTensor().pow(2).sum().backward();
    throughBlock = in.grad();
  }
  REQUIRE(!torch::allclose(throughBlock, expected[1]));

  const auto plain = evaluated(x, nullptr);
  REQUIRE(plain.first.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("tensor ", i);
    CHECK(torch::allclose(plain.first[i], expected[i], 1e-5, 1e-6));
  }
  // Remat: the Linear's call after the block is a span; its call inside is not (recomputed in
  // backward it would run with gradients).
  const auto units = gen.unitNodes();
  REQUIRE(units.count("fc") == 1u);
  const auto fcNodes = nodesOf(gen.staticGraph(), "aten::linear");
  REQUIRE(fcNodes.size() == 2u);
  REQUIRE(units.at("fc").size() == 1u);
  CHECK(units.at("fc").front().value() == fcNodes[1]->id.value());
  SegmentPlan plan;
  plan.recompute = {"fc"};
  const auto planned = evaluated(x, &plan);
  CHECK(planned.second == 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("tensor ", i);
    CHECK(torch::allclose(planned.first[i], expected[i], 1e-5, 1e-6));
  }

  // A forward that fails inside the block (5 features for a Linear of 4) leaves gradients on.
  CHECK_THROWS(gen.forward({torch::randn({6, 5})}));
  CHECK(torch::GradMode::is_enabled());
}

// A model whose IR holds what only TorchScript's interpreter runs (Tensor.tolist():
// prim::tolist) trains on TorchScript's executor, unbound, and says why. A with block and
// aten::warn, which the interpreter runs too, the evaluator runs itself: those models train bound.
TEST_CASE("a model with tolist() trains unbound; one with a with block or that warns, bound") {
  at::set_num_threads(2);
  const std::string data = SYMTUNE_SOURCE_DIR "/tests/data/blobs.npz";
  for (const auto& [name, bound] :
       {std::make_pair("tolist_model", false), std::make_pair("with_model", true),
        std::make_pair("warn_model", true)}) {
    CAPTURE(name);
    {
      SyMuGen gen(load(name), name);
      CHECK(gen.unrunnable().has_value() == !bound);
    }
    const Session s =
        parseSession(std::string(R"({"format": "symtune-session", "version": 1, "name": "ir",
            "model": {"file": ")") +
                         SYMTUNE_FIXTURES_DIR + "/" + name + R"(.pt", "classes": 3},
            "data": {"format": "npz", "file": ")" +
                         data + R"(", "inputs": ["x"],
                     "target": "y", "batch_size": 16},
            "binding": {"table": null}, "run": {"steps": 2}})",
                     "ir.json");
    Trainer trainer(s);
    CHECK((trainer.binder() != nullptr) == bound);
    if (!bound) {
      REQUIRE(trainer.bindingNote().has_value());
      MESSAGE(*trainer.bindingNote());
      CHECK(trainer.bindingNote()->find("does not run its prim::tolist") != std::string::npos);
    }
    for (int i = 0; i < 2; ++i)
      CHECK(std::isfinite(trainer.step().loss));
  }
}
