#pragma once
// A GraphModel drawn in a QGraphicsScene: the model's view laid out off the GUI thread (a
// LayoutRunner), clusters for its groups, the overlay's figures painted on the nodes. Changed
// figures repaint the nodes in place; only a changed view (another graph, a group collapsed or
// expanded) lays out again. Double-clicking a cluster collapses it; double-clicking a collapsed
// group expands it.
//
//   GraphModel model(GraphSide::Forward);
//   GraphScene scene(&model);
//   scene.setOverlay(Overlay::Latency);
//   view->setScene(&scene);                    // a QGraphicsView in ui/
//   model.setGraph(graph);                     // layoutFinished() when drawn

#include <QGraphicsScene>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "symtune/graphview/graph_model.h"
#include "symtune/graphview/layout_runner.h"
#include "symtune/graphview/overlay.h"

Q_DECLARE_METATYPE(symtune::NodeId)

namespace symtune::graphview {

class NodeItem;
class ClusterItem;

class GraphScene : public QGraphicsScene {
  Q_OBJECT

 public:
  explicit GraphScene(GraphModel* model, QObject* parent = nullptr);
  ~GraphScene() override;

  GraphModel* model() const { return model_; }

  void setOverlay(Overlay overlay);
  Overlay overlay() const { return overlay_; }
  // The smallest and largest figure of the overlay over the drawn nodes; none when no drawn node
  // has one. The colour scale runs from 0 to the largest.
  std::optional<std::pair<double, double>> overlayRange() const { return range_; }

  bool layingOut() const { return runner_.busy(); }
  const LaidOutView& current() const { return current_; }
  // Note [The layout of another graph]: whether what is drawn is the model's graph (false while
  // a new graph is laid out, and after its layout failed).
  bool drawsModelGraph() const { return drawnGraph_ == model_->graph(); }
  QString layoutError() const { return layoutError_; }  // the last layout's failure, if it failed

  // The item that draws `node`: its own, or its collapsed group's; null when not drawn.
  NodeItem* itemFor(NodeId node) const;
  QGraphicsItem* graphicsItemFor(NodeId node) const;  // the same, for views to scroll to
  ClusterItem* clusterFor(RegionId group) const;
  int drawnNodes() const { return static_cast<int>(items_.size()); }
  int drawnClusters() const { return static_cast<int>(clusters_.size()); }

  // Selects the item that draws `node`, expanding the groups that hide it first (the selection
  // then follows the new layout).
  void selectNode(NodeId node);
  NodeId selectedNode() const;
  // Marks the nodes the other view's selection is linked to (forward op ↔ autograd nodes).
  void setLinkedNodes(const std::vector<NodeId>& nodes);
  bool isLinked(NodeId node) const;  // drawn marked (the item that draws it is)

 Q_SIGNALS:
  void nodeSelected(symtune::NodeId node);  // none when the selection is cleared or is a group
  void layoutStarted();
  void layoutFinished(double seconds, bool cached);
  void layoutFailed(const QString& message);
  void figuresChanged();  // the overlay's figures were repainted

 private:
  void rebuild(const LaidOutView& laidOut);
  void onLayoutFailed(const QString& message);
  void refreshFigures();
  void onSelectionChanged();

  GraphModel* model_;
  LayoutRunner runner_;
  LaidOutView current_;
  std::shared_ptr<const Graph> drawnGraph_;  // the graph current_ was made from
  QString layoutError_;
  Overlay overlay_ = Overlay::None;
  std::optional<std::pair<double, double>> range_;
  std::map<std::string, NodeItem*> items_;  // by DOT name
  std::map<RegionId, ClusterItem*> clusters_;
  NodeId pendingSelection_;
  std::vector<NodeId> linked_;
  bool rebuilding_ = false;
};

}  // namespace symtune::graphview
