// The Controller dock's data and its pins, without a window: each step that carries its
// configuration becomes a row, newest first (configuration, predicted and measured samples per
// second, explored, micro-batches run), steps without one are ignored, the oldest go past the
// capacity; the summary names the mode, the space and the pins; the reward and micro-batch series
// follow the steps; each knob gets a pin editor, enabled only on an attached run under the online
// controller, which asks for the value chosen ("free": let go) and shows the run's pins.

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QSignalSpy>
#include <QTableView>

#include <optional>

#include "symtune/core/attach_messages.h"
#include "symtune/ui/control_dock.h"
#include "symtune/ui/control_log_model.h"
#include "symtune/ui/sparkline.h"
#include "test_main.h"

using symtune::attach::ControlMessage;
using symtune::attach::StepControl;
using symtune::attach::StepMessage;
using symtune::ui::ControlDock;
using symtune::ui::ControlLogModel;

Q_DECLARE_METATYPE(std::optional<double>)

namespace {

// Messages as the studio receives them: encoded by the runner, decoded by the protocol.
template <typename M>
M throughTheProtocol(const M& m) {
  return std::get<M>(symtune::attach::decodeServerMessage(symtune::attach::encode(m)));
}

ControlMessage space(const std::string& mode, std::optional<double> pinnedThreads = {}) {
  ControlMessage m;
  m.mode = mode;
  m.knobs = {{"microbatches", {1, 2, 4}, 1, "powers of two up to the batch", std::nullopt},
             {"threads", {1, 2}, 2, "the machine's 2 hardware threads", pinnedThreads}};
  return throughTheProtocol(m);
}

StepMessage step(int64_t index, int microbatches, std::optional<double> measured, bool explored,
                 bool decided = true) {
  StepMessage m;
  m.step = index;
  m.features.values.fill(0);
  StepControl c;
  c.microbatches = microbatches;
  c.configuration = "microbatches " + std::to_string(microbatches) + ", threads 1";
  c.knobs = {{"microbatches", microbatches}, {"threads", 1}};
  c.decided = decided;
  c.predictedSamplesPerSecond = decided ? 500 : 0;
  c.samplesPerSecond = measured;
  c.explored = explored;
  if (decided) {
    c.alternatives = {{"microbatches 1, threads 2", 450}};
    c.batchSignals = {{"batch_size", 16}, {"sequence_length", 40}};
    c.drivers = {{"threads 1 rather than 2", 1.11}};
  }
  c.levelMoved = index == 1;
  if (index == 1)
    c.idle = {{"binding_explore", 1}};
  if (index == 2) {
    c.violation = "the loss diverged (nan against its average 2.1)";
    c.heldBack =
        "microbatches 4, threads 1: as slow as it may be, it could take the run below "
        "0.97 of the throughput of microbatches 1, threads 2 since the warm-up";
  }
  m.control = c;
  return throughTheProtocol(m);
}

}  // namespace

