// The node inspector: a forward and a backward node of a small graph as rows (kind, module path,
// source line, shapes, costs, links), live statistics from `nodes` messages updating in place,
// each node's history capped, unknown node ids ignored, a CUDA run's kernels as rows; the widget's
// empty state and sparkline.

#include <QAbstractItemModelTester>
#include <QSignalSpy>

#include <limits>
#include <memory>

#include "symtune/core/graph.h"
#include "symtune/ui/node_inspector.h"
#include "symtune/ui/node_inspector_model.h"
#include "symtune/ui/sparkline.h"
#include "test_main.h"

using namespace symtune;
using symtune::ui::NodeInspector;
using symtune::ui::NodeInspectorModel;

namespace {

// #0 aten::conv2d in "layer1.0.conv1", #1 aten::relu, #2 ConvolutionBackward0 linked to #0,
// #3 the AccumulateGrad of the convolution's weight.
std::shared_ptr<const Graph> sampleGraph() {
  auto g = std::make_shared<Graph>();
  g->name = "tiny";
  GraphRegion root;
  root.label = "forward";
  const RegionId r0 = g->addRegion(root);

  GraphNode conv;
  conv.kind = "aten::conv2d";
  conv.region = r0;
  conv.modulePath = "layer1.0.conv1";
  conv.source = {"model.py", 42, "forward"};
  conv.inputs = {ValueInfo{"Tensor", std::vector<int64_t>{32, 3, 56, 56}, "float32", std::nullopt},
                 ValueInfo{"Tensor", std::vector<int64_t>{64, 3, 3, 3}, "float32", std::nullopt},
                 ValueInfo{"int[]", std::nullopt, "", std::vector<int64_t>{1, 1}}};
  conv.outputs = {
      ValueInfo{"Tensor", std::vector<int64_t>{32, 64, 56, 56}, "float32", std::nullopt}};
  conv.sequenceNr = 3;
  conv.features.opClass = "conv";
  conv.features.flops = 3.47e9;
  conv.features.bytesRead = 1536.0 * 1024;
  conv.features.bytesWritten = 24.5 * 1024 * 1024;
  const NodeId c = g->addNode(conv);

  GraphNode relu;
  relu.kind = "aten::relu";
  relu.region = r0;
  relu.features.opClass = "activation";
  const NodeId r = g->addNode(relu);
  g->addEdge(c, r);

  GraphNode back;
  back.side = GraphSide::Backward;
  back.kind = "ConvolutionBackward0";
  back.sequenceNr = 3;
  back.saved = {ValueInfo{"Tensor", std::vector<int64_t>{32, 3, 56, 56}, "float32", std::nullopt}};
  back.features.opClass = "autograd";
  back.features.savedBytes = 1176.0 * 1024;
  const NodeId b = g->addNode(back);
  g->link(c, b);

  GraphNode accumulate;
  accumulate.side = GraphSide::Backward;
  accumulate.kind = "torch::autograd::AccumulateGrad";
  accumulate.modulePath = "layer1.0.conv1.weight";  // a parameter's name (docs/graph-format.md)
  accumulate.features.opClass = "autograd";
  g->addNode(accumulate);
  return g;
}

// A `nodes` message.
attach::NodesMessage nodesMessage(qint64 step, std::vector<attach::NodeFigures> nodes) {
  attach::NodesMessage m;
  m.step = step;
  m.nodes = std::move(nodes);
  return m;
}

attach::NodeFigures nodeStats(int node, double forwardS, double backwardS, qint64 bytes = 2048,
                              qint64 backwardBytes = 3 * 1024 * 1024) {
  attach::NodeFigures f;
  f.node = node;
  f.calls = 1;
  f.backwardCalls = 2;
  f.forwardSeconds = forwardS;
  f.backwardSeconds = backwardS;
  f.bytesAllocated = bytes;
  f.backwardBytesAllocated = backwardBytes;
  return f;
}

QString valueOf(const QAbstractItemModel& m, const QString& property) {
  for (int row = 0; row < m.rowCount(); ++row) {
    if (m.index(row, NodeInspectorModel::Property).data().toString() == property)
      return m.index(row, NodeInspectorModel::Value).data().toString();
  }
  return QStringLiteral("<no row %1>").arg(property);
}

void attachTester(QAbstractItemModel* model) {
  new QAbstractItemModelTester(model, QAbstractItemModelTester::FailureReportingMode::QtTest,
                               model);
}

}  // namespace

