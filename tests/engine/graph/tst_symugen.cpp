// SyMuGen on the zoo's dynamic-branch ResNet: the static graph's regions and module paths, and a
// captured step's shapes, branches, costs and autograd links (by sequence number).

#include "doctest_torch.h"

#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "symtune/core/cost_templates.h"
#include "symtune/graph/symugen.h"
#include "symtune/telemetry/memory_tracker.h"
#include "symtune/zoo/model_zoo.h"

using namespace symtune;

namespace {

const GraphNode* findNode(const Graph& g, const std::string& kind, const std::string& path) {
  for (const auto& n : g.nodes()) {
    if (n.kind == kind && n.modulePath == path)
      return &n;
  }
  return nullptr;
}

// The 1-based line of the first line of `file` (under the source tree) that contains `text`.
int lineOf(const std::string& file, const std::string& text) {
  std::ifstream in(std::string(SYMTUNE_SOURCE_DIR) + "/" + file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find(text) != std::string::npos)
      return n;
  }
  return -1;
}

int countKind(const Graph& g, const std::string& kind) {
  int n = 0;
  for (const auto& node : g.nodes())
    n += node.kind == kind;
  return n;
}

// LibTorch's intra-op pool of two threads, as for every suite on the two-core CI machines.
struct TwoThreads {
  TwoThreads() { at::set_num_threads(2); }
};

}  // namespace

TEST_CASE_FIXTURE(TwoThreads, "the static graph of the zoo's ResNet has its regions and paths") {
  auto zoo = buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
  SyMuGen gen(zoo.module, "resnet");
  const Graph& g = gen.staticGraph();
  CHECK(g.name == "resnet");
  CHECK(g.countNodes(GraphSide::Backward) == 0u);
  // ci preset: stem + 4 stages x (DownBlock: 4 convs, GatedBlock: 3 convs) = 1 + 4*7 convs.
  CHECK(countKind(g, "aten::conv2d") == 29);
  CHECK(countKind(g, "aten::batch_norm") == 29);
  // Four gated blocks plus the stem's pooling switch.
  CHECK(countKind(g, "prim::If") == 5);
  int thenRegions = 0, elseRegions = 0;
  for (const auto& r : g.regions()) {
    thenRegions += r.kind == RegionKind::IfThen;
    elseRegions += r.kind == RegionKind::IfElse;
  }
  CHECK(thenRegions == 5);
  CHECK(elseRegions == 5);

  const GraphNode* conv = findNode(g, "aten::conv2d", "layer3.1.body.conv1");
  REQUIRE(conv != nullptr);
  CHECK(conv->features.opClass == "conv");
  CHECK(conv->features.controlDepth == 1);  // inside the gate's then-branch
  // Its region chain: module body.conv1 ... inside the then-branch of layer3.1's gate.
  RegionId r = conv->region;
  CHECK((g.region(r).kind == RegionKind::Module));
  CHECK(g.region(r).label == "layer3.1.body.conv1");
  while (g.region(r).kind == RegionKind::Module)
    r = g.region(r).parent;
  CHECK((g.region(r).kind == RegionKind::IfThen));
  CHECK(g.node(g.region(r).owner).modulePath == "layer3.1");
  CHECK(g.region(g.region(r).parent).label == "layer3.1");

  // The op's source is the ConvBn class's forward in the model file, at the file's own line.
  CHECK(conv->source.function == "forward");
  CHECK(conv->source.file == "resources/models/dynamic_resnet.py");
  CHECK(conv->source.line == lineOf("resources/models/dynamic_resnet.py", "y = torch.conv2d("));
  const GraphNode* gate = findNode(g, "aten::sigmoid", "layer2.1");
  REQUIRE(gate != nullptr);
  CHECK(gate->source.line == lineOf("resources/models/dynamic_resnet.py", "g = torch.sigmoid("));

  // Every forward op is reached by data flow from the input or a parameter-less start.
  CHECK(g.edges().size() > g.nodes().size());
}

