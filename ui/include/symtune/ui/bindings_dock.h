#pragma once
// The Bindings dock: DynaCompiler's binding table of the attached run (BindingTableModel) as a
// sortable table with a one-line summary; selecting a row asks for its site's node to be shown
// (siteSelected), and the tooltip of a row lists every candidate's times.

#include <QWidget>

#include "symtune/core/ids.h"

class QLabel;
class QSortFilterProxyModel;
class QTableView;

namespace symtune::ui {

class BindingTableModel;

class BindingsDock : public QWidget {
  Q_OBJECT

 public:
  explicit BindingsDock(QWidget* parent = nullptr);

  BindingTableModel* model() const { return model_; }
  QTableView* view() const { return view_; }
  QString summary() const;

 Q_SIGNALS:
  void siteSelected(symtune::NodeId node);

 private:
  BindingTableModel* model_;
  QSortFilterProxyModel* sorted_;
  QTableView* view_;
  QLabel* summary_;
};

}  // namespace symtune::ui
