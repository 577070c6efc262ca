#pragma once
// The data behind one graph view, with no graphics: the graph, the side shown (forward ops or
// autograd nodes), which groups are collapsed, and the live figures painted on the nodes. Scenes
// draw it; tests drive it without a window.
//
//   GraphModel model(GraphSide::Forward);
//   model.setGraph(std::make_shared<Graph>(graphFromJson(json)));  // opens collapsed to fit
//   model.setCollapsed(loop, false);        // viewChanged(): lay out again
//   model.addNodeStats(nodesMessage);       // valuesChanged(): repaint only

#include <QObject>
#include <QString>

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "symtune/core/attach_messages.h"
#include "symtune/core/graph.h"
#include "symtune/graphview/overlay.h"
#include "symtune/graphview/view_dot.h"

namespace symtune::graphview {

class GraphModel : public QObject {
  Q_OBJECT

 public:
  // A graph opens with groups collapsed until at most this many nodes are drawn.
  static constexpr int kOpenDrawn = 300;
  // "Expand all" draws at most this many: Graphviz's layout of thousands of nodes takes minutes
  // (Note [Fast layout]), and nothing else is laid out meanwhile.
  static constexpr int kMostDrawn = 2000;

  explicit GraphModel(GraphSide side, QObject* parent = nullptr);
  ~GraphModel() override;

  void setGraph(std::shared_ptr<const Graph> graph);
  void clear();
  const std::shared_ptr<const Graph>& graph() const { return graph_; }
  GraphSide side() const { return options_.side; }
  // Nodes of this side in the graph.
  int nodeCount() const { return static_cast<int>(members_.size()); }

  // What is drawn.
  const ViewOptions& viewOptions() const { return options_; }
  ViewDot view() const;
  bool isCollapsed(RegionId group) const { return options_.collapsed.count(group) != 0; }
  void setCollapsed(RegionId group, bool collapsed);
  void toggleCollapsed(RegionId group) { setCollapsed(group, !isCollapsed(group)); }
  // Opens every group, or as many as keep at most `maxDrawn` nodes drawn: the number of groups
  // left collapsed.
  int expandAll(int maxDrawn = kMostDrawn);
  void collapseToFit(int maxDrawn = kOpenDrawn);
  // Expands the groups that hide `node`; false when nothing had to change.
  bool reveal(NodeId node);
  // The groups (outermost first) that hold `node` in this view.
  std::vector<RegionId> groupsOf(NodeId node) const;

  // Live figures, from the run's `nodes` messages (docs/protocol.md). Only repaints follow.
  void addNodeStats(const attach::NodesMessage& nodes);
  void setPeakMemory(std::optional<double> bytes);
  std::optional<double> peakMemory() const { return peakBytes_; }
  int64_t statsStep() const { return statsStep_; }
  // DynaCompiler's binding table (the `bindings` message; null clears): each site's speedup for
  // the Binding overlay. Only repaints follow.
  void setBindings(const BindingTable* table);
  // The memory budget's plan (the `remat` message; null clears), for the Remat overlay.
  void setRemat(const attach::RematMessage* plan);
  // A node's figure for `overlay`, or none when the run has not measured it.
  std::optional<double> value(Overlay overlay, NodeId node) const;
  // A collapsed group's: the sum over its nodes (latency, memory, FLOPs), the largest (gradient
  // norm).
  std::optional<double> groupValue(Overlay overlay, RegionId group) const;

  // Nodes of this side whose op kind, module path or name ("n12") contains `text`
  // (case-insensitive), in graph order.
  std::vector<NodeId> find(const QString& text) const;

 Q_SIGNALS:
  void graphChanged();   // a new graph (or none)
  void viewChanged();    // what is drawn changed: lay out again
  void valuesChanged();  // only figures changed: repaint

 private:
  struct Figures {
    double seconds = 0, bytes = 0;
    std::optional<double> deviceSeconds, kernels;  // CUDA runs; kernels with GPU activity
  };
  std::shared_ptr<const Graph> graph_;
  ViewOptions options_;
  std::unordered_map<NodeId, std::vector<RegionId>> members_;  // node → its groups, outermost first
  std::unordered_map<NodeId, Figures> figures_;
  std::unordered_map<std::string, double> squaredNormByModule_, squaredNormByParameter_;
  std::optional<double> peakBytes_;
  int64_t statsStep_ = -1;
  std::unordered_map<NodeId, double> bindingSpeedup_;  // forward site → speedup over aten
  std::unordered_map<NodeId, double> rematState_;      // forward node → 1 recomputed, 0 kept
};

}  // namespace symtune::graphview