class TestControlDock : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void theLogFollowsTheSteps() {
    ControlLogModel model(nullptr, 3);
    QAbstractItemModelTester tester(&model);
    QVERIFY(model.summary().isEmpty());
    model.setControl(space("online"));
    QCOMPARE(model.summary(), QString("Online controller · 2 knobs, 6 configurations"));
    StepMessage plain;
    plain.step = 0;
    plain.features.values.fill(0);
    model.addStep(plain);  // no control: not a row
    QCOMPARE(model.rowCount(), 0);
    model.addStep(step(0, 1, std::nullopt, false));  // the first step: not learnt from
    model.addStep(step(1, 2, 620.0, true));
    model.addStep(step(2, 2, 640.0, false));
    QCOMPARE(model.rowCount(), 3);
    // Newest first.
    QCOMPARE(model.data(model.index(0, ControlLogModel::StepColumn)).toLongLong(), 2LL);
    // The middle step explored, and its time made the model believe the speed had moved.
    QCOMPARE(model.data(model.index(1, ControlLogModel::ExploredColumn)).toString(),
             QString::fromUtf8("explored \u00b7 speed moved"));
    QVERIFY(model.data(model.index(1, ControlLogModel::ConfigurationColumn), Qt::ToolTipRole)
                .toString()
                .contains("Speed moved: the model believed"));
    // A knob kept because its value changes nothing says so.
    QVERIFY(model.data(model.index(1, ControlLogModel::ConfigurationColumn), Qt::ToolTipRole)
                .toString()
                .contains("Kept at binding_explore 1: on this batch its value changes nothing"));
    // A draw conservative exploration held back says so, and what it was.
    QCOMPARE(model.data(model.index(0, ControlLogModel::ExploredColumn)).toString(),
             QString("held back"));
    QVERIFY(model.data(model.index(0, ControlLogModel::ConfigurationColumn), Qt::ToolTipRole)
                .toString()
                .contains("Held back: microbatches 4, threads 1: as slow as it may be"));
    QCOMPARE(model.data(model.index(0, ControlLogModel::MeasuredColumn)).toString(),
             QString("640.0"));
    QCOMPARE(model.data(model.index(2, ControlLogModel::MeasuredColumn)).toString(), QString());
    QCOMPARE(model.data(model.index(0, ControlLogModel::PredictedColumn)).toString(),
             QString("500.0"));
    QVERIFY(model.data(model.index(1, ControlLogModel::ConfigurationColumn), Qt::ToolTipRole)
                .toString()
                .contains("microbatches 1, threads 2: 450.0 samples/s"));
    QVERIFY(model.summary().endsWith("step 2: microbatches 2, threads 1"));
    // Why: a broken constraint first, otherwise what drove the choice most.
    QCOMPARE(model.data(model.index(0, ControlLogModel::WhyColumn)).toString(),
             QString("the loss diverged (nan against its average 2.1)"));
    QCOMPARE(model.data(model.index(1, ControlLogModel::WhyColumn)).toString(),
             QString::fromUtf8("threads 1 rather than 2 \u00d71.11"));
    const QString why =
        model.data(model.index(1, ControlLogModel::ConfigurationColumn), Qt::ToolTipRole)
            .toString();
    QVERIFY(why.contains("The batch: batch_size 16, sequence_length 40"));
    QVERIFY(why.contains(QString::fromUtf8("  threads 1 rather than 2 \u00d71.11")));
    // The series, oldest first: only measured steps have a reward.
    QCOMPARE(model.series(ControlLogModel::MeasuredColumn), (QVector<QPointF>{{1, 620}, {2, 640}}));
    QCOMPARE(model.series(ControlLogModel::MicrobatchesColumn),
             (QVector<QPointF>{{0, 1}, {1, 2}, {2, 2}}));
    // Past the capacity the oldest goes.
    model.addStep(step(3, 4, 300.0, true));
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.data(model.index(2, ControlLogModel::StepColumn)).toLongLong(), 1LL);
    QVERIFY(model.summary().endsWith("step 3: microbatches 4, threads 1 (explored)"));
    model.setControl(space("online", 1.0));
    QVERIFY(model.summary().contains(" · pinned: threads 1 · "));
    ControlMessage excluded = space("online");
    excluded.excluded = {"microbatches 4, threads 1"};
    model.setControl(throughTheProtocol(excluded));
    QVERIFY(model.summary().contains(
        " · excluded, the loss diverged: microbatches 4, threads 1 · step 3"));
    model.clear();
    QCOMPARE(model.rowCount(), 0);
    QVERIFY(model.summary().isEmpty());
  }

  void theDockPinsKnobsOnAnOnlineRun() {
    qRegisterMetaType<std::optional<double>>();
    ControlDock dock;
    QSignalSpy asked(&dock, &ControlDock::pinRequested);
    QCOMPARE(dock.summary(), QString("No controller: the run's session has no control block"));
    QVERIFY(dock.pinEditor("threads") == nullptr);

    dock.model()->setControl(space("fixed"));
    QComboBox* threads = dock.pinEditor("threads");
    QVERIFY(threads != nullptr);
    QCOMPARE(threads->count(), 3);  // free, 1, 2
    dock.setRunAttached(true);
    QVERIFY(!threads->isEnabled());  // a fixed configuration: nothing to pin
    QVERIFY(dock.summary().startsWith("Fixed configuration"));

    dock.model()->setControl(space("online"));
    threads = dock.pinEditor("threads");
    QVERIFY(threads->isEnabled());
    QCOMPARE(threads->currentIndex(), 0);  // free
    threads->activated(2);                 // what choosing "2" does
    QCOMPARE(asked.count(), 1);
    QCOMPARE(asked.first().at(0).toString(), QString("threads"));
    QCOMPARE(asked.first().at(1).value<std::optional<double>>(), std::optional<double>(2.0));
    QCOMPARE(dock.status(), QString("Asking the run…"));
    threads->activated(0);  // free
    QCOMPARE(asked.count(), 2);
    QVERIFY(!asked.last().at(1).value<std::optional<double>>().has_value());
    threads->setCurrentIndex(2);  // as the user left it
    dock.commandFinished(false, "knob threads cannot take 2");
    QCOMPARE(dock.status(), QString("Refused: knob threads cannot take 2"));
    QCOMPARE(threads->currentIndex(), 0);  // back to the run's: free

    // The run's pins show in the editors, which are kept while the space is the same.
    dock.model()->setControl(space("online", 1.0));
    QCOMPARE(dock.pinEditor("threads"), threads);
    QCOMPARE(threads->currentText(), QString("1"));
    QCOMPARE(asked.count(), 2);  // showing the run's pin asks for nothing

    threads->setCurrentIndex(2);  // the user choosing: a step leaves the editor alone
    dock.model()->addStep(step(5, 2, 700.0, false));
    QCOMPARE(threads->currentIndex(), 2);
    dock.model()->addStep(step(6, 4, 650.0, true));
    QCOMPARE(dock.rewardChart()->points().size(), 2);
    QCOMPARE(dock.microbatchesChart()->points().size(), 2);
    QCOMPARE(dock.view()->model()->rowCount(), 2);

    dock.setRunAttached(false);
    QVERIFY(!threads->isEnabled());
  }
};

SYMTUNE_TEST_MAIN(TestControlDock)
#include "tst_control_dock.moc"
