#include "symtune/ui/graph_panel.h"

#include <QAction>
#include <QComboBox>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QSplitter>
#include <QStackedLayout>
#include <QToolBar>
#include <QVBoxLayout>

#include "symtune/graphview/graph_model.h"
#include "symtune/graphview/graph_scene.h"
#include "symtune/graphview/scene_export.h"
#include "symtune/ui/graph_view.h"

namespace symtune::ui {

using graphview::GraphModel;
using graphview::GraphScene;
using graphview::Overlay;

namespace {

QWidget* titled(const QString& title, QWidget* content, QWidget* parent) {
  auto* box = new QWidget(parent);
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  auto* label = new QLabel(title, box);
  QFont bold = label->font();
  bold.setBold(true);
  label->setFont(bold);
  label->setContentsMargins(6, 2, 6, 0);
  layout->addWidget(label);
  layout->addWidget(content, 1);
  return box;
}

}  // namespace

GraphPanel::GraphPanel(QWidget* parent) : QWidget(parent) {
  forwardModel_ = new GraphModel(GraphSide::Forward, this);
  backwardModel_ = new GraphModel(GraphSide::Backward, this);
  forwardScene_ = new GraphScene(forwardModel_, this);
  backwardScene_ = new GraphScene(backwardModel_, this);
  forwardView_ = new GraphView(forwardScene_, this);
  backwardView_ = new GraphView(backwardScene_, this);
  forwardView_->setObjectName("forwardGraphView");
  backwardView_->setObjectName("backwardGraphView");

  auto* toolbar = new QToolBar(this);
  toolbar->setIconSize(QSize(16, 16));
  toolbar->addWidget(new QLabel(tr("Overlay "), toolbar));
  overlayBox_ = new QComboBox(toolbar);
  for (Overlay o : graphview::kOverlays)
    overlayBox_->addItem(graphview::overlayName(o), static_cast<int>(o));
  overlayBox_->setToolTip(tr("Figure painted on the nodes (live from the attached run)"));
  toolbar->addWidget(overlayBox_);
  toolbar->addSeparator();
  search_ = new QLineEdit(toolbar);
  search_->setPlaceholderText(tr("Find op, module or n12 (Ctrl+F)"));
  search_->setClearButtonEnabled(true);
  search_->setMaximumWidth(280);
  toolbar->addWidget(search_);
  searchStatus_ = new QLabel(toolbar);
  searchStatus_->setMinimumWidth(70);
  searchStatus_->setContentsMargins(6, 0, 6, 0);
  toolbar->addWidget(searchStatus_);
  QAction* fit = toolbar->addAction(tr("Fit"), this, &GraphPanel::zoomToFit);
  fit->setToolTip(tr("Zoom to fit (Ctrl+0)"));
  QAction* expand = toolbar->addAction(tr("Expand all"), this, [this] {
    const int left = forwardModel_->expandAll() + backwardModel_->expandAll();
    if (left > 0)
      Q_EMIT statusMessage(
          tr("%n group(s) left collapsed: more than %1 nodes drawn would take Graphviz minutes "
             "to lay out (double-click a group to open it)",
             nullptr, left)
              .arg(GraphModel::kMostDrawn));
  });
  expand->setToolTip(tr("Open every group, up to %1 nodes drawn").arg(GraphModel::kMostDrawn));
  toolbar->addAction(tr("Collapse"), this, [this] {
    forwardModel_->collapseToFit();
    backwardModel_->collapseToFit();
  });

  splitter_ = new QSplitter(Qt::Horizontal, this);
  splitter_->addWidget(titled(tr("Forward — TorchScript IR"), forwardView_, splitter_));
  splitter_->addWidget(titled(tr("Backward — autograd"), backwardView_, splitter_));
  splitter_->setStretchFactor(0, 3);
  splitter_->setStretchFactor(1, 2);
  emptyState_ = new QLabel(
      tr("No model graph yet.\nOpen a session (Ctrl+O), start one (Ctrl+N) or attach to a run."),
      this);
  emptyState_->setAlignment(Qt::AlignCenter);
  emptyState_->setWordWrap(true);
  emptyState_->setEnabled(false);  // the palette's disabled text colour, light or dark

  auto* stack = new QStackedLayout;
  stack->addWidget(emptyState_);
  stack->addWidget(splitter_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);
  layout->addWidget(toolbar);
  layout->addLayout(stack, 1);
  connect(forwardModel_, &GraphModel::graphChanged, this, [this, stack] {
    stack->setCurrentWidget(forwardModel_->graph() ? static_cast<QWidget*>(splitter_)
                                                   : emptyState_);
    backwardView_->parentWidget()->setVisible(backwardModel_->nodeCount() > 0);
    // Find and Export act on the view last clicked: not on a view the new graph leaves empty.
    if (lastFocused_ == backwardView_ && backwardModel_->nodeCount() == 0)
      lastFocused_ = forwardView_;
  });

  connect(overlayBox_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int index) {
    setOverlay(static_cast<Overlay>(overlayBox_->itemData(index).toInt()));
  });
  connect(search_, &QLineEdit::returnPressed, this, [this] { findNext(search_->text()); });
  connect(search_, &QLineEdit::textChanged, this, [this] {
    searchIndex_ = -1;
    searchStatus_->clear();
  });
  // Ctrl+F and Ctrl+0 are the main window's View menu actions, which call focusSearch() and
  // zoomToFit().

