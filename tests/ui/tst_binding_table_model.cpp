// The Bindings dock's data: a `bindings` message's table becomes one row per (site, bucket) —
// site, bucket, winner, speedup over aten, how it was decided — a table that grew inserts rows,
// another one resets, and selecting a row in the dock names its site's node (through sorting).

#include <QAbstractItemModelTester>
#include <QItemSelectionModel>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>

#include <memory>

#include "symtune/core/attach_messages.h"
#include "symtune/ui/binding_table_model.h"
#include "symtune/ui/bindings_dock.h"
#include "test_main.h"

using symtune::Binding;
using symtune::BindingTable;
using symtune::ui::BindingTableModel;

namespace {

Binding binding(int node, const std::string& bucket, const std::string& winner, double aten,
                double best, const std::string& refusedCandidate = {}) {
  Binding b;
  b.site = "#" + std::to_string(node) + " aten::select rnn";
  b.node = node;
  b.pattern = "loop-indexed select";
  b.bucket = bucket;
  b.reference = "aten";
  b.winner = winner;
  b.candidates.push_back({"aten", aten, 0, 0, ""});
  if (winner != "aten")
    b.candidates.push_back({winner, best, 0, 0, ""});
  if (!refusedCandidate.empty())
    b.candidates.push_back({refusedCandidate, best, 0, 0.5, "differs from aten by 0.5"});
  return b;
}

std::shared_ptr<const BindingTable> tableOf(std::vector<Binding> bindings) {
  auto t = std::make_shared<BindingTable>();
  t->model = "tagger:0011223344556677";
  for (auto& b : bindings)
    t->put(std::move(b));
  return t;
}

// The table as the studio receives it: encoded by the runner, decoded by the protocol.
std::shared_ptr<const BindingTable> throughTheProtocol(const BindingTable& table) {
  auto m = std::get<symtune::attach::BindingsMessage>(
      symtune::attach::decodeServerMessage(symtune::attach::encode(table)));
  return m.table;
}

}  // namespace

