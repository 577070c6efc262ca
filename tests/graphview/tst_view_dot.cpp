// The DOT of a graph view as data: clusters for modules and control flow, collapsed groups drawn
// as one node with their edges rerouted, the backward side grouped with its forward ops, the
// size a large graph opens at.

#include "sample_graph.h"
#include "symtune/graphview/view_dot.h"
#include "test_main.h"

using namespace symtune;
using namespace symtune::graphview;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

class TestViewDot : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void forwardViewNestsClusters() {
    const auto s = testing::sampleGraph();
    const ViewDot view = buildViewDot(s.graph);
    QCOMPARE(view.entries.size(), size_t{7});
    QCOMPARE(view.clusters.size(), size_t{4});
    const std::string encoder = "cluster_r" + std::to_string(s.encoder.value());
    const std::string loop = "cluster_r" + std::to_string(s.loop.value());
    QCOMPARE(view.clusters.at(loop).label, std::string("loop ×3 · encoder"));
    QVERIFY(!view.clusters.at(loop).dimmed);
    const std::string elseName = "cluster_r" + std::to_string(s.elseBranch.value());
    QCOMPARE(view.clusters.at(elseName).label, std::string("if: else (not taken)"));
    QVERIFY(view.clusters.at(elseName).dimmed);
    // The loop's cluster sits inside the encoder's, and holds the loop body.
    const auto at = [&](const std::string& part) { return view.dot.find(part); };
    QVERIFY(at("subgraph " + encoder + " {") < at("subgraph " + loop + " {"));
    QVERIFY(at("subgraph " + loop + " {") < at("n1 [label=\"matmul\\ncell\"]"));
    QVERIFY(contains(view.dot, "n3 [label=\"prim::If\"]"));
    QCOMPARE(view.edges, 8);
    QVERIFY(contains(view.dot, "n2 -> n1;"));  // the loop-carried value
    QCOMPARE(view.shownAs.at(s.matmul), std::string("n1"));
    QVERIFY(view.shownAs.count(s.sumBackward) == 0);
  }

  void collapsedGroupStandsForItsNodes() {
    const auto s = testing::sampleGraph();
    ViewOptions options;
    options.collapsed = {s.loop};
    const ViewDot view = buildViewDot(s.graph, options);
    const std::string group = "g" + std::to_string(s.loop.value());
    QCOMPARE(view.entries.size(), size_t{6});
    QCOMPARE(view.entries.count("n1"), size_t{0});
    const ViewEntry& e = view.entries.at(group);
    QCOMPARE(e.group, s.loop);
    QCOMPARE(e.members, 2);
    QCOMPARE(e.label, std::string("▸ loop ×3 · encoder"));
    QCOMPARE(e.detail, std::string("2 ops"));
    QCOMPARE(view.shownAs.at(s.matmul), group);
    QCOMPARE(view.shownAs.at(s.add), group);
    QVERIFY(contains(view.dot, "n0 -> " + group + ";"));
    QVERIFY(contains(view.dot, group + " -> n3;"));
    QVERIFY(!contains(view.dot, group + " -> " + group));  // no edge to itself
    QCOMPARE(view.edges, 6);
    QCOMPARE(view.clusters.count("cluster_r" + std::to_string(s.loop.value())), size_t{0});
  }

  void outerCollapsedGroupHidesInnerOnes() {
    const auto s = testing::sampleGraph();
    ViewOptions options;
    options.collapsed = {s.loop, s.encoder};
    const ViewDot view = buildViewDot(s.graph, options);
    const std::string group = "g" + std::to_string(s.encoder.value());
    QCOMPARE(view.entries.at(group).members, 3);
    QCOMPARE(view.shownAs.at(s.matmul), group);
    QCOMPARE(view.entries.count("g" + std::to_string(s.loop.value())), size_t{0});
    QCOMPARE(view.clusters.size(), size_t{2});  // the two branches
  }

  void backwardNodesGroupWithTheirForwardOps() {
    const auto s = testing::sampleGraph();
    ViewOptions options;
    options.side = GraphSide::Backward;
    const ViewDot view = buildViewDot(s.graph, options);
    QCOMPARE(view.entries.size(), size_t{3});
    QCOMPARE(groupOf(s.graph, s.graph.node(s.addBackward)), s.loop);
    QCOMPARE(groupOf(s.graph, s.graph.node(s.sumBackward)), s.root);
    // Only groups with backward nodes are drawn: the encoder and its loop.
    QCOMPARE(view.clusters.size(), size_t{2});
    QVERIFY(contains(view.dot, "n8 -> n9;"));
    const auto sizes = groupSizes(s.graph, GraphSide::Backward);
    QCOMPARE(sizes.at(s.encoder), 2);
    QCOMPARE(sizes.count(s.thenBranch), size_t{0});
  }

  void largeViewsOpenCollapsedToFit_data() {
    QTest::addColumn<int>("maxDrawn");
    QTest::addColumn<int>("expectedDrawn");
    QTest::addRow("everything fits") << 7 << 7;
    QTest::addRow("the loop collapses") << 6 << 6;
    QTest::addRow("the encoder too") << 5 << 5;
    QTest::addRow("as far as groups go") << 1 << 5;  // one-op groups stay open
  }
  void largeViewsOpenCollapsedToFit() {
    QFETCH(int, maxDrawn);
    QFETCH(int, expectedDrawn);
    const auto s = testing::sampleGraph();
    ViewOptions options;
    options.collapsed = collapseToFit(s.graph, GraphSide::Forward, maxDrawn);
    QCOMPARE(static_cast<int>(buildViewDot(s.graph, options).entries.size()), expectedDrawn);
  }

  void fastLayoutAttributesAboveTheThreshold() {
    const auto s = testing::sampleGraph();
    ViewOptions options;
    QVERIFY(!contains(buildViewDot(s.graph, options).dot, "mclimit"));
    options.fastLayoutAbove = 3;
    QVERIFY(contains(buildViewDot(s.graph, options).dot, "mclimit=0.05"));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestViewDot)
#include "tst_view_dot.moc"