  // The link between the views (Note [Forward and backward]).
  connect(forwardScene_, &GraphScene::nodeSelected, this, [this](NodeId n) {
    lastFocused_ = forwardView_;
    link(forwardScene_, backwardScene_, backwardView_, n);
  });
  connect(backwardScene_, &GraphScene::nodeSelected, this, [this](NodeId n) {
    lastFocused_ = backwardView_;
    link(backwardScene_, forwardScene_, forwardView_, n);
  });
}

// The scenes are the panel's children, destroyed after this body: nothing they announce then
// may reach the panel's handlers.
GraphPanel::~GraphPanel() {
  forwardScene_->disconnect(this);
  backwardScene_->disconnect(this);
}

// Note [Forward and backward]
// SyMuGen links each forward op to the autograd nodes it created (GraphNode::backward) and each
// autograd node to its forward op (GraphNode::forward). Selecting in one view marks the linked
// nodes in the other and scrolls them into sight; the other view's own selection is left alone.
void GraphPanel::link(GraphScene* from, GraphScene* to, GraphView* toView, NodeId selected) {
  Q_UNUSED(from);
  std::vector<NodeId> linked;
  if (selected.valid() && graph() &&
      static_cast<size_t>(selected.value()) < graph()->nodes().size()) {
    const GraphNode& node = graph()->node(selected);
    if (node.side == GraphSide::Forward)
      linked = node.backward;
    else if (node.forward.valid())
      linked.push_back(node.forward);
  }
  to->setLinkedNodes(linked);
  if (!linked.empty()) {
    if (QGraphicsItem* item = to->graphicsItemFor(linked.front()))
      toView->ensureVisible(item, 40, 40);
  }
  Q_EMIT nodeSelected(selected);
}

void GraphPanel::setGraph(std::shared_ptr<const Graph> graph) {
  backwardModel_->setGraph(graph);
  forwardModel_->setGraph(std::move(graph));
  searchIndex_ = -1;
}

const std::shared_ptr<const Graph>& GraphPanel::graph() const {
  return forwardModel_->graph();
}

void GraphPanel::addNodeStats(const attach::NodesMessage& nodes) {
  forwardModel_->addNodeStats(nodes);
  backwardModel_->addNodeStats(nodes);
}

void GraphPanel::setPeakMemory(double bytes) {
  forwardModel_->setPeakMemory(bytes);
  backwardModel_->setPeakMemory(bytes);
}

