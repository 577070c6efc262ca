#pragma once
// The Session dock's model: a session's settings as a two-column tree (setting, value), grouped
// like the file (model, data, optimizer, run). Built from symtune::Session; no widgets.

#include <QAbstractItemModel>

#include <memory>
#include <vector>

#include "symtune/core/session.h"

namespace symtune::ui {

class SessionModel : public QAbstractItemModel {
  Q_OBJECT

 public:
  explicit SessionModel(QObject* parent = nullptr);
  ~SessionModel() override;

  void setSession(const Session& session);
  void clear();

  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  struct Item;
  std::vector<std::unique_ptr<Item>> groups_;
};

}  // namespace symtune::ui
