#include "symtune/ui/remat_plan_model.h"

#include <algorithm>
#include <cmath>

namespace symtune::ui {

QString formatMegabytes(double bytes) {
  if (!std::isfinite(bytes))
    return QStringLiteral("—");
  if (std::abs(bytes) >= 1e6)
    return QStringLiteral("%1 MB").arg(bytes / 1e6, 0, 'f', 1);
  return QStringLiteral("%1 kB").arg(bytes / 1e3, 0, 'f', 0);
}

RematPlanModel::RematPlanModel(QObject* parent) : QAbstractTableModel(parent) {
}

namespace {

bool sameUnits(const attach::RematMessage& a, const attach::RematMessage& b) {
  return std::equal(a.units.begin(), a.units.end(), b.units.begin(), b.units.end(),
                    [](const attach::RematUnitState& x, const attach::RematUnitState& y) {
                      return x.name == y.name && x.parent == y.parent && x.nodes == y.nodes;
                    });
}

}  // namespace

void RematPlanModel::setPlan(std::optional<attach::RematMessage> plan) {
  if (plan_ && plan && sameUnits(*plan_, *plan)) {
    plan_ = std::move(plan);
    if (!plan_->units.empty())
      Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
  } else {
    beginResetModel();
    plan_ = std::move(plan);
    if (!plan_)
      lastStep_.reset();
    endResetModel();
  }
  Q_EMIT summaryChanged(summary());
}

void RematPlanModel::addStep(const attach::StepMessage& step) {
  if (!step.remat)
    return;
  lastStep_ = step.remat;
  lastStepIndex_ = step.step;
  Q_EMIT summaryChanged(summary());
}

NodeId RematPlanModel::nodeAt(int row) const {
  if (!plan_ || row < 0 || row >= rowCount())
    return {};
  const auto& nodes = plan_->units[static_cast<size_t>(row)].nodes;
  return nodes.empty() ? NodeId() : NodeId(nodes.front());
}

QString RematPlanModel::summary() const {
  if (!plan_)
    return {};
  QStringList parts;
  QString set;
  if (plan_->budgetMb)
    set = tr("%1 MB").arg(*plan_->budgetMb, 0, 'g', 4);
  else if (plan_->budgetFraction)
    set = tr("%1 of the plain peak").arg(*plan_->budgetFraction, 0, 'g', 3);
  else
    set = tr("none");
  if (plan_->strategy == "checkpoint")
    parts << tr("Every block recomputed; budget %1").arg(set);
  else if (plan_->strategy == "selective")
    parts << tr("Runs of ops recomputed, matmuls and convolutions kept; budget %1").arg(set);
  else
    parts << tr("Budget %1").arg(set);
  if (lastStep_) {
    QString step = tr("step %1: ").arg(lastStepIndex_);
    step += lastStep_->budgetBytes ? tr("held to %1").arg(formatMegabytes(*lastStep_->budgetBytes))
                                   : tr("not held (measuring the plain peak)");
    if (lastStep_->predictedPeak)
      step += tr(", predicted %1").arg(formatMegabytes(*lastStep_->predictedPeak));
    step += tr(", peak %1").arg(formatMegabytes(lastStep_->peakBytes));
    if (lastStep_->attempts > 0)
      step += tr(" after %n retries", nullptr, static_cast<int>(lastStep_->attempts));
    parts << step;
  }
  if (!plan_->units.empty()) {
    const auto recomputed = std::count_if(plan_->units.begin(), plan_->units.end(),
                                          [](const auto& u) { return u.recomputed; });
    parts << tr("%1 of %2 units recomputed").arg(recomputed).arg(plan_->units.size());
  }
  if (lastStep_ && !lastStep_->note.empty())
    parts << QString::fromStdString(lastStep_->note);
  return parts.join(QStringLiteral(" · "));
}

int RematPlanModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !plan_ ? 0 : static_cast<int>(plan_->units.size());
}

int RematPlanModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RematPlanModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  const attach::RematUnitState& unit = plan_->units[static_cast<size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      switch (static_cast<Column>(index.column())) {
        case UnitColumn:
          return QString::fromStdString(unit.name);
        case WithinColumn:
          return unit.parent.empty() ? QStringLiteral("—") : QString::fromStdString(unit.parent);
        case PlanColumn:
          return unit.recomputed ? tr("recomputed") : tr("kept");
        case SavedColumn:
          return formatMegabytes(unit.savedBytes);
        case NodesColumn:
          return static_cast<int>(unit.nodes.size());
        case ColumnCount:
          break;
      }
      return {};
    case Qt::ToolTipRole:
      return unit.recomputed
                 ? tr("Recomputed in the backward: its activations are dropped after the forward")
                 : tr("Kept: its activations stay until the backward uses them");
    case Qt::TextAlignmentRole:
      return index.column() == SavedColumn || index.column() == NodesColumn
                 ? QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter)
                 : QVariant();
    case NodeRole:
      return unit.nodes.empty() ? -1 : unit.nodes.front();
    case RecomputedRole:
      return unit.recomputed;
    case SavedBytesRole:
      return unit.savedBytes;
    default:
      return {};
  }
}

QVariant RematPlanModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return QAbstractTableModel::headerData(section, orientation, role);
  switch (static_cast<Column>(section)) {
    case UnitColumn:
      return tr("Unit");
    case WithinColumn:
      return tr("Within");
    case PlanColumn:
      return tr("Plan");
    case SavedColumn:
      return tr("Saved for backward");
    case NodesColumn:
      return tr("Nodes");
    case ColumnCount:
      break;
  }
  return {};
}

}  // namespace symtune::ui
