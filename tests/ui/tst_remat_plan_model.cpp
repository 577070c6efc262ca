// The Memory budget dock's data, without a window: a `remat` message becomes one row per unit —
// unit, the block it lies in, kept or recomputed, saved bytes, nodes — a plan over the same units
// updates the rows in place and another resets them, the summary follows the steps (budget,
// predicted and measured peak, retries, a budget given up), and the dock asks for the budget the
// user typed and names a unit's node when its row is selected.

#include <QAbstractItemModelTester>
#include <QItemSelectionModel>
#include <QSignalSpy>
#include <QTableView>

#include "symtune/core/attach_messages.h"
#include "symtune/ui/remat_dock.h"
#include "symtune/ui/remat_plan_model.h"
#include "test_main.h"

using symtune::NodeId;
using symtune::attach::RematMessage;
using symtune::attach::StepMessage;
using symtune::attach::StepRemat;
using symtune::ui::RematDock;
using symtune::ui::RematPlanModel;

namespace {

// A plan as the studio receives it: encoded by the runner, decoded by the protocol.
RematMessage throughTheProtocol(const RematMessage& plan) {
  return std::get<RematMessage>(
      symtune::attach::decodeServerMessage(symtune::attach::encode(plan)));
}

RematMessage tagger(bool loopRecomputed, std::optional<double> fraction = 0.5) {
  RematMessage m;
  m.step = 4;
  m.strategy = "plan";
  m.budgetFraction = fraction;
  m.budgetBytes = 20e6;
  m.units = {{"embedding", "", {1, 2}, 1.5e6, false},
             {"rnn", "", {7, 8, 9, 10}, 12e6, false},
             {"rnn loop #8", "rnn", {9, 10}, 9.5e6, loopRecomputed},
             {"head", "", {}, 640e3, false}};
  return throughTheProtocol(m);
}

StepMessage step(int64_t index, std::optional<double> budget, std::optional<double> predicted,
                 double peak, int64_t attempts = 0, std::string note = {}) {
  StepMessage m;
  m.step = index;
  m.features.values.fill(0);
  StepRemat r;
  r.budgetBytes = budget;
  r.predictedPeak = predicted;
  r.peakBytes = peak;
  r.attempts = attempts;
  r.note = std::move(note);
  m.remat = r;
  return m;
}

}  // namespace