TEST_CASE_FIXTURE(TwoThreads, "a captured step joins the forward ops and the autograd graph") {
  auto zoo = buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
  SyMuGen gen(zoo.module, "resnet");
  const Batch batch = zoo.data->batch(0);
  const StepCapture step = gen.captureStep(batch.inputs, [&](const c10::IValue& out) {
    return torch::nn::functional::cross_entropy(out.toTensor(), batch.target);
  });
  const Graph& g = step.graph;
  CHECK(step.loss.requires_grad());
  CHECK(step.nodesExecuted > 0);

  // Shapes of the step: the stem's conv sees the 16x16 batch.
  const GraphNode* stem = findNode(g, "aten::conv2d", "stem");
  REQUIRE(stem != nullptr);
  REQUIRE((!stem->inputs.empty() && stem->inputs[0].shape.has_value()));
  REQUIRE((!stem->outputs.empty() && stem->outputs[0].shape.has_value()));
  CHECK(*stem->inputs[0].shape == std::vector<int64_t>{16, 3, 16, 16});
  CHECK(*stem->outputs[0].shape == std::vector<int64_t>{16, 4, 16, 16});
  CHECK(stem->inputs[0].dtype == "float32");
  // Its cost on those shapes: 2 * numel(out) * (3*3*3), no bias.
  CHECK(stem->features.flops.value_or(-1) == doctest::Approx(2.0 * 16 * 4 * 16 * 16 * 27));

  // Every gate took exactly one of its branches; the stem pooling switch took "else".
  for (const auto& region : g.regions()) {
    if (region.kind != RegionKind::IfThen)
      continue;
    INFO("the branches of node ", region.owner.value());
    const auto other = std::find_if(g.regions().begin(), g.regions().end(), [&](const auto& x) {
      return x.kind == RegionKind::IfElse && x.owner == region.owner;
    });
    REQUIRE(other != g.regions().end());
    REQUIRE((region.taken.has_value() && other->taken.has_value()));
    CHECK(*region.taken != *other->taken);
  }

  // The autograd graph: every backward node that has a forward op is linked to it, by
  // sequence number, and carries its module path.
  CHECK(g.countNodes(GraphSide::Backward) > 0);
  int linked = 0, accumulate = 0;
  for (const auto& n : g.nodes()) {
    if (n.side != GraphSide::Backward)
      continue;
    INFO("backward node ", n.id.value(), " ", n.kind);
    if (n.kind == "torch::autograd::AccumulateGrad") {
      ++accumulate;
      INFO("AccumulateGrad nodes name their parameter");
      CHECK(!n.modulePath.empty());
      continue;
    }
    if (n.forward.valid()) {
      ++linked;
      const GraphNode& f = g.node(n.forward);
      CHECK((f.side == GraphSide::Forward));
      CHECK((f.sequenceNr <= n.sequenceNr || f.sequenceNr < 0));
      CHECK(n.modulePath == f.modulePath);
      CHECK(std::find(f.backward.begin(), f.backward.end(), n.id) != f.backward.end());
    }
  }
  MESSAGE("backward nodes: ", g.countNodes(GraphSide::Backward),
          ", linked to a forward op: ", linked, ", AccumulateGrad: ", accumulate);
  // Parameters of blocks whose gate was closed get no gradient: count those that did.
  CHECK(accumulate > 0);
  CHECK(linked > 0);
  // The stem's convolution produced a ConvolutionBackward0.
  bool stemLinked = false;
  for (NodeId b : stem->backward)
    stemLinked |= g.node(b).kind == "ConvolutionBackward0";
  CHECK(stemLinked);

  // Backward nodes not linked to a forward op come from the loss, computed outside the model.
  for (const auto& n : g.nodes()) {
    if (n.side == GraphSide::Backward && n.sequenceNr >= 0 && !n.forward.valid()) {
      INFO(n.kind);
      CHECK((n.kind.find("Loss") != std::string::npos ||
             n.kind.find("LogSoftmax") != std::string::npos));
    }
  }

  // The step trains: backward through the captured loss gives the stem a gradient.
  step.loss.backward();
  auto stemWeight = zoo.module.attr("stem").toModule().attr("weight").toTensor();
  CHECK(stemWeight.grad().defined());
}

TEST_CASE_FIXTURE(TwoThreads, "a plain torch::nn::Module gives its module tree") {
  torch::nn::Sequential encoder(torch::nn::Linear(4, 8), torch::nn::ReLU());
  torch::nn::Module net("Net");
  net.register_module("enc", encoder.ptr());
  net.register_module("head", torch::nn::Linear(8, 2).ptr());
  const Graph g = SyMuGen::captureModuleTree(net, "net");
  std::vector<std::string> paths;
  for (const auto& n : g.nodes())
    paths.push_back(n.modulePath);
  REQUIRE(paths == std::vector<std::string>{"", "enc", "enc.0", "enc.1", "head"});
  const GraphNode& linear = g.node(NodeId(2));
  CHECK(linear.kind == "torch::nn::LinearImpl");  // Module::name()
  REQUIRE(linear.outputs.size() == 2u);           // weight and bias
  REQUIRE(linear.outputs[0].shape.has_value());
  CHECK(*linear.outputs[0].shape == std::vector<int64_t>{8, 4});
  CHECK(g.region(linear.region).label == "enc");
  CHECK(g.edges().size() == 4u);  // parent -> child
}

