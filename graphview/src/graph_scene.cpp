#include "symtune/graphview/graph_scene.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "graph_items.h"

namespace symtune::graphview {

GraphScene::GraphScene(GraphModel* model, QObject* parent) : QGraphicsScene(parent), model_(model) {
  setItemIndexMethod(QGraphicsScene::BspTreeIndex);
  connect(model_, &GraphModel::viewChanged, this, [this] {
    if (model_->graph()) {
      runner_.request(model_->view());
    } else {
      runner_.cancel();  // the earlier graph's layout, still running, is not drawn when it ends
      rebuild({});
    }
  });
  // A selection waiting for a layout of the earlier graph names a node of that graph; so do the
  // outlines of the nodes linked to a selection in the other view.
  connect(model_, &GraphModel::graphChanged, this, [this] {
    pendingSelection_ = {};
    linked_.clear();
  });
  connect(model_, &GraphModel::valuesChanged, this, &GraphScene::refreshFigures);
  connect(&runner_, &LayoutRunner::started, this, &GraphScene::layoutStarted);
  connect(&runner_, &LayoutRunner::laidOut, this, &GraphScene::rebuild);
  connect(&runner_, &LayoutRunner::failed, this, &GraphScene::onLayoutFailed);
  connect(this, &QGraphicsScene::selectionChanged, this, &GraphScene::onSelectionChanged);
  if (model_->graph())
    runner_.request(model_->view());
}

// QGraphicsScene's destructor clears the scene, which would announce the selection's end to
// whoever follows it (the other view of a panel being destroyed, by then gone) from an object no
// longer a GraphScene.
GraphScene::~GraphScene() {
  blockSignals(true);
}

// Note [The layout of another graph]
// A new graph is laid out off the GUI thread, and until its layout arrives the scene still draws
// the previous graph's: items that name the previous graph's node ids. Those ids mean nothing in
// the new graph (or another node, or one past its end), so while the two differ the scene paints
// no figures, selects nothing and links nothing; when the new layout fails, it draws nothing.
void GraphScene::rebuild(const LaidOutView& laidOut) {
  const NodeId selected = pendingSelection_.valid() ? pendingSelection_ : selectedNode();
  pendingSelection_ = {};
  rebuilding_ = true;
  clear();
  items_.clear();
  clusters_.clear();
  current_ = laidOut;
  drawnGraph_ = model_->graph();
  layoutError_.clear();
  if (laidOut.view && laidOut.layout) {
    const ViewDot& view = *laidOut.view;
    const DotLayout& layout = *laidOut.layout;
    // A cluster above the clusters it is nested in: items of one z stack in the order they were
    // added, and the clusters come by name (cluster_r10 before cluster_r2), so a parent added
    // after its child covered it and took the double-click meant for it. Below the edges (z 1).
    const auto depth = [this](RegionId r) {
      int d = 0;
      for (RegionId p = drawnGraph_->region(r).parent; p.valid(); p = drawnGraph_->region(p).parent)
        ++d;
      return d;
    };
    for (const auto& [name, cluster] : view.clusters) {
      auto box = layout.clusters.find(QString::fromStdString(name));
      if (box == layout.clusters.end())
        continue;
      auto* item = new ClusterItem(cluster, box->second);
      if (drawnGraph_)
        item->setZValue(std::min(depth(cluster.region), 999) * 1e-3);
      addItem(item);
      clusters_.emplace(cluster.region, item);
    }
    for (const auto& route : layout.edges)
      addItem(new EdgeItem(route));
    for (const auto& [name, entry] : view.entries) {
      auto box = layout.nodes.find(QString::fromStdString(name));
      if (box == layout.nodes.end())
        continue;
      auto* item = new NodeItem(name, entry, box->second);
      addItem(item);
      items_.emplace(name, item);
    }
    setSceneRect(layout.bounds.adjusted(-20, -20, 20, 20));
  } else {
    setSceneRect(QRectF(0, 0, 0, 0));  // nothing drawn: nothing to fit, nothing to export
  }
  refreshFigures();
  setLinkedNodes(linked_);
  rebuilding_ = false;
  if (NodeItem* item = itemFor(selected))
    item->setSelected(true);
  // Only for a layout drawn: a failed one's clearing said "finished" before "failed", and what
  // waits for a layout (a view's fit, a search's centring) took it for one.
  if (laidOut.layout)
    Q_EMIT layoutFinished(laidOut.seconds, laidOut.cached);
}

void GraphScene::onLayoutFailed(const QString& message) {
  pendingSelection_ = {};  // its node was to be shown by the layout that failed
  if (!drawsModelGraph())
    rebuild({});  // Note [The layout of another graph]
  layoutError_ = message;
  Q_EMIT layoutFailed(message);
}

void GraphScene::setOverlay(Overlay overlay) {
  if (overlay_ == overlay)
    return;
  overlay_ = overlay;
  refreshFigures();
}

// One pass over the side's nodes: each node's figure goes to the item that draws it (a group
// sums its nodes', gradient norms take the largest), then every item gets its place on the scale.
void GraphScene::refreshFigures() {
  range_.reset();
  std::unordered_map<NodeItem*, double> figures;
  if (overlay_ != Overlay::None && current_.view && drawsModelGraph()) {
    for (const auto& [node, name] : current_.view->shownAs) {
      auto v = model_->value(overlay_, node);
      auto item = items_.find(name);
      // A figure a peer sent as null (NaN) or infinite has no place on the scale.
      if (!v || !std::isfinite(*v) || item == items_.end())
        continue;
      auto [slot, fresh] = figures.emplace(item->second, *v);
      if (!fresh)
        slot->second = takesLargest(overlay_) ? std::max(slot->second, *v) : slot->second + *v;
    }
    for (const auto& [item, v] : figures) {
      if (!range_)
        range_ = std::make_pair(v, v);
      range_->first = std::min(range_->first, v);
      range_->second = std::max(range_->second, v);
    }
  }
  const double top = range_ && range_->second > 0 ? range_->second : 1.0;
  for (const auto& [name, item] : items_) {
    auto it = figures.find(item);
    if (it == figures.end())
      item->setFigure(std::nullopt, QString());
    else
      item->setFigure(it->second / top, formatValue(overlay_, it->second, model_->peakMemory()));
  }
  Q_EMIT figuresChanged();
}

NodeItem* GraphScene::itemFor(NodeId node) const {
  if (!node.valid() || !current_.view || !drawsModelGraph())
    return nullptr;
  auto name = current_.view->shownAs.find(node);
  if (name == current_.view->shownAs.end())
    return nullptr;
  auto item = items_.find(name->second);
  return item != items_.end() ? item->second : nullptr;
}

QGraphicsItem* GraphScene::graphicsItemFor(NodeId node) const {
  return itemFor(node);
}

ClusterItem* GraphScene::clusterFor(RegionId group) const {
  auto it = clusters_.find(group);
  return it != clusters_.end() ? it->second : nullptr;
}

void GraphScene::selectNode(NodeId node) {
  if (model_->reveal(node)) {
    pendingSelection_ = node;  // selected when the new layout is drawn
    return;
  }
  if (NodeItem* item = itemFor(node)) {
    clearSelection();
    item->setSelected(true);
  }
}

NodeId GraphScene::selectedNode() const {
  if (!drawsModelGraph())
    return {};  // Note [The layout of another graph]
  for (QGraphicsItem* item : selectedItems()) {
    if (auto* node = dynamic_cast<NodeItem*>(item))
      return node->entry().node;
  }
  return {};
}

void GraphScene::setLinkedNodes(const std::vector<NodeId>& nodes) {
  linked_ = nodes;
  for (const auto& [name, item] : items_)
    item->setLinked(false);
  for (NodeId n : linked_) {
    if (NodeItem* item = itemFor(n))
      item->setLinked(true);
  }
}

bool GraphScene::isLinked(NodeId node) const {
  const NodeItem* item = itemFor(node);
  return item != nullptr && item->linked();
}

void GraphScene::onSelectionChanged() {
  if (!rebuilding_)
    Q_EMIT nodeSelected(selectedNode());
}

}  // namespace symtune::graphview
