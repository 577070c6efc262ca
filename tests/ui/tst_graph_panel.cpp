// The Graph panel, offscreen: forward and backward views linked both ways, search cycling
// through matches (and expanding what hides them), the overlay switch, export by extension.

#include <QSignalSpy>
#include <QTemporaryDir>

#include "sample_graph.h"
#include "symtune/graphview/graph_model.h"
#include "symtune/graphview/graph_scene.h"
#include "symtune/ui/graph_panel.h"
#include "symtune/ui/graph_view.h"
#include "test_main.h"

using namespace symtune;
using symtune::graphview::GraphScene;
using symtune::ui::GraphPanel;

class TestGraphPanel : public QObject {
  Q_OBJECT

  testing::SampleGraph s_;

  // Shows the sample graph and waits until both views are drawn.
  bool show(GraphPanel& panel) {
    QSignalSpy forward(panel.forwardScene(), &GraphScene::layoutFinished);
    QSignalSpy backward(panel.backwardScene(), &GraphScene::layoutFinished);
    panel.setGraph(std::make_shared<const Graph>(s_.graph));
    return (forward.wait(10000) || !forward.isEmpty()) &&
           (!backward.isEmpty() || backward.wait(10000));
  }

  // A forward graph of one node, no autograd graph.
  static std::shared_ptr<const Graph> oneRelu() {
    Graph g;
    g.name = "static";
    GraphRegion root;
    root.kind = RegionKind::Method;
    g.addRegion(root);
    GraphNode relu;
    relu.kind = "aten::relu";
    relu.region = RegionId(0);
    g.addNode(relu);
    return std::make_shared<const Graph>(std::move(g));
  }

 private Q_SLOTS:
  void init() { s_ = testing::sampleGraph(); }

  void selectingInOneViewMarksTheOther() {
    GraphPanel panel;
    QVERIFY(show(panel));
    QSignalSpy selected(&panel, &GraphPanel::nodeSelected);
    panel.forwardScene()->selectNode(s_.add);
    QVERIFY(panel.backwardScene()->isLinked(s_.addBackward));
    QVERIFY(!panel.backwardScene()->isLinked(s_.mmBackward));
    QCOMPARE(selected.last().at(0).value<NodeId>(), s_.add);

    panel.backwardScene()->selectNode(s_.mmBackward);
    QVERIFY(panel.forwardScene()->isLinked(s_.matmul));
    QVERIFY(!panel.forwardScene()->isLinked(s_.add));
    QCOMPARE(selected.last().at(0).value<NodeId>(), s_.mmBackward);

    panel.backwardScene()->clearSelection();
    QVERIFY(!panel.forwardScene()->isLinked(s_.matmul));
  }

  void searchCyclesThroughMatches() {
    GraphPanel panel;
    QVERIFY(show(panel));
    QCOMPARE(panel.findNext("encoder"), 3);
    QCOMPARE(panel.forwardScene()->selectedNode(), s_.linear);
    panel.findNext("encoder");
    QCOMPARE(panel.forwardScene()->selectedNode(), s_.matmul);
    panel.findNext("encoder");
    panel.findNext("encoder");  // back to the first
    QCOMPARE(panel.forwardScene()->selectedNode(), s_.linear);
    QCOMPARE(panel.findNext("no such op"), 0);
  }

  void searchExpandsTheGroupThatHidesAMatch() {
    GraphPanel panel;
    QVERIFY(show(panel));
    QSignalSpy done(panel.forwardScene(), &GraphScene::layoutFinished);
    panel.forwardModel()->setCollapsed(s_.loop, true);
    QVERIFY(done.wait(10000));
    done.clear();
    QCOMPARE(panel.findNext("matmul"), 1);
    QVERIFY(done.wait(10000));
    QVERIFY(!panel.forwardModel()->isCollapsed(s_.loop));
    QCOMPARE(panel.forwardScene()->selectedNode(), s_.matmul);
  }

  void overlaySwitchesBothViews() {
    GraphPanel panel;
    QVERIFY(show(panel));
    QSignalSpy changed(&panel, &GraphPanel::overlayChanged);
    panel.setOverlay(graphview::Overlay::Flops);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(panel.forwardScene()->overlay(), graphview::Overlay::Flops);
    QCOMPARE(panel.backwardScene()->overlay(), graphview::Overlay::Flops);
    QCOMPARE(panel.forwardScene()->overlayRange()->second, 6e9);
    panel.setOverlay(graphview::Overlay::Flops);
    QCOMPARE(changed.count(), 1);  // no change, no signal
  }

