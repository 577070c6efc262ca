#pragma once
// The Controller dock's table: each step of the attached run that carried its configuration (the
// attach protocol's `step` message under a `control` block, docs/control.md), newest first — the
// configuration, the online controller's predicted and measured samples per second, whether it
// explored (or held a draw back, Note [Conservative exploration] in controller.h), the
// micro-batches the step ran as, why (a broken constraint, or what drove the choice) — and the
// run's configuration space (its `control` message). No widgets.
//
//   ControlLogModel model;
//   model.setControl(controlMessage);   // none: the run has no control block
//   model.addStep(stepMessage);         // a step without `control` is ignored
//   QVector<QPointF> reward = model.series(ControlLogModel::MeasuredColumn);

#include <QAbstractTableModel>
#include <QPointF>
#include <QString>
#include <QVector>

#include <deque>
#include <optional>

#include "symtune/core/attach_messages.h"

namespace symtune::ui {

class ControlLogModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    StepColumn,
    ConfigurationColumn,
    PredictedColumn,  // samples/s, the model's mean before the step
    MeasuredColumn,   // samples/s, as the step measured it
    ExploredColumn,
    MicrobatchesColumn,  // as the step ran
    WhyColumn,           // the constraint the step broke, or what most drove the choice
    ColumnCount
  };
  static constexpr int kDefaultCapacity = 2000;  // steps kept: the oldest go first

  explicit ControlLogModel(QObject* parent = nullptr, int capacity = kDefaultCapacity);

  void setControl(std::optional<attach::ControlMessage> control);
  const std::optional<attach::ControlMessage>& control() const { return control_; }
  void addStep(const attach::StepMessage& step);
  void clear();  // a new run

  // The points (step, value) of a numeric column, oldest first; NaN-free.
  QVector<QPointF> series(Column column) const;
  // "Online controller · 3 knobs, 40 configurations · pinned: threads 1 · step 12: microbatches
  // 2, threads 1 (explored)"; empty without a control block.
  QString summary() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 Q_SIGNALS:
  void summaryChanged(const QString& summary);
  void controlChanged();  // setControl(), clear(): the space or its pins

 private:
  struct Row {
    int64_t step = 0;
    attach::StepControl control;
  };
  const Row& rowAt(int row) const;  // row 0: the newest

  std::optional<attach::ControlMessage> control_;
  std::deque<Row> rows_;  // oldest first
  int capacity_;
};

}  // namespace symtune::ui
