#include "symtune/ui/run_history_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace symtune::ui {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

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

void RunHistoryModel::appendStep(const attach::StepMessage& step) {
  const StepFeatures& f = step.features;
  Row row;
  row[Step] = static_cast<double>(step.step);
  row[Loss] = step.loss;
  row[SamplesPerSecond] = f[Feature::SamplesPerSecond];
  row[PeakMemoryMiB] = f[Feature::PeakMemory] / kMiB;
  row[GradientNorm] = f[Feature::GradGlobalNorm];
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  row[BudgetMiB] = step.remat && step.remat->budgetBytes ? *step.remat->budgetBytes / kMiB : kNaN;
  row[PredictedPeakMiB] =
      step.remat && step.remat->predictedPeak ? *step.remat->predictedPeak / kMiB : kNaN;
  row[BudgetedPeakMiB] = step.remat ? step.remat->peakBytes / kMiB : kNaN;
  row[ValidationLoss] = kNaN;
  row[ValidationTop1] = kNaN;
  row[ValidationTop5] = kNaN;
  if (early_ && static_cast<double>(early_->step - 1) <= row[Step]) {
    if (static_cast<double>(early_->step - 1) == row[Step]) {
      row[ValidationLoss] = early_->loss;
      row[ValidationTop1] = early_->top1.value_or(kNaN);
      row[ValidationTop5] = early_->top5.value_or(kNaN);
    }
    early_.reset();
  }

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

void RunHistoryModel::addValidation(const attach::ValidationMessage& validation) {
  const auto last = static_cast<double>(validation.step - 1);
  if (rows_.empty() || rows_.back()[Step] < last) {
    early_ = validation;
    return;
  }
  for (int row = static_cast<int>(rows_.size()) - 1; row >= 0; --row) {
    Row& r = rows_[static_cast<size_t>(row)];
    if (r[Step] == last) {
      constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
      r[ValidationLoss] = validation.loss;
      r[ValidationTop1] = validation.top1.value_or(kNaN);
      r[ValidationTop5] = validation.top5.value_or(kNaN);
      Q_EMIT dataChanged(index(row, ValidationLoss), index(row, ValidationTop5));
      return;
    }
    if (r[Step] < last)
      return;
  }
}

void RunHistoryModel::clear() {
  early_.reset();
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
        case BudgetMiB:
        case PredictedPeakMiB:
        case BudgetedPeakMiB:
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
    case BudgetMiB:
      return tr("Budget (MiB)");
    case PredictedPeakMiB:
      return tr("Predicted peak (MiB)");
    case BudgetedPeakMiB:
      return tr("Budgeted peak (MiB)");
    case ValidationLoss:
      return tr("Validation loss");
    case ValidationTop1:
      return tr("Validation top-1");
    case ValidationTop5:
      return tr("Validation top-5");
    case ColumnCount:
      break;
  }
  return {};
}

}  // namespace symtune::ui
