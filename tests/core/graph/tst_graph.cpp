// symtune::Graph's JSON (round trip, version refusal, malformed input) and DOT export as text.

#include "symtune/core/graph.h"
#include "test_main.h"

using namespace symtune;

namespace {

// A forward graph with a module region and an if/else, and one autograd node linked to an op.
Graph sampleGraph() {
  Graph g;
  g.name = "tiny";
  GraphRegion root;
  root.kind = RegionKind::Method;
  root.label = "forward";
  const RegionId r0 = g.addRegion(root);
  GraphRegion block;
  block.kind = RegionKind::Module;
  block.parent = r0;
  block.label = "block";
  const RegionId r1 = g.addRegion(block);

  GraphNode mm;
  mm.kind = "aten::mm";
  mm.region = r1;
  mm.modulePath = "block";
  mm.source = {"model.py", 12, "forward"};
  mm.inputs = {ValueInfo{"Tensor", std::vector<int64_t>{2, 3}, "float32", std::nullopt},
               ValueInfo{"Tensor", std::vector<int64_t>{3, 4}, "float32", std::nullopt}};
  mm.outputs = {ValueInfo{"Tensor", std::vector<int64_t>{2, 4}, "float32", std::nullopt}};
  mm.sequenceNr = 7;
  mm.features.opClass = "matmul";
  mm.features.flops = 48;
  mm.features.bytesRead = 72;
  mm.features.bytesWritten = 32;
  const NodeId a = g.addNode(mm);

  GraphNode cond;
  cond.kind = "prim::If";
  cond.region = r1;
  cond.modulePath = "block";
  cond.features.opClass = "control";
  const NodeId b = g.addNode(cond);
  GraphRegion then;
  then.kind = RegionKind::IfThen;
  then.parent = r1;
  then.owner = b;
  then.taken = true;
  const RegionId r2 = g.addRegion(then);
  GraphNode relu;
  relu.kind = "aten::relu";
  relu.region = r2;
  relu.modulePath = "block";
  relu.features.controlDepth = 1;
  relu.inputs = {ValueInfo{"int[]", std::nullopt, "", std::vector<int64_t>{3, 3}}};
  const NodeId c = g.addNode(relu);
  g.addEdge(a, b, 0, 0);
  g.addEdge(b, c, 0, 0);

  GraphNode back;
  back.side = GraphSide::Backward;
  back.kind = "MmBackward0";
  back.sequenceNr = 7;
  back.features.opClass = "autograd";
  const NodeId d = g.addNode(back);
  g.link(a, d);
  return g;
}

}  // namespace

class TestGraph : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void jsonRoundTripIsExact() {
    const Graph g = sampleGraph();
    const std::string text = toJson(g);
    const Graph back = graphFromJson(text);
    QCOMPARE(toJson(back), text);
    QCOMPARE(back.nodes().size(), size_t{4});
    QCOMPARE(back.node(NodeId(3)).forward, NodeId(0));
    QCOMPARE(back.node(NodeId(0)).backward, std::vector<NodeId>{NodeId(3)});
    QCOMPARE(*back.region(RegionId(2)).taken, true);
    QCOMPARE(*back.node(NodeId(0)).features.arithmeticIntensity(), 48.0 / 104.0);
    QCOMPARE(*back.node(NodeId(2)).inputs[0].ints, (std::vector<int64_t>{3, 3}));
  }

  void jsonNamesItsFormatAndVersion() {
    const QByteArray text = QByteArray::fromStdString(toJson(sampleGraph()));
    QVERIFY(text.startsWith("{\n \"format\": \"symtune-graph\",\n \"version\": 1,"));
  }

  void rejectsOtherVersionsAndBrokenFiles_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("message");
    QTest::addRow("newer version")
        << R"({"format": "symtune-graph", "version": 2})"
        << "graph JSON: version: unsupported graph version 2 (this Symtune reads 1)";
    QTest::addRow("not a graph") << R"({"format": "symtune-session", "version": 1})"
                                 << "graph JSON: format: not a symtune graph";
    QTest::addRow("edge out of range")
        << R"({"format": "symtune-graph", "version": 1, "name": "x", "regions": [], "nodes": [], "edges": [[0, 0, 1, 0]]})"
        << "graph JSON: edges: node id out of range";
  }

  void rejectsOtherVersionsAndBrokenFiles() {
    QFETCH(QString, text);
    QFETCH(QString, message);
    try {
      graphFromJson(text.toStdString());
      QFAIL("accepted");
    } catch (const GraphFormatError& e) {
      QCOMPARE(QString::fromStdString(e.what()), message);
    }
  }

  void dotExportIsExactText() {
    const std::string expected =
        "digraph \"tiny\" {\n"
        "  rankdir=TB;\n"
        "  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n"
        "  subgraph cluster_r1 {\n"
        "    label=\"block\";\n"
        "    n0 [label=\"aten::mm\\nblock\"];\n"
        "    n1 [label=\"prim::If\\nblock\"];\n"
        "    subgraph cluster_r2 {\n"
        "      label=\"if: then (taken)\";\n"
        "      n2 [label=\"aten::relu\\nblock\"];\n"
        "    }\n"
        "  }\n"
        "  subgraph cluster_backward {\n"
        "    label=\"autograd\";\n"
        "    n3 [label=\"MmBackward0\", style=filled, fillcolor=\"#f3e8ff\"];\n"
        "  }\n"
        "  n0 -> n1;\n"
        "  n1 -> n2;\n"
        "  n0 -> n3 [style=dashed, color=\"#9333ea\", constraint=false];\n"
        "}\n";
    QCOMPARE(QString::fromStdString(toDot(sampleGraph())), QString::fromStdString(expected));
  }

  void dotForwardOnlyLeavesOutAutograd() {
    DotOptions options;
    options.backward = false;
    const QString dot = QString::fromStdString(toDot(sampleGraph(), options));
    QVERIFY(!dot.contains("MmBackward0"));
    QVERIFY(!dot.contains("n3"));
    QVERIFY(dot.contains("n0 -> n1;"));
  }

  void dotEscapesQuotes() {
    Graph g;
    g.name = "say \"hi\"";
    QVERIFY(QString::fromStdString(toDot(g)).startsWith("digraph \"say \\\"hi\\\"\" {"));
  }

  void regionLabels_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<int>("taken");  // -1: unknown
    QTest::addColumn<int>("trips");  // -1: unknown
    QTest::addColumn<QString>("label");
    QTest::addRow("module") << int(RegionKind::Module) << -1 << -1 << "layer1.0";
    QTest::addRow("then, taken") << int(RegionKind::IfThen) << 1 << -1 << "if: then (taken)";
    QTest::addRow("else, unknown") << int(RegionKind::IfElse) << -1 << -1 << "if: else";
    QTest::addRow("loop ×6") << int(RegionKind::Loop) << -1 << 6 << "loop ×6";
    QTest::addRow("loop, unknown trips") << int(RegionKind::Loop) << -1 << -1 << "loop";
  }
  void regionLabels() {
    QFETCH(int, kind);
    QFETCH(int, taken);
    QFETCH(int, trips);
    QFETCH(QString, label);
    GraphRegion r;
    r.kind = static_cast<RegionKind>(kind);
    r.label = "layer1.0";
    if (taken >= 0)
      r.taken = taken == 1;
    if (trips >= 0)
      r.tripCount = trips;
    QCOMPARE(QString::fromStdString(regionLabel(r)), label);
  }
};

SYMTUNE_TEST_MAIN_CORE(TestGraph)
#include "tst_graph.moc"
