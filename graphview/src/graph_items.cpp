#include "graph_items.h"

#include <QFontMetricsF>
#include <QGraphicsScene>
#include <QPainter>
#include <QPalette>
#include <QStyleOptionGraphicsItem>

#include <cmath>

#include "symtune/graphview/graph_model.h"
#include "symtune/graphview/graph_scene.h"

namespace symtune::graphview {

namespace {

QPalette paletteOf(const QGraphicsItem* item) {
  return item->scene() != nullptr ? item->scene()->palette() : QPalette();
}

QFont labelFont(int pointSize, bool bold = false) {
  QFont font(QStringLiteral("Helvetica"));
  font.setPixelSize(pointSize);  // scene units are points; Graphviz sized the boxes for 10 pt
  font.setBold(bold);
  return font;
}

// Text that fits its box: elided in the middle when wider (module paths, long op kinds).
void drawFitted(QPainter* painter, const QRectF& box, int flags, const QString& text) {
  const QFontMetricsF metrics(painter->font());
  painter->drawText(box, flags, metrics.elidedText(text, Qt::ElideMiddle, box.width()));
}

// The model an item's double-click changes: none while the scene still draws an earlier graph,
// whose group ids mean other groups, or none, in the model's (Note [The layout of another graph]).
GraphModel* modelOf(const QGraphicsItem* item) {
  auto* scene = qobject_cast<GraphScene*>(item->scene());
  return scene != nullptr && scene->drawsModelGraph() ? scene->model() : nullptr;
}

double detailOf(const QStyleOptionGraphicsItem* option, const QPainter* painter) {
  return option->levelOfDetailFromTransform(painter->worldTransform());
}

}  // namespace

NodeItem::NodeItem(const std::string& name, const ViewEntry& entry, const NodeBox& box)
    : name_(QString::fromStdString(name)),
      label_(QString::fromStdString(entry.label)),
      detail_(QString::fromStdString(entry.detail)),
      entry_(entry),
      rect_(-box.size.width() / 2, -box.size.height() / 2, box.size.width(), box.size.height()) {
  setPos(box.center);
  setFlag(ItemIsSelectable);
  setZValue(2);
  setToolTip(label_ + (detail_.isEmpty() ? QString() : QStringLiteral("\n") + detail_));
}

QRectF NodeItem::boundingRect() const {
  return rect_.adjusted(-2, -2, 2, 2);
}

QPainterPath NodeItem::shape() const {
  QPainterPath path;
  path.addRect(rect_);
  return path;
}

void NodeItem::setFigure(std::optional<double> scaled, const QString& text) {
  if (scaled == scaled_ && text == figureText_)
    return;
  scaled_ = scaled;
  figureText_ = text;
  setToolTip(label_ + QStringLiteral("\n") + (text.isEmpty() ? detail_ : text));
  update();
}

void NodeItem::setLinked(bool linked) {
  if (linked_ != linked) {
    linked_ = linked;
    update();
  }
}

void NodeItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const QPalette palette = paletteOf(this);
  const bool measured = scaled_.has_value();
  const QColor fill = measured ? heatColor(*scaled_) : palette.color(QPalette::Base);
  QColor border = palette.color(QPalette::Mid);
  qreal width = 1.0;
  if (isSelected()) {
    border = palette.color(QPalette::Highlight);
    width = 3.0;
  } else if (linked_) {
    border = palette.color(QPalette::Link);
    width = 3.0;
  }
  if (detailOf(option, painter) < kTextDetail) {  // Note [Level of detail]
    painter->fillRect(rect_, isSelected() || linked_ ? border : fill);
    return;
  }
  painter->setPen(QPen(border, width, isGroup() ? Qt::DashLine : Qt::SolidLine));
  painter->setBrush(fill);
  painter->drawRoundedRect(rect_, 3, 3);
  // Heat colours are light: text on them is dark whatever the palette.
  painter->setPen(measured ? QColor(20, 20, 20) : palette.color(QPalette::Text));
  const QString second = figureText_.isEmpty() ? detail_ : figureText_;
  const QRectF inner = rect_.adjusted(4, 2, -4, -2);
  if (second.isEmpty()) {
    painter->setFont(labelFont(10, isGroup()));
    drawFitted(painter, inner, Qt::AlignCenter, label_);
    return;
  }
  const QRectF top(inner.left(), inner.top(), inner.width(), inner.height() / 2);
  const QRectF bottom(inner.left(), inner.center().y(), inner.width(), inner.height() / 2);
  painter->setFont(labelFont(10, isGroup()));
  drawFitted(painter, top, Qt::AlignHCenter | Qt::AlignBottom, label_);
  painter->setFont(labelFont(8));
  drawFitted(painter, bottom, Qt::AlignHCenter | Qt::AlignTop, second);
}

