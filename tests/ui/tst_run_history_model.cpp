// The live charts' data: `step` messages become rows of RunHistoryModel (unmeasured features as
// NaN, shown as "—"), the model keeps its newest `capacity` steps, and LiveCharts overlays runs
// with their finite points only.

#include <QAbstractItemModelTester>
#include <QChart>
#include <QLegend>
#include <QLineSeries>
#include <QSignalSpy>
#include <QValueAxis>

#include <cmath>
#include <limits>
#include <memory>

#include "symtune/core/attach_messages.h"
#include "symtune/ui/live_charts.h"
#include "symtune/ui/run_history_model.h"
#include "test_main.h"

using symtune::ui::LiveCharts;
using symtune::ui::RunHistoryModel;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A `step` message as the runner encodes it (docs/protocol.md), features it did not measure NaN.
symtune::attach::StepMessage stepMessage(qint64 step, double loss, double samplesPerS = 100.0,
                                         double peakBytes = 2.0 * 1024 * 1024,
                                         double gradNorm = 1.5) {
  using symtune::Feature;
  symtune::attach::StepMessage m;
  m.step = step;
  m.loss = loss;
  m.seconds = 0.01;
  m.features.values.fill(kNaN);
  m.features[Feature::SamplesPerSecond] = samplesPerS;
  m.features[Feature::PeakMemory] = peakBytes;
  m.features[Feature::GradGlobalNorm] = gradNorm;
  m.features[Feature::StepTime] = 0.01;
  return m;
}

// A step frame's JSON through the protocol's decoder.
symtune::attach::StepMessage decoded(const QByteArray& json) {
  return std::get<symtune::attach::StepMessage>(
      symtune::attach::decodeServerMessage(nlohmann::json::parse(json.toStdString())));
}

void attachTester(QAbstractItemModel* model) {
  new QAbstractItemModelTester(model, QAbstractItemModelTester::FailureReportingMode::QtTest,
                               model);
}

bool sameValue(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || qFuzzyCompare(a, b);
}

}  // namespace

using Values = QList<double>;

