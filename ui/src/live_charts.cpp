#include "symtune/ui/live_charts.h"

#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QGridLayout>
#include <QLegend>
#include <QLineSeries>
#include <QPointer>
#include <QTimer>
#include <QValueAxis>

#include <algorithm>
#include <cmath>
#include <limits>

#include "symtune/ui/run_history_model.h"

// Note [Live chart updates]
// A run can send hundreds of steps a second. Each QXYSeries::append makes QtCharts re-map every
// point of the line, and an axis change redraws the whole chart. So the charts keep their own copy
// of each line's points, updated as the model's rows come and go, and hand it to the series with
// one QXYSeries::replace — then rescale the axes — at most every kRefreshIntervalMs. Rows whose
// value is NaN (not measured) or infinite are left out of the line: QtCharts draws NaN as spikes
// to the origin.

namespace symtune::ui {

namespace {

// The lines a run draws: one per chart, then the memory budget's three — the budget, the peak
// predicted and the peak held, of the forward and backward the budget holds — drawn dashed and
// only once the run has a point for them (a run held to a budget: docs/remat.md), the validation
// loss and the validation top-5.
struct LineSpec {
  int chart;
  RunHistoryModel::Column column;
  Qt::PenStyle style;
  const char* suffix;  // after the run's name in the legend
};
constexpr std::array<LineSpec, LiveCharts::ChartCount + 5> kLines = {{
    {LiveCharts::LossChart, RunHistoryModel::Loss, Qt::SolidLine, ""},
    {LiveCharts::SamplesChart, RunHistoryModel::SamplesPerSecond, Qt::SolidLine, ""},
    {LiveCharts::MemoryChart, RunHistoryModel::PeakMemoryMiB, Qt::SolidLine, ""},
    {LiveCharts::GradientNormChart, RunHistoryModel::GradientNorm, Qt::SolidLine, ""},
    {LiveCharts::AccuracyChart, RunHistoryModel::ValidationTop1, Qt::SolidLine, ""},
    {LiveCharts::MemoryChart, RunHistoryModel::BudgetMiB, Qt::DashLine, " budget"},
    {LiveCharts::MemoryChart, RunHistoryModel::PredictedPeakMiB, Qt::DotLine, " predicted"},
    {LiveCharts::MemoryChart, RunHistoryModel::BudgetedPeakMiB, Qt::DashDotLine, " budgeted peak"},
    {LiveCharts::LossChart, RunHistoryModel::ValidationLoss, Qt::DashLine, " validation"},
    {LiveCharts::AccuracyChart, RunHistoryModel::ValidationTop5, Qt::DashLine, " top-5"},
}};
constexpr size_t kBudgetLine = LiveCharts::ChartCount, kPredictedLine = kBudgetLine + 1,
                 kBudgetedPeakLine = kBudgetLine + 2, kValidationLine = kBudgetLine + 3,
                 kTop5Line = kBudgetLine + 4;

// Distinct on light and dark backgrounds (Tableau 10).
constexpr std::array<QRgb, 10> kRunColours = {0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                              0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0xbab0ac};

bool drawable(const QPointF& p) {
  return std::isfinite(p.x()) && std::isfinite(p.y());
}

QPointF point(const RunHistoryModel& model, int row, RunHistoryModel::Column column) {
  return {model.value(row, RunHistoryModel::Step), model.value(row, column)};
}

// [lo, hi] widened so that a flat line sits in the middle of the chart rather than on an edge.
std::pair<double, double> padded(double lo, double hi) {
  if (hi > lo)
    return {lo, hi};
  const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
  return {lo - pad, hi + pad};
}

}  // namespace

struct LiveCharts::Run {
  QPointer<RunHistoryModel> model;
  RunHistoryModel* key = nullptr;  // the model's address, valid as a key after it is destroyed
  QColor colour;
  // Per line of kLines; the budget's lines have no series until they have a point.
  std::array<QLineSeries*, kLines.size()> series{};
  std::array<QList<QPointF>, kLines.size()> points;
  bool dirty = false;
  bool rebuildAfterRemoval = false;
  std::vector<QMetaObject::Connection> connections;
};

LiveCharts::LiveCharts(QWidget* parent) : QWidget(parent), refresh_(new QTimer(this)) {
  const std::array<QString, ChartCount> titles = {tr("Loss"), tr("Samples/s"),
                                                  tr("Peak memory (MiB)"), tr("Gradient norm"),
                                                  tr("Validation accuracy")};
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->setSpacing(0);
  for (int i = 0; i < ChartCount; ++i) {
    auto* c = new QChart;
    c->setTitle(titles[i]);
    QFont titleFont = c->titleFont();
    titleFont.setBold(true);
    c->setTitleFont(titleFont);
    // The legend names the runs: shown once there is more than one (updateLegends()).
    c->legend()->setVisible(false);
    c->legend()->setAlignment(Qt::AlignTop);
    c->setMargins(QMargins(2, 2, 2, 2));
    xAxes_[i] = new QValueAxis(c);  // steps; untitled, to leave the plot its height
    xAxes_[i]->setLabelFormat(QStringLiteral("%.0f"));
    yAxes_[i] = new QValueAxis(c);
    yAxes_[i]->setLabelFormat(QStringLiteral("%.4g"));
    c->addAxis(xAxes_[i], Qt::AlignBottom);
    c->addAxis(yAxes_[i], Qt::AlignLeft);
    views_[i] = new QChartView(c, this);
    views_[i]->setRenderHint(QPainter::Antialiasing);
    views_[i]->setMinimumSize(200, 150);
    grid->addWidget(views_[i], i / 2, i % 2, 1, i == AccuracyChart ? 2 : 1);
  }
  views_[AccuracyChart]->setVisible(false);  // until a run validates with an accuracy
  refresh_->setSingleShot(true);
  refresh_->setInterval(kRefreshIntervalMs);
  connect(refresh_, &QTimer::timeout, this, &LiveCharts::flush);
  applyTheme();
}

LiveCharts::~LiveCharts() {
  for (Run& run : runs_) {
    for (const auto& c : run.connections)
      disconnect(c);
  }
}

LiveCharts::Run* LiveCharts::find(RunHistoryModel* model) {
  auto it = std::find_if(runs_.begin(), runs_.end(), [&](const Run& r) { return r.key == model; });
  return it == runs_.end() ? nullptr : &*it;
}

QColor LiveCharts::freeColour() const {
  for (QRgb rgb : kRunColours) {
    const QColor c(rgb);
    if (std::none_of(runs_.begin(), runs_.end(), [&](const Run& r) { return r.colour == c; }))
      return c;
  }
  return QColor(kRunColours[runs_.size() % kRunColours.size()]);
}

void LiveCharts::addRun(RunHistoryModel* model) {
  Q_ASSERT(model != nullptr);
  if (find(model) != nullptr)
    return;
  Run run;
  run.model = model;
  run.key = model;
  run.colour = freeColour();
  for (size_t line = 0; line < static_cast<size_t>(ChartCount); ++line)
    addLine(run, line);
  // Connections find the run by model address: runs_ may reallocate.
  run.connections.push_back(connect(model, &QAbstractItemModel::rowsInserted, this,
                                    [this, model](const QModelIndex&, int first, int last) {
                                      if (Run* r = find(model))
                                        rowsInserted(*r, first, last);
                                    }));
  run.connections.push_back(connect(model, &QAbstractItemModel::rowsAboutToBeRemoved, this,
                                    [this, model](const QModelIndex&, int first, int last) {
                                      if (Run* r = find(model))
                                        rowsAboutToBeRemoved(*r, first, last);
                                    }));
  run.connections.push_back(connect(model, &QAbstractItemModel::rowsRemoved, this, [this, model] {
    if (Run* r = find(model); r != nullptr && r->rebuildAfterRemoval)
      rebuild(*r);
  }));
  run.connections.push_back(connect(model, &QAbstractItemModel::modelReset, this, [this, model] {
    if (Run* r = find(model))
      rebuild(*r);
  }));
  // A validation lands on a row already drawn: rare, so the run's lines are drawn again.
  run.connections.push_back(connect(model, &QAbstractItemModel::dataChanged, this, [this, model] {
    if (Run* r = find(model))
      rebuild(*r);
  }));
  run.connections.push_back(
      connect(model, &RunHistoryModel::runNameChanged, this, [this, model](const QString& name) {
        if (Run* r = find(model)) {
          for (size_t line = 0; line < kLines.size(); ++line) {
            if (r->series[line] != nullptr)
              r->series[line]->setName(name + QString::fromLatin1(kLines[line].suffix));
          }
        }
      }));
  run.connections.push_back(
      connect(model, &QObject::destroyed, this, [this, model] { removeRun(model); }));
  runs_.push_back(std::move(run));
  rebuild(runs_.back());
  updateLegends();
}

void LiveCharts::addLine(Run& run, size_t line) {
  const LineSpec& spec = kLines[line];
  auto* s = new QLineSeries;
  s->setName(run.model->runName() + QString::fromLatin1(spec.suffix));
  QPen pen(run.colour);
  pen.setWidthF(1.5);
  pen.setStyle(spec.style);
  s->setPen(pen);
  QChart* c = chart(spec.chart);
  c->addSeries(s);
  s->attachAxis(xAxes_[spec.chart]);
  s->attachAxis(yAxes_[spec.chart]);
  run.series[line] = s;
  if (line >= static_cast<size_t>(ChartCount))
    updateLegends();  // a budget's line is named, even for one run
}

void LiveCharts::updateLegends() {
  for (int i = 0; i < ChartCount; ++i)
    chart(i)->legend()->setVisible(runs_.size() > 1 ||
                                   static_cast<int>(chart(i)->series().size()) > runCount());
}

void LiveCharts::removeRun(RunHistoryModel* model) {
  auto it = std::find_if(runs_.begin(), runs_.end(), [&](const Run& r) { return r.key == model; });
  if (it == runs_.end())
    return;
  for (const auto& c : it->connections)
    disconnect(c);
  for (size_t line = 0; line < kLines.size(); ++line) {
    if (it->series[line] == nullptr)
      continue;
    chart(kLines[line].chart)->removeSeries(it->series[line]);
    delete it->series[line];
  }
  runs_.erase(it);
  updateLegends();
  scheduleRefresh();
}

void LiveCharts::rowsInserted(Run& run, int first, int last) {
  for (size_t line = 0; line < kLines.size(); ++line) {
    for (int row = first; row <= last; ++row) {
      const QPointF p = point(*run.model, row, kLines[line].column);
      if (drawable(p))
        run.points[line].append(p);
    }
    if (run.series[line] == nullptr && !run.points[line].isEmpty())
      addLine(run, line);
  }
  run.dirty = true;
  scheduleRefresh();
}

void LiveCharts::rowsAboutToBeRemoved(Run& run, int first, int last) {
  if (first != 0) {  // RunHistoryModel only drops its oldest rows; anything else: start over
    run.rebuildAfterRemoval = true;
    return;
  }
  for (size_t line = 0; line < kLines.size(); ++line) {
    qsizetype drop = 0;
    for (int row = first; row <= last; ++row)
      drop += drawable(point(*run.model, row, kLines[line].column)) ? 1 : 0;
    run.points[line].remove(0, std::min(drop, run.points[line].size()));
  }
  run.dirty = true;
  scheduleRefresh();
}

void LiveCharts::rebuild(Run& run) {
  run.rebuildAfterRemoval = false;
  for (auto& p : run.points)
    p.clear();
  if (run.model != nullptr && run.model->rowCount() > 0)
    rowsInserted(run, 0, run.model->rowCount() - 1);
  run.dirty = true;
  scheduleRefresh();
}

void LiveCharts::scheduleRefresh() {
  if (!refresh_->isActive())
    refresh_->start();
}

void LiveCharts::flush() {
  refresh_->stop();
  for (Run& run : runs_) {
    if (!run.dirty)
      continue;
    for (size_t line = 0; line < kLines.size(); ++line) {
      if (run.series[line] != nullptr)
        run.series[line]->replace(run.points[line]);
    }
    run.dirty = false;
  }
  for (int i = 0; i < ChartCount; ++i) {
    double xLo = std::numeric_limits<double>::infinity(), xHi = -xLo;
    double yLo = xLo, yHi = -xLo;
    for (const Run& run : runs_) {
      for (size_t line = 0; line < kLines.size(); ++line) {
        if (kLines[line].chart != i)
          continue;
        for (const QPointF& p : run.points[line]) {
          xLo = std::min(xLo, p.x());
          xHi = std::max(xHi, p.x());
          yLo = std::min(yLo, p.y());
          yHi = std::max(yHi, p.y());
        }
      }
    }
    if (i == AccuracyChart)
      views_[i]->setVisible(xLo <= xHi);
    if (xLo > xHi)  // no points
      continue;
    const auto [x0, x1] = padded(xLo, xHi);
    xAxes_[i]->setRange(x0, x1);
    const auto [y0, y1] = padded(yLo, yHi);
    const double margin = (y1 - y0) * 0.05;
    // Figures that never go below zero (throughput, memory, norms) get no axis below it: a
    // "-56 samples/s" tick reads as a measurement.
    yAxes_[i]->setRange(yLo >= 0 ? std::max(0.0, y0 - margin) : y0 - margin, y1 + margin);
  }
}

int LiveCharts::runCount() const {
  return static_cast<int>(runs_.size());
}

int LiveCharts::pointCount(int chartIndex, int run) const {
  Q_ASSERT(chartIndex >= 0 && chartIndex < ChartCount);
  Q_ASSERT(run >= 0 && run < runCount());
  return static_cast<int>(runs_[static_cast<size_t>(run)].points[chartIndex].size());
}

QChart* LiveCharts::chart(int i) const {
  Q_ASSERT(i >= 0 && i < ChartCount);
  return views_[i]->chart();
}

QLineSeries* LiveCharts::series(int chartIndex, int run) const {
  Q_ASSERT(chartIndex >= 0 && chartIndex < ChartCount);
  Q_ASSERT(run >= 0 && run < runCount());
  return runs_[static_cast<size_t>(run)].series[static_cast<size_t>(chartIndex)];
}

QLineSeries* LiveCharts::budgetSeries(int run) const {
  Q_ASSERT(run >= 0 && run < runCount());
  return runs_[static_cast<size_t>(run)].series[kBudgetLine];
}

QLineSeries* LiveCharts::predictedSeries(int run) const {
  Q_ASSERT(run >= 0 && run < runCount());
  return runs_[static_cast<size_t>(run)].series[kPredictedLine];
}

QLineSeries* LiveCharts::budgetedPeakSeries(int run) const {
  Q_ASSERT(run >= 0 && run < runCount());
  return runs_[static_cast<size_t>(run)].series[kBudgetedPeakLine];
}

QLineSeries* LiveCharts::validationSeries(int run) const {
  Q_ASSERT(run >= 0 && run < runCount());
  return runs_[static_cast<size_t>(run)].series[kValidationLine];
}

QLineSeries* LiveCharts::top5Series(int run) const {
  Q_ASSERT(run >= 0 && run < runCount());
  return runs_[static_cast<size_t>(run)].series[kTop5Line];
}

bool LiveCharts::accuracyShown() const {
  return !views_[AccuracyChart]->isHidden();
}

void LiveCharts::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange)
    applyTheme();
  QWidget::changeEvent(event);
}

void LiveCharts::applyTheme() {
  const bool dark = palette().color(QPalette::Window).lightness() < 128;
  const auto theme = dark ? QChart::ChartThemeDark : QChart::ChartThemeLight;
  for (int i = 0; i < ChartCount; ++i) {
    QChart* c = chart(i);
    if (c->theme() == theme)
      continue;
    c->setTheme(theme);  // resets the series' pens: give the runs their colours back
    for (const Run& run : runs_) {
      for (size_t line = 0; line < kLines.size(); ++line) {
        if (kLines[line].chart != i || run.series[line] == nullptr)
          continue;
        QPen pen(run.colour);
        pen.setWidthF(1.5);
        pen.setStyle(kLines[line].style);
        run.series[line]->setPen(pen);
      }
    }
  }
}

}  // namespace symtune::ui