void NodeItem::mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) {
  if (isGroup()) {
    if (GraphModel* model = modelOf(this))
      model->setCollapsed(entry_.group, false);  // lays out again; this item is replaced
    return;
  }
  QGraphicsItem::mouseDoubleClickEvent(event);
}

ClusterItem::ClusterItem(const ViewCluster& cluster, const ClusterBox& box)
    : cluster_(cluster),
      rect_(box.rect),
      labelPos_(box.labelPos),
      label_(QString::fromStdString(cluster.label)) {
  setZValue(0);
  setToolTip(QObject::tr("%1 — double-click to collapse").arg(label_));
}

QRectF ClusterItem::boundingRect() const {
  return rect_.adjusted(-1, -1, 1, 1);
}

void ClusterItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  const QPalette palette = paletteOf(this);
  QColor fill = palette.color(QPalette::AlternateBase);
  QColor border = palette.color(QPalette::Mid);
  if (cluster_.dimmed) {  // a branch that did not run: faint and dashed
    fill.setAlphaF(0.35f);
    border.setAlphaF(0.6f);
  }
  painter->setPen(QPen(border, 1.0, cluster_.dimmed ? Qt::DashLine : Qt::SolidLine));
  painter->setBrush(fill);
  painter->drawRoundedRect(rect_, 4, 4);
  if (detailOf(option, painter) < kTextDetail)
    return;
  QColor text = palette.color(QPalette::Text);
  if (cluster_.dimmed)
    text = palette.color(QPalette::PlaceholderText);
  painter->setPen(text);
  painter->setFont(labelFont(10, true));
  const QRectF labelBox(rect_.left() + 4, rect_.top() + 2, rect_.width() - 8, 16);
  painter->drawText(labelBox, Qt::AlignHCenter | Qt::AlignTop, label_);
}

void ClusterItem::mouseDoubleClickEvent(QGraphicsSceneMouseEvent*) {
  if (GraphModel* model = modelOf(this))
    model->setCollapsed(cluster_.region, true);
}

EdgeItem::EdgeItem(const EdgeRoute& route) {
  setZValue(1);
  const auto& p = route.spline;
  if (!p.isEmpty()) {
    path_.moveTo(p[0]);
    for (int i = 1; i + 2 < p.size(); i += 3)
      path_.cubicTo(p[i], p[i + 1], p[i + 2]);
  }
  if (route.arrowTip && !p.isEmpty()) {
    const QPointF tip = *route.arrowTip;
    const QPointF from = p.back();
    const double length = std::hypot(tip.x() - from.x(), tip.y() - from.y());
    if (length > 0) {
      const QPointF along = (tip - from) / length, across(-along.y(), along.x());
      arrow_ << tip << from + across * (length * 0.45) << from - across * (length * 0.45);
    }
  }
  bounds_ = path_.boundingRect().united(arrow_.boundingRect()).adjusted(-2, -2, 2, 2);
}

QRectF EdgeItem::boundingRect() const {
  return bounds_;
}

void EdgeItem::paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) {
  QColor colour = paletteOf(this).color(QPalette::WindowText);
  colour.setAlphaF(0.55f);
  QPen pen(colour, 1.0);
  pen.setCosmetic(true);
  painter->setPen(pen);
  painter->setBrush(Qt::NoBrush);
  painter->drawPath(path_);
  if (!arrow_.isEmpty() && detailOf(option, painter) >= kTextDetail) {
    painter->setBrush(colour);
    painter->drawPolygon(arrow_);
  }
}

}  // namespace symtune::graphview
