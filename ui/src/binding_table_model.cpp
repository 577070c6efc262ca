#include "symtune/ui/binding_table_model.h"

#include <set>

namespace symtune::ui {

namespace {

int refusedCount(const Binding& b) {
  int n = 0;
  for (const auto& c : b.candidates)
    n += c.refused.empty() ? 0 : 1;
  return n;
}

QString decided(const Binding& b) {
  if (b.predicted)
    return BindingTableModel::tr("predicted");
  const int refused = refusedCount(b);
  QString text =
      BindingTableModel::tr("%n measured", nullptr, static_cast<int>(b.candidates.size()));
  if (refused > 0)
    text += BindingTableModel::tr(", %n refused", nullptr, refused);
  return text;
}

// The tooltip of a row: every candidate's times, or why it was refused.
QString candidates(const Binding& b) {
  if (b.candidates.empty())
    return BindingTableModel::tr("Bound by the cost model from the site's other buckets");
  QStringList lines;
  for (const auto& c : b.candidates) {
    QString line = QStringLiteral("%1: forward %2 µs, backward %3 µs")
                       .arg(QString::fromStdString(c.name))
                       .arg(c.forwardSeconds * 1e6, 0, 'f', 1)
                       .arg(c.backwardSeconds * 1e6, 0, 'f', 1);
    if (!c.refused.empty())
      line += BindingTableModel::tr(" — refused: %1").arg(QString::fromStdString(c.refused));
    lines << line;
  }
  return lines.join(QLatin1Char('\n'));
}

}  // namespace

BindingTableModel::BindingTableModel(QObject* parent) : QAbstractTableModel(parent) {
}

void BindingTableModel::setTable(std::shared_ptr<const BindingTable> table) {
  const int before = rowCount();
  const int after = table ? static_cast<int>(table->bindings.size()) : 0;
  bool grew = table_ && table && after >= before;
  for (int i = 0; grew && i < before; ++i) {
    const Binding& a = table_->bindings[static_cast<size_t>(i)];
    const Binding& b = table->bindings[static_cast<size_t>(i)];
    grew = a.site == b.site && a.bucket == b.bucket;
  }
  if (!grew) {
    beginResetModel();
    table_ = std::move(table);
    endResetModel();
    return;
  }
  if (after > before)
    beginInsertRows({}, before, after - 1);
  table_ = std::move(table);
  if (after > before)
    endInsertRows();
  if (before > 0)
    Q_EMIT dataChanged(index(0, 0), index(before - 1, ColumnCount - 1));
}

NodeId BindingTableModel::nodeAt(int row) const {
  if (row < 0 || row >= rowCount())
    return NodeId();
  return NodeId(table_->bindings[static_cast<size_t>(row)].node);
}

QString BindingTableModel::summary() const {
  if (!table_)
    return {};
  std::set<std::string> sites, away;
  int measured = 0, predicted = 0;
  for (const auto& b : table_->bindings) {
    sites.insert(b.site);
    if (b.winner != b.reference)
      away.insert(b.site);
    (b.predicted ? predicted : measured) += 1;
  }
  return tr("%1 of %2 sites bound away from aten; %3 buckets measured, %4 predicted")
      .arg(away.size())
      .arg(sites.size())
      .arg(measured)
      .arg(predicted);
}

int BindingTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !table_ ? 0 : static_cast<int>(table_->bindings.size());
}

int BindingTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant BindingTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount)
    return {};
  const Binding& b = table_->bindings[static_cast<size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case SiteColumn:
          return QString::fromStdString(b.site);
        case BucketColumn:
          return QString::fromStdString(b.bucket);
        case WinnerColumn:
          return QString::fromStdString(b.winner);
        case SpeedupColumn:
          return b.predicted ? QStringLiteral("—")
                             : QStringLiteral("%1×").arg(b.speedup(), 0, 'f', 2);
        case DecidedColumn:
          return decided(b);
      }
      return {};
    case Qt::ToolTipRole:
      return candidates(b);
    case Qt::TextAlignmentRole:
      return index.column() == SpeedupColumn ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter))
                                             : QVariant();
    case NodeRole:
      return b.node;
    case SpeedupRole:
      return b.speedup();
    case MeasuredRole:
      return static_cast<int>(b.candidates.size());
    case RefusedRole:
      return refusedCount(b);
    case BoundAwayRole:
      return b.winner != b.reference;
  }
  return {};
}

QVariant BindingTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return QAbstractTableModel::headerData(section, orientation, role);
  switch (section) {
    case SiteColumn:
      return tr("Site");
    case BucketColumn:
      return tr("Bucket");
    case WinnerColumn:
      return tr("Bound to");
    case SpeedupColumn:
      return tr("Speedup over aten");
    case DecidedColumn:
      return tr("Decided by");
  }
  return {};
}

}  // namespace symtune::ui
