// Graphviz layout as data: every node placed, ranks top to bottom, errors as exceptions.

#include <future>

#include "sample_graph.h"
#include "symtune/graphview/dot_layout.h"
#include "symtune/graphview/view_dot.h"
#include "test_main.h"

using symtune::graphview::layoutDot;

class TestDotLayout : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void chainIsLaidOutTopToBottom() {
    const auto layout = layoutDot("digraph { node [shape=box]; a -> b -> c; a -> c; }");
    QCOMPARE(layout.nodes.size(), size_t{3});
    const auto& a = layout.nodes.at("a");
    const auto& b = layout.nodes.at("b");
    const auto& c = layout.nodes.at("c");
    QVERIFY(a.center.y() < b.center.y());
    QVERIFY(b.center.y() < c.center.y());
    QVERIFY(a.size.width() > 0 && a.size.height() > 0);
    QVERIFY(layout.bounds.contains(a.center) && layout.bounds.contains(c.center));
  }

  void layoutsFromSeveralThreadsAgree() {
    const QString dot = "digraph { x -> y; y -> z; x -> z; }";
    const auto here = layoutDot(dot);
    auto f1 = std::async(std::launch::async, [&] { return layoutDot(dot); });
    auto f2 = std::async(std::launch::async, [&] { return layoutDot(dot); });
    QCOMPARE(f1.get().nodes.at("z").center, here.nodes.at("z").center);
    QCOMPARE(f2.get().nodes.at("y").center, here.nodes.at("y").center);
  }

  // A view with clusters: every cluster box holds its nodes, nested boxes nest, every edge has a
  // route from its tail to its head's arrowhead.
  void clustersAndEdgesOfAView() {
    const auto s = symtune::testing::sampleGraph();
    const auto view = symtune::graphview::buildViewDot(s.graph);
    const auto layout = layoutDot(QString::fromStdString(view.dot));
    QCOMPARE(layout.nodes.size(), view.entries.size());
    QCOMPARE(layout.clusters.size(), view.clusters.size());
    const auto box = [&](symtune::RegionId r) {
      return layout.clusters.at(QStringLiteral("cluster_r%1").arg(r.value())).rect;
    };
    QVERIFY(box(s.encoder).contains(box(s.loop)));
    QVERIFY(box(s.loop).contains(layout.nodes.at("n1").center));
    QVERIFY(box(s.loop).contains(layout.nodes.at("n2").center));
    QVERIFY(!box(s.loop).contains(layout.nodes.at("n0").center));
    QVERIFY(box(s.thenBranch).contains(layout.nodes.at("n4").center));
    QVERIFY(layout.bounds.contains(box(s.encoder)));
    QCOMPARE(static_cast<int>(layout.edges.size()), view.edges);
    for (const auto& e : layout.edges) {
      QVERIFY2(e.spline.size() >= 4 && (e.spline.size() - 1) % 3 == 0, qPrintable(e.tail));
      QVERIFY(e.arrowTip.has_value());
      const auto& head = layout.nodes.at(e.head);
      const QRectF headBox(head.center - QPointF(head.size.width(), head.size.height()) / 2,
                           head.size);
      QVERIFY2(headBox.adjusted(-2, -2, 2, 2).contains(*e.arrowTip),
               qPrintable(e.tail + " -> " + e.head));
    }
  }

  void rejectsBrokenDot() {
    QVERIFY_THROWS_EXCEPTION(symtune::graphview::LayoutError, layoutDot("digraph { a -> "));
    // Graphviz's own words, which name the line: "...: Error: syntax error in line 3 ..."
    try {
      layoutDot("digraph {\n a -> b;\n c -> ; }");
      QFAIL("a DOT text with a syntax error was laid out");
    } catch (const symtune::graphview::LayoutError& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains("syntax error in line 3"), e.what());
    }
  }
};

SYMTUNE_TEST_MAIN_CORE(TestDotLayout)
#include "tst_dot_layout.moc"
