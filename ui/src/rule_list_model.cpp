#include "symtune/ui/rule_list_model.h"

#include <QFont>

#include <algorithm>

namespace symtune::ui {

RuleListModel::RuleListModel(QObject* parent) : QAbstractTableModel(parent) {
}

bool RuleListModel::isRow(const QModelIndex& index) const {
  return index.isValid() && checkIndex(index, CheckIndexOption::ParentIsInvalid);
}

void RuleListModel::setRules(const std::vector<attach::RuleState>& rules) {
  std::vector<Rule> next;
  next.reserve(rules.size());
  for (const attach::RuleState& o : rules) {
    Rule r;
    r.name = QString::fromStdString(o.name);
    r.enabled = o.enabled;
    r.origin = QString::fromStdString(o.origin);
    r.description = QString::fromStdString(o.description);
    next.push_back(std::move(r));
  }

  const bool sameNames = next.size() == rules_.size() &&
                         std::equal(next.begin(), next.end(), rules_.begin(),
                                    [](const Rule& a, const Rule& b) { return a.name == b.name; });
  if (!sameNames) {
    beginResetModel();
    rules_ = std::move(next);
    endResetModel();
    return;
  }
  for (size_t i = 0; i < next.size(); ++i) {
    Rule& old = rules_[i];
    const Rule& now = next[i];
    if (old.enabled == now.enabled && old.origin == now.origin &&
        old.description == now.description && !old.pending)
      continue;
    old = now;
    const int row = static_cast<int>(i);
    Q_EMIT dataChanged(index(row, 0), index(row, ColumnCount - 1));
  }
}

void RuleListModel::clear() {
  beginResetModel();
  rules_.clear();
  endResetModel();
}

void RuleListModel::clearPending() {
  for (size_t i = 0; i < rules_.size(); ++i)
    clearPendingAt(static_cast<int>(i));
}

void RuleListModel::clearPending(const QString& name) {
  clearPendingAt(rowOf(name));
}

void RuleListModel::clearPendingAt(int row) {
  if (row < 0 || row >= rowCount() || !rules_[static_cast<size_t>(row)].pending)
    return;
  rules_[static_cast<size_t>(row)].pending = false;
  Q_EMIT dataChanged(index(row, 0), index(row, ColumnCount - 1),
                     {Qt::FontRole, Qt::ToolTipRole, PendingRole});
}

QString RuleListModel::nameAt(int row) const {
  if (row < 0 || row >= rowCount())
    return {};
  return rules_[static_cast<size_t>(row)].name;
}

int RuleListModel::rowOf(const QString& name) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].name == name)
      return static_cast<int>(i);
  }
  return -1;
}

bool RuleListModel::isPending(const QString& name) const {
  const int row = rowOf(name);
  return row >= 0 && rules_[static_cast<size_t>(row)].pending;
}

int RuleListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rules_.size());
}

int RuleListModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant RuleListModel::data(const QModelIndex& index, int role) const {
  if (!isRow(index))
    return {};
  const Rule& r = rules_[static_cast<size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case NameColumn:
          return r.name;
        case OriginColumn:
          return r.origin;
        case DescriptionColumn:
          return r.description;
      }
      return {};
    case Qt::ToolTipRole:
      if (r.pending)
        return tr("Waiting for the run to apply this");
      return index.column() == OriginColumn ? r.origin : r.description;
    case Qt::CheckStateRole:
      if (index.column() != NameColumn)
        return {};
      return r.enabled ? Qt::Checked : Qt::Unchecked;
    case Qt::FontRole:
      if (!r.pending)
        return {};
      {
        QFont italic;
        italic.setItalic(true);
        return italic;
      }
    case NameRole:
      return r.name;
    case EnabledRole:
      return r.enabled;
    case PendingRole:
      return r.pending;
    case OriginRole:
      return r.origin;
    case DescriptionRole:
      return r.description;
  }
  return {};
}

// Note [Toggles wait for the run]: the check box shows what the run does, not what the user asked
// for. A toggle marks the row pending and asks the run; the run's next `rules` message sets the
// flag and clears the mark — so a toggle the run refuses, or a run that died, never shows a state
// that is not in force.
bool RuleListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (role != Qt::CheckStateRole || index.column() != NameColumn || !isRow(index))
    return false;
  Rule& r = rules_[static_cast<size_t>(index.row())];
  const bool enabled = value.value<Qt::CheckState>() == Qt::Checked;
  if (enabled == r.enabled && !r.pending)
    return false;
  r.pending = true;
  Q_EMIT dataChanged(this->index(index.row(), 0), this->index(index.row(), ColumnCount - 1),
                     {Qt::FontRole, Qt::ToolTipRole, PendingRole});
  Q_EMIT toggleRequested(r.name, enabled);
  return true;
}

Qt::ItemFlags RuleListModel::flags(const QModelIndex& index) const {
  if (!isRow(index))
    return Qt::NoItemFlags;
  Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemNeverHasChildren;
  if (index.column() == NameColumn)
    f |= Qt::ItemIsUserCheckable;
  return f;
}

QVariant RuleListModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return {};
  switch (section) {
    case NameColumn:
      return tr("Name");
    case OriginColumn:
      return tr("Origin");
    case DescriptionColumn:
      return tr("Description");
  }
  return {};
}

QHash<int, QByteArray> RuleListModel::roleNames() const {
  QHash<int, QByteArray> names = QAbstractTableModel::roleNames();
  names.insert(NameRole, "name");
  names.insert(EnabledRole, "enabled");
  names.insert(PendingRole, "pending");
  names.insert(OriginRole, "origin");
  names.insert(DescriptionRole, "description");
  return names;
}

}  // namespace symtune::ui
