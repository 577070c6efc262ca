// symtune-bench-chart: draws the JSON that symtune-bench writes as one PNG, with no display. A
// title line, then one row per model: throughput over the baseline mode, peak memory over the
// baseline mode (one bar per mode), every mode's loss per step overlaid, and, for a run with
// remat:F modes (--budgets), the time-memory curve.
//
//   build/ci/bin/symtune-bench-chart results.json results.png [--width 1500]
//
// Qt and nlohmann/json only, never LibTorch: the charts can be drawn on a machine that cannot run
// the benchmark. Exit status: 0 drawn, 1 the PNG could not be written, 2 bad arguments or input.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <QApplication>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QFont>
#include <QGridLayout>
#include <QLabel>
#include <QLineSeries>
#include <QPalette>
#include <QPixmap>
#include <QValueAxis>
#include <QWidget>
#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;

constexpr const char* kUsage =
    "usage: symtune-bench-chart RESULTS.json OUTPUT.png [--width PX]\n"
    "Draws the JSON that symtune-bench writes as one PNG image (PNG only): per model, throughput\n"
    "and peak memory of each mode over the baseline mode, each mode's loss per step, and the\n"
    "time-memory curve of the remat:F modes (symtune-bench --budgets) where there are any.\n"
    "  --width PX  image width, 600 to 10000 (default 1500); each model adds a 330 px row\n"
    "Needs no display: QT_QPA_PLATFORM defaults to offscreen.\n";

constexpr int kDefaultWidth = 1500;
constexpr int kMinWidth = 600, kMaxWidth = 10000;
constexpr int kTitleHeight = 40, kTitlePixels = 20;
constexpr int kRowHeight = 330;
constexpr int kMargin = 8;  // around the page and between charts

// Bad arguments or bad input: the message names the argument or the JSON field and what was
// expected. Exit status 2.
class BadInput : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --- Arguments ------------------------------------------------------------------------------

struct Arguments {
  bool help = false;
  std::string input;
  std::string output;
  int width = kDefaultWidth;
};

int parseWidth(const std::string& text) {
  int width = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, width);
  if (error != std::errc() || stop != end || width < kMinWidth || width > kMaxWidth) {
    throw BadInput("--width: expected a number of pixels from " + std::to_string(kMinWidth) +
                   " to " + std::to_string(kMaxWidth) + ", got '" + text + "'");
  }
  return width;
}

bool endsWithPng(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".png") == 0;
}

Arguments parseArguments(int argc, char** argv) {
  Arguments args;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      args.help = true;
      return args;
    }
    if (arg == "--width") {
      if (i + 1 == argc)
        throw BadInput("--width: expected a number of pixels after it");
      args.width = parseWidth(argv[++i]);
    } else if (arg.rfind("-", 0) == 0) {
      throw BadInput("unknown option '" + arg + "'");
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2)
    throw BadInput("expected RESULTS.json and OUTPUT.png, got " +
                   std::to_string(positional.size()) + " file names");
  args.input = positional[0];
  args.output = positional[1];
  if (!endsWithPng(args.output))
    throw BadInput(args.output + ": only PNG is written; name the output *.png");
  return args;
}

// --- Results --------------------------------------------------------------------------------

struct ModeResult {
  std::string mode;
  double samplesPerS = 0;                 // samples_per_s.median
  double peakBytes = 0;                   // peak_bytes.median
  std::optional<double> throughputRatio;  // ratio.samples_per_s, over the baseline mode
  std::optional<double> peakBytesRatio;   // ratio.peak_bytes, over the baseline mode
  std::vector<double> losses;             // one per step; NaN where the JSON has null
  bool infeasible = false;  // a remat budget no plan fitted, or a configuration refused: no numbers
};

struct ModelResult {
  std::string model;
  std::vector<ModeResult> modes;
};

struct BenchResults {
  std::string preset, cpu, gpu, torch, baseline;
  int warmup = 0;
  std::vector<ModelResult> models;
};

