#pragma once
// The Charts dock: loss, samples/s, peak memory and gradient norm against the step, one line per
// run, several runs overlaid. A run that validates on held-out samples adds a dashed validation
// loss line to the loss chart and, under a class-index loss, its top-1 accuracy (and top-5,
// dashed) to the validation accuracy chart, which shows once a run has a point for it. A run held
// to a memory budget adds three lines to the memory chart: the budget (dashed), the peak its plan
// was predicted to reach (dotted) and the peak it held (dash-dot), of the forward and backward the
// budget holds — the solid line is the whole step's, the update's too. Fed by RunHistoryModel; see
// Note [Live chart updates].

#include <QWidget>

#include <array>
#include <cstddef>
#include <vector>

class QChart;
class QChartView;
class QLineSeries;
class QTimer;
class QValueAxis;

namespace symtune::ui {

class RunHistoryModel;

class LiveCharts : public QWidget {
  Q_OBJECT

 public:
  enum Chart { LossChart, SamplesChart, MemoryChart, GradientNormChart, AccuracyChart, ChartCount };

  // How often, at most, the charts take new points and rescale their axes.
  static constexpr int kRefreshIntervalMs = 100;

  explicit LiveCharts(QWidget* parent = nullptr);
  ~LiveCharts() override;

  // Overlays a run (one line per chart, its own colour). The model is not owned; a run whose
  // model is destroyed leaves the charts by itself.
  void addRun(RunHistoryModel* run);
  void removeRun(RunHistoryModel* run);
  int runCount() const;

  // The points run `run` (in the order added) has in chart `chart`: its steps whose value is
  // finite. Counts what the lines show once the pending refresh is done (flush()).
  int pointCount(int chart, int run) const;
  QChart* chart(int i) const;
  QLineSeries* series(int chart, int run) const;
  // The memory chart's budget, predicted-peak and budgeted-peak lines of run `run`; null until it
  // has a point.
  QLineSeries* budgetSeries(int run) const;
  QLineSeries* predictedSeries(int run) const;
  QLineSeries* budgetedPeakSeries(int run) const;
  // The loss chart's validation line of run `run` (dashed: the loss on held-out samples); null
  // until it has a point.
  QLineSeries* validationSeries(int run) const;
  // The accuracy chart's top-5 line of run `run` (dashed); null until it has a point. Its top-1
  // line is series(AccuracyChart, run).
  QLineSeries* top5Series(int run) const;
  // Whether the accuracy chart shows: once a run has a validation accuracy.
  bool accuracyShown() const;
  // Draws pending points and rescales now, instead of at the next refresh.
  void flush();

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct Run;

  Run* find(RunHistoryModel* model);
  void addLine(Run& run, size_t line);  // line: an index into the lines a run draws
  void rowsInserted(Run& run, int first, int last);
  void rowsAboutToBeRemoved(Run& run, int first, int last);
  void rebuild(Run& run);
  void scheduleRefresh();
  void updateLegends();
  void applyTheme();
  QColor freeColour() const;

  std::array<QChartView*, ChartCount> views_{};
  std::array<QValueAxis*, ChartCount> xAxes_{}, yAxes_{};
  std::vector<Run> runs_;
  QTimer* refresh_;
};

}  // namespace symtune::ui
