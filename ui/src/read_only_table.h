#pragma once
// The docks' read-only tables (Bindings, Memory budget): one row selected at a time, no editing,
// no row numbers, columns sized to their contents with the last one stretched.

#include <QHeaderView>
#include <QTableView>

namespace symtune::ui {

inline void setUpReadOnlyTable(QTableView* view) {
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setSelectionMode(QAbstractItemView::SingleSelection);
  view->setEditTriggers(QAbstractItemView::NoEditTriggers);
  view->verticalHeader()->hide();
  view->horizontalHeader()->setStretchLastSection(true);
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
}

}  // namespace symtune::ui
