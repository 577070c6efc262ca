// SyMuGen on the zoo's dynamic-branch ResNet: the static graph's regions and module paths, and a
// captured step's shapes, branches, costs and autograd links (by sequence number).

#include <torch/torch.h>

#include <fstream>
#include <set>

#include "symtune/core/cost_templates.h"
#include "symtune/graph/symugen.h"
#include "symtune/zoo/model_zoo.h"
#include "test_main.h"

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

}  // namespace

class TestSyMuGen : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { at::set_num_threads(2); }

  void staticGraphOfTheZooResNet() {
    auto zoo = buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
    SyMuGen gen(zoo.module, "resnet");
    const Graph& g = gen.staticGraph();
    QCOMPARE(g.name, std::string("resnet"));
    QCOMPARE(g.countNodes(GraphSide::Backward), size_t{0});
    // ci preset: stem + 4 stages x (DownBlock: 4 convs, GatedBlock: 3 convs) = 1 + 4*7 convs.
    QCOMPARE(countKind(g, "aten::conv2d"), 29);
    QCOMPARE(countKind(g, "aten::batch_norm"), 29);
    // Four gated blocks plus the stem's pooling switch.
    QCOMPARE(countKind(g, "prim::If"), 5);
    int thenRegions = 0, elseRegions = 0;
    for (const auto& r : g.regions()) {
      thenRegions += r.kind == RegionKind::IfThen;
      elseRegions += r.kind == RegionKind::IfElse;
    }
    QCOMPARE(thenRegions, 5);
    QCOMPARE(elseRegions, 5);

    const GraphNode* conv = findNode(g, "aten::conv2d", "layer3.1.body.conv1");
    QVERIFY(conv != nullptr);
    QCOMPARE(conv->features.opClass, std::string("conv"));
    QCOMPARE(conv->features.controlDepth, 1);  // inside the gate's then-branch
    // Its region chain: module body.conv1 ... inside the then-branch of layer3.1's gate.
    RegionId r = conv->region;
    QCOMPARE(g.region(r).kind, RegionKind::Module);
    QCOMPARE(g.region(r).label, std::string("layer3.1.body.conv1"));
    while (g.region(r).kind == RegionKind::Module)
      r = g.region(r).parent;
    QCOMPARE(g.region(r).kind, RegionKind::IfThen);
    QCOMPARE(g.node(g.region(r).owner).modulePath, std::string("layer3.1"));
    QCOMPARE(g.region(g.region(r).parent).label, std::string("layer3.1"));

    // The op's source is the ConvBn class's forward in the model file, at the file's own line.
    QCOMPARE(conv->source.function, std::string("forward"));
    QCOMPARE(conv->source.file, std::string("resources/models/dynamic_resnet.py"));
    QCOMPARE(conv->source.line, lineOf("resources/models/dynamic_resnet.py", "y = torch.conv2d("));
    const GraphNode* gate = findNode(g, "aten::sigmoid", "layer2.1");
    QVERIFY(gate != nullptr);
    QCOMPARE(gate->source.line, lineOf("resources/models/dynamic_resnet.py", "g = torch.sigmoid("));

    // Every forward op is reached by data flow from the input or a parameter-less start.
    QVERIFY(g.edges().size() > g.nodes().size());
  }

  void capturedStepJoinsForwardAndBackward() {
    auto zoo = buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
    SyMuGen gen(zoo.module, "resnet");
    const Batch batch = zoo.data->batch(0);
    const StepCapture step = gen.captureStep(batch.inputs, [&](const c10::IValue& out) {
      return torch::nn::functional::cross_entropy(out.toTensor(), batch.target);
    });
    const Graph& g = step.graph;
    QVERIFY(step.loss.requires_grad());
    QVERIFY(step.nodesExecuted > 0);

    // Shapes of the step: the stem's conv sees the 16x16 batch.
    const GraphNode* stem = findNode(g, "aten::conv2d", "stem");
    QVERIFY(stem != nullptr);
    QCOMPARE(*stem->inputs[0].shape, (std::vector<int64_t>{16, 3, 16, 16}));
    QCOMPARE(*stem->outputs[0].shape, (std::vector<int64_t>{16, 4, 16, 16}));
    QCOMPARE(stem->inputs[0].dtype, std::string("float32"));
    // Its cost on those shapes: 2 * numel(out) * (3*3*3), no bias.
    QCOMPARE(stem->features.flops.value_or(-1), 2.0 * 16 * 4 * 16 * 16 * 27);

    // Every gate took exactly one of its branches; the stem pooling switch took "else".
    for (const auto& region : g.regions()) {
      if (region.kind != RegionKind::IfThen)
        continue;
      const auto& other = *std::find_if(g.regions().begin(), g.regions().end(), [&](const auto& x) {
        return x.kind == RegionKind::IfElse && x.owner == region.owner;
      });
      QVERIFY(region.taken.has_value() && other.taken.has_value());
      QVERIFY(*region.taken != *other.taken);
    }

    // The autograd graph: every backward node that has a forward op is linked to it, by
    // sequence number, and carries its module path.
    QVERIFY(g.countNodes(GraphSide::Backward) > 0);
    int linked = 0, accumulate = 0;
    for (const auto& n : g.nodes()) {
      if (n.side != GraphSide::Backward)
        continue;
      if (n.kind == "torch::autograd::AccumulateGrad") {
        ++accumulate;
        QVERIFY2(!n.modulePath.empty(), "AccumulateGrad nodes name their parameter");
        continue;
      }
      if (n.forward.valid()) {
        ++linked;
        const GraphNode& f = g.node(n.forward);
        QCOMPARE(f.side, GraphSide::Forward);
        QCOMPARE(f.sequenceNr <= n.sequenceNr || f.sequenceNr < 0, true);
        QCOMPARE(n.modulePath, f.modulePath);
        QVERIFY(std::find(f.backward.begin(), f.backward.end(), n.id) != f.backward.end());
      }
    }
    qInfo("backward nodes: %zu, linked to a forward op: %d, AccumulateGrad: %d",
          g.countNodes(GraphSide::Backward), linked, accumulate);
    // Parameters of blocks whose gate was closed get no gradient: count those that did.
    QVERIFY(accumulate > 0);
    QVERIFY(linked > 0);
    // The stem's convolution produced a ConvolutionBackward0.
    bool stemLinked = false;
    for (NodeId b : stem->backward)
      stemLinked |= g.node(b).kind == "ConvolutionBackward0";
    QVERIFY(stemLinked);

    // Backward nodes not linked to a forward op come from the loss, computed outside the model.
    for (const auto& n : g.nodes()) {
      if (n.side == GraphSide::Backward && n.sequenceNr >= 0 && !n.forward.valid()) {
        QVERIFY2(n.kind.find("Loss") != std::string::npos ||
                     n.kind.find("LogSoftmax") != std::string::npos,
                 n.kind.c_str());
      }
    }

    // The step trains: backward through the captured loss gives the stem a gradient.
    step.loss.backward();
    auto stemWeight = zoo.module.attr("stem").toModule().attr("weight").toTensor();
    QVERIFY(stemWeight.grad().defined());
  }

  void plainTorchNnModuleGivesItsModuleTree() {
    torch::nn::Sequential encoder(torch::nn::Linear(4, 8), torch::nn::ReLU());
    torch::nn::Module net("Net");
    net.register_module("enc", encoder.ptr());
    net.register_module("head", torch::nn::Linear(8, 2).ptr());
    const Graph g = SyMuGen::captureModuleTree(net, "net");
    QStringList paths;
    for (const auto& n : g.nodes())
      paths << QString::fromStdString(n.modulePath);
    QCOMPARE(paths, (QStringList{"", "enc", "enc.0", "enc.1", "head"}));
    const GraphNode& linear = g.node(NodeId(2));
    QCOMPARE(linear.kind, std::string("torch::nn::LinearImpl"));  // Module::name()
    QCOMPARE(linear.outputs.size(), size_t{2});                   // weight and bias
    QCOMPARE(*linear.outputs[0].shape, (std::vector<int64_t>{8, 4}));
    QCOMPARE(g.region(linear.region).label, std::string("enc"));
    QCOMPARE(g.edges().size(), size_t{4});  // parent -> child
  }

  void capturedStepMatchesTheModulesOwnForward() {
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
    QVERIFY(torch::allclose(got, expected, 1e-5, 1e-6));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestSyMuGen)
#include "tst_symugen.moc"
