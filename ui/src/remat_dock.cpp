#include "symtune/ui/remat_dock.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

#include "read_only_table.h"
#include "symtune/ui/remat_plan_model.h"

namespace symtune::ui {

RematDock::RematDock(QWidget* parent)
    : QWidget(parent),
      model_(new RematPlanModel(this)),
      view_(new QTableView(this)),
      summary_(new QLabel(this)),
      status_(new QLabel(this)),
      unit_(new QComboBox(this)),
      value_(new QDoubleSpinBox(this)),
      apply_(new QPushButton(tr("Apply"), this)) {
  view_->setModel(model_);
  view_->setObjectName("rematView");
  setUpReadOnlyTable(view_);
  summary_->setWordWrap(true);
  summary_->setText(tr("No memory budget: the run's session has no remat block"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  unit_->addItem(tr("MB"), static_cast<int>(Unit::Megabytes));
  unit_->addItem(tr("× plain peak"), static_cast<int>(Unit::Fraction));
  unit_->setToolTip(
      tr("A budget in megabytes (10^6 bytes), or as a share of the plain step's "
         "peak"));
  value_->setDecimals(3);
  value_->setRange(0.001, 1e7);
  value_->setValue(100);
  value_->setToolTip(tr("The step's peak above what is live when it begins"));
  apply_->setToolTip(tr("Hold the running job to this budget from its next step"));
  auto* editor = new QHBoxLayout;
  editor->addWidget(new QLabel(tr("Budget"), this));
  editor->addWidget(value_, 1);
  editor->addWidget(unit_);
  editor->addWidget(apply_);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(summary_);
  layout->addLayout(editor);
  layout->addWidget(status_);
  layout->addWidget(view_, 1);

  connect(model_, &RematPlanModel::summaryChanged, this, [this](const QString& text) {
    summary_->setText(text.isEmpty() ? tr("No memory budget: the run's session has no remat block")
                                     : text);
    // The editor shows the run's budget when that changes, unless the user is at it.
    const auto& plan = model_->plan();
    const std::pair<std::optional<double>, std::optional<double>> set =
        plan ? std::make_pair(plan->budgetMb, plan->budgetFraction)
             : std::make_pair(std::optional<double>(), std::optional<double>());
    if (set != shownBudget_ && !editedByUser_ && !value_->hasFocus() && !unit_->hasFocus()) {
      shownBudget_ = set;
      if (set.first)
        setBudget(Unit::Megabytes, *set.first);
      else if (set.second)
        setBudget(Unit::Fraction, *set.second);
      editedByUser_ = false;
    }
    updateEnabled();
  });
  connect(unit_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
    const bool fraction = budgetUnit() == Unit::Fraction;
    value_->setRange(0.001, fraction ? 1.0 : 1e7);
    value_->setSingleStep(fraction ? 0.05 : 10);
    editedByUser_ = true;
  });
  // (The spin box's line edit is protected: found as its child.)
  connect(value_->findChild<QLineEdit*>(), &QLineEdit::textEdited, this,
          [this] { editedByUser_ = true; });
  connect(apply_, &QPushButton::clicked, this, &RematDock::apply);
  connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            const NodeId node = model_->nodeAt(current.row());
            if (current.isValid() && node.valid())
              Q_EMIT unitSelected(node);
          });
  updateEnabled();
}

QString RematDock::summary() const {
  return summary_->text();
}

QString RematDock::status() const {
  return status_->text();
}

void RematDock::setBudget(Unit unit, double value) {
  unit_->setCurrentIndex(unit_->findData(static_cast<int>(unit)));
  value_->setValue(value);
}

RematDock::Unit RematDock::budgetUnit() const {
  return static_cast<Unit>(unit_->currentData().toInt());
}

double RematDock::budgetValue() const {
  return value_->value();
}

void RematDock::setRunAttached(bool attached) {
  attached_ = attached;
  if (!attached) {
    editedByUser_ = false;
    shownBudget_ = {};
  }
  updateEnabled();
}

void RematDock::updateEnabled() {
  const bool enabled = attached_ && model_->plan().has_value();
  apply_->setEnabled(enabled);
  apply_->setToolTip(enabled ? tr("Hold the running job to this budget from its next step")
                             : tr("Attach to a run whose session has a remat block"));
}

void RematDock::apply() {
  status_->setText(tr("Asking the run…"));
  Q_EMIT budgetRequested(budgetUnit(), budgetValue());
}

void RematDock::commandFinished(bool ok, const QString& message) {
  status_->setText(ok ? message : tr("Refused: %1").arg(message));
  if (ok)
    editedByUser_ = false;  // the run's budget is the editor's again
}

}  // namespace symtune::ui
