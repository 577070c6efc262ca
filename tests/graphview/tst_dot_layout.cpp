// Graphviz layout as data: every node placed, ranks top to bottom, errors as exceptions.

#include <future>

#include "symtune/graphview/dot_layout.h"
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

  void rejectsBrokenDot() {
    QVERIFY_THROWS_EXCEPTION(symtune::graphview::LayoutError, layoutDot("digraph { a -> "));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestDotLayout)
#include "tst_dot_layout.moc"
