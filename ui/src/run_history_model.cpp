#include "symtune/ui/run_history_model.h"

#include <QJsonValue>

#include <algorithm>
#include <cmath>
#include <limits>

namespace symtune::ui {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kMiB = 1024.0 * 1024.0;

// A number of a message, NaN when null, missing or not a number (the protocol writes NaN as null).
double number(const QJsonValue& v) {
  return v.isDouble() ? v.toDouble() : kNaN;
}

}  // namespace

RunHistoryModel::RunHistoryModel(int capacity, QObject* parent)
    : QAbstractTableModel(parent), capacity_(std::max(1, capacity)) {
}

void RunHistoryModel::setRunName(const QString& name) {
  if (name == runName_)
    return;
  runName_ = name;
  Q_EMIT runNameChanged(runName_);
}

void RunHistoryModel::appendStep(const QJsonObject& step) {
  const QJsonObject features = step.value(QLatin1String("features")).toObject();
  Row row;
  row[Step] = number(step.value(QLatin1String("step")));
  row[Loss] = number(step.value(QLatin1String("loss")));
  row[SamplesPerSecond] = number(features.value(QLatin1String("samples_per_s")));
  row[PeakMemoryMiB] = number(features.value(QLatin1String("peak_memory_bytes"))) / kMiB;
  row[GradientNorm] = number(features.value(QLatin1String("grad_global_norm")));

  if (static_cast<int>(rows_.size()) >= capacity_) {
    beginRemoveRows({}, 0, 0);
    rows_.pop_front();
    endRemoveRows();
  }
  const int at = static_cast<int>(rows_.size());
  beginInsertRows({}, at, at);
  rows_.push_back(row);
  endInsertRows();
}

void RunHistoryModel::clear() {
  if (rows_.empty())
    return;
  beginResetModel();
  rows_.clear();
  endResetModel();
}

double RunHistoryModel::value(int row, Column column) const {
  Q_ASSERT(row >= 0 && row < static_cast<int>(rows_.size()));
  Q_ASSERT(column >= 0 && column < ColumnCount);
  return rows_[static_cast<size_t>(row)][column];
}

int RunHistoryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int RunHistoryModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunHistoryModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const auto column = static_cast<Column>(index.column());
  const double v = value(index.row(), column);
  switch (role) {
    case Qt::DisplayRole:
      if (std::isnan(v))
        return QStringLiteral("—");
      switch (column) {
        case Step:
          return QString::number(static_cast<qint64>(v));
        case SamplesPerSecond:
          return QString::number(v, 'f', 1);
        case PeakMemoryMiB:
          return QString::number(v, 'f', 2);
        default:
          return QString::number(v, 'g', 6);
      }
    case Qt::UserRole:
      return v;
    case Qt::TextAlignmentRole:
      return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    default:
      return {};
  }
}

QVariant RunHistoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 ||
      section >= ColumnCount)
    return QAbstractTableModel::headerData(section, orientation, role);
  switch (static_cast<Column>(section)) {
    case Step:
      return tr("Step");
    case Loss:
      return tr("Loss");
    case SamplesPerSecond:
      return tr("Samples/s");
    case PeakMemoryMiB:
      return tr("Peak memory (MiB)");
    case GradientNorm:
      return tr("Gradient norm");
    case ColumnCount:
      break;
  }
  return {};
}

}  // namespace symtune::ui
