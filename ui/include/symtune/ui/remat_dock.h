#pragma once
// The Memory budget dock: the rematerializer's plan on the attached run (RematPlanModel) — a
// summary line (the budget, the last step's predicted and measured peak), the units kept and
// recomputed — and the budget, which the user can change on the running job: "Apply" asks for
// it (budgetRequested), the run answers (commandFinished). Selecting a unit asks for its first
// node to be shown (unitSelected).

#include <QWidget>

#include <optional>
#include <utility>

#include "symtune/core/ids.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QTableView;

namespace symtune::ui {

class RematPlanModel;

class RematDock : public QWidget {
  Q_OBJECT

 public:
  enum class Unit { Megabytes, Fraction };
  Q_ENUM(Unit)

  explicit RematDock(QWidget* parent = nullptr);

  RematPlanModel* model() const { return model_; }
  QTableView* view() const { return view_; }
  QString summary() const;
  QString status() const;  // the last command's outcome

  // The budget editor: its unit and value.
  void setBudget(Unit unit, double value);
  Unit budgetUnit() const;
  double budgetValue() const;
  // Apply is enabled while a run that holds a budget is attached.
  void setRunAttached(bool attached);
  // The run's answer to the last request.
  void commandFinished(bool ok, const QString& message);
  // Asks for the editor's budget (what Apply does).
  void apply();

 Q_SIGNALS:
  void budgetRequested(symtune::ui::RematDock::Unit unit, double value);
  void unitSelected(symtune::NodeId node);

 private:
  void updateEnabled();

  RematPlanModel* model_;
  QTableView* view_;
  QLabel* summary_;
  QLabel* status_;
  QComboBox* unit_;
  QDoubleSpinBox* value_;
  QPushButton* apply_;
  bool attached_ = false;
  bool editedByUser_ = false;  // the editor keeps the user's value over the run's
  // The run's budget as set (megabytes, fraction) the editor last showed.
  std::pair<std::optional<double>, std::optional<double>> shownBudget_;
};

}  // namespace symtune::ui
