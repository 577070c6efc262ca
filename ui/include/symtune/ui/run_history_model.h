#pragma once
// One run's history for the live charts: a table with one row per `step` message (docs/protocol.md)
// and the charted figures as columns. A figure the run did not measure (null in the message) is
// NaN: shown as "—", returned as NaN by Qt::UserRole. Keeps the newest `capacity` steps.

#include <QAbstractTableModel>

#include <array>
#include <deque>
#include <optional>

#include "symtune/core/attach_messages.h"

namespace symtune::ui {

class RunHistoryModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  // BudgetMiB, PredictedPeakMiB, BudgetedPeakMiB: a run held to a memory budget (the step's
  // `remat` figures): the budget, the peak its plan was predicted to reach and the peak it held —
  // of the forward and backward, which the budget holds (PeakMemoryMiB covers the update too).
  // ValidationLoss, ValidationTop1, ValidationTop5: the loss and accuracy on the held-out
  // samples, on the row of the step they followed (a `validation` message; NaN on the other rows,
  // and for an accuracy the run did not measure).
  enum Column {
    Step,
    Loss,
    SamplesPerSecond,
    PeakMemoryMiB,
    GradientNorm,
    BudgetMiB,
    PredictedPeakMiB,
    BudgetedPeakMiB,
    ValidationLoss,
    ValidationTop1,
    ValidationTop5,
    ColumnCount
  };

  static constexpr int kDefaultCapacity = 20000;

  // RunHistoryModel run;  run.setRunName(tr("baseline"));  run.appendStep(message);
  explicit RunHistoryModel(int capacity = kDefaultCapacity, QObject* parent = nullptr);

  QString runName() const { return runName_; }
  void setRunName(const QString& name);
  int capacity() const { return capacity_; }

  // A `step` message: its step, loss, samples per second, peak memory (as MiB), global gradient
  // norm, and under a memory budget the budget, the predicted and the budgeted peak (NaN where
  // the run sent none). Drops the oldest row when the model is full.
  void appendStep(const attach::StepMessage& step);
  // A `validation` message: its loss, top-1 and top-5 on the row of the last step it followed
  // (step - 1), when the model still holds that row; dataChanged tells the charts. One for a step
  // not yet here (a studio attaching gets the run's last validation before its last step) waits
  // for that step's row.
  void addValidation(const attach::ValidationMessage& validation);
  void clear();

  // The raw value of a cell (NaN when not measured); row and column must be valid.
  double value(int row, Column column) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 Q_SIGNALS:
  void runNameChanged(const QString& name);

 private:
  using Row = std::array<double, ColumnCount>;

  QString runName_;
  int capacity_;
  std::deque<Row> rows_;
  std::optional<attach::ValidationMessage> early_;  // for a step still to come
};

}  // namespace symtune::ui
