#include "symtune/graphview/dot_layout.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <QMutex>
#include <QMutexLocker>
#include <QStringList>

#include <memory>

namespace symtune::graphview {

namespace {

// Note [Graphviz lock]
// libgvc and libcgraph keep global state (the error handler, the layout engine's statics), so
// every use of them in the process goes through this one mutex.
QMutex& graphvizMutex() {
  static QMutex mutex;
  return mutex;
}

GVC_t* context() {
  static GVC_t* gvc = gvContext();  // lives for the process; plugins load once
  return gvc;
}

double attrNumber(void* obj, const char* name) {
  const char* v = agget(obj, const_cast<char*>(name));
  return v != nullptr ? QString::fromLatin1(v).toDouble() : 0.0;
}

}  // namespace

DotLayout layoutDot(const QString& dot) {
  const QByteArray text = dot.toUtf8();
  QMutexLocker lock(&graphvizMutex());
  GVC_t* gvc = context();
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> graph(agmemread(text.constData()), agclose);
  if (!graph) {
    throw LayoutError("Graphviz could not parse the DOT text");
  }
  if (gvLayout(gvc, graph.get(), "dot") != 0) {
    throw LayoutError("Graphviz dot layout failed");
  }
  // Attach the computed positions as attributes (pos, width, height, bb), then read them back.
  gvRender(gvc, graph.get(), "dot", nullptr);

  DotLayout layout;
  const QStringList bb =
      QString::fromLatin1(agget(graph.get(), const_cast<char*>("bb"))).split(',');
  const double top = bb.size() == 4 ? bb[3].toDouble() : 0.0;
  if (bb.size() == 4) {
    layout.bounds =
        QRectF(bb[0].toDouble(), 0, bb[2].toDouble() - bb[0].toDouble(), top - bb[1].toDouble());
  }
  for (Agnode_t* n = agfstnode(graph.get()); n != nullptr; n = agnxtnode(graph.get(), n)) {
    const QStringList pos = QString::fromLatin1(agget(n, const_cast<char*>("pos"))).split(',');
    NodeBox box;
    if (pos.size() == 2) {
      box.center = QPointF(pos[0].toDouble(), top - pos[1].toDouble());  // y down
    }
    box.size = QSizeF(attrNumber(n, "width") * 72.0, attrNumber(n, "height") * 72.0);  // inches
    layout.nodes.emplace(QString::fromUtf8(agnameof(n)), box);
  }
  gvFreeLayout(gvc, graph.get());
  return layout;
}

}  // namespace symtune::graphview