class TestRunHistoryModel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // Frames as the runner writes them, through the decoder (features it did not send are NaN).
  void stepMessagesBecomeRows_data() {
    QTest::addColumn<QByteArray>("message");
    QTest::addColumn<Values>("values");  // Step, Loss, Samples/s, Peak memory (MiB), Grad norm
    QTest::addColumn<QStringList>("display");
    QTest::addRow("every feature measured")
        << QByteArray(
               "{\"type\": \"step\", \"step\": 12, \"loss\": 2.5, \"seconds\": 0.02, "
               "\"features\": {\"samples_per_s\": 1600, \"peak_memory_bytes\": 3145728, "
               "\"grad_global_norm\": 0.75}, \"rules\": {\"in_force\": [], \"fired\": []}, "
               "\"skipped\": false}")
        << Values{12, 2.5, 1600, 3, 0.75, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}
        << QStringList{"12", "2.5", "1600.0", "3.00", "0.75", "—", "—", "—", "—", "—", "—"};
    QTest::addRow("null features are NaN")
        << QByteArray(
               "{\"type\": \"step\", \"step\": 3, \"loss\": 0.125, \"seconds\": 0.02, "
               "\"features\": {\"samples_per_s\": null, \"peak_memory_bytes\": null, "
               "\"grad_global_norm\": null}, \"rules\": {\"in_force\": [], \"fired\": []}, "
               "\"skipped\": false}")
        << Values{3, 0.125, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}
        << QStringList{"3", "0.125", "—", "—", "—", "—", "—", "—", "—", "—", "—"};
    QTest::addRow("null loss, missing features")
        << QByteArray(
               "{\"type\": \"step\", \"step\": 7, \"loss\": null, \"seconds\": 0.02, "
               "\"features\": {}, \"rules\": {\"in_force\": [], \"fired\": []}, "
               "\"skipped\": false}")
        << Values{7, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}
        << QStringList{"7", "—", "—", "—", "—", "—", "—", "—", "—", "—", "—"};
    QTest::addRow("peak memory in MiB")
        << QByteArray(
               "{\"type\": \"step\", \"step\": 0, \"loss\": 1, \"seconds\": 0.02, "
               "\"features\": {\"peak_memory_bytes\": 524288, \"samples_per_s\": 12.25, "
               "\"grad_global_norm\": 1e-7}, \"rules\": {\"in_force\": [], \"fired\": []}, "
               "\"skipped\": false}")
        << Values{0, 1, 12.25, 0.5, 1e-7, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}
        << QStringList{"0", "1", "12.3", "0.50", "1e-07", "—", "—", "—", "—", "—", "—"};
    // A step held to a memory budget: its budget and predicted peak, as MiB.
    QTest::addRow("under a memory budget")
        << QByteArray(
               "{\"type\": \"step\", \"step\": 5, \"loss\": 1, \"seconds\": 0.02, "
               "\"features\": {\"peak_memory_bytes\": 1048576}, "
               "\"rules\": {\"in_force\": [], \"fired\": []}, \"skipped\": false, "
               "\"remat\": {\"budget_bytes\": 2097152, \"predicted_peak\": 1572864, "
               "\"peak\": 1048576, \"recomputed\": [\"layer1.0\"], \"attempts\": 0, "
               "\"cached\": true}}")
        << Values{5, 1, kNaN, 1, kNaN, 2, 1.5, 1, kNaN, kNaN, kNaN}
        << QStringList{"5", "1", "—", "1.00", "—", "2.00", "1.50", "1.00", "—", "—", "—"};
    QTest::addRow("calibrating: no budget, no prediction")
        << QByteArray(
               "{\"type\": \"step\", \"step\": 0, \"loss\": 1, \"seconds\": 0.02, "
               "\"features\": {}, \"rules\": {\"in_force\": [], \"fired\": []}, "
               "\"skipped\": false, \"remat\": {\"budget_bytes\": null, "
               "\"predicted_peak\": null, \"peak\": 1048576, \"recomputed\": [], "
               "\"attempts\": 0, \"cached\": false}}")
        << Values{0, 1, kNaN, kNaN, kNaN, kNaN, kNaN, 1, kNaN, kNaN, kNaN}
        << QStringList{"0", "1", "—", "—", "—", "—", "—", "1.00", "—", "—", "—"};
  }

  void stepMessagesBecomeRows() {
    QFETCH(QByteArray, message);
    QFETCH(Values, values);
    QFETCH(QStringList, display);
    RunHistoryModel model;
    attachTester(&model);
    QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
    model.appendStep(decoded(message));
    QCOMPARE(inserted.count(), 1);
    QCOMPARE(model.rowCount(), 1);
    QCOMPARE(model.columnCount(), int(RunHistoryModel::ColumnCount));
    for (int c = 0; c < RunHistoryModel::ColumnCount; ++c) {
      const QModelIndex i = model.index(0, c);
      const double raw = i.data(Qt::UserRole).toDouble();
      QVERIFY2(sameValue(raw, values[c]),
               qPrintable(QStringLiteral("column %1: %2 != %3").arg(c).arg(raw).arg(values[c])));
      QCOMPARE(i.data(Qt::DisplayRole).toString(), display[c]);
      QVERIFY(sameValue(model.value(0, static_cast<RunHistoryModel::Column>(c)), values[c]));
    }
  }

  void headersNameTheFigures() {
    RunHistoryModel model;
    QStringList headers;
    for (int c = 0; c < model.columnCount(); ++c)
      headers << model.headerData(c, Qt::Horizontal).toString();
    QCOMPARE(headers,
             (QStringList{"Step", "Loss", "Samples/s", "Peak memory (MiB)", "Gradient norm",
                          "Budget (MiB)", "Predicted peak (MiB)", "Budgeted peak (MiB)",
                          "Validation loss", "Validation top-1", "Validation top-5"}));
  }

  void capacityDropsTheOldest_data() {
    QTest::addColumn<int>("capacity");
    QTest::addColumn<int>("steps");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("firstStep");
    QTest::addRow("under capacity") << 10 << 4 << 4 << 0;
    QTest::addRow("exactly full") << 5 << 5 << 5 << 0;
    QTest::addRow("over capacity") << 3 << 8 << 3 << 5;
    QTest::addRow("capacity one") << 1 << 4 << 1 << 3;
  }

  void capacityDropsTheOldest() {
    QFETCH(int, capacity);
    QFETCH(int, steps);
    QFETCH(int, rows);
    QFETCH(int, firstStep);
    RunHistoryModel model(capacity);
    attachTester(&model);
    QSignalSpy removed(&model, &QAbstractItemModel::rowsRemoved);
    for (int s = 0; s < steps; ++s)
      model.appendStep(stepMessage(s, 1.0 / (s + 1)));
    QCOMPARE(model.rowCount(), rows);
    QCOMPARE(removed.count(), steps - rows);
    QCOMPARE(model.index(0, RunHistoryModel::Step).data(Qt::UserRole).toDouble(),
             double(firstStep));
    QCOMPARE(model.index(rows - 1, RunHistoryModel::Step).data(Qt::UserRole).toDouble(),
             double(steps - 1));
  }

  void defaultCapacityAndClear() {
    RunHistoryModel model;
    attachTester(&model);
    QCOMPARE(model.capacity(), 20000);
    model.appendStep(stepMessage(0, 1));
    model.appendStep(stepMessage(1, 0.5));
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    model.clear();
    QCOMPARE(reset.count(), 1);
    QCOMPARE(model.rowCount(), 0);
  }

  void runNameIsNotified() {
    RunHistoryModel model;
    QSignalSpy changed(&model, &RunHistoryModel::runNameChanged);
    model.setRunName("baseline");
    model.setRunName("baseline");
    QCOMPARE(model.runName(), QString("baseline"));
    QCOMPARE(changed.count(), 1);
  }

  // Two runs overlaid: run "a" has a NaN loss at step 2 and no gradient norm at step 4; run "b"
  // measured everything. Each chart gets each run's finite points only.
  void chartsOverlayRunsSkippingNaN_data() {
    QTest::addColumn<int>("chart");
    QTest::addColumn<QString>("title");
    QTest::addColumn<int>("pointsA");
    QTest::addColumn<int>("pointsB");
    QTest::addRow("loss") << int(LiveCharts::LossChart) << "Loss" << 4 << 3;
    QTest::addRow("samples/s") << int(LiveCharts::SamplesChart) << "Samples/s" << 5 << 3;
    QTest::addRow("peak memory") << int(LiveCharts::MemoryChart) << "Peak memory (MiB)" << 5 << 3;
    QTest::addRow("gradient norm")
        << int(LiveCharts::GradientNormChart) << "Gradient norm" << 4 << 3;
  }

  void chartsOverlayRunsSkippingNaN() {
    QFETCH(int, chart);
    QFETCH(QString, title);
    QFETCH(int, pointsA);
    QFETCH(int, pointsB);
    RunHistoryModel a, b;
    a.setRunName("a");
    b.setRunName("b");
    LiveCharts charts;
    charts.addRun(&a);
    charts.addRun(&b);
    for (int s = 0; s < 5; ++s)
      a.appendStep(stepMessage(s, s == 2 ? kNaN : 4.0 - s, 100.0 + s, 1024.0 * 1024 * (s + 1),
                               s == 4 ? kNaN : 0.5));
    for (int s = 0; s < 3; ++s)
      b.appendStep(stepMessage(s, 3.0 - s, 200.0, 1024.0 * 1024, 0.25));

    QCOMPARE(charts.runCount(), 2);
    QCOMPARE(charts.chart(chart)->title(), title);
    QCOMPARE(charts.pointCount(chart, 0), pointsA);
    QCOMPARE(charts.pointCount(chart, 1), pointsB);
    // The lines follow within one refresh, not per step.
    QCOMPARE(charts.series(chart, 0)->count(), 0);
    QTRY_COMPARE_WITH_TIMEOUT(charts.series(chart, 0)->count(), pointsA, 1000);
    QCOMPARE(charts.series(chart, 1)->count(), pointsB);
    for (int run = 0; run < 2; ++run) {
      for (const QPointF& p : charts.series(chart, run)->points())
        QVERIFY(std::isfinite(p.x()) && std::isfinite(p.y()));
    }
    QCOMPARE(charts.series(chart, 0)->name(), QString("a"));
    QCOMPARE(charts.series(chart, 1)->name(), QString("b"));
    QVERIFY(charts.series(chart, 0)->color() != charts.series(chart, 1)->color());
    QVERIFY(charts.chart(chart)->legend()->isVisible());
    QCOMPARE(charts.chart(chart)->series().size(), 2);
  }

  void chartPointsMatchTheSteps() {
    RunHistoryModel run;
    LiveCharts charts;
    charts.addRun(&run);
    run.appendStep(stepMessage(10, 2.0));
    run.appendStep(stepMessage(11, kNaN));
    run.appendStep(stepMessage(12, 1.0));
    charts.flush();
    QCOMPARE(charts.series(LiveCharts::LossChart, 0)->points(),
             (QList<QPointF>{{10, 2.0}, {12, 1.0}}));
    QCOMPARE(charts.series(LiveCharts::MemoryChart, 0)->points().first(), QPointF(10, 2.0));
    // The axes cover the data.
    auto* x =
        qobject_cast<QValueAxis*>(charts.chart(LiveCharts::LossChart)->axes(Qt::Horizontal)[0]);
    auto* y = qobject_cast<QValueAxis*>(charts.chart(LiveCharts::LossChart)->axes(Qt::Vertical)[0]);
    QVERIFY(x != nullptr && y != nullptr);
    QCOMPARE(x->min(), 10.0);
    QCOMPARE(x->max(), 12.0);
    QVERIFY(y->min() <= 1.0 && y->max() >= 2.0);

    // Figures from zero up keep the axis from zero up (its margin went below: -56 samples/s).
    run.appendStep(stepMessage(13, 1.5, /*samplesPerS=*/0.0));
    run.appendStep(stepMessage(14, 1.5, /*samplesPerS=*/1200.0));
    charts.flush();
    auto* rate =
        qobject_cast<QValueAxis*>(charts.chart(LiveCharts::SamplesChart)->axes(Qt::Vertical)[0]);
    QVERIFY(rate != nullptr);
    QCOMPARE(rate->min(), 0.0);
    QVERIFY(rate->max() >= 1200.0);
  }

  // A validation lands on the row of the step it followed and draws a dashed line on the loss
  // chart; one for a step the model no longer holds is dropped.
  void validationsJoinTheLossChart() {
    RunHistoryModel run(4);
    attachTester(&run);
    LiveCharts charts;
    charts.addRun(&run);
    for (int s = 0; s < 6; ++s)
      run.appendStep(stepMessage(s, 2.0 - 0.1 * s));
    QVERIFY(charts.validationSeries(0) == nullptr);
    QSignalSpy changed(&run, &QAbstractItemModel::dataChanged);
    run.addValidation({5, 24, 1.25, 0.5, std::nullopt});  // after step index 4
    run.addValidation({1, 24, 9.0, 0.1, std::nullopt});   // step 0: dropped from the model
    QCOMPARE(changed.count(), 1);
    QCOMPARE(run.value(2, RunHistoryModel::ValidationLoss), 1.25);
    QVERIFY(std::isnan(run.value(3, RunHistoryModel::ValidationLoss)));
    charts.flush();
    QVERIFY(charts.validationSeries(0) != nullptr);
    QCOMPARE(charts.validationSeries(0)->points(), (QList<QPointF>{{4, 1.25}}));
    QCOMPARE(charts.series(LiveCharts::LossChart, 0)->points().size(), 4);
    QVERIFY(charts.chart(LiveCharts::LossChart)->legend()->isVisible());  // names the line
    // Its top-1 on the accuracy chart, shown from then on; no top-5 with three classes.
    QCOMPARE(run.value(2, RunHistoryModel::ValidationTop1), 0.5);
    QVERIFY(std::isnan(run.value(2, RunHistoryModel::ValidationTop5)));
    QCOMPARE(charts.series(LiveCharts::AccuracyChart, 0)->points(), (QList<QPointF>{{4, 0.5}}));
    QVERIFY(charts.top5Series(0) == nullptr);
    QVERIFY(charts.accuracyShown());
  }

  // A studio attaching gets the run's last validation before its last step (docs/protocol.md,
  // the handshake): it waits for that step's row, and a later step without it drops it.
  void aValidationBeforeItsStepWaitsForIt() {
    RunHistoryModel run;
    attachTester(&run);
    run.addValidation({8, 24, 0.75, std::nullopt, std::nullopt});  // after step index 7
    run.appendStep(stepMessage(7, 0.9));
    QCOMPARE(run.value(0, RunHistoryModel::ValidationLoss), 0.75);
    run.addValidation({12, 24, 0.5, std::nullopt, std::nullopt});
    run.appendStep(stepMessage(9, 0.8));  // validation for step 11 never followed by its row
    run.appendStep(stepMessage(12, 0.7));
    QVERIFY(std::isnan(run.value(1, RunHistoryModel::ValidationLoss)));
    QVERIFY(std::isnan(run.value(2, RunHistoryModel::ValidationLoss)));
    run.addValidation({20, 24, 0.25, std::nullopt, std::nullopt});
    run.clear();
    run.appendStep(stepMessage(19, 0.6));  // cleared: the waiting one went with the rows
    QVERIFY(std::isnan(run.value(0, RunHistoryModel::ValidationLoss)));
  }

  // The accuracy chart stays hidden for a run without accuracies, and draws top-5 dashed.
  void accuracyChartShowsWithAccuracies() {
    RunHistoryModel run;
    LiveCharts charts;
    charts.addRun(&run);
    for (int s = 0; s < 4; ++s)
      run.appendStep(stepMessage(s, 1.0));
    run.addValidation({2, 10, 0.8, std::nullopt, std::nullopt});  // a regression: no accuracy
    charts.flush();
    QVERIFY(!charts.accuracyShown());
    run.addValidation({4, 10, 0.7, 0.6, 0.9});
    charts.flush();
    QVERIFY(charts.accuracyShown());
    QVERIFY(charts.top5Series(0) != nullptr);
    QCOMPARE(charts.top5Series(0)->points(), (QList<QPointF>{{3, 0.9}}));
    QCOMPARE(charts.top5Series(0)->pen().style(), Qt::DashLine);
    QVERIFY(charts.chart(LiveCharts::AccuracyChart)->legend()->isVisible());
  }

  void chartsDropWhatTheModelDrops() {
    RunHistoryModel run(3);
    LiveCharts charts;
    charts.addRun(&run);
    // Step 1 has no loss: when it is dropped, no loss point goes with it.
    for (int s = 0; s < 6; ++s)
      run.appendStep(stepMessage(s, s == 1 ? kNaN : double(s)));
    charts.flush();
    QCOMPARE(charts.series(LiveCharts::LossChart, 0)->points(),
             (QList<QPointF>{{3, 3.0}, {4, 4.0}, {5, 5.0}}));
    QCOMPARE(charts.pointCount(LiveCharts::SamplesChart, 0), 3);
    run.clear();
    QCOMPARE(charts.pointCount(LiveCharts::LossChart, 0), 0);
  }

  void runsCanBeAddedLateAndRemoved() {
    RunHistoryModel a, b;
    a.appendStep(stepMessage(0, 1.0));
    a.appendStep(stepMessage(1, 0.5));
    LiveCharts charts;
    charts.addRun(&a);  // a run with history already
    charts.addRun(&a);  // twice: once
    QCOMPARE(charts.runCount(), 1);
    QCOMPARE(charts.pointCount(LiveCharts::LossChart, 0), 2);
    charts.addRun(&b);
    charts.removeRun(&a);
    QCOMPARE(charts.runCount(), 1);
    QCOMPARE(charts.chart(LiveCharts::LossChart)->series().size(), 1);
    {
      auto c = std::make_unique<RunHistoryModel>();
      charts.addRun(c.get());
      QCOMPARE(charts.runCount(), 2);
    }  // a destroyed model leaves the charts
    QCOMPARE(charts.runCount(), 1);
    QCOMPARE(charts.chart(LiveCharts::GradientNormChart)->series().size(), 1);
  }

  void aBudgetedRunDrawsItsBudgetAndPrediction() {
    // Without a budget the memory chart has one line per run; a run held to one adds its budget,
    // predicted peak and budgeted peak once they have points, named after the run.
    RunHistoryModel plain, held;
    plain.setRunName("plain");
    held.setRunName("held");
    LiveCharts charts;
    charts.addRun(&plain);
    charts.addRun(&held);
    plain.appendStep(stepMessage(0, 1.0));
    QCOMPARE(charts.chart(LiveCharts::MemoryChart)->series().size(), 2);
    QVERIFY(charts.budgetSeries(1) == nullptr && charts.predictedSeries(1) == nullptr);
    for (int s = 0; s < 4; ++s) {
      symtune::attach::StepMessage m = stepMessage(s, 1.0, 100.0, 1024.0 * 1024 * (3 + s));
      symtune::attach::StepRemat remat;
      remat.budgetBytes = 8.0 * 1024 * 1024;
      if (s > 0)  // the first step's peak is not predicted
        remat.predictedPeak = 1024.0 * 1024 * (3.5 + s);
      remat.peakBytes = m.features[symtune::Feature::PeakMemory];
      m.remat = remat;
      held.appendStep(m);
    }
    charts.flush();
    QCOMPARE(charts.chart(LiveCharts::MemoryChart)->series().size(), 5);
    QCOMPARE(charts.chart(LiveCharts::LossChart)->series().size(), 2);
    QVERIFY(charts.budgetSeries(0) == nullptr);
    QCOMPARE(charts.budgetSeries(1)->name(), QString("held budget"));
    QCOMPARE(charts.predictedSeries(1)->name(), QString("held predicted"));
    QCOMPARE(charts.budgetSeries(1)->count(), 4);
    QCOMPARE(charts.predictedSeries(1)->points().first(), QPointF(1, 4.5));
    QCOMPARE(charts.budgetedPeakSeries(1)->points().last(), QPointF(3, 6.0));
    QCOMPARE(charts.budgetSeries(1)->pen().style(), Qt::DashLine);
    QCOMPARE(charts.budgetSeries(1)->color(), charts.series(LiveCharts::MemoryChart, 1)->color());
    auto* y =
        qobject_cast<QValueAxis*>(charts.chart(LiveCharts::MemoryChart)->axes(Qt::Vertical)[0]);
    QVERIFY(y->max() >= 8.0);  // the budget is in view
    held.setRunName("tuned");
    QCOMPARE(charts.budgetSeries(1)->name(), QString("tuned budget"));
    charts.removeRun(&held);
    QCOMPARE(charts.chart(LiveCharts::MemoryChart)->series().size(), 1);
  }

  void renamedRunRenamesItsLines() {
    RunHistoryModel run;
    LiveCharts charts;
    charts.addRun(&run);
    run.setRunName("tuned");
    for (int c = 0; c < LiveCharts::ChartCount; ++c)
      QCOMPARE(charts.series(c, 0)->name(), QString("tuned"));
  }

  void themeFollowsThePalette_data() {
    QTest::addColumn<QColor>("window");
    QTest::addColumn<int>("theme");
    QTest::addRow("light window") << QColor(240, 240, 240) << int(QChart::ChartThemeLight);
    QTest::addRow("dark window") << QColor(30, 30, 30) << int(QChart::ChartThemeDark);
  }

  void themeFollowsThePalette() {
    QFETCH(QColor, window);
    QFETCH(int, theme);
    RunHistoryModel a, b;
    LiveCharts charts;
    charts.addRun(&a);
    charts.addRun(&b);
    const QColor colourA = charts.series(0, 0)->color();
    QPalette pal = charts.palette();
    pal.setColor(QPalette::Window, window);
    charts.setPalette(pal);
    for (int c = 0; c < LiveCharts::ChartCount; ++c)
      QCOMPARE(int(charts.chart(c)->theme()), theme);
    // The runs keep their colours across a theme change.
    QCOMPARE(charts.series(0, 0)->color(), colourA);
    QVERIFY(charts.series(0, 1)->color() != colourA);
  }
};

SYMTUNE_TEST_MAIN(TestRunHistoryModel)
#include "tst_run_history_model.moc"