class TestNodeInspectorModel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void rowsDescribeTheNode_data() {
    QTest::addColumn<int>("node");
    QTest::addColumn<QString>("property");
    QTest::addColumn<QString>("value");
    QTest::addRow("forward: kind") << 0 << "kind"
                                   << "aten::conv2d";
    QTest::addRow("forward: side") << 0 << "side"
                                   << "forward";
    QTest::addRow("forward: module path") << 0 << "module path"
                                          << "layer1.0.conv1";
    QTest::addRow("forward: source") << 0 << "source"
                                     << "model.py:42, forward";
    QTest::addRow("forward: input tensor") << 0 << "input 0"
                                           << "Tensor float32 [32, 3, 56, 56]";
    QTest::addRow("forward: input ints") << 0 << "input 2"
                                         << "int[] = [1, 1]";
    QTest::addRow("forward: output") << 0 << "output 0"
                                     << "Tensor float32 [32, 64, 56, 56]";
    QTest::addRow("forward: op class") << 0 << "op class"
                                       << "conv";
    QTest::addRow("forward: FLOPs") << 0 << "FLOPs"
                                    << "3.47 GFLOP";
    QTest::addRow("forward: bytes read") << 0 << "bytes read"
                                         << "1.5 MiB";
    QTest::addRow("forward: bytes written") << 0 << "bytes written"
                                            << "24.5 MiB";
    QTest::addRow("forward: linked") << 0 << "backward nodes"
                                     << "#2 ConvolutionBackward0";
    QTest::addRow("forward: no stats yet") << 0 << "forward time"
                                           << "—";
    QTest::addRow("root module, unknown costs") << 1 << "module path"
                                                << "(root)";
    QTest::addRow("unknown FLOPs") << 1 << "FLOPs"
                                   << "unknown";
    QTest::addRow("unknown source") << 1 << "source"
                                    << "unknown";
    QTest::addRow("no inputs or outputs") << 1 << "inputs, outputs"
                                          << "none";
    QTest::addRow("no backward node") << 1 << "backward nodes"
                                      << "none";
    QTest::addRow("backward: kind") << 2 << "kind"
                                    << "ConvolutionBackward0";
    QTest::addRow("backward: side") << 2 << "side"
                                    << "backward";
    QTest::addRow("backward: its forward op's module") << 2 << "module path"
                                                       << "layer1.0.conv1";
    QTest::addRow("backward: saved tensor") << 2 << "saved 0"
                                            << "Tensor float32 [32, 3, 56, 56]";
    QTest::addRow("backward: saved bytes") << 2 << "saved bytes"
                                           << "1.1 MiB";
    QTest::addRow("backward: op class") << 2 << "op class"
                                        << "autograd";
    QTest::addRow("backward: linked") << 2 << "forward node"
                                      << "#0 aten::conv2d";
    QTest::addRow("AccumulateGrad: its parameter's module") << 3 << "module path"
                                                            << "layer1.0.conv1";
    QTest::addRow("AccumulateGrad: its parameter") << 3 << "parameter"
                                                   << "layer1.0.conv1.weight";
  }

  void rowsDescribeTheNode() {
    QFETCH(int, node);
    QFETCH(QString, property);
    QFETCH(QString, value);
    NodeInspectorModel model;
    attachTester(&model);
    model.setGraph(sampleGraph());
    model.setNode(NodeId(node));
    QCOMPARE(model.columnCount(), 2);
    QCOMPARE(valueOf(model, property), value);
  }

  void forwardRowsInOrder() {
    NodeInspectorModel model;
    model.setGraph(sampleGraph());
    model.setNode(NodeId(0));
    QStringList properties;
    for (int row = 0; row < model.rowCount(); ++row)
      properties << model.index(row, 0).data().toString();
    QCOMPARE(properties,
             (QStringList{"node",          "kind",           "side",        "module path",
                          "source",        "input 0",        "input 1",     "input 2",
                          "output 0",      "op class",       "FLOPs",       "bytes read",
                          "bytes written", "backward nodes", "calls",       "forward time",
                          "backward time", "allocated",      "GPU kernels", "last step"}));
    QCOMPARE(model.headerData(0, Qt::Horizontal).toString(), QString("Property"));
    QCOMPARE(model.headerData(1, Qt::Horizontal).toString(), QString("Value"));
  }

  void noNodeNoRows_data() {
    QTest::addColumn<bool>("withGraph");
    QTest::addColumn<int>("node");
    QTest::addRow("invalid id") << true << -1;
    QTest::addRow("id past the graph") << true << 4;
    QTest::addRow("no graph") << false << 0;
  }

  void noNodeNoRows() {
    QFETCH(bool, withGraph);
    QFETCH(int, node);
    NodeInspectorModel model;
    attachTester(&model);
    if (withGraph)
      model.setGraph(sampleGraph());
    model.setNode(NodeId(0));
    model.setNode(NodeId(node));
    QCOMPARE(model.rowCount(), 0);
    QVERIFY(!model.node().valid());
  }

  void liveStatsUpdateInPlace_data() {
    QTest::addColumn<int>("node");
    QTest::addRow("forward node") << 0;
    QTest::addRow("backward node: its forward op's stats") << 2;
  }

  void liveStatsUpdateInPlace() {
    QFETCH(int, node);
    NodeInspectorModel model;
    attachTester(&model);
    model.setGraph(sampleGraph());
    model.setNode(NodeId(node));
    const int rows = model.rowCount();
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);

    attach::NodeFigures conv = nodeStats(0, 0.0015, 0.0025);
    conv.forwardDeviceSeconds = 0.001;
    model.addNodeStats(nodesMessage(10, {conv, nodeStats(1, 0.0001, 0.0002)}));
    QCOMPARE(changed.count(), 1);
    QCOMPARE(reset.count(), 0);
    QCOMPARE(model.rowCount(), rows);
    const auto first = changed.at(0).at(0).value<QModelIndex>();
    const auto last = changed.at(0).at(1).value<QModelIndex>();
    QCOMPARE(first.row(), rows - NodeInspectorModel::kLiveRowCount);
    QCOMPARE(last.row(), rows - 1);
    QCOMPARE(valueOf(model, "calls"), QString("1 forward, 2 backward"));
    QCOMPARE(valueOf(model, "forward time"), QString("1.500 ms (device 1.000 ms)"));
    QCOMPARE(valueOf(model, "backward time"), QString("2.500 ms"));
    QCOMPARE(valueOf(model, "allocated"), QString("2.0 KiB forward, 3.0 MiB backward"));
    QCOMPARE(valueOf(model, "GPU kernels"), QString("—"));
    QCOMPARE(valueOf(model, "last step"), QString("10"));

    // Stats of another node only: nothing shown changes.
    model.addNodeStats(nodesMessage(11, {nodeStats(1, 0.0001, 0.0002)}));
    QCOMPARE(changed.count(), 1);
    QCOMPARE(valueOf(model, "last step"), QString("10"));

    model.addNodeStats(nodesMessage(12, {nodeStats(0, 0.004, 0.0)}));
    QCOMPARE(changed.count(), 2);
    QCOMPARE(valueOf(model, "forward time"), QString("4.000 ms"));
    QCOMPARE(valueOf(model, "last step"), QString("12"));
    QCOMPARE(model.history(NodeId(node)), (QVector<QPointF>{{10, 4.0}, {12, 4.0}}));

    // A time the runner could not measure comes as null (NaN here): a dash, no point in the
    // history. An allocation a byte short of 1 MiB reads as 1.0 MiB, not 1024.0 KiB.
    const double unmeasured = std::numeric_limits<double>::quiet_NaN();
    model.addNodeStats(nodesMessage(13, {nodeStats(0, unmeasured, 0.001, 1024 * 1024 - 1)}));
    QCOMPARE(valueOf(model, "forward time"), QString("—"));
    QCOMPARE(valueOf(model, "backward time"), QString("1.000 ms"));
    QCOMPARE(valueOf(model, "allocated"), QString("1.0 MiB forward, 3.0 MiB backward"));
    QCOMPARE(model.history(NodeId(node)), (QVector<QPointF>{{10, 4.0}, {12, 4.0}}));
  }

  void historyKeepsTheLast200_data() {
    QTest::addColumn<int>("samples");
    QTest::addColumn<int>("kept");
    QTest::addColumn<double>("firstStep");
    QTest::addRow("fewer") << 5 << 5 << 0.0;
    QTest::addRow("exactly 200") << 200 << 200 << 0.0;
    QTest::addRow("more") << 250 << 200 << 50.0;
  }

  void historyKeepsTheLast200() {
    QFETCH(int, samples);
    QFETCH(int, kept);
    QFETCH(double, firstStep);
    NodeInspectorModel model;
    model.setGraph(sampleGraph());
    for (int s = 0; s < samples; ++s)
      model.addNodeStats(nodesMessage(s, {nodeStats(0, s * 1e-3, 1e-3)}));
    const QVector<QPointF> h = model.history(NodeId(0));
    QCOMPARE(h.size(), kept);
    QCOMPARE(h.first().x(), firstStep);
    QCOMPARE(h.last(), QPointF(samples - 1, samples));  // (samples-1 + 1) ms
    QVERIFY(model.history(NodeId(1)).isEmpty());
  }

  // (A node id that is not a number, or none, is the decoder's to refuse: tst_attach_messages.)
  void unknownNodesAreIgnored_data() {
    QTest::addColumn<int>("node");
    QTest::addRow("past the graph") << 99;
    QTest::addRow("negative") << -1;
    QTest::addRow("a backward node") << 2;
  }

  void unknownNodesAreIgnored() {
    QFETCH(int, node);
    NodeInspectorModel model;
    attachTester(&model);
    model.setGraph(sampleGraph());
    model.setNode(NodeId(0));
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    attach::NodeFigures stats = nodeStats(0, 0.001, 0.001);
    stats.node = node;
    model.addNodeStats(nodesMessage(5, {stats, nodeStats(1, 0.001, 0.0)}));
    QCOMPARE(changed.count(), 0);
    QCOMPARE(valueOf(model, "calls"), QString("—"));
    QVERIFY(model.history(NodeId(0)).isEmpty());
    QVERIFY(model.history(NodeId(99)).isEmpty());
    QCOMPARE(model.history(NodeId(1)).size(), 1);
  }

  // A CUDA run traced with CUPTI: the kernel count, the CUDA share of the allocations, and one row
  // per kernel after the live rows; the rows come and go with the node's kernels.
  void kernelsOfACudaRunAreRows() {
    NodeInspectorModel model;
    attachTester(&model);
    model.setGraph(sampleGraph());
    model.setNode(NodeId(2));  // the backward node: its forward op's figures
    const int rows = model.rowCount();
    attach::NodeFigures conv = nodeStats(0, 0.0015, 0.0025);
    conv.forwardDeviceSeconds = 0.001;
    conv.backwardDeviceSeconds = 0.002;
    conv.cudaBytesAllocated = 1024;
    conv.backwardCudaBytesAllocated = 2 * 1024 * 1024;
    conv.kernels = 3;
    conv.backwardKernels = 2;
    conv.kernelList = {{"wgrad_kernel", "kernel", true, 1, 0.0012},
                       {"implicit_gemm", "kernel", false, 1, 0.0009},
                       {"Memset", "memset", false, 1, 0.0001}};
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    model.addNodeStats(nodesMessage(7, {conv}));
    QCOMPARE(reset.count(), 1);  // three rows more
    QCOMPARE(model.rowCount(), rows + 3);
    QCOMPARE(valueOf(model, "GPU kernels"), QString("3"));
    QCOMPARE(valueOf(model, "allocated"),
             QString("2.0 KiB forward, 3.0 MiB backward (CUDA 1.0 KiB, 2.0 MiB)"));
    QCOMPARE(valueOf(model, "kernel 1"), QString("1× 1.200 ms backward: wgrad_kernel"));
    QCOMPARE(valueOf(model, "kernel 2"), QString("1× 0.900 ms forward: implicit_gemm"));
    QCOMPARE(valueOf(model, "kernel 3"), QString("1× 0.100 ms forward: Memset"));

    // The same number of kernels: updated in place.
    conv.kernelList[0].calls = 2;
    model.addNodeStats(nodesMessage(8, {conv}));
    QCOMPARE(reset.count(), 1);
    QCOMPARE(valueOf(model, "kernel 1"), QString("2× 1.200 ms backward: wgrad_kernel"));

    // A step without GPU activity: the kernel rows go.
    model.addNodeStats(nodesMessage(9, {nodeStats(0, 0.001, 0.001)}));
    QCOMPARE(reset.count(), 2);
    QCOMPARE(model.rowCount(), rows);
    QCOMPARE(valueOf(model, "GPU kernels"), QString("—"));
  }

  void newGraphForgetsStats() {
    NodeInspectorModel model;
    attachTester(&model);
    model.setGraph(sampleGraph());
    model.addNodeStats(nodesMessage(1, {nodeStats(0, 0.001, 0.001)}));
    model.setNode(NodeId(0));
    model.setGraph(sampleGraph());
    QCOMPARE(model.rowCount(), 0);
    QVERIFY(model.history(NodeId(0)).isEmpty());
  }

  void inspectorShowsTheNodeAndItsHistory() {
    NodeInspector inspector;
    inspector.model()->setGraph(sampleGraph());
    QVERIFY(inspector.isShowingEmptyState());
    inspector.showNode(NodeId(0));
    QVERIFY(!inspector.isShowingEmptyState());
    QCOMPARE(inspector.sparkline()->points().size(), 0);
    inspector.model()->addNodeStats(nodesMessage(1, {nodeStats(0, 0.001, 0.002)}));
    inspector.model()->addNodeStats(nodesMessage(2, {nodeStats(0, 0.002, 0.002)}));
    QCOMPARE(inspector.sparkline()->points(), (QVector<QPointF>{{1, 3.0}, {2, 4.0}}));
    QCOMPARE(inspector.sparkline()->maxLabel(), QString("max 4 ms"));
    QCOMPARE(inspector.sparkline()->minLabel(), QString("min 3 ms"));
    inspector.showNode(NodeId(1));
    QVERIFY(inspector.sparkline()->points().isEmpty());
    inspector.showNode(NodeId());
    QVERIFY(inspector.isShowingEmptyState());
    // It paints in both states.
    inspector.resize(300, 400);
    inspector.show();
    QVERIFY(QTest::qWaitForWindowExposed(&inspector));
    inspector.showNode(NodeId(2));
    inspector.grab();
    QVERIFY(inspector.sparkline()->sizeHint().height() > 0);
  }
};

SYMTUNE_TEST_MAIN(TestNodeInspectorModel)
#include "tst_node_inspector_model.moc"
