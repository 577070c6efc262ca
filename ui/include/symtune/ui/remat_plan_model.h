#pragma once
// The Memory budget dock's table: the rematerializer's plan in force on the attached run (the
// attach protocol's `remat` message, docs/remat.md), one row per unit a plan can recompute — the
// unit, the block it lies in, kept or recomputed, what it saves for backward, its graph nodes —
// and the last step's budget, predicted and measured peak (its `step` message). No widgets.
//
//   RematPlanModel model;
//   model.setPlan(rematMessage);   // none: the run holds no budget
//   model.addStep(stepMessage);    // the summary follows the steps
//   NodeId node = model.nodeAt(row);

#include <QAbstractTableModel>
#include <QString>

#include <optional>

#include "symtune/core/attach_messages.h"
#include "symtune/core/ids.h"

namespace symtune::ui {

class RematPlanModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { UnitColumn, WithinColumn, PlanColumn, SavedColumn, NodesColumn, ColumnCount };
  enum Role {
    NodeRole = Qt::UserRole + 1,  // int: the unit's first node in the graph (-1: none shown)
    RecomputedRole,               // bool
    SavedBytesRole,               // double: saved for backward, by the templates
  };

  explicit RematPlanModel(QObject* parent = nullptr);

  // The plan (none clears). A plan over the same units updates the rows in place; other units
  // reset the table.
  void setPlan(std::optional<attach::RematMessage> plan);
  const std::optional<attach::RematMessage>& plan() const { return plan_; }
  // A step: its remat figures feed the summary (a step without them is ignored).
  void addStep(const attach::StepMessage& step);
  const std::optional<attach::StepRemat>& lastStep() const { return lastStep_; }

  NodeId nodeAt(int row) const;  // none when out of range or the unit shows no node
  // "Budget 40 MB (set: 40 MB) · step 12: predicted 38.1 MB, peak 37.2 MB · 3 of 9 units
  // recomputed"; empty without a plan.
  QString summary() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 Q_SIGNALS:
  void summaryChanged(const QString& summary);

 private:
  std::optional<attach::RematMessage> plan_;
  std::optional<attach::StepRemat> lastStep_;
  int64_t lastStepIndex_ = -1;
};

// "38.1 MB", "640 kB": bytes as the dock shows them (10^6 bytes to the MB, as budget_mb).
QString formatMegabytes(double bytes);

}  // namespace symtune::ui