  void exportsByExtension_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("error");
    QTest::addRow("svg") << "g.svg"
                         << "";
    QTest::addRow("png, upper case") << "g.PNG"
                                     << "";
    QTest::addRow("pdf") << "g.pdf"
                         << "export writes .svg or .png files";
  }
  void exportsByExtension() {
    QFETCH(QString, file);
    QFETCH(QString, error);
    GraphPanel panel;
    QVERIFY(show(panel));
    QTemporaryDir dir;
    const QString path = dir.filePath(file);
    const QString result = panel.exportTo(path);
    if (error.isEmpty()) {
      QCOMPARE(result, QString());
      QVERIFY(QFileInfo(path).size() > 0);
    } else {
      QVERIFY2(result.endsWith(error), qPrintable(result));
      QVERIFY(!QFileInfo::exists(path));
    }
  }

  // An export with an overlay on carries its legend: the colours and what they mean.
  void exportCarriesTheLegend() {
    GraphPanel panel;
    QVERIFY(show(panel));
    panel.setOverlay(graphview::Overlay::Flops);
    const QString legend = panel.forwardView()->legendText();
    QVERIFY(legend.startsWith("FLOPs: 0 – "));
    QTemporaryDir dir;
    QCOMPARE(panel.exportTo(dir.filePath("g.svg")), QString());
    QFile svg(dir.filePath("g.svg"));
    QVERIFY(svg.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(svg.readAll());
    QVERIFY2(text.contains(legend.toHtmlEscaped()), qPrintable(legend));
  }

  // Note [The layout of another graph]: until a new graph is laid out, the items drawn name the
  // old graph's node ids. Switching the overlay then read those ids in the new graph (a smaller
  // one: std::out_of_range, and the studio ended); now nothing is painted or selected on them.
  void aNewGraphIsNotPaintedOnTheOldLayout() {
    GraphPanel panel;
    QVERIFY(show(panel));
    panel.setOverlay(graphview::Overlay::Flops);
    QVERIFY(panel.forwardScene()->overlayRange());
    panel.forwardScene()->selectNode(s_.matmul);
    QCOMPARE(panel.forwardScene()->selectedNode(), s_.matmul);
    QSignalSpy done(panel.forwardScene(), &GraphScene::layoutFinished);
    panel.setGraph(oneRelu());
    QVERIFY(!panel.forwardScene()->drawsModelGraph());
    panel.setOverlay(graphview::Overlay::Latency);
    panel.setOverlay(graphview::Overlay::Flops);
    QVERIFY(!panel.forwardScene()->overlayRange());
    QCOMPARE(panel.forwardScene()->selectedNode(), NodeId());
    QVERIFY(panel.forwardScene()->itemFor(s_.matmul) == nullptr);
    QVERIFY(done.wait(10000));
    QVERIFY(panel.forwardScene()->drawsModelGraph());
    QCOMPARE(panel.forwardScene()->drawnNodes(), 1);
    QCOMPARE(panel.forwardScene()->selectedNode(), NodeId());  // the old selection not carried
  }

  // Destroying the panel with a node selected: the scenes' own teardown clears the selection,
  // which reached the panel's handlers after the panel (and the other scene) had gone.
  void closesWithANodeSelected() {
    auto panel = std::make_unique<GraphPanel>();
    QVERIFY(show(*panel));
    panel->backwardScene()->selectNode(s_.mmBackward);
    QVERIFY(panel->forwardScene()->isLinked(s_.matmul));
    panel.reset();
  }

  void backwardViewOnlyWhenTheGraphHasOne() {
    GraphPanel panel;
    panel.show();
    QVERIFY(show(panel));
    QVERIFY(panel.backwardView()->isVisible());
    panel.setGraph(oneRelu());
    QVERIFY(!panel.backwardView()->isVisible());
    QVERIFY(panel.forwardView()->isVisible());
  }
};

SYMTUNE_TEST_MAIN(TestGraphPanel)
#include "tst_graph_panel.moc"
