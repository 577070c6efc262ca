#pragma once
// The items a GraphScene draws: nodes (a graph node or a collapsed group), clusters (control-flow
// regions and modules) and edges. Private to graphview/.

#include <QColor>
#include <QGraphicsItem>
#include <QGraphicsPathItem>
#include <QPainterPath>
#include <QString>

#include <optional>

#include "symtune/graphview/dot_layout.h"
#include "symtune/graphview/view_dot.h"

namespace symtune::graphview {

class GraphScene;

// Note [Level of detail]
// Items check how large they are on screen (QStyleOptionGraphicsItem::levelOfDetailFromTransform)
// and draw less when small: below 0.35 a node is a filled box with no text and an edge has no
// arrowhead. A 2,000-node graph zoomed to fit then costs one rectangle per node per frame; text,
// the expensive part, is drawn only for what is large enough to read.
inline constexpr double kTextDetail = 0.35;

class NodeItem : public QGraphicsItem {
 public:
  NodeItem(const std::string& name, const ViewEntry& entry, const NodeBox& box);

  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;
  QPainterPath shape() const override;

  const QString& name() const { return name_; }
  const ViewEntry& entry() const { return entry_; }
  bool isGroup() const { return entry_.group.valid(); }

  // The overlay: a value's text and its place on the scale (0..1); none: not measured.
  void setFigure(std::optional<double> scaled, const QString& text);
  const QString& figureText() const { return figureText_; }
  std::optional<double> scaledFigure() const { return scaled_; }
  void setLinked(bool linked);  // drawn with the link colour: the other view's selection
  bool linked() const { return linked_; }

 protected:
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) override;

 private:
  QString name_, label_, detail_;
  ViewEntry entry_;
  QRectF rect_;
  std::optional<double> scaled_;
  QString figureText_;
  bool linked_ = false;
};

class ClusterItem : public QGraphicsItem {
 public:
  ClusterItem(const ViewCluster& cluster, const ClusterBox& box);
  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;
  const ViewCluster& cluster() const { return cluster_; }

 protected:
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* event) override;

 private:
  ViewCluster cluster_;
  QRectF rect_;
  QPointF labelPos_;
  QString label_;
};

class EdgeItem : public QGraphicsItem {
 public:
  explicit EdgeItem(const EdgeRoute& route);
  QRectF boundingRect() const override;
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget* widget) override;

 private:
  QPainterPath path_;
  QPolygonF arrow_;
  QRectF bounds_;
};

}  // namespace symtune::graphview
