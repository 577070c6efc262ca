#include "symtune/ui/session_model.h"

#include <QStringList>

namespace symtune::ui {

struct SessionModel::Item {
  QString name, value;
  Item* parent = nullptr;
  int row = 0;
  std::vector<std::unique_ptr<Item>> children;

  Item* add(const QString& childName, const QString& childValue) {
    auto child = std::make_unique<Item>();
    child->name = childName;
    child->value = childValue;
    child->parent = this;
    child->row = static_cast<int>(children.size());
    children.push_back(std::move(child));
    return children.back().get();
  }
};

SessionModel::SessionModel(QObject* parent) : QAbstractItemModel(parent) {
}
SessionModel::~SessionModel() = default;

namespace {

QString shapeText(const std::vector<int64_t>& shape) {
  QStringList dims;
  for (auto d : shape)
    dims << QString::number(d);
  return "[" + dims.join(", ") + "]";
}

}  // namespace

void SessionModel::setSession(const Session& s) {
  beginResetModel();
  groups_.clear();
  auto group = [&](const QString& name, const QString& value = {}) {
    auto item = std::make_unique<Item>();
    item->name = name;
    item->value = value;
    item->row = static_cast<int>(groups_.size());
    groups_.push_back(std::move(item));
    return groups_.back().get();
  };
  group(tr("name"), QString::fromStdString(s.name));
  group(tr("file"), QString::fromStdString(s.path.string()));

  Item* model = group(tr("model"));
  if (s.model.isZoo()) {
    model->value = QString::fromStdString(s.model.zoo + " (" + s.model.preset + ")");
    model->add(tr("zoo"), QString::fromStdString(s.model.zoo));
    model->add(tr("preset"), QString::fromStdString(s.model.preset));
  } else {
    model->value = QString::fromStdString(s.model.file.filename().string());
    model->add(tr("file"), QString::fromStdString(s.model.file.string()));
    for (size_t i = 0; i < s.model.inputs.size(); ++i) {
      model->add(tr("input %1").arg(i), shapeText(s.model.inputs[i].shape) + " " +
                                            QString::fromLatin1(toString(s.model.inputs[i].dtype)));
    }
    model->add(tr("classes"), QString::number(s.model.classes));
  }

  Item* data = group(tr("data"));
  data->add(tr("seed"), QString::number(s.data.seed));
  data->add(tr("batch size"),
            s.data.batchSize ? QString::number(*s.data.batchSize) : tr("model default"));

  Item* opt = group(tr("optimizer"), QString::fromStdString(s.optimizer.name));
  opt->add(tr("learning rate"), QString::number(s.optimizer.lr, 'g', 6));
  opt->add(tr("weight decay"), QString::number(s.optimizer.weightDecay, 'g', 6));
  if (s.optimizer.name == "sgd")
    opt->add(tr("momentum"), QString::number(s.optimizer.momentum));

  Item* run = group(tr("run"));
  run->add(tr("steps"), QString::number(s.run.steps));
  run->add(tr("device"), QString::fromStdString(s.run.device));
  run->add(tr("threads"), s.run.threads > 0 ? QString::number(s.run.threads) : tr("default"));
  endResetModel();
}

void SessionModel::clear() {
  beginResetModel();
  groups_.clear();
  endResetModel();
}

QModelIndex SessionModel::index(int row, int column, const QModelIndex& parent) const {
  if (row < 0 || column < 0 || column >= 2 || row >= rowCount(parent))
    return {};
  if (!parent.isValid())
    return createIndex(row, column, groups_[row].get());
  auto* p = static_cast<Item*>(parent.internalPointer());
  return createIndex(row, column, p->children[row].get());
}

QModelIndex SessionModel::parent(const QModelIndex& child) const {
  if (!child.isValid())
    return {};
  auto* item = static_cast<Item*>(child.internalPointer());
  if (item->parent == nullptr)
    return {};
  return createIndex(item->parent->row, 0, item->parent);
}

int SessionModel::rowCount(const QModelIndex& parent) const {
  if (!parent.isValid())
    return static_cast<int>(groups_.size());
  if (parent.column() != 0)
    return 0;
  return static_cast<int>(static_cast<Item*>(parent.internalPointer())->children.size());
}

int SessionModel::columnCount(const QModelIndex&) const {
  return 2;
}

QVariant SessionModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || (role != Qt::DisplayRole && role != Qt::ToolTipRole))
    return {};
  auto* item = static_cast<Item*>(index.internalPointer());
  return index.column() == 0 ? item->name : item->value;
}

QVariant SessionModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return {};
  return section == 0 ? tr("Setting") : tr("Value");
}

}  // namespace symtune::ui