class TestBindingTableModel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void rowsShowEachSiteAndBucket_data() {
    QTest::addColumn<int>("row");
    QTest::addColumn<int>("column");
    QTest::addColumn<QString>("text");
    QTest::addRow("site") << 0 << int(BindingTableModel::SiteColumn) << "#10 aten::select rnn";
    QTest::addRow("bucket") << 0 << int(BindingTableModel::BucketColumn)
                            << "float32 [<=32,<=64] x<=64";
    QTest::addRow("winner") << 0 << int(BindingTableModel::WinnerColumn) << "unbind-once";
    QTest::addRow("speedup") << 0 << int(BindingTableModel::SpeedupColumn) << "4.00×";
    QTest::addRow("measured") << 0 << int(BindingTableModel::DecidedColumn) << "2 measured";
    QTest::addRow("kept on aten") << 1 << int(BindingTableModel::WinnerColumn) << "aten";
    QTest::addRow("a refusal") << 1 << int(BindingTableModel::DecidedColumn)
                               << "2 measured, 1 refused";
    QTest::addRow("predicted speedup") << 2 << int(BindingTableModel::SpeedupColumn) << "—";
    QTest::addRow("predicted") << 2 << int(BindingTableModel::DecidedColumn) << "predicted";
  }

  void rowsShowEachSiteAndBucket() {
    QFETCH(int, row);
    QFETCH(int, column);
    QFETCH(QString, text);
    BindingTableModel model;
    new QAbstractItemModelTester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest,
                                 &model);
    Binding predicted = binding(10, "float32 [<=32,<=128] x<=128", "unbind-once", 0, 0);
    predicted.candidates.clear();
    predicted.predicted = true;
    const auto sent =
        tableOf({binding(10, "float32 [<=32,<=64] x<=64", "unbind-once", 4e-3, 1e-3),
                 binding(12, "float32 [<=32]", "aten", 1e-3, 1e-3, "off-by-one"), predicted});
    model.setTable(throughTheProtocol(*sent));
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.columnCount(), int(BindingTableModel::ColumnCount));
    QCOMPARE(model.index(row, column).data().toString(), text);
  }

  void rolesAndTooltips() {
    BindingTableModel model;
    model.setTable(tableOf({binding(10, "a", "unbind-once", 4e-3, 1e-3),
                            binding(12, "b", "aten", 1e-3, 1e-3, "off-by-one")}));
    const QModelIndex first = model.index(0, 0), second = model.index(1, 0);
    QCOMPARE(first.data(BindingTableModel::NodeRole).toInt(), 10);
    QCOMPARE(first.data(BindingTableModel::SpeedupRole).toDouble(), 4.0);
    QCOMPARE(first.data(BindingTableModel::MeasuredRole).toInt(), 2);
    QVERIFY(first.data(BindingTableModel::BoundAwayRole).toBool());
    QVERIFY(!second.data(BindingTableModel::BoundAwayRole).toBool());
    QCOMPARE(second.data(BindingTableModel::RefusedRole).toInt(), 1);
    const QString tip = second.data(Qt::ToolTipRole).toString();
    QVERIFY2(tip.contains("off-by-one: forward 1000.0 µs") &&
                 tip.contains("refused: differs from aten by 0.5"),
             qPrintable(tip));
    QCOMPARE(model.nodeAt(1), symtune::NodeId(12));
    QVERIFY(!model.nodeAt(2).valid());
    QCOMPARE(model.summary(),
             QString("1 of 2 sites bound away from aten; 2 buckets measured, 0 predicted"));
    QCOMPARE(model.headerData(BindingTableModel::SpeedupColumn, Qt::Horizontal).toString(),
             QString("Speedup over aten"));
  }

  void aGrownTableInsertsRowsAnotherResets() {
    BindingTableModel model;
    new QAbstractItemModelTester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest,
                                 &model);
    QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    const Binding a = binding(10, "a", "unbind-once", 4e-3, 1e-3);
    const Binding b = binding(12, "b", "aten", 1e-3, 1e-3);
    model.setTable(tableOf({a}));
    QCOMPARE(reset.count(), 1);  // from none
    model.setTable(tableOf({a, b}));
    QCOMPARE(inserted.count(), 1);
    QCOMPARE(reset.count(), 1);
    QCOMPARE(model.rowCount(), 2);
    model.setTable(tableOf({b}));  // another table (another run)
    QCOMPARE(reset.count(), 2);
    QCOMPARE(model.rowCount(), 1);
    model.setTable(nullptr);
    QCOMPARE(model.rowCount(), 0);
    QVERIFY(model.summary().isEmpty());
  }

  void selectingARowNamesItsSiteThroughSorting() {
    symtune::ui::BindingsDock dock;
    QSignalSpy selected(&dock, &symtune::ui::BindingsDock::siteSelected);
    dock.model()->setTable(
        tableOf({binding(10, "a", "unbind-once", 2e-3, 1e-3), binding(12, "b", "alias", 9e-3, 1e-3),
                 binding(14, "c", "aten", 1e-3, 1e-3)}));
    QVERIFY(dock.summary().startsWith("2 of 3 sites bound away from aten"));
    // Sorted by speedup, largest first: #12 (9x), #10 (2x), #14 (1x).
    dock.view()->sortByColumn(BindingTableModel::SpeedupColumn, Qt::DescendingOrder);
    dock.view()->selectionModel()->setCurrentIndex(
        dock.view()->model()->index(0, 0),
        QItemSelectionModel::SelectCurrent | QItemSelectionModel::Rows);
    QCOMPARE(selected.count(), 1);
    QCOMPARE(selected.takeFirst().at(0).value<symtune::NodeId>(), symtune::NodeId(12));
    dock.view()->selectionModel()->setCurrentIndex(
        dock.view()->model()->index(2, 0),
        QItemSelectionModel::SelectCurrent | QItemSelectionModel::Rows);
    QCOMPARE(selected.takeFirst().at(0).value<symtune::NodeId>(), symtune::NodeId(14));
  }
};

SYMTUNE_TEST_MAIN(TestBindingTableModel)
#include "tst_binding_table_model.moc"
