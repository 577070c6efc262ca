#pragma once
// Graphviz `dot` layout of a DOT text, as data: the position and size of every node and the
// bounding box, in points with y pointing down (scene coordinates). Graphviz is not thread-safe:
// every call takes one process-wide lock, so layouts may run on worker threads but never at once.
// graphview/ is the only place that calls Graphviz.

#include <QPointF>
#include <QRectF>
#include <QSizeF>
#include <QString>

#include <map>
#include <stdexcept>

namespace symtune::graphview {

struct NodeBox {
  QPointF center;
  QSizeF size;
};

struct DotLayout {
  QRectF bounds;
  std::map<QString, NodeBox> nodes;  // by node name
};

class LayoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Lays out `dot` (a whole `digraph { ... }`). Throws LayoutError when Graphviz rejects the text.
DotLayout layoutDot(const QString& dot);

}  // namespace symtune::graphview
