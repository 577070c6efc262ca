#pragma once
// The node inspector's model: one graph node as a two-column table (property, value) — what the
// graph knows of it (kind, module path, source line, shapes, costs, linked nodes), then its live
// statistics from the run's `nodes` messages (docs/protocol.md), then, on a CUDA run traced with
// CUPTI, the kernels it launched ("kernel 1", "kernel 2", ..., most time first). No widgets.
//
// Per-node statistics are measured per forward op: a backward node shows those of the forward op
// that created it (its `forward` link), like the runner attributes autograd time.

#include <QAbstractTableModel>
#include <QPointF>
#include <QVector>

#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "symtune/core/attach_messages.h"
#include "symtune/core/graph.h"
#include "symtune/core/ids.h"

namespace symtune::ui {

class NodeInspectorModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Property, Value, ColumnCount };

  // Samples of forward + backward time kept per node.
  static constexpr int kHistoryLength = 200;
  // Rows of live statistics after the graph's rows, in this order: calls, forward time, backward
  // time, allocated, GPU kernels, last step. The node's kernel rows follow them.
  static constexpr int kLiveRowCount = 6;

  explicit NodeInspectorModel(QObject* parent = nullptr);
  ~NodeInspectorModel() override;

  // A new graph: forgets the statistics (node ids belong to their graph) and shows no node.
  void setGraph(std::shared_ptr<const Graph> graph);
  const Graph* graph() const { return graph_.get(); }

  // Shows a node; an invalid id, or one the graph does not have, shows nothing (no rows).
  void setNode(NodeId id);
  NodeId node() const { return node_; }

  // A `nodes` message (docs/protocol.md). Entries naming no forward node of the graph are
  // ignored.
  void addNodeStats(const attach::NodesMessage& nodes);

  // A node's forward + backward time per sampled step: x = step, y = milliseconds, oldest first,
  // at most kHistoryLength samples. A backward node has its forward op's history.
  QVector<QPointF> history(NodeId id) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  struct Stats {
    int64_t step = -1;
    attach::NodeFigures figures;  // of that step
    std::deque<QPointF> history;
  };
  struct Row {
    QString property, value;
  };

  bool known(NodeId id) const;
  NodeId statsKey(NodeId id) const;  // the forward op whose statistics a node shows
  void buildRows();
  QString liveValue(int liveRow) const;
  // The kernels of the statistics a node shows (empty without GPU activity).
  const std::vector<attach::NodeKernelFigures>& kernelsOf(NodeId id) const;

  std::shared_ptr<const Graph> graph_;
  NodeId node_;
  std::vector<Row> rows_;  // the graph's rows of node_; the live rows follow them
  std::unordered_map<NodeId, Stats> stats_;
};

}  // namespace symtune::ui
