// SyMuGen on models users make themselves with Python's torch.jit.script (written by the
// fixtures.scripted_models test): a data-dependent if, a loop over a variable-length input, and
// submodules nested three deep.

#include <torch/torch.h>

#include "symtune/graph/symugen.h"
#include "test_main.h"

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
    if (lossKinds.count(n.kind)) {
      QVERIFY2(!n.forward.valid(), n.kind.c_str());
      continue;
    }
    QVERIFY2(n.forward.valid(), ("unlinked autograd node " + n.kind).c_str());
    const auto& back = g.node(n.forward).backward;
    QVERIFY(std::find(back.begin(), back.end(), n.id) != back.end());
  }
}

StepCapture capture(SyMuGen& gen, const torch::Tensor& x) {
  return gen.captureStep({x}, [](const c10::IValue& out) { return out.toTensor().pow(2).mean(); });
}

const std::set<std::string> kLossKinds = {"MeanBackward0", "PowBackward0"};

}  // namespace

class TestSyMuGenScripted : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void ifModel() {
    SyMuGen gen(load("if_model"), "if_model");
    const Graph& g = gen.staticGraph();
    QCOMPARE(nodesOf(g, "prim::If").size(), size_t{1});
    QCOMPARE(nodesOf(g, "aten::linear").size(), size_t{3});
    const GraphRegion* then = regionOf(g, RegionKind::IfThen);
    const GraphRegion* otherwise = regionOf(g, RegionKind::IfElse);
    QVERIFY(then && otherwise);
    // The heads sit in their branches, under their module paths.
    for (const GraphNode* n : nodesOf(g, "aten::linear")) {
      if (n->modulePath == "fc")
        QCOMPARE(n->features.controlDepth, 0);
      if (n->modulePath == "pos")
        QCOMPARE(g.region(g.region(n->region).parent).kind, RegionKind::IfThen);
      if (n->modulePath == "neg")
        QCOMPARE(g.region(g.region(n->region).parent).kind, RegionKind::IfElse);
    }

    // A positive batch takes "then"; its autograd graph reaches pos, not neg.
    StepCapture step = capture(gen, torch::ones({4, 8}));
    const Graph& s = step.graph;
    QCOMPARE(*s.region(then->id).taken, true);
    QCOMPARE(*s.region(otherwise->id).taken, false);
    checkEveryBackwardNodeIsLinked(s, kLossKinds);
    for (const GraphNode* n : nodesOf(s, "aten::linear")) {
      QCOMPARE(!n->backward.empty(), n->modulePath != "neg");
    }
    // A negative batch takes "else".
    const Graph negative = capture(gen, -torch::ones({4, 8})).graph;
    QCOMPARE(*negative.region(otherwise->id).taken, true);
  }

  void loopModel() {
    SyMuGen gen(load("loop_model"), "loop_model");
    const Graph& g = gen.staticGraph();
    QCOMPARE(nodesOf(g, "prim::Loop").size(), size_t{1});
    const GraphRegion* body = regionOf(g, RegionKind::Loop);
    QVERIFY(body != nullptr);
    QVERIFY(!body->tripCount.has_value());  // the trip count is the input's length: unknown
    for (const GraphNode* n : nodesOf(g, "aten::linear")) {
      QCOMPARE(n->features.controlDepth, n->modulePath == "out" ? 0 : 1);
    }

    // Two inputs of different lengths: the step records its own trip count, and each op in the
    // body created one autograd node per trip, all linked to it.
    for (int64_t length : {5, 9}) {
      const StepCapture step = capture(gen, torch::randn({2, length, 6}));
      const Graph& s = step.graph;
      QCOMPARE(*s.region(body->id).tripCount, length);
      checkEveryBackwardNodeIsLinked(s, kLossKinds);
      for (const GraphNode* n : nodesOf(s, "aten::tanh")) {
        QCOMPARE(n->backward.size(), static_cast<size_t>(length));
        QCOMPARE(s.node(n->backward[0]).kind, std::string("TanhBackward0"));
      }
    }
  }

  void nestedModel() {
    SyMuGen gen(load("nested_model"), "nested_model");
    const Graph& g = gen.staticGraph();
    const GraphNode* fc = nullptr;
    for (const GraphNode* n : nodesOf(g, "aten::linear")) {
      if (n->modulePath == "block.inner.fc")
        fc = n;
    }
    QVERIFY(fc != nullptr);
    // Module regions nest like the modules: block.inner.fc inside block.inner inside block.
    RegionId r = fc->region;
    QStringList chain;
    while (g.region(r).kind == RegionKind::Module) {
      chain << QString::fromStdString(g.region(r).label);
      r = g.region(r).parent;
    }
    QCOMPARE(chain, (QStringList{"block.inner.fc", "block.inner", "block"}));
    QCOMPARE(nodesOf(g, "aten::layer_norm").size(), size_t{1});

    const StepCapture step = capture(gen, torch::randn({7, 10}));
    const Graph& s = step.graph;
    checkEveryBackwardNodeIsLinked(s, kLossKinds);
    // The template of a known layer on the step's shapes: linear 10 -> 10 on a batch of 7 is
    // 2*7*10*10 + 7*10 FLOPs, reading x, W and b and writing y (float32).
    const GraphNode& lin = s.node(fc->id);
    QCOMPARE(*lin.inputs[0].shape, (std::vector<int64_t>{7, 10}));
    QCOMPARE(lin.features.flops.value_or(-1), 2.0 * 7 * 10 * 10 + 7 * 10);
    QCOMPARE(lin.features.bytesRead.value_or(-1), (70.0 + 100 + 10) * 4);
    QCOMPARE(lin.features.bytesWritten.value_or(-1), 70.0 * 4);
    QCOMPARE(s.node(lin.backward.at(0)).kind, std::string("AddmmBackward0"));
    QCOMPARE(s.node(lin.backward.at(0)).modulePath, std::string("block.inner.fc"));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestSyMuGenScripted)
#include "tst_symugen_scripted.moc"