std::string field(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

std::string dotted(std::initializer_list<const char*> path) {
  std::string joined;
  for (const char* key : path)
    joined = field(joined, key);
  return joined;
}

// The value at `path` under `object`, or nullptr where a step is missing or null.
const json* find(const json& object, std::initializer_list<const char*> path) {
  const json* at = &object;
  for (const char* key : path) {
    if (!at->is_object())
      return nullptr;
    const auto it = at->find(key);
    if (it == at->end() || it->is_null())
      return nullptr;
    at = &*it;
  }
  return at;
}

double requiredNumber(const json& object, std::initializer_list<const char*> path,
                      const std::string& where) {
  const json* value = find(object, path);
  if (!value || !value->is_number())
    throw BadInput(field(where, dotted(path)) + ": missing or not a number");
  return value->get<double>();
}

std::string requiredString(const json& object, const char* key, const std::string& where) {
  const json* value = find(object, {key});
  if (!value || !value->is_string())
    throw BadInput(field(where, key) + ": missing or not a string");
  return value->get<std::string>();
}

const json& requiredArray(const json& object, const char* key, const std::string& where) {
  const json* value = find(object, {key});
  if (!value || !value->is_array())
    throw BadInput(field(where, key) + ": missing or not an array");
  return *value;
}

std::optional<double> optionalNumber(const json& object, std::initializer_list<const char*> path) {
  const json* value = find(object, path);
  if (!value || !value->is_number())
    return std::nullopt;
  return value->get<double>();
}

std::string optionalString(const json& object, std::initializer_list<const char*> path,
                           const std::string& fallback) {
  const json* value = find(object, path);
  return value && value->is_string() ? value->get<std::string>() : fallback;
}

std::string indexed(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

std::vector<double> parseLosses(const json& array, const std::string& where) {
  std::vector<double> losses;
  for (size_t i = 0; i < array.size(); ++i) {
    if (array[i].is_null())
      losses.push_back(std::numeric_limits<double>::quiet_NaN());
    else if (array[i].is_number())
      losses.push_back(array[i].get<double>());
    else
      throw BadInput(indexed(where, i) + ": expected a number or null");
  }
  return losses;
}

ModeResult parseMode(const json& object, const std::string& where) {
  ModeResult mode;
  mode.mode = requiredString(object, "mode", where);
  if (find(object, {"infeasible"}) != nullptr || find(object, {"refused"}) != nullptr) {
    mode.infeasible = true;
    return mode;
  }
  mode.samplesPerS = requiredNumber(object, {"samples_per_s", "median"}, where);
  mode.peakBytes = requiredNumber(object, {"peak_bytes", "median"}, where);
  mode.throughputRatio = optionalNumber(object, {"ratio", "samples_per_s"});
  mode.peakBytesRatio = optionalNumber(object, {"ratio", "peak_bytes"});
  mode.losses = parseLosses(requiredArray(object, "losses", where), field(where, "losses"));
  return mode;
}

ModelResult parseModel(const json& object, const std::string& where) {
  ModelResult model;
  model.model = requiredString(object, "model", where);
  const json& modes = requiredArray(object, "modes", where);
  for (size_t i = 0; i < modes.size(); ++i)
    model.modes.push_back(parseMode(modes[i], indexed(field(where, "modes"), i)));
  return model;
}

BenchResults parseResults(const json& root) {
  if (!root.is_object())
    throw BadInput("expected a JSON object at the top");
  const std::string format = optionalString(root, {"format"}, "symtune-bench");
  if (format != "symtune-bench")
    throw BadInput("format: expected \"symtune-bench\", got \"" + format + "\"");
  BenchResults results;
  results.preset = optionalString(root, {"config", "preset"}, "?");
  results.baseline = optionalString(root, {"config", "baseline"}, "");
  results.warmup = static_cast<int>(optionalNumber(root, {"config", "warmup"}).value_or(0));
  results.cpu = optionalString(root, {"machine", "cpu"}, "unknown CPU");
  results.gpu = optionalString(root, {"machine", "gpu"}, "");
  results.torch = optionalString(root, {"machine", "torch"}, "?");
  const json& models = requiredArray(root, "models", "");
  for (size_t i = 0; i < models.size(); ++i)
    results.models.push_back(parseModel(models[i], indexed("models", i)));
  if (results.models.empty())
    throw BadInput("models: empty, nothing to draw");
  return results;
}

BenchResults readResults(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw BadInput(path + ": cannot be read");
  try {
    return parseResults(json::parse(in));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw BadInput(path + ": not JSON: " + e.what());
  } catch (const BadInput& e) {
    throw BadInput(path + ": " + e.what());
  }
}

// --- Ratios ---------------------------------------------------------------------------------

// A bar is the harness's ratio (this mode over the baseline mode). Where that is null, the ratio of
// this mode's median to the baseline mode's median is drawn instead; a mode with neither (no
// baseline mode in this model, or a baseline median of 0) has no bar.
struct RatioMetric {
  const char* title;                         // "peak memory"
  std::optional<double> ModeResult::*ratio;  // the harness's ratio
  double ModeResult::*median;                // the fallback's numerator and denominator
};

const RatioMetric kThroughput{"throughput (samples/s)", &ModeResult::throughputRatio,
                              &ModeResult::samplesPerS};
const RatioMetric kPeakMemory{"peak memory", &ModeResult::peakBytesRatio, &ModeResult::peakBytes};

std::optional<double> ratio(const ModelResult& model, const ModeResult& mode,
                            const RatioMetric& metric, const std::string& baseline) {
  if (mode.infeasible)
    return std::nullopt;
  if (mode.*metric.ratio)
    return mode.*metric.ratio;
  const auto base = std::find_if(model.modes.begin(), model.modes.end(),
                                 [&](const ModeResult& m) { return m.mode == baseline; });
  if (base == model.modes.end())
    return std::nullopt;
  const double denominator = (*base).*metric.median;
  if (!(denominator > 0))
    return std::nullopt;
  return mode.*metric.median / denominator;
}

// --- Charts ---------------------------------------------------------------------------------

QChart* newChart(const QString& title) {
  auto* chart = new QChart;
  chart->setTitle(title);
  QFont font = chart->titleFont();
  font.setBold(true);
  chart->setTitleFont(font);
  chart->setBackgroundRoundness(0);
  chart->setMargins(QMargins(4, 4, 4, 4));
  return chart;
}

// Bars from 0 with the value written above each, and room above the tallest for its label.
QChart* barChart(const QString& title, const QStringList& categories, const QList<qreal>& values) {
  auto* set = new QBarSet(QString());
  set->append(values);
  set->setLabelColor(Qt::black);
  auto* series = new QBarSeries;
  series->append(set);
  series->setLabelsVisible(true);
  series->setLabelsPosition(QAbstractBarSeries::LabelsOutsideEnd);
  series->setLabelsFormat(QStringLiteral("@value×"));
  series->setLabelsPrecision(3);

  QChart* chart = newChart(title);
  chart->addSeries(series);
  chart->legend()->hide();
  auto* x = new QBarCategoryAxis;
  x->append(categories);
  chart->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  auto* y = new QValueAxis;
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
  const qreal tallest = values.isEmpty() ? 1.0 : *std::max_element(values.begin(), values.end());
  y->setRange(0, std::max<qreal>(tallest, 1.0) * 1.15);
  y->applyNiceNumbers();
  return chart;
}

QChart* ratioChart(const ModelResult& model, const RatioMetric& metric,
                   const std::string& baseline) {
  QStringList categories;
  QList<qreal> values;
  for (const ModeResult& mode : model.modes) {
    if (const auto value = ratio(model, mode, metric, baseline)) {
      categories << QString::fromStdString(mode.mode);
      values << *value;
    }
  }
  const QString over =
      baseline.empty() ? QStringLiteral("baseline") : QString::fromStdString(baseline);
  QString title =
      QStringLiteral("%1 — %2 ÷ %3")
          .arg(QString::fromStdString(model.model), QString::fromUtf8(metric.title), over);
  if (categories.isEmpty())
    title += QStringLiteral(" (no data)");  // e.g. peak memory where the run measured none
  return barChart(title, categories, values);
}

QLineSeries* lossSeries(const ModeResult& mode) {
  auto* series = new QLineSeries;
  series->setName(QString::fromStdString(mode.mode));
  for (size_t step = 0; step < mode.losses.size(); ++step) {
    if (std::isfinite(mode.losses[step]))
      series->append(static_cast<qreal>(step), mode.losses[step]);
  }
  return series;
}

// The range of the finite losses of every mode, widened a little so no curve touches the frame.
std::pair<qreal, qreal> lossRange(const ModelResult& model) {
  qreal low = std::numeric_limits<qreal>::infinity();
  qreal high = -low;
  for (const ModeResult& mode : model.modes) {
    for (double loss : mode.losses) {
      if (std::isfinite(loss)) {
        low = std::min<qreal>(low, loss);
        high = std::max<qreal>(high, loss);
      }
    }
  }
  if (low > high)
    return {0, 1};
  const qreal pad = high > low ? (high - low) * 0.05 : std::max<qreal>(std::abs(high) * 0.05, 0.5);
  return {low - pad, high + pad};
}

QChart* lossChart(const ModelResult& model, int warmup) {
  QChart* chart =
      newChart(QString::fromStdString(model.model) + QStringLiteral(" — loss per step"));
  chart->legend()->setAlignment(Qt::AlignBottom);
  auto* x = new QValueAxis;
  x->setLabelFormat(QStringLiteral("%d"));
  x->setTitleText(warmup > 0 ? QStringLiteral("step (warm-up: steps 0-%1)").arg(warmup - 1)
                             : QStringLiteral("step"));
  chart->addAxis(x, Qt::AlignBottom);
  auto* y = new QValueAxis;
  chart->addAxis(y, Qt::AlignLeft);
  size_t steps = 0;
  for (const ModeResult& mode : model.modes) {
    if (mode.infeasible)
      continue;
    QLineSeries* series = lossSeries(mode);
    chart->addSeries(series);
    series->attachAxis(x);
    series->attachAxis(y);
    steps = std::max(steps, mode.losses.size());
  }
  x->setRange(0, std::max<qreal>(static_cast<qreal>(steps) - 1, 1));
  const auto [low, high] = lossRange(model);
  y->setRange(low, high);
  y->applyNiceNumbers();
  return chart;
}

// The budget F of a "remat:F" mode; nullopt for any other mode.
std::optional<double> rematBudget(const std::string& mode) {
  const std::string prefix = "remat:";
  if (mode.rfind(prefix, 0) != 0)
    return std::nullopt;
  double value = 0;
  const char* first = mode.data() + prefix.size();
  const char* last = mode.data() + mode.size();
  const auto [end, error] = std::from_chars(first, last, value);
  if (error != std::errc() || end != last)
    return std::nullopt;
  return value;
}

bool hasRematModes(const ModelResult& model) {
  return std::any_of(model.modes.begin(), model.modes.end(),
                     [](const ModeResult& m) { return rematBudget(m.mode).has_value(); });
}

// The time-memory curve of `symtune-bench --budgets`: each remat:F mode's throughput over its
// peak memory (both over the baseline), joined in order of F, with full checkpointing and the
// baseline as points of their own. Budgets no plan fitted are named in the title.
QChart* curveChart(const ModelResult& model, const std::string& baseline) {
  std::vector<std::pair<double, const ModeResult*>> budgets;
  QStringList infeasible;
  for (const ModeResult& mode : model.modes) {
    if (const auto f = rematBudget(mode.mode)) {
      if (mode.infeasible)
        infeasible << QString::number(*f);
      else
        budgets.emplace_back(*f, &mode);
    }
  }
  std::sort(budgets.begin(), budgets.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  QString title = QString::fromStdString(model.model) +
                  QStringLiteral(" — throughput against peak memory ÷ ") +
                  QString::fromStdString(baseline.empty() ? "baseline" : baseline);
  if (!infeasible.isEmpty())
    title += QStringLiteral(" (no plan fits ") + infeasible.join(QStringLiteral(", ")) + ")";
  QChart* chart = newChart(title);
  chart->legend()->setAlignment(Qt::AlignBottom);
  auto* x = new QValueAxis;
  x->setTitleText(QStringLiteral("peak memory ÷ baseline"));
  chart->addAxis(x, Qt::AlignBottom);
  auto* y = new QValueAxis;
  y->setTitleText(QStringLiteral("throughput ÷ baseline"));
  chart->addAxis(y, Qt::AlignLeft);
  qreal top = 1.0;
  const auto point = [&](const ModeResult& mode) -> std::optional<QPointF> {
    const auto m = ratio(model, mode, kPeakMemory, baseline);
    const auto t = ratio(model, mode, kThroughput, baseline);
    if (!m || !t)
      return std::nullopt;
    top = std::max<qreal>(top, *t);
    return QPointF(*m, *t);
  };
  auto* curve = new QLineSeries;
  curve->setName(QStringLiteral("remat:F (F = budget ÷ plain peak)"));
  curve->setPointsVisible(true);
  for (const auto& [f, mode] : budgets) {
    if (const auto p = point(*mode))
      curve->append(*p);
  }
  std::vector<QLineSeries*> series{curve};
  for (const ModeResult& mode : model.modes) {
    if (rematBudget(mode.mode) || (mode.mode != "checkpoint" && mode.mode != baseline))
      continue;
    if (const auto p = point(mode)) {
      auto* single = new QLineSeries;
      single->setName(QString::fromStdString(mode.mode));
      single->setPointsVisible(true);
      single->append(*p);
      series.push_back(single);
    }
  }
  for (QLineSeries* s : series) {
    chart->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
  }
  x->setRange(0, 1.1);
  x->setTickCount(12);  // every 0.1
  x->setLabelFormat(QStringLiteral("%.1f"));
  y->setRange(0, top * 1.1);
  y->applyNiceNumbers();
  return chart;
}

// --- Page -----------------------------------------------------------------------------------

QString titleLine(const BenchResults& results) {
  const std::string gpu = results.gpu.empty() ? "no GPU" : results.gpu;
  const std::string baseline = results.baseline.empty() ? "?" : results.baseline;
  return QString::fromStdString("Symtune benchmark — preset " + results.preset + ", " +
                                results.cpu + ", " + gpu + ", torch " + results.torch +
                                ", baseline " + baseline);
}

QChartView* chartView(QChart* chart) {
  auto* view = new QChartView(chart);  // takes the chart
  view->setRenderHint(QPainter::Antialiasing);
  view->setFrameShape(QFrame::NoFrame);
  return view;
}

// The page is a widget that is never shown on screen (it is shown only to get laid out).
std::unique_ptr<QWidget> chartPage(const BenchResults& results, int width) {
  auto page = std::make_unique<QWidget>();
  page->setAttribute(Qt::WA_DontShowOnScreen);
  QPalette palette = page->palette();
  palette.setColor(QPalette::Window, Qt::white);
  palette.setColor(QPalette::WindowText, Qt::black);
  page->setPalette(palette);
  page->setAutoFillBackground(true);

  auto* grid = new QGridLayout(page.get());
  grid->setContentsMargins(kMargin, kMargin, kMargin, kMargin);
  grid->setSpacing(kMargin);
  auto* title = new QLabel(titleLine(results));
  QFont font = title->font();
  font.setBold(true);
  font.setPixelSize(kTitlePixels);
  title->setFont(font);
  title->setAlignment(Qt::AlignCenter);
  title->setFixedHeight(kTitleHeight);
  const bool curves = std::any_of(results.models.begin(), results.models.end(), hasRematModes);
  grid->addWidget(title, 0, 0, 1, curves ? 4 : 3);

  int row = 1;
  for (const ModelResult& model : results.models) {
    grid->addWidget(chartView(ratioChart(model, kThroughput, results.baseline)), row, 0);
    grid->addWidget(chartView(ratioChart(model, kPeakMemory, results.baseline)), row, 1);
    grid->addWidget(chartView(lossChart(model, results.warmup)), row, 2);
    if (hasRematModes(model))
      grid->addWidget(chartView(curveChart(model, results.baseline)), row, 3);
    grid->setRowStretch(row, 1);
    ++row;
  }
  const int rows = static_cast<int>(results.models.size());
  page->resize(width, kMargin + kTitleHeight + rows * (kMargin + kRowHeight) + kMargin);
  return page;
}

// Showing the page (off screen) sends the resize events and lays out the grid; the charts lay
// themselves out on posted events, so those are processed before the page is grabbed.
QPixmap render(QWidget& page) {
  page.show();
  QCoreApplication::processEvents(QEventLoop::AllEvents, 1000);
  return page.grab();
}

}  // namespace

int main(int argc, char** argv) {
  Arguments args;
  BenchResults results;
  try {
    args = parseArguments(argc, argv);
    if (args.help) {
      std::cout << kUsage;
      return 0;
    }
    results = readResults(args.input);
  } catch (const BadInput& e) {
    std::cerr << "symtune-bench-chart: " << e.what() << "\n";
    return 2;
  }

  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
    qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  const std::unique_ptr<QWidget> page = chartPage(results, args.width);
  if (!render(*page).save(QString::fromStdString(args.output), "PNG")) {
    std::cerr << "symtune-bench-chart: " << args.output << ": cannot be written\n";
    return 1;
  }
  return 0;
}
