// A graph model drawn in a scene, offscreen: laid out off the GUI thread, a collapsed loop hiding
// its nodes and restoring them, overlays repainted with no new layout, selection revealing
// collapsed nodes, links between views, search, export.

#include <QApplication>
#include <QGraphicsSceneMouseEvent>
#include <QGraphicsView>
#include <QImage>
#include <QJsonDocument>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <limits>

#include "sample_graph.h"
#include "symtune/graphview/graph_scene.h"
#include "symtune/graphview/scene_export.h"
#include "test_main.h"

#include "../../graphview/src/graph_items.h"  // NodeItem: what the scene draws for a node

using namespace symtune;
using namespace symtune::graphview;

namespace {

// A `nodes` message: forward (and as much backward) seconds and forward bytes per node.
attach::NodesMessage nodesMessage(const std::vector<std::tuple<NodeId, double, double>>& nodes,
                                  std::vector<attach::ParameterNorm> parameters = {}) {
  attach::NodesMessage m;
  m.step = 7;
  for (const auto& [id, seconds, bytes] : nodes) {
    attach::NodeFigures f;
    f.node = id.value();
    f.calls = 1;
    f.forwardSeconds = f.backwardSeconds = seconds;
    f.bytesAllocated = static_cast<int64_t>(bytes);
    m.nodes.push_back(f);
  }
  m.parameters = std::move(parameters);
  return m;
}

}  // namespace

class TestGraphScene : public QObject {
  Q_OBJECT

  std::shared_ptr<Graph> graph_;
  testing::SampleGraph s_;

  // Waits for the scene's next layout.
  static bool laidOut(QSignalSpy& spy) { return spy.wait(10000) || !spy.isEmpty(); }

 private Q_SLOTS:
  void init() {
    s_ = testing::sampleGraph();
    graph_ = std::make_shared<Graph>(s_.graph);
  }

