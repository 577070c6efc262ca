#pragma once
// The Bindings dock's table: DynaCompiler's binding table of the attached run (the attach
// protocol's `bindings` message, docs/binding.md), one row per (site, bucket) — the site, the
// shape bucket, the implementation bound, its speedup over the ATen op, and how it was decided
// (candidates measured, or predicted by the cost model). No widgets.
//
//   BindingTableModel model;
//   model.setTable(bindingsMessage.table);  // a shared BindingTable; null clears
//   NodeId node = model.nodeAt(row);        // the site's graph node, to select it

#include <QAbstractTableModel>
#include <QString>

#include <memory>

#include "symtune/core/binding_table.h"
#include "symtune/core/ids.h"

namespace symtune::ui {

class BindingTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { SiteColumn, BucketColumn, WinnerColumn, SpeedupColumn, DecidedColumn, ColumnCount };
  enum Role {
    NodeRole = Qt::UserRole + 1,  // int: the site's node id in the graph
    SpeedupRole,                  // double: the reference's time over the winner's (1: unmeasured)
    MeasuredRole,                 // int: candidates measured (0 when predicted)
    RefusedRole,                  // int: candidates refused for disagreeing or failing
    BoundAwayRole,                // bool: bound to something other than the ATen op
  };

  explicit BindingTableModel(QObject* parent = nullptr);

  // The run's table (null: none). Rows are (site, bucket)s in the table's order; a table that
  // only grew keeps the rows there were and inserts the new ones.
  void setTable(std::shared_ptr<const BindingTable> table);
  const std::shared_ptr<const BindingTable>& table() const { return table_; }

  NodeId nodeAt(int row) const;  // none when out of range
  // "3 of 8 sites bound away from aten, 11 measured, 2 predicted" (empty without a table).
  QString summary() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const BindingTable> table_;
};

}  // namespace symtune::ui
