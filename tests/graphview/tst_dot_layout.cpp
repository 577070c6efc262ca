// Graphviz layout as data: every node placed, ranks top to bottom, errors as exceptions.

#include <cmath>
#include <future>

#include <QLineF>
#include <QSignalSpy>

#include "sample_graph.h"
#include "symtune/graphview/dot_layout.h"
#include "symtune/graphview/layout_runner.h"
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

  // Note [Layout from Graphviz's structs]: a chain past 100,000 points (2,200 nodes) keeps its
  // even spacing and every arrowhead. Read from attach_attrs' %.5g attributes, neighbours were 40
  // and 50 points apart and some arrow tips fell on their spline's last point.
  void longChainKeepsItsPrecision() {
    const int n = 2200;
    QString dot = "digraph { node [shape=box];";
    for (int i = 0; i + 1 < n; ++i)
      dot += QStringLiteral(" n%1 -> n%2;").arg(i).arg(i + 1);
    dot += " }";
    const auto layout = layoutDot(dot);
    QVERIFY(layout.bounds.height() > 100000);
    const auto y = [&](int i) { return layout.nodes.at(QStringLiteral("n%1").arg(i)).center.y(); };
    const double step = y(1) - y(0);
    QVERIFY(step > 0);
    for (int i = 1; i < n; ++i)
      QVERIFY2(std::abs(y(i) - y(i - 1) - step) < 1e-6, qPrintable(QString::number(i)));
    QCOMPARE(static_cast<int>(layout.edges.size()), n - 1);
    for (const auto& e : layout.edges) {
      QVERIFY(e.arrowTip.has_value() && !e.spline.isEmpty());
      QVERIFY2(QLineF(e.spline.back(), *e.arrowTip).length() > 1, qPrintable(e.tail));
    }
  }

  // busy() is about the newest request: a layout given up for a cached view no longer keeps the
  // runner busy (a search waiting to centre its node waited for it), and a view asked for again
  // while its layout runs is answered by that layout.
  void theRunnerIsBusyWithTheNewestRequestOnly() {
    qRegisterMetaType<symtune::graphview::LaidOutView>();
    symtune::graphview::LayoutRunner runner;
    QSignalSpy done(&runner, &symtune::graphview::LayoutRunner::laidOut);
    const auto viewOf = [](const std::string& dot) {
      symtune::graphview::ViewDot v;
      v.dot = dot;
      return v;
    };
    std::string chain = "digraph { node [shape=box];";
    for (int i = 0; i + 1 < 400; ++i)
      chain += " n" + std::to_string(i) + " -> n" + std::to_string(i + 1) + ";";
    chain += " }";
    const std::string small = "digraph { a -> b; }";
    runner.request(viewOf(small));
    QVERIFY(done.wait(10000));
    QVERIFY(!runner.busy());

    // The chain, then the cached small view: answered from the cache while the chain runs.
    runner.request(viewOf(chain));
    QVERIFY(runner.busy());
    runner.request(viewOf(small));
    QVERIFY(done.wait(10000));
    QCOMPARE(done.last().at(0).value<symtune::graphview::LaidOutView>().view->dot, small);
    QVERIFY(!runner.busy());

    // The chain asked for again while it may still run: one answer, of the chain.
    done.clear();
    runner.request(viewOf(chain));
    QVERIFY(runner.busy());
    QTRY_VERIFY_WITH_TIMEOUT(!done.isEmpty(), 10000);
    QCOMPARE(done.last().at(0).value<symtune::graphview::LaidOutView>().view->dot, chain);
    QVERIFY(!runner.busy());
    QTest::qWait(200);
    QCOMPARE(done.size(), 1);
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
