#pragma once
// The Rules dock's list: the rules of the attached run (the attach protocol's `rules` message), one
// row each — name (checkable: enabled), origin, description. A check toggle does not change the
// rule: it asks the run (toggleRequested) and shows the row as pending until the run's next
// `rules` message says what it did. No widgets.
//
//   RuleListModel model;
//   model.setRules(rulesMessage.rules);  // the attach protocol's RuleState, in order
//   QObject::connect(&model, &RuleListModel::toggleRequested, ...);

#include <QAbstractTableModel>
#include <QString>

#include <vector>

#include "symtune/core/attach_messages.h"

namespace symtune::ui {

class RuleListModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { NameColumn, OriginColumn, DescriptionColumn, ColumnCount };
  enum Role {
    NameRole = Qt::UserRole + 1,  // QString
    EnabledRole,                  // bool: as the run last reported it
    PendingRole,                  // bool: a toggle was requested and the run has not answered
    OriginRole,                   // QString
    DescriptionRole,              // QString
  };

  explicit RuleListModel(QObject* parent = nullptr);

  // The run's rules, in order: updated in place when the names are the same list, otherwise
  // reset. Clears the pending mark of every rule it lists.
  void setRules(const std::vector<attach::RuleState>& rules);
  void clear();
  // Clears every pending mark: the run refused a toggle (or none is attached to answer), so the
  // rows show what is in force, as they did before it was asked.
  void clearPending();
  // Clears `name`'s pending mark only: the run refused that toggle, not the others.
  void clearPending(const QString& name);

  QString nameAt(int row) const;         // "" when out of range
  int rowOf(const QString& name) const;  // -1 when absent
  bool isPending(const QString& name) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  QHash<int, QByteArray> roleNames() const override;

 Q_SIGNALS:
  // The user checked or unchecked `name`'s box: the run should enable or disable it.
  void toggleRequested(const QString& name, bool enabled);

 private:
  bool isRow(const QModelIndex& index) const;  // a valid index of this model
  void clearPendingAt(int row);                // no-op for a row out of range or not pending

  struct Rule {
    QString name, origin, description;
    bool enabled = false;
    bool pending = false;
  };
  std::vector<Rule> rules_;
};

}  // namespace symtune::ui
