#include "symtune/ui/node_inspector.h"

#include <QHeaderView>
#include <QLabel>
#include <QStackedWidget>
#include <QTreeView>
#include <QVBoxLayout>

#include "symtune/ui/node_inspector_model.h"
#include "symtune/ui/sparkline.h"

namespace symtune::ui {

NodeInspector::NodeInspector(QWidget* parent)
    : QWidget(parent),
      model_(new NodeInspectorModel(this)),
      pages_(new QStackedWidget(this)),
      empty_(new QLabel(tr("Select a node in the graph to see its shapes, costs and live "
                           "statistics."),
                        this)),
      view_(new QTreeView(this)),
      sparkline_(new Sparkline(this)) {
  empty_->setAlignment(Qt::AlignCenter);
  empty_->setWordWrap(true);
  empty_->setForegroundRole(QPalette::PlaceholderText);
  empty_->setMargin(12);

  view_->setModel(model_);
  view_->setRootIsDecorated(false);
  view_->setUniformRowHeights(true);
  view_->setAlternatingRowColors(true);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  view_->header()->setSectionResizeMode(NodeInspectorModel::Property,
                                        QHeaderView::ResizeToContents);
  view_->header()->setStretchLastSection(true);

  sparkline_->setUnit(QStringLiteral(" ms"));
  sparkline_->setToolTip(tr("Forward + backward time per sampled step"));

  auto* details = new QWidget(this);
  auto* column = new QVBoxLayout(details);
  column->setContentsMargins(0, 0, 0, 0);
  column->addWidget(view_, 1);
  auto* caption = new QLabel(tr("Time per sampled step (forward + backward)"), details);
  caption->setForegroundRole(QPalette::PlaceholderText);
  column->addWidget(caption);
  column->addWidget(sparkline_);

  pages_->addWidget(empty_);
  pages_->addWidget(details);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(pages_);

  connect(model_, &QAbstractItemModel::modelReset, this, &NodeInspector::refresh);
  connect(model_, &QAbstractItemModel::dataChanged, this, &NodeInspector::refresh);
  refresh();
}

void NodeInspector::showNode(NodeId id) {
  model_->setNode(id);  // refreshes through modelReset
}

bool NodeInspector::isShowingEmptyState() const {
  return pages_->currentWidget() == empty_;
}

void NodeInspector::refresh() {
  const bool shown = model_->node().valid();
  pages_->setCurrentIndex(shown ? 1 : 0);
  sparkline_->setPoints(shown ? model_->history(model_->node()) : QVector<QPointF>());
}

}  // namespace symtune::ui
