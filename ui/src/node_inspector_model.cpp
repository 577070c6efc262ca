#include "symtune/ui/node_inspector_model.h"

#include <QStringList>

#include <cmath>

namespace symtune::ui {

namespace {

QString text(const std::string& s) {
  return QString::fromStdString(s);
}

QString listText(const std::vector<int64_t>& values) {
  QStringList items;
  for (int64_t v : values)
    items << QString::number(v);
  return "[" + items.join(", ") + "]";
}

// "Tensor float32 [32, 64, 56, 56]"; "int[] = [3, 3]" for a known value.
QString valueText(const ValueInfo& v) {
  QStringList parts{text(v.type)};
  if (!v.dtype.empty())
    parts << text(v.dtype);
  if (v.shape)
    parts << listText(*v.shape);
  if (v.ints)
    parts << "= " + (v.ints->size() == 1 && v.type == "int" ? QString::number(v.ints->front())
                                                            : listText(*v.ints));
  return parts.join(' ');
}

// 512 B, 1.5 KiB, 24.0 MiB, ...
QString bytesText(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double v = bytes;
  // The unit chosen after rounding to the figure shown: 1048575 B is "1.0 MiB", not "1024.0 KiB".
  while (unit < 4 && std::abs(unit == 0 ? v : std::round(v * 10) / 10) >= 1024) {
    v /= 1024;
    ++unit;
  }
  return unit == 0 ? QStringLiteral("%1 B").arg(static_cast<qint64>(v))
                   : QStringLiteral("%1 %2").arg(v, 0, 'f', 1).arg(QLatin1String(kUnits[unit]));
}

// 48 FLOP, 1.23 MFLOP, ...
QString flopsText(double flops) {
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P"};
  int prefix = 0;
  double v = flops;
  while (std::abs(v) >= 1000 && prefix < 5) {
    v /= 1000;
    ++prefix;
  }
  return prefix == 0 ? QStringLiteral("%1 FLOP").arg(v, 0, 'g', 6)
                     : QStringLiteral("%1 %2FLOP").arg(v, 0, 'f', 2).arg(kPrefixes[prefix]);
}

// A figure the runner could not measure arrives as null, read as NaN: "—", not "nan ms".
QString msText(double seconds) {
  if (!std::isfinite(seconds))
    return QStringLiteral("—");
  return QStringLiteral("%1 ms").arg(seconds * 1e3, 0, 'f', 3);
}

QString nodeRef(const Graph& g, NodeId id) {
  return QStringLiteral("#%1 %2").arg(id.value()).arg(text(g.node(id).kind));
}

}  // namespace

NodeInspectorModel::NodeInspectorModel(QObject* parent) : QAbstractTableModel(parent) {
}
NodeInspectorModel::~NodeInspectorModel() = default;

void NodeInspectorModel::setGraph(std::shared_ptr<const Graph> graph) {
  beginResetModel();
  graph_ = std::move(graph);
  stats_.clear();
  node_ = NodeId();
  rows_.clear();
  endResetModel();
}

bool NodeInspectorModel::known(NodeId id) const {
  return graph_ != nullptr && id.valid() &&
         static_cast<size_t>(id.value()) < graph_->nodes().size();
}

NodeId NodeInspectorModel::statsKey(NodeId id) const {
  if (!known(id))
    return NodeId();
  const GraphNode& n = graph_->node(id);
  return n.side == GraphSide::Backward ? n.forward : id;
}

void NodeInspectorModel::setNode(NodeId id) {
  beginResetModel();
  node_ = known(id) ? id : NodeId();
  buildRows();
  endResetModel();
}

void NodeInspectorModel::buildRows() {
  rows_.clear();
  if (!node_.valid())
    return;
  const GraphNode& n = graph_->node(node_);
  auto add = [&](const QString& property, const QString& value) {
    rows_.push_back({property, value});
  };
  const QString unknown = tr("unknown");

  add(tr("node"), QStringLiteral("#%1").arg(node_.value()));
  add(tr("kind"), text(n.kind));
  add(tr("side"), n.side == GraphSide::Forward ? tr("forward") : tr("backward"));
  // Autograd nodes have no module of their own: theirs is their forward op's. An AccumulateGrad
  // has no forward op; its path names its parameter, the module's path and the attribute.
  const GraphNode* owner = &n;
  if (n.side == GraphSide::Backward)
    owner = known(n.forward) ? &graph_->node(n.forward) : nullptr;
  if (owner == nullptr && !n.modulePath.empty()) {
    const auto dot = n.modulePath.rfind('.');
    add(tr("module path"),
        dot == std::string::npos ? tr("(root)") : text(n.modulePath.substr(0, dot)));
    add(tr("parameter"), text(n.modulePath));
  } else {
    add(tr("module path"), owner == nullptr            ? unknown
                           : owner->modulePath.empty() ? tr("(root)")
                                                       : text(owner->modulePath));
  }
  add(tr("source"), n.source.known() ? QStringLiteral("%1:%2, %3")
                                           .arg(text(n.source.file))
                                           .arg(n.source.line)
                                           .arg(text(n.source.function))
                                     : unknown);
  auto values = [&](const QString& what, const std::vector<ValueInfo>& list) {
    for (size_t i = 0; i < list.size(); ++i)
      add(QStringLiteral("%1 %2").arg(what).arg(i), valueText(list[i]));
  };
  if (n.inputs.empty() && n.outputs.empty())
    add(tr("inputs, outputs"), tr("none"));
  values(tr("input"), n.inputs);
  values(tr("output"), n.outputs);
  values(tr("saved"), n.saved);
  add(tr("op class"), n.features.opClass.empty() ? unknown : text(n.features.opClass));
  const NodeFeatures& f = n.features;
  add(tr("FLOPs"), f.flops ? flopsText(*f.flops) : unknown);
  add(tr("bytes read"), f.bytesRead ? bytesText(*f.bytesRead) : unknown);
  add(tr("bytes written"), f.bytesWritten ? bytesText(*f.bytesWritten) : unknown);
  if (f.savedBytes)
    add(tr("saved bytes"), bytesText(*f.savedBytes));
  if (f.controlDepth > 0)
    add(tr("control depth"), QString::number(f.controlDepth));
  if (n.side == GraphSide::Forward) {
    QStringList linked;
    for (NodeId b : n.backward) {
      if (known(b))
        linked << nodeRef(*graph_, b);
    }
    add(tr("backward nodes"), linked.isEmpty() ? tr("none") : linked.join(", "));
  } else {
    add(tr("forward node"), known(n.forward) ? nodeRef(*graph_, n.forward) : unknown);
  }
}

QString NodeInspectorModel::liveValue(int liveRow) const {
  const auto it = stats_.find(statsKey(node_));
  if (it == stats_.end())
    return QStringLiteral("—");
  const attach::NodeFigures& f = it->second.figures;
  auto withDevice = [](double seconds, const std::optional<double>& device) {
    return device ? tr("%1 (device %2)").arg(msText(seconds), msText(*device)) : msText(seconds);
  };
  switch (liveRow) {
    case 0:
      return tr("%1 forward, %2 backward").arg(f.calls).arg(f.backwardCalls);
    case 1:
      return withDevice(f.forwardSeconds, f.forwardDeviceSeconds);
    case 2:
      return withDevice(f.backwardSeconds, f.backwardDeviceSeconds);
    case 3: {
      QString text = tr("%1 forward, %2 backward")
                         .arg(bytesText(static_cast<double>(f.bytesAllocated)),
                              bytesText(static_cast<double>(f.backwardBytesAllocated)));
      if (f.cudaBytesAllocated && f.backwardCudaBytesAllocated) {
        text += tr(" (CUDA %1, %2)")
                    .arg(bytesText(static_cast<double>(*f.cudaBytesAllocated)),
                         bytesText(static_cast<double>(*f.backwardCudaBytesAllocated)));
      }
      return text;
    }
    case 4:
      return f.kernels ? QString::number(*f.kernels) : QStringLiteral("—");
    case 5:
      return QString::number(it->second.step);
    default:
      return {};
  }
}

const std::vector<attach::NodeKernelFigures>& NodeInspectorModel::kernelsOf(NodeId id) const {
  static const std::vector<attach::NodeKernelFigures> kNone;
  const auto it = stats_.find(statsKey(id));
  return it == stats_.end() ? kNone : it->second.figures.kernelList;
}

void NodeInspectorModel::addNodeStats(const attach::NodesMessage& message) {
  const int64_t step = message.step;
  bool shownChanged = false;
  const NodeId shownKey = statsKey(node_);
  const size_t kernelRowsBefore = node_.valid() ? kernelsOf(node_).size() : 0;
  for (const attach::NodeFigures& o : message.nodes) {
    const NodeId id(o.node);
    if (!known(id) || graph_->node(id).side != GraphSide::Forward)
      continue;  // statistics are per forward op (docs/protocol.md)
    Stats& s = stats_[id];
    s.step = step;
    s.figures = o;
    const double ms = (o.forwardSeconds + o.backwardSeconds) * 1e3;
    if (std::isfinite(ms))  // an unmeasured step leaves a gap in the sparkline, not a NaN point
      s.history.emplace_back(static_cast<double>(step), ms);
    while (s.history.size() > static_cast<size_t>(kHistoryLength))
      s.history.pop_front();
    shownChanged = shownChanged || (shownKey.valid() && id == shownKey);
  }
  if (!shownChanged)
    return;
  if (kernelsOf(node_).size() != kernelRowsBefore) {  // rows come or go: views lay out again
    beginResetModel();
    endResetModel();
    return;
  }
  const int first = static_cast<int>(rows_.size());
  Q_EMIT dataChanged(index(first, Value), index(rowCount() - 1, Value), {Qt::DisplayRole});
}

QVector<QPointF> NodeInspectorModel::history(NodeId id) const {
  const auto it = stats_.find(statsKey(id));
  if (it == stats_.end())
    return {};
  return QVector<QPointF>(it->second.history.begin(), it->second.history.end());
}

int NodeInspectorModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !node_.valid())
    return 0;
  return static_cast<int>(rows_.size() + kernelsOf(node_).size()) + kLiveRowCount;
}

int NodeInspectorModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant NodeInspectorModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
    return {};
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole)
    return {};
  const int row = index.row();
  const int graphRows = static_cast<int>(rows_.size());
  if (row < graphRows) {
    const Row& r = rows_[static_cast<size_t>(row)];
    return index.column() == Property ? r.property : r.value;
  }
  static const char* const kLiveNames[kLiveRowCount] = {
      QT_TR_NOOP("calls"),     QT_TR_NOOP("forward time"), QT_TR_NOOP("backward time"),
      QT_TR_NOOP("allocated"), QT_TR_NOOP("GPU kernels"),  QT_TR_NOOP("last step")};
  const int liveRow = row - graphRows;
  if (liveRow < kLiveRowCount)
    return index.column() == Property ? tr(kLiveNames[liveRow]) : liveValue(liveRow);
  const auto& kernels = kernelsOf(node_);
  const size_t k = static_cast<size_t>(liveRow - kLiveRowCount);
  if (k >= kernels.size())
    return {};
  if (index.column() == Property)
    return tr("kernel %1").arg(k + 1);
  // "2× 0.310 ms backward: void at::native::elementwise_kernel<...>(...)"; the tooltip has it all.
  const attach::NodeKernelFigures& kf = kernels[k];
  const QString text = tr("%1× %2 %3: %4")
                           .arg(kf.calls)
                           .arg(msText(kf.seconds), kf.backward ? tr("backward") : tr("forward"),
                                QString::fromStdString(kf.name));
  return role == Qt::ToolTipRole ? text : text.left(160);
}

QVariant NodeInspectorModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
    return QAbstractTableModel::headerData(section, orientation, role);
  switch (section) {
    case Property:
      return tr("Property");
    case Value:
      return tr("Value");
    default:
      return {};
  }
}

}  // namespace symtune::ui