class TestRematPlanModel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void aPlanBecomesOneRowPerUnit() {
    RematPlanModel model;
    new QAbstractItemModelTester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest,
                                 &model);
    QCOMPARE(model.rowCount(), 0);
    QCOMPARE(model.summary(), QString());
    model.setPlan(tagger(true));
    QCOMPARE(model.rowCount(), 4);
    QCOMPARE(model.columnCount(), int(RematPlanModel::ColumnCount));
    const auto cell = [&](int row, int column) { return model.index(row, column).data(); };
    QCOMPARE(cell(2, RematPlanModel::UnitColumn).toString(), QString("rnn loop #8"));
    QCOMPARE(cell(2, RematPlanModel::WithinColumn).toString(), QString("rnn"));
    QCOMPARE(cell(1, RematPlanModel::WithinColumn).toString(), QString("—"));
    QCOMPARE(cell(2, RematPlanModel::PlanColumn).toString(), QString("recomputed"));
    QCOMPARE(cell(1, RematPlanModel::PlanColumn).toString(), QString("kept"));
    QCOMPARE(cell(1, RematPlanModel::SavedColumn).toString(), QString("12.0 MB"));
    QCOMPARE(cell(3, RematPlanModel::SavedColumn).toString(), QString("640 kB"));
    QCOMPARE(cell(1, RematPlanModel::NodesColumn).toInt(), 4);
    QCOMPARE(model.index(2, 0).data(RematPlanModel::RecomputedRole).toBool(), true);
    QCOMPARE(model.index(2, 0).data(RematPlanModel::SavedBytesRole).toDouble(), 9.5e6);
    QCOMPARE(model.index(2, 0).data(RematPlanModel::NodeRole).toInt(), 9);
    QCOMPARE(model.index(3, 0).data(RematPlanModel::NodeRole).toInt(), -1);  // shows no node
    QCOMPARE(model.nodeAt(1), NodeId(7));
    QVERIFY(!model.nodeAt(3).valid());
    QVERIFY(!model.nodeAt(9).valid());
    QCOMPARE(model.headerData(RematPlanModel::SavedColumn, Qt::Horizontal).toString(),
             QString("Saved for backward"));
    QCOMPARE(model.summary(), QString("Budget 0.5 of the plain peak · 1 of 4 units recomputed"));
  }

  void theSamePlanUpdatesInPlaceAnotherResets() {
    RematPlanModel model;
    new QAbstractItemModelTester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest,
                                 &model);
    model.setPlan(tagger(false));
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    QSignalSpy summary(&model, &RematPlanModel::summaryChanged);
    model.setPlan(tagger(true, std::nullopt));  // the loop now recomputed
    QCOMPARE(reset.count(), 0);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(summary.count(), 1);
    QCOMPARE(model.index(2, RematPlanModel::PlanColumn).data().toString(), QString("recomputed"));
    QCOMPARE(model.summary(), QString("Budget none · 1 of 4 units recomputed"));

    RematMessage other = tagger(true);
    other.units.pop_back();
    model.setPlan(other);
    QCOMPARE(reset.count(), 1);
    QCOMPARE(model.rowCount(), 3);
    model.setPlan(std::nullopt);
    QCOMPARE(model.rowCount(), 0);
    QCOMPARE(model.summary(), QString());
  }

  void theSummarySaysTheStrategy() {
    RematPlanModel model;
    RematMessage plan = tagger(false, std::nullopt);
    plan.budgetMb = 40;
    const std::pair<const char*, const char*> cases[] = {
        {"plan", "Budget 40 MB · 0 of 4 units recomputed"},
        {"checkpoint", "Every block recomputed; budget 40 MB · 0 of 4 units recomputed"},
        {"selective",
         "Runs of ops recomputed, matmuls and convolutions kept; budget 40 MB · 0 of 4 units "
         "recomputed"}};
    for (const auto& [strategy, summary] : cases) {
      plan.strategy = strategy;
      model.setPlan(throughTheProtocol(plan));
      QCOMPARE(model.summary(), QString(summary));
    }
  }

  void theSummaryFollowsTheSteps() {
    RematPlanModel model;
    StepMessage unbudgeted;
    unbudgeted.step = 0;
    model.addStep(unbudgeted);  // a step without remat figures: nothing to say
    QVERIFY(!model.lastStep().has_value());
    RematMessage plan = tagger(true);
    plan.budgetFraction.reset();
    plan.budgetMb = 25;
    model.setPlan(plan);
    model.addStep(step(0, std::nullopt, std::nullopt, 30e6));
    QCOMPARE(model.summary(), QString("Budget 25 MB · step 0: not held (measuring the plain peak), "
                                      "peak 30.0 MB · 1 of 4 units recomputed"));
    QSignalSpy summary(&model, &RematPlanModel::summaryChanged);
    model.addStep(step(5, 25e6, 23.5e6, 22.25e6, 1));
    QCOMPARE(summary.count(), 1);
    QCOMPARE(summary.first().first().toString(), model.summary());
    QCOMPARE(model.summary(), QString("Budget 25 MB · step 5: held to 25.0 MB, predicted 23.5 MB, "
                                      "peak 22.3 MB after 1 retries · 1 of 4 units recomputed"));
    model.addStep(step(6, 30e6, 23.5e6, 22e6, 0, "no plan fits; back to budget_mb 30"));
    QVERIFY(model.summary().endsWith(" · no plan fits; back to budget_mb 30"));
  }

  void theDockAsksForTheBudgetAndShowsUnits() {
    RematDock dock;
    QSignalSpy asked(&dock, &RematDock::budgetRequested);
    QSignalSpy selected(&dock, &RematDock::unitSelected);
    dock.model()->setPlan(tagger(true, 0.5));
    // The editor shows the run's budget until the user changes it.
    QCOMPARE(dock.budgetUnit(), RematDock::Unit::Fraction);
    QCOMPARE(dock.budgetValue(), 0.5);
    QVERIFY(dock.summary().startsWith("Budget 0.5 of the plain peak"));
    dock.setRunAttached(true);
    dock.setBudget(RematDock::Unit::Megabytes, 48);
    dock.apply();
    QCOMPARE(asked.count(), 1);
    QCOMPARE(asked.first().at(0).value<RematDock::Unit>(), RematDock::Unit::Megabytes);
    QCOMPARE(asked.first().at(1).toDouble(), 48.0);
    QCOMPARE(dock.status(), QString("Asking the run…"));
    dock.commandFinished(false, "the budget of 1 kB is below what any plan fits");
    QCOMPARE(dock.status(), QString("Refused: the budget of 1 kB is below what any plan fits"));
    dock.commandFinished(true, "Applied from step 9");
    QCOMPARE(dock.status(), QString("Applied from step 9"));

    dock.view()->selectionModel()->setCurrentIndex(
        dock.model()->index(1, 0), QItemSelectionModel::SelectCurrent | QItemSelectionModel::Rows);
    QCOMPARE(selected.count(), 1);
    QCOMPARE(selected.first().first().value<NodeId>(), NodeId(7));
    // A unit the graph does not show selects nothing.
    dock.view()->selectionModel()->setCurrentIndex(
        dock.model()->index(3, 0), QItemSelectionModel::SelectCurrent | QItemSelectionModel::Rows);
    QCOMPARE(selected.count(), 1);
  }
};

SYMTUNE_TEST_MAIN(TestRematPlanModel)
#include "tst_remat_plan_model.moc"
