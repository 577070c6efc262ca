#pragma once
// Graphviz `dot` layout of a DOT text, as data: the position and size of every node, the box of
// every cluster, the route of every edge and the bounding box, in points with y pointing down
// (scene coordinates). Graphviz is not thread-safe: every call takes one process-wide lock, so
// layouts may run on worker threads but never at once. graphview/ is the only place that calls
// Graphviz.

#include <QPointF>
#include <QRectF>
#include <QSizeF>
#include <QString>
#include <QVector>

#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

namespace symtune::graphview {

struct NodeBox {
  QPointF center;
  QSizeF size;
};

struct ClusterBox {
  QRectF rect;
  QPointF labelPos;  // the centre of its label, when Graphviz placed one
};

// One edge's route: a piecewise cubic Bézier (the first point, then three points per segment),
// and the tip of its arrowhead when it has one.
struct EdgeRoute {
  QString tail, head;  // node names
  QVector<QPointF> spline;
  std::optional<QPointF> arrowTip;
};

struct DotLayout {
  QRectF bounds;
  std::map<QString, NodeBox> nodes;        // by node name
  std::map<QString, ClusterBox> clusters;  // by subgraph name ("cluster_…"), nested ones included
  std::vector<EdgeRoute> edges;            // grouped by tail node
};

class LayoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Lays out `dot` (a whole `digraph { ... }`). Throws LayoutError when Graphviz rejects the text.
DotLayout layoutDot(const QString& dot);

}  // namespace symtune::graphview