void GraphPanel::setOverlay(Overlay overlay) {
  if (overlay == this->overlay())
    return;
  forwardScene_->setOverlay(overlay);
  backwardScene_->setOverlay(overlay);
  overlayBox_->setCurrentIndex(overlayBox_->findData(static_cast<int>(overlay)));
  forwardView_->viewport()->update();
  backwardView_->viewport()->update();
  Q_EMIT overlayChanged(overlay);
}

Overlay GraphPanel::overlay() const {
  return forwardScene_->overlay();
}

GraphView* GraphPanel::focusedView() const {
  return lastFocused_ != nullptr ? lastFocused_ : forwardView_;
}

void GraphPanel::selectAndCentre(GraphView* view, NodeId target) {
  GraphScene* scene = view->graphScene();
  scene->selectNode(target);  // expands the groups that hide it
  auto centre = [view, scene, target] {
    if (QGraphicsItem* item = scene->graphicsItemFor(target))
      view->centerOn(item);
  };
  if (scene->layingOut()) {
    // Once, when the layout that shows `target` lands; forgotten when it fails or the graph
    // changes, so that no later layout centres on a node of an earlier one.
    auto* once = new QObject(this);
    connect(scene, &GraphScene::layoutFinished, once, [centre, once] {
      centre();
      once->deleteLater();
    });
    connect(scene, &GraphScene::layoutFailed, once, &QObject::deleteLater);
    connect(scene->model(), &GraphModel::graphChanged, once, &QObject::deleteLater);
  } else {
    centre();
  }
}

void GraphPanel::showForwardNode(NodeId node) {
  if (!graph() || !node.valid() || node.value() >= static_cast<int32_t>(graph()->nodes().size()))
    return;
  selectAndCentre(forwardView_, node);
}

void GraphPanel::setBindings(const BindingTable* table) {
  forwardModel_->setBindings(table);
  backwardModel_->setBindings(table);
}

void GraphPanel::clearRunFigures() {
  setBindings(nullptr);
  setRemat(nullptr);
  forwardModel_->setPeakMemory(std::nullopt);
  backwardModel_->setPeakMemory(std::nullopt);
}

void GraphPanel::setRemat(const attach::RematMessage* plan) {
  forwardModel_->setRemat(plan);
  backwardModel_->setRemat(plan);
}

int GraphPanel::findNext(const QString& text) {
  GraphView* view = focusedView();
  GraphScene* scene = view->graphScene();
  const std::vector<NodeId> found = scene->model()->find(text);
  if (text != lastSearch_)
    searchIndex_ = -1;
  lastSearch_ = text;
  if (found.empty()) {
    searchStatus_->setText(text.trimmed().isEmpty() ? QString() : tr("no match"));
    return 0;
  }
  searchIndex_ = (searchIndex_ + 1) % static_cast<int>(found.size());
  const NodeId target = found[static_cast<size_t>(searchIndex_)];
  searchStatus_->setText(tr("%1 of %2").arg(searchIndex_ + 1).arg(found.size()));
  selectAndCentre(view, target);
  return static_cast<int>(found.size());
}

void GraphPanel::focusSearch() {
  search_->setFocus(Qt::ShortcutFocusReason);
  search_->selectAll();
}

void GraphPanel::zoomToFit() {
  forwardView_->zoomToFit();
  backwardView_->zoomToFit();
}

QString GraphPanel::exportTo(const QString& path) {
  GraphView* view = focusedView();
  GraphScene* scene = view->graphScene();
  // The overlay's legend goes with the colours it explains.
  const graphview::Decoration legend = [view](QPainter& painter, const QRectF& area) {
    view->paintLegend(painter, area);
  };
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix == "svg")
    return graphview::exportSvg(
        *scene, path, graph() ? QString::fromStdString(graph()->name) : QString(), legend);
  if (suffix == "png")
    return graphview::exportPng(*scene, path, 2.0, legend);
  return tr("%1: export writes .svg or .png files").arg(path);
}

}  // namespace symtune::ui
