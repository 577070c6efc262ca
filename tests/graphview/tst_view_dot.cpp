// The DOT of a graph view as data: clusters for modules and control flow, collapsed groups drawn
// as one node with their edges rerouted, the backward side grouped with its forward ops, the
// size a large graph opens at.

#include <algorithm>
#include <set>
#include <string>

#include "sample_graph.h"
#include "symtune/graphview/dot_layout.h"
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

  // A NUL in a name (JSON allows \u0000) ended the text Graphviz read inside a quoted string,
  // and the whole view failed to lay out; other control characters are spaces too.
  void controlCharactersInNamesLayOut() {
    auto s = testing::sampleGraph();
    s.graph.node(s.relu).kind = std::string("aten::re\0lu", 11);
    s.graph.region(s.encoder).label = std::string("enc\0oder\x01\r\t", 11);
    s.graph.node(s.matmul).modulePath = std::string("encoder.c\0ell", 13);
    const ViewDot view = buildViewDot(s.graph);
    QVERIFY(view.dot.find('\0') == std::string::npos);
    QVERIFY(contains(view.dot, "re lu"));
    const auto layout = layoutDot(QString::fromStdString(view.dot));
    QCOMPARE(layout.nodes.size(), view.entries.size());
    QCOMPARE(layout.clusters.size(), view.clusters.size());
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

  // An AccumulateGrad has no forward op and a path naming its parameter: the module region of
  // the path's longest leading part that has one (matched whole, every one went to the root).
  void accumulateGradGroupsWithItsParametersModule() {
    auto s = testing::sampleGraph();
    const auto accumulate = [&](const std::string& parameter) {
      GraphNode n;
      n.kind = "torch::autograd::AccumulateGrad";
      n.side = GraphSide::Backward;
      n.modulePath = parameter;
      return groupOf(s.graph, s.graph.node(s.graph.addNode(n)));
    };
    QCOMPARE(accumulate("encoder.weight"), s.encoder);
    QCOMPARE(accumulate("encoder.cell.weight"), s.encoder);  // no region for encoder.cell
    QCOMPARE(accumulate("scale"), RegionId());               // the root module's own
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

  // A model of nested modules (4 blocks of 3 layers of 2 sub-layers, 3 ops in each, and a loop
  // in every layer): for every limit the collapsed view draws at most that many entries, and no
  // more groups are collapsed than it takes (collapseToFit counts as it collapses).
  void nestedModulesCollapseJustEnough() {
    Graph g;
    GraphRegion root;
    root.kind = RegionKind::Method;
    root.label = "forward";
    const RegionId top = g.addRegion(root);
    const auto region = [&](RegionKind kind, RegionId parent, const std::string& label) {
      GraphRegion r;
      r.kind = kind;
      r.parent = parent;
      r.label = label;
      return g.addRegion(r);
    };
    const auto ops = [&](RegionId in, int count) {
      for (int i = 0; i < count; ++i) {
        GraphNode n;
        n.kind = "aten::add";
        n.region = in;
        g.addNode(n);
      }
    };
    ops(top, 2);
    for (int b = 0; b < 4; ++b) {
      const std::string block = "block" + std::to_string(b);
      const RegionId br = region(RegionKind::Module, top, block);
      for (int l = 0; l < 3; ++l) {
        const std::string layer = block + ".layer" + std::to_string(l);
        const RegionId lr = region(RegionKind::Module, br, layer);
        ops(region(RegionKind::Loop, lr, layer), 2);
        for (int s = 0; s < 2; ++s)
          ops(region(RegionKind::Module, lr, layer + ".sub" + std::to_string(s)), 3);
      }
    }
    const int total = static_cast<int>(g.nodes().size());  // 2 + 4 * 3 * (2 + 6) = 98
    QCOMPARE(total, 98);
    for (int limit = 6; limit <= total; ++limit) {
      const std::set<RegionId> collapsed = collapseToFit(g, GraphSide::Forward, limit);
      ViewOptions options;
      options.collapsed = collapsed;
      const int drawn = static_cast<int>(buildViewDot(g, options).entries.size());
      QVERIFY2(drawn <= limit,
               qPrintable(QStringLiteral("limit %1: %2 drawn").arg(limit).arg(drawn)));
      // Just enough: the view before the last group collapsed (the shallowest, then the
      // smallest, then the last in region order) drew more than the limit.
      if (!collapsed.empty()) {
        const auto sizes = groupSizes(g, GraphSide::Forward);
        const auto depth = [&](RegionId r) {
          int d = 0;
          for (; r.valid(); r = g.region(r).parent)
            ++d;
          return d;
        };
        const auto later = [&](RegionId a, RegionId b) {  // whether b was collapsed after a
          if (depth(a) != depth(b))
            return depth(b) < depth(a);
          if (sizes.at(a) != sizes.at(b))
            return sizes.at(b) < sizes.at(a);
          return a < b;
        };
        ViewOptions before = options;
        before.collapsed.erase(*std::max_element(collapsed.begin(), collapsed.end(), later));
        QVERIFY2(static_cast<int>(buildViewDot(g, before).entries.size()) > limit,
                 qPrintable(QStringLiteral("limit %1: one group too many").arg(limit)));
      }
    }
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