  void drawsTheViewOffTheGuiThread() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    QVERIFY(scene.layingOut());
    QVERIFY(laidOut(done));
    QVERIFY(!scene.layingOut());
    QCOMPARE(scene.drawnNodes(), 7);
    QCOMPARE(scene.drawnClusters(), 4);
    QVERIFY(scene.clusterFor(s_.loop) != nullptr);
    QCOMPARE(scene.itemFor(s_.matmul)->name(), QString("n1"));
    QVERIFY(scene.sceneRect().contains(scene.itemFor(s_.sum)->pos()));
  }

  // Clusters came by name, cluster_r10 before cluster_r2, at one z: a parent added after its
  // child covered it (the child's border and label hidden) and took the double-click meant for it.
  void nestedClustersAreDrawnAboveTheirParents() {
    auto g = std::make_shared<Graph>();
    GraphRegion root;
    root.kind = RegionKind::Method;
    root.label = "forward";
    RegionId parent = g->addRegion(root);
    std::vector<RegionId> modules;
    std::string path;
    for (int i = 0; i < 10; ++i) {
      GraphRegion r;
      r.kind = RegionKind::Module;
      r.parent = parent;
      path += (path.empty() ? "m" : ".m") + std::to_string(i);
      r.label = path;
      parent = g->addRegion(r);
      modules.push_back(parent);
      GraphNode n;
      n.kind = "aten::relu";
      n.region = parent;
      n.modulePath = path;
      const NodeId id = g->addNode(n);
      if (i > 0)
        g->addEdge(NodeId(id.value() - 1), id);
    }
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(g);
    QVERIFY(laidOut(done));
    for (size_t i = 1; i < modules.size(); ++i) {
      const ClusterItem* outer = scene.clusterFor(modules[i - 1]);
      const ClusterItem* inner = scene.clusterFor(modules[i]);
      QVERIFY(outer != nullptr && inner != nullptr);
      QVERIFY2(inner->zValue() > outer->zValue(), qPrintable(QString::number(i)));
    }
    // What is topmost inside the innermost box, beside its node, is that box.
    const ClusterItem* innermost = scene.clusterFor(modules.back());
    const QPointF inside = innermost->boundingRect().topLeft() + QPointF(3, 3);
    const ClusterItem* top = nullptr;
    for (QGraphicsItem* item : scene.items(inside)) {
      if ((top = dynamic_cast<const ClusterItem*>(item)) != nullptr)
        break;
    }
    QCOMPARE(top, innermost);
  }

  void collapsedLoopHidesItsNodesAndRestoresThem() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    QVERIFY(laidOut(done));
    const QPointF before = scene.itemFor(s_.linear)->pos();

    done.clear();
    model.setCollapsed(s_.loop, true);
    QVERIFY(laidOut(done));
    NodeItem* group = scene.itemFor(s_.matmul);
    QVERIFY(group != nullptr && group->isGroup());
    QCOMPARE(scene.itemFor(s_.add), group);
    QCOMPARE(group->entry().members, 2);
    QCOMPARE(scene.drawnNodes(), 6);
    QVERIFY(scene.clusterFor(s_.loop) == nullptr);
    QVERIFY(scene.clusterFor(s_.encoder) != nullptr);

    done.clear();
    model.setCollapsed(s_.loop, false);
    QVERIFY(laidOut(done));
    QCOMPARE(done.first().at(1).toBool(), true);  // the first layout, from the cache
    QCOMPARE(scene.drawnNodes(), 7);
    QVERIFY(!scene.itemFor(s_.matmul)->isGroup());
    QVERIFY(scene.itemFor(s_.matmul) != scene.itemFor(s_.add));
    QVERIFY(scene.clusterFor(s_.loop) != nullptr);
    QCOMPARE(scene.itemFor(s_.linear)->pos(), before);
  }

  void overlaysRepaintWithoutLayingOutAgain() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    QSignalSpy started(&scene, &GraphScene::layoutStarted);
    model.setGraph(graph_);
    QVERIFY(laidOut(done));
    scene.setOverlay(Overlay::Latency);
    QVERIFY(!scene.overlayRange().has_value());  // nothing measured yet
    QVERIFY(!scene.itemFor(s_.matmul)->scaledFigure().has_value());

    const int layouts = started.count();
    QSignalSpy repainted(&scene, &GraphScene::figuresChanged);
    for (int i = 1; i <= 20; ++i) {
      model.addNodeStats(
          nodesMessage({{s_.matmul, 0.002 * i, 1 << 20}, {s_.add, 0.001 * i, 3 << 20}}));
    }
    QCOMPARE(repainted.count(), 20);
    QCOMPARE(started.count(), layouts);
    QCOMPARE(scene.itemFor(s_.matmul)->figureText(), QString("80 ms"));  // (0.04 + 0.04) s
    QCOMPARE(*scene.itemFor(s_.matmul)->scaledFigure(), 1.0);
    QCOMPARE(*scene.itemFor(s_.add)->scaledFigure(), 0.5);
    QCOMPARE(scene.overlayRange()->first, 0.04);

    model.setPeakMemory(8 << 20);
    scene.setOverlay(Overlay::Memory);
    QCOMPARE(scene.itemFor(s_.add)->figureText(), QString("3.0 MiB (38 %)"));
    scene.setOverlay(Overlay::Flops);
    QCOMPARE(scene.itemFor(s_.linear)->figureText(), QString("2 GFLOP"));
    QVERIFY(!scene.itemFor(s_.add)->scaledFigure().has_value());
    QCOMPARE(started.count(), layouts);
  }

  // A peer may send a figure as null (NaN to the decoder): it is left off the scale, whichever
  // node the scale's pass meets first.
  void aNonFiniteFigureIsLeftOffTheScale() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    QVERIFY(laidOut(done));
    scene.setOverlay(Overlay::Latency);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    model.addNodeStats(nodesMessage({{s_.matmul, nan, 1 << 20},
                                     {s_.add, 0.01, 1 << 20},
                                     {s_.linear, std::numeric_limits<double>::infinity(), 0},
                                     {s_.sum, 0.005, 1 << 20}}));
    QVERIFY(scene.overlayRange().has_value());
    QCOMPARE(scene.overlayRange()->first, 0.01);
    QCOMPARE(scene.overlayRange()->second, 0.02);
    QVERIFY(!scene.itemFor(s_.matmul)->scaledFigure().has_value());
    QVERIFY(!scene.itemFor(s_.linear)->scaledFigure().has_value());
    QCOMPARE(*scene.itemFor(s_.add)->scaledFigure(), 1.0);
    QCOMPARE(*scene.itemFor(s_.sum)->scaledFigure(), 0.5);
  }

  // "Expand all" opens groups only while at most its limit of nodes is drawn, and says how many
  // it left collapsed.
  void expandAllStopsAtItsLimit() {
    GraphModel model(GraphSide::Forward);
    model.setGraph(graph_);
    model.setCollapsed(s_.encoder, true);
    QCOMPARE(model.expandAll(), 0);
    QVERIFY(model.viewOptions().collapsed.empty());
    const int left = model.expandAll(5);
    QVERIFY(left > 0);
    QVERIFY(static_cast<int>(model.view().entries.size()) <= 5);
    QCOMPARE(model.expandAll(), 0);
  }

  // Note [The layout of another graph]: a graph cleared while its layout runs is not drawn when
  // that layout lands, and a scene that draws nothing has nothing to export.
  void aClearedGraphStaysUndrawn() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    QVERIFY(laidOut(done));
    QVERIFY(scene.drawnNodes() > 0);
    model.setCollapsed(s_.loop, true);  // a new layout, running
    model.clear();
    QTRY_VERIFY_WITH_TIMEOUT(!scene.layingOut(), 10000);
    QCOMPARE(scene.drawnNodes(), 0);
    QVERIFY(scene.sceneRect().isEmpty());
    QTemporaryDir dir;
    QCOMPARE(exportSvg(scene, dir.filePath("none.svg")), QString("there is no graph to export"));
  }

  // While a new graph is laid out the scene still draws the earlier one: a double-click on its
  // group changes nothing in the new graph (whose group of that id is another).
  void aDoubleClickOnAnEarlierGraphChangesNothing() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QGraphicsView view(&scene);  // the scene delivers mouse events to items through a view
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    model.setCollapsed(s_.loop, true);
    QVERIFY(laidOut(done));
    NodeItem* group = scene.itemFor(s_.matmul);
    QVERIFY(group != nullptr && group->isGroup());
    const QPointF at = group->sceneBoundingRect().center();

    model.setGraph(std::make_shared<Graph>(s_.graph));  // another graph, its layout pending
    QVERIFY(!scene.drawsModelGraph());
    model.setCollapsed(s_.loop, true);
    QGraphicsSceneMouseEvent click(QEvent::GraphicsSceneMouseDoubleClick);
    click.setScenePos(at);
    click.setButton(Qt::LeftButton);
    click.setButtons(Qt::LeftButton);
    QApplication::sendEvent(&scene, &click);
    QVERIFY(model.isCollapsed(s_.loop));
    QTRY_VERIFY_WITH_TIMEOUT(!scene.layingOut(), 10000);

    // The same click on the graph the scene draws opens the group.
    group = scene.itemFor(s_.matmul);
    QVERIFY(group != nullptr && group->isGroup());
    QGraphicsSceneMouseEvent again(QEvent::GraphicsSceneMouseDoubleClick);
    again.setScenePos(group->sceneBoundingRect().center());
    again.setButton(Qt::LeftButton);
    again.setButtons(Qt::LeftButton);
    QApplication::sendEvent(&scene, &again);
    QVERIFY(!model.isCollapsed(s_.loop));
  }

  void groupsAddUpTheirNodesFigures() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    model.setCollapsed(s_.loop, true);
    QVERIFY(laidOut(done));
    scene.setOverlay(Overlay::Flops);
    QCOMPARE(scene.itemFor(s_.matmul)->figureText(), QString("6 GFLOP"));
    QCOMPARE(*model.groupValue(Overlay::Flops, s_.encoder), 8e9);

    model.addNodeStats(nodesMessage(
        {}, {{"encoder.cell.weight", 3.0}, {"encoder.cell.bias", 4.0}, {"encoder.weight", 1.0}}));
    scene.setOverlay(Overlay::GradNorm);
    QCOMPARE(*model.value(Overlay::GradNorm, s_.matmul), 5.0);  // sqrt(3² + 4²), its module's
    QCOMPARE(*model.value(Overlay::GradNorm, s_.linear), 1.0);
    QVERIFY(!model.value(Overlay::GradNorm, s_.sum).has_value());    // the root's ops: none
    QCOMPARE(scene.itemFor(s_.matmul)->figureText(), QString("5"));  // the group's largest
  }

  void backwardFiguresComeFromTheirForwardOps() {
    GraphModel model(GraphSide::Backward);
    model.setGraph(graph_);
    attach::NodesMessage m;
    m.step = 3;
    attach::NodeFigures add;
    add.node = s_.add.value();
    add.forwardSeconds = 1.0;
    add.backwardSeconds = 0.5;
    add.backwardBytesAllocated = 64;
    attach::NodeFigures stranger;
    stranger.node = 999;  // not in this graph
    stranger.forwardSeconds = 1.0;
    m.nodes = {add, stranger};
    model.addNodeStats(m);
    QCOMPARE(*model.value(Overlay::Latency, s_.addBackward), 0.5);
    QCOMPARE(*model.value(Overlay::Memory, s_.addBackward), 64.0);
    QVERIFY(!model.value(Overlay::Latency, s_.mmBackward).has_value());
    QCOMPARE(model.statsStep(), int64_t{3});
  }

  void bindingOverlayShowsEachSitesSpeedup() {
    // Two buckets of the matmul (the larger speedup is shown), the add kept on aten, and a
    // predicted bucket that adds no figure of its own.
    BindingTable table;
    const auto binding = [](NodeId node, const std::string& bucket, const std::string& winner,
                            double atenSeconds, double winnerSeconds, bool predicted = false) {
      Binding b;
      b.site = "#" + std::to_string(node.value());
      b.node = node.value();
      b.bucket = bucket;
      b.reference = "aten";
      b.winner = winner;
      b.predicted = predicted;
      if (!predicted) {
        b.candidates.push_back({"aten", atenSeconds, 0, 0, ""});
        if (winner != "aten")
          b.candidates.push_back({winner, winnerSeconds, 0, 0, ""});
      }
      return b;
    };
    table.put(binding(s_.matmul, "a", "unbind-once", 3.0, 1.0));
    table.put(binding(s_.matmul, "b", "unbind-once", 8.0, 1.0));
    table.put(binding(s_.matmul, "c", "unbind-once", 0, 0, /*predicted=*/true));
    table.put(binding(s_.add, "a", "aten", 1.0, 1.0));

    GraphModel forward(GraphSide::Forward);
    forward.setGraph(graph_);
    QSignalSpy repaint(&forward, &GraphModel::valuesChanged);
    forward.setBindings(&table);
    QCOMPARE(repaint.count(), 1);
    QCOMPARE(*forward.value(Overlay::Binding, s_.matmul), 8.0);
    QCOMPARE(*forward.value(Overlay::Binding, s_.add), 1.0);
    QVERIFY(!forward.value(Overlay::Binding, s_.relu).has_value());    // not a site
    QCOMPARE(*forward.groupValue(Overlay::Binding, s_.encoder), 8.0);  // the group's largest
    QCOMPARE(formatValue(Overlay::Binding, 8.0), QString("8.00× over aten"));
    // Figures read without an exponent ("1.23e+03 ms" until 2026-12-07), a few KiB not as 0.0 MiB.
    QCOMPARE(formatValue(Overlay::Latency, 1.234), QString("1234 ms"));
    QCOMPARE(formatValue(Overlay::Latency, 0.0125), QString("12.5 ms"));
    QCOMPARE(formatValue(Overlay::Memory, 40 * 1024.0), QString("40 KiB"));
    QCOMPARE(formatValue(Overlay::Memory, 1024.0 * 1024.0 - 1), QString("1.0 MiB"));
    QCOMPARE(formatValue(Overlay::Memory, 1023.4 * 1024.0), QString("1023 KiB"));
    QCOMPARE(formatValue(Overlay::Memory, 3 * 1024.0 * 1024.0, 12 * 1024.0 * 1024.0),
             QString("3.0 MiB (25 %)"));
    QCOMPARE(formatValue(Overlay::Flops, 2.5e12), QString("2500 GFLOP"));

    GraphModel backward(GraphSide::Backward);
    backward.setGraph(graph_);
    backward.setBindings(&table);
    QCOMPARE(*backward.value(Overlay::Binding, s_.addBackward), 1.0);  // its forward op's

    // A site of several nodes (a pair, a loop's reads and write) colours every one of them.
    Binding pair = binding(s_.add, "b", "bn-relu", 2.0, 1.0);
    pair.nodes = {s_.relu.value()};
    table.put(pair);
    forward.setBindings(&table);
    QCOMPARE(*forward.value(Overlay::Binding, s_.add), 2.0);
    QCOMPARE(*forward.value(Overlay::Binding, s_.relu), 2.0);

    forward.setBindings(nullptr);
    QVERIFY(!forward.value(Overlay::Binding, s_.matmul).has_value());
  }

  void rematOverlayPaintsTheUnitsKeptAndRecomputed() {
    // The plan in force: the matmul's unit recomputed, the add's kept, the relu in no unit; a
    // loop unit inside a kept block recomputes the add too.
    attach::RematMessage plan;
    plan.units.push_back({"encoder", "", {s_.matmul.value()}, 4e6, true});
    plan.units.push_back({"head", "", {s_.add.value()}, 1e6, false});
    GraphModel forward(GraphSide::Forward);
    forward.setGraph(graph_);
    QSignalSpy repaint(&forward, &GraphModel::valuesChanged);
    forward.setRemat(&plan);
    QCOMPARE(repaint.count(), 1);
    QCOMPARE(*forward.value(Overlay::Remat, s_.matmul), 1.0);
    QCOMPARE(*forward.value(Overlay::Remat, s_.add), 0.0);
    QVERIFY(!forward.value(Overlay::Remat, s_.relu).has_value());
    QCOMPARE(*forward.groupValue(Overlay::Remat, s_.encoder), 1.0);  // any recomputed node
    QCOMPARE(formatValue(Overlay::Remat, 1.0), QString("recomputed"));
    QCOMPARE(formatValue(Overlay::Remat, 0.0), QString("kept"));

    GraphModel backward(GraphSide::Backward);
    backward.setGraph(graph_);
    backward.setRemat(&plan);
    QCOMPARE(*backward.value(Overlay::Remat, s_.addBackward), 0.0);  // its forward op's

    plan.units.push_back({"head loop #9", "head", {s_.add.value()}, 5e5, true});
    forward.setRemat(&plan);
    QCOMPARE(*forward.value(Overlay::Remat, s_.add), 1.0);
    forward.setRemat(nullptr);
    QVERIFY(!forward.value(Overlay::Remat, s_.matmul).has_value());
  }

  void selectingAHiddenNodeExpandsItsGroups() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    model.setCollapsed(s_.encoder, true);
    QVERIFY(laidOut(done));
    QVERIFY(scene.itemFor(s_.matmul)->isGroup());
    QSignalSpy selected(&scene, &GraphScene::nodeSelected);
    done.clear();
    scene.selectNode(s_.matmul);
    QVERIFY(laidOut(done));
    QVERIFY(!model.isCollapsed(s_.encoder));
    QCOMPARE(scene.selectedNode(), s_.matmul);
    QVERIFY(scene.itemFor(s_.matmul)->isSelected());
    QCOMPARE(selected.last().at(0).value<NodeId>(), s_.matmul);
  }

  void linkedNodesAreMarked() {
    GraphModel model(GraphSide::Backward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    model.setGraph(graph_);
    QVERIFY(laidOut(done));
    scene.setLinkedNodes(graph_->node(s_.add).backward);
    QVERIFY(scene.itemFor(s_.addBackward)->linked());
    QVERIFY(!scene.itemFor(s_.mmBackward)->linked());
  }

  void searchFindsByKindModuleAndName_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QStringList>("found");
    QTest::addRow("op kind") << "MATMUL" << QStringList{"n1"};
    QTest::addRow("module path") << "encoder" << QStringList{"n0", "n1", "n2"};
    QTest::addRow("node name") << "n4" << QStringList{"n4"};
    QTest::addRow("nothing") << "conv" << QStringList{};
    QTest::addRow("blank") << "  " << QStringList{};
  }
  void searchFindsByKindModuleAndName() {
    QFETCH(QString, text);
    QFETCH(QStringList, found);
    GraphModel model(GraphSide::Forward);
    model.setGraph(graph_);
    QStringList names;
    for (NodeId n : model.find(text))
      names << QStringLiteral("n%1").arg(n.value());
    QCOMPARE(names, found);
  }

  void exportsSvgAndPng() {
    GraphModel model(GraphSide::Forward);
    GraphScene scene(&model);
    QSignalSpy done(&scene, &GraphScene::layoutFinished);
    QTemporaryDir dir;
    QVERIFY(!exportSvg(scene, dir.filePath("empty.svg")).isEmpty());  // nothing drawn yet
    model.setGraph(graph_);
    QVERIFY(laidOut(done));
    scene.setOverlay(Overlay::Flops);
    QCOMPARE(exportSvg(scene, dir.filePath("g.svg")), QString());
    QFile svg(dir.filePath("g.svg"));
    QVERIFY(svg.open(QIODevice::ReadOnly));
    const QByteArray text = svg.readAll();
    QVERIFY(text.contains("<svg"));
    QVERIFY(text.contains("matmul"));
    QVERIFY(text.contains("6 GFLOP"));
    QCOMPARE(exportPng(scene, dir.filePath("g.png"), 2.0), QString());
    const QImage png(dir.filePath("g.png"));
    QCOMPARE(png.width(), static_cast<int>(std::ceil(scene.sceneRect().width() * 2)));
    QVERIFY(exportPng(scene, dir.filePath("no/such/dir/g.png")).startsWith("cannot write"));
  }
};

SYMTUNE_TEST_MAIN(TestGraphScene)
#include "tst_graph_scene.moc"