TEST_CASE_FIXTURE(TwoThreads, "a captured step computes what the module's own forward does") {
  auto zoo = buildZooModel("dynamic_resnet", {"ci", 3, std::nullopt});
  zoo.module.eval();
  SyMuGen gen(zoo.module);
  const Batch batch = zoo.data->batch(5);
  torch::NoGradGuard noGrad;
  const auto expected = zoo.module.forward(batch.inputs).toTensor();
  torch::Tensor got;
  gen.captureStep(batch.inputs, [&](const c10::IValue& out) {
    got = out.toTensor();
    return got.sum();
  });
  CHECK(torch::allclose(got, expected, 1e-5, 1e-6));
}

// A vararg operator takes its input count on the stack after its inputs, as TorchScript's
// interpreter pushes it: a print or an f-string in forward failed the first step with an
// internal assert ("expected int").
TEST_CASE_FIXTURE(TwoThreads, "a forward that prints and formats runs as TorchScript runs it") {
  torch::jit::Module m("Net");
  m.define(R"(
def forward(self, x: Tensor):
    label = "scale {} of {}".format(2, x.size(0))
    print(label, x.size(1))
    return x * 2.0
)");
  SyMuGen gen(m);
  const torch::Tensor x = torch::randn({3, 4});
  torch::NoGradGuard noGrad;
  const EvaluatorRun run = gen.forward({x});
  CHECK(run.output.toTensor().equal(x * 2.0));
}

// Note [A loop's initial values]: a loop's initial carried value that its body does not read by
// name is dropped as the loop starts, so the evaluator holds two of the loop's tensors at a time,
// not three.
TEST_CASE_FIXTURE(TwoThreads, "the evaluator does not hold a loop's initial value through it") {
  torch::jit::Module m("Net");
  m.define(R"(
def forward(self, x: Tensor, n: int):
    h = x * 2.0
    for i in range(n):
        h = h + 1.0
    return h.sum()
)");
  SyMuGen gen(m);
  const torch::Tensor x = torch::randn({256, 1024});  // 1 MiB
  const int64_t bytes = x.numel() * static_cast<int64_t>(x.element_size());
  REQUIRE(CpuAllocationCounter::active());
  torch::NoGradGuard noGrad;
  CpuAllocationCounter::resetPeak();
  const EvaluatorRun run = gen.forward({x, c10::IValue(int64_t{4})});
  const int64_t peak = CpuAllocationCounter::counters().peak;
  CHECK(run.output.toTensor().item<double>() ==
        doctest::Approx((x * 2.0 + 4.0).sum().item<double>()).epsilon(1e-4));
  // The last trip's input and output; before, the initial value too.
  CHECK(peak >= 2 * bytes);
  CHECK(peak < 2 * bytes + bytes / 2);
  MESSAGE("peak ", peak / 1024, " KiB for tensors of ", bytes / 1024, " KiB");
}

// Note [Seen storages]: the counting forward counts what a training forward would save, and holds
// none of it: without grad, each value is freed after its last reader.
TEST_CASE_FIXTURE(TwoThreads, "the counting forward counts what a step saves without holding it") {
  torch::jit::Module m("Net");
  m.define(R"(
def forward(self, x: Tensor):
    h = torch.tanh(x)
    h = torch.tanh(h)
    h = torch.tanh(h)
    h = torch.tanh(h)
    return h.sum()
)");
  SyMuGen gen(m);
  const torch::Tensor x = torch::randn({256, 1024});  // 1 MiB
  const int64_t bytes = x.numel() * static_cast<int64_t>(x.element_size());
  REQUIRE(CpuAllocationCounter::active());
  torch::NoGradGuard noGrad;
  ForwardOptions counting;
  counting.countCost = true;
  CpuAllocationCounter::resetPeak();
  const int64_t before = CpuAllocationCounter::counters().current;
  const EvaluatorRun run = gen.forward({x}, counting);
  const int64_t peak = CpuAllocationCounter::counters().peak - before;
  // Each tanh saves its output for backward: four tensors of x's size.
  MESSAGE("counted ", run.cost.savedBytes / 1024, " KiB saved; the forward's peak ", peak / 1024,
          " KiB, for tensors of ", bytes / 1024, " KiB");
  CHECK(run.cost.savedBytes >= 4.0 * static_cast<double>(bytes));
  // One tanh's input and output at a time; held, the four outputs would be.
  CHECK(peak < 2 * bytes + bytes / 2);
}

