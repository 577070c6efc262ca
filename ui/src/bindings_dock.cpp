#include "symtune/ui/bindings_dock.h"

#include <QItemSelectionModel>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

#include "read_only_table.h"
#include "symtune/ui/binding_table_model.h"

namespace symtune::ui {

namespace {

// Sorts the speedup column by its number, the others by their text.
class BindingSort final : public QSortFilterProxyModel {
 public:
  using QSortFilterProxyModel::QSortFilterProxyModel;

 protected:
  bool lessThan(const QModelIndex& a, const QModelIndex& b) const override {
    if (a.column() == BindingTableModel::SpeedupColumn)
      return a.data(BindingTableModel::SpeedupRole).toDouble() <
             b.data(BindingTableModel::SpeedupRole).toDouble();
    return QSortFilterProxyModel::lessThan(a, b);
  }
};

}  // namespace

BindingsDock::BindingsDock(QWidget* parent)
    : QWidget(parent),
      model_(new BindingTableModel(this)),
      sorted_(new BindingSort(this)),
      view_(new QTableView(this)),
      summary_(new QLabel(this)) {
  sorted_->setSourceModel(model_);
  view_->setModel(sorted_);
  view_->setObjectName("bindingsView");
  view_->setSortingEnabled(true);
  setUpReadOnlyTable(view_);
  summary_->setWordWrap(true);
  summary_->setText(tr("No op sites bound yet"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(summary_);
  layout->addWidget(view_, 1);

  const auto refresh = [this] {
    const QString text = model_->summary();
    summary_->setText(text.isEmpty() ? tr("No op sites bound yet") : text);
  };
  connect(model_, &QAbstractItemModel::modelReset, this, refresh);
  connect(model_, &QAbstractItemModel::rowsInserted, this, refresh);
  connect(model_, &QAbstractItemModel::dataChanged, this, refresh);
  connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (current.isValid())
              Q_EMIT siteSelected(model_->nodeAt(sorted_->mapToSource(current).row()));
          });
}

QString BindingsDock::summary() const {
  return summary_->text();
}

}  // namespace symtune::ui
