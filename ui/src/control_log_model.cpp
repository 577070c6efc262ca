#include "symtune/ui/control_log_model.h"

#include <QColor>

#include <cmath>

namespace symtune::ui {

namespace {

QString rate(double samplesPerSecond) {
  return QString::number(samplesPerSecond, 'f', 1);
}

QString value(double v) {
  return QString::number(v, 'g', 4);
}

// "microbatches 4 rather than 2 ×1.12"
QString driver(const std::pair<std::string, double>& d) {
  return QStringLiteral("%1 \u00d7%2")
      .arg(QString::fromStdString(d.first), QString::number(d.second, 'f', 2));
}

}  // namespace

ControlLogModel::ControlLogModel(QObject* parent, int capacity)
    : QAbstractTableModel(parent), capacity_(std::max(1, capacity)) {
}

void ControlLogModel::setControl(std::optional<attach::ControlMessage> control) {
  control_ = std::move(control);
  Q_EMIT controlChanged();
  Q_EMIT summaryChanged(summary());
}

void ControlLogModel::addStep(const attach::StepMessage& step) {
  if (!step.control)
    return;
  if (static_cast<int>(rows_.size()) >= capacity_) {
    // The oldest is the last row shown.
    const int last = static_cast<int>(rows_.size()) - 1;
    beginRemoveRows({}, last, last);
    rows_.pop_front();
    endRemoveRows();
  }
  beginInsertRows({}, 0, 0);
  rows_.push_back({step.step, *step.control});
  endInsertRows();
  Q_EMIT summaryChanged(summary());
}

void ControlLogModel::clear() {
  beginResetModel();
  rows_.clear();
  control_.reset();
  endResetModel();
  Q_EMIT controlChanged();
  Q_EMIT summaryChanged(summary());
}

const ControlLogModel::Row& ControlLogModel::rowAt(int row) const {
  return rows_[rows_.size() - 1 - static_cast<size_t>(row)];
}

QVector<QPointF> ControlLogModel::series(Column column) const {
  QVector<QPointF> points;
  for (const Row& r : rows_) {
    double v = NAN;
    if (column == PredictedColumn && r.control.decided && r.control.predictedSamplesPerSecond > 0)
      v = r.control.predictedSamplesPerSecond;
    else if (column == MeasuredColumn && r.control.samplesPerSecond)
      v = *r.control.samplesPerSecond;
    else if (column == MicrobatchesColumn)
      v = static_cast<double>(r.control.microbatches);
    if (std::isfinite(v))
      points.append(QPointF(static_cast<double>(r.step), v));
  }
  return points;
}

QString ControlLogModel::summary() const {
  if (!control_)
    return {};
  QString mode = control_->mode == "online"  ? tr("Online controller")
                 : control_->mode == "tuned" ? tr("Tuned configuration (auto_tune)")
                                             : tr("Fixed configuration");
  int64_t configurations = 1;
  QStringList pinned;
  for (const auto& k : control_->knobs) {
    configurations *= static_cast<int64_t>(std::max<size_t>(1, k.values.size()));
    if (k.pinned)
      pinned << QStringLiteral("%1 %2").arg(QString::fromStdString(k.name), value(*k.pinned));
  }
  QString text = tr("%1 · %2 knobs, %3 configurations")
                     .arg(mode)
                     .arg(control_->knobs.size())
                     .arg(configurations);
  if (!pinned.isEmpty())
    text += tr(" · pinned: %1").arg(pinned.join(QStringLiteral(", ")));
  if (!control_->excluded.empty()) {
    QStringList excluded;
    for (const auto& c : control_->excluded)
      excluded << QString::fromStdString(c);
    text += tr(" · excluded, the loss diverged: %1").arg(excluded.join(QStringLiteral("; ")));
  }
  if (!rows_.empty()) {
    const Row& last = rows_.back();
    text +=
        tr(" · step %1: %2").arg(last.step).arg(QString::fromStdString(last.control.configuration));
    if (last.control.explored)
      text += tr(" (explored)");
  }
  return text;
}

int ControlLogModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int ControlLogModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant ControlLogModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount())
    return {};
  const Row& r = rowAt(index.row());
  const attach::StepControl& c = r.control;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case StepColumn:
        return QVariant::fromValue<qlonglong>(r.step);
      case ConfigurationColumn:
        return QString::fromStdString(c.configuration);
      case PredictedColumn:
        return c.decided && c.predictedSamplesPerSecond > 0 ? rate(c.predictedSamplesPerSecond)
                                                            : QString();
      case MeasuredColumn:
        return c.samplesPerSecond ? rate(*c.samplesPerSecond) : QString();
      case ExploredColumn: {
        QStringList flags;
        if (c.explored)
          flags << tr("explored");
        else if (!c.heldBack.empty())
          flags << tr("held back");
        if (c.levelMoved)
          flags << tr("speed moved");
        return flags.join(QStringLiteral(" \u00b7 "));
      }
      case MicrobatchesColumn:
        return QVariant::fromValue<qlonglong>(c.microbatches);
      case WhyColumn:
        if (!c.violation.empty())
          return QString::fromStdString(c.violation);
        return c.drivers.empty() ? QString() : driver(c.drivers.front());
      default:
        return {};
    }
  }
  if (role == Qt::ForegroundRole && index.column() == WhyColumn && !c.violation.empty())
    return QColor(Qt::red);
  if (role == Qt::ToolTipRole && index.column() == ConfigurationColumn) {
    if (!c.decided)
      return tr("The run's configuration (control.mode is not \"online\")");
    QStringList lines;
    lines << tr("Chosen: %1").arg(QString::fromStdString(c.configuration));
    if (c.samplesPerSecond)
      lines << tr("Measured %1 samples/s").arg(rate(*c.samplesPerSecond));
    else
      lines << tr(
          "Not learnt from: its costs were one-off (the first step, a new shape, a "
          "calibrating step, or one in which the binder measured)");
    if (!c.alternatives.empty())
      lines << tr("The next best by the model:");
    for (const auto& a : c.alternatives)
      lines << QStringLiteral("  %1: %2 samples/s")
                   .arg(QString::fromStdString(a.configuration), rate(a.predictedSamplesPerSecond));
    if (!c.drivers.empty())
      lines << tr("Against the first of them (factors on the predicted samples/s):");
    for (const auto& d : c.drivers)
      lines << QStringLiteral("  ") + driver(d);
    QStringList batchSignals;
    for (const auto& [name, v] : c.batchSignals)
      batchSignals << QStringLiteral("%1 %2").arg(QString::fromStdString(name), value(v));
    if (!batchSignals.isEmpty())
      lines << tr("The batch: %1").arg(batchSignals.join(QStringLiteral(", ")));
    if (!c.heldBack.empty())
      lines << tr("Held back: %1").arg(QString::fromStdString(c.heldBack));
    for (const auto& [knob, v] : c.idle)
      lines << tr("Kept at %1 %2: on this batch its value changes nothing, so it was not drawn")
                   .arg(QString::fromStdString(knob), value(v));
    if (c.levelMoved)
      lines << tr(
          "Speed moved: the model believed this configuration's speed had changed, and counts the "
          "steps before it less from here");
    if (!c.violation.empty())
      lines << tr("Broke a constraint: %1").arg(QString::fromStdString(c.violation));
    return lines.join('\n');
  }
  if (role == Qt::TextAlignmentRole && index.column() != ConfigurationColumn &&
      index.column() != ExploredColumn)
    return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant ControlLogModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return {};
  switch (section) {
    case StepColumn:
      return tr("Step");
    case ConfigurationColumn:
      return tr("Configuration");
    case PredictedColumn:
      return tr("Predicted (samples/s)");
    case MeasuredColumn:
      return tr("Measured (samples/s)");
    case ExploredColumn:
      return tr("Explored");
    case MicrobatchesColumn:
      return tr("Micro-batches run");
    case WhyColumn:
      return tr("Why");
    default:
      return {};
  }
}

}  // namespace symtune::ui