// Note [Shapes only]: a counted forward on the meta device counts what the counted forward on the
// batch counts, for every zoo model whose forward needs no value to go on, and the others refuse.
TEST_CASE_FIXTURE(TwoThreads, "a forward on shapes alone counts what the counted forward counts") {
  std::set<std::string> ran;
  for (const char* name : {"transformer_xl", "dynamic_tagger", "dynamic_resnet", "moe_topk",
                           "early_exit", "tree_rnn"}) {
    INFO(std::string(name));
    auto zoo = buildZooModel(name, {"ci", 0, std::nullopt});
    SyMuGen gen(zoo.module, name);
    torch::NoGradGuard noGrad;
    for (int64_t b = 0; b < 3; ++b) {
      const Batch batch = zoo.data->batch(b);
      ForwardOptions counting;
      counting.countCost = true;
      const ForwardCost real = gen.forward(batch.inputs, counting).cost;
      ForwardOptions shapes = counting;
      shapes.shapesOnly = true;
      std::vector<torch::Tensor> buffers;  // batch norms' statistics, as the forward finds them
      for (const auto& t : zoo.module.buffers())
        buffers.push_back(t.clone());
      const int64_t before = CpuAllocationCounter::counters().current;
      CpuAllocationCounter::resetPeak();
      std::optional<EvaluatorRun> run;
      try {
        run = gen.forward(batch.inputs, shapes);
      } catch (const c10::Error& e) {
        const std::string why = e.what_without_backtrace();
        MESSAGE(std::string(name),
                " refuses: ", why.substr(0, std::min(why.find('\n'), why.find(". "))));
        break;
      }
      const int64_t peak = CpuAllocationCounter::counters().peak - before;
      // The module is as it was: its buffers' values too (a batch norm's update went to a copy).
      size_t i = 0;
      for (const auto& t : zoo.module.buffers())
        CHECK(torch::equal(t, buffers[i++]));
      INFO("batch ", b);
      ran.insert(name);
      CHECK(run->cost.savedBytes == doctest::Approx(real.savedBytes));
      CHECK(run->cost.flops == doctest::Approx(real.flops));
      REQUIRE(run->cost.units.size() == real.units.size());
      for (const auto& [unitName, unit] : real.units) {
        INFO(unitName);
        const auto& meta = run->cost.units.at(unitName);
        CHECK(meta.savedBytes == doctest::Approx(unit.savedBytes));
        CHECK(meta.flops == doctest::Approx(unit.flops));
        CHECK(meta.executions == unit.executions);
        REQUIRE(meta.savedByCall.size() == unit.savedByCall.size());
        for (size_t c = 0; c < unit.savedByCall.size(); ++c)
          CHECK(meta.savedByCall[c] == doctest::Approx(unit.savedByCall[c]));
      }
      // Next to nothing on the CPU: the ops without a meta kernel make their output from their
      // inputs' shapes (norms, activations, gathers) or run on zeros (a three-way `where`).
      MESSAGE(std::string(name), ", batch ", b, ": ", real.savedBytes / 1024,
              " KiB saved by the count, the same on shapes alone, whose forward allocated at most ",
              peak / 1024, " KiB");
      CHECK(static_cast<double>(peak) < real.savedBytes / 4);
    }
    for (const auto& p : zoo.module.parameters())
      CHECK_FALSE(p.is_meta());
  }
  // Transformer-XL's, the tagger's and the tree network's forwards need no value; early exit's
  // reads its confidence.
  CHECK(ran.count("transformer_xl") == 1);
  CHECK(ran.count("dynamic_tagger") == 1);
  CHECK(ran.count("tree_rnn") == 1);
  CHECK(ran.count("early_exit") == 0);

  // A training forward runs after one on shapes alone; with grad on it is refused outright.
  auto zoo = buildZooModel("transformer_xl", {"ci", 0, std::nullopt});
  SyMuGen gen(zoo.module, "xl");
  ForwardOptions shapes;
  shapes.countCost = true;
  shapes.shapesOnly = true;
  {
    torch::NoGradGuard noGrad;
    gen.forward(zoo.data->batch(0).inputs, shapes);
  }
  CHECK(gen.forward(zoo.data->batch(0).inputs).output.toTensor().requires_grad());
  CHECK_THROWS_WITH_AS(gen.forward(zoo.data->batch(0).inputs, shapes),
                       doctest::Contains("shapes alone"), c10::Error);
}
