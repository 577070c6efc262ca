#include "symtune/graphview/dot_layout.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#include <graphviz/types.h>

#include <QMutex>
#include <QMutexLocker>

#include <cstdio>
#include <functional>
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

// What Graphviz says while the lock is held: its errors name the line of the DOT text, the
// layout's failure only that it failed. Also written to standard error, as Graphviz would.
QString& graphvizMessages() {
  static QString messages;
  return messages;
}

int onGraphvizMessage(char* text) {
  graphvizMessages() += QString::fromUtf8(text);
  std::fputs(text, stderr);
  return 0;
}

// "Graphviz could not parse the DOT text: Error: <stdin>: syntax error in line 1 near '->'"
LayoutError failure(const char* what) {
  const QString said = graphvizMessages().simplified();
  return LayoutError(said.isEmpty() ? std::string(what)
                                    : std::string(what) + ": " + said.toStdString());
}

GVC_t* context() {
  static GVC_t* gvc = gvContext();  // lives for the process; plugins load once
  return gvc;
}

// Note [Layout from Graphviz's structs]
// The layout is read from the structs Graphviz laid out (ND_coord, ED_spl, GD_bb: the types.h
// that its renderers read), not from the attributes attach_attrs writes: those print numbers with
// %.5g, so at and above 100,000 points (a chain of about 2,000 nodes, which the view may draw) a
// coordinate was off by up to 5 points, an edge's arrow tip fell on its last spline point (no
// arrowhead was drawn) and nodes were placed 40 and 50 points apart where dot placed them 48.

// Graphviz points have y up; the scene's y points down from the top of the bounding box.
struct Flip {
  double top = 0;
  QPointF operator()(const pointf& p) const { return {p.x, top - p.y}; }
  QRectF box(const boxf& b) const {
    return QRectF((*this)(pointf{b.LL.x, b.UR.y}), (*this)(pointf{b.UR.x, b.LL.y}));
  }
};

// An edge's first spline (several only for concentrated edges) and its arrowhead's tip.
EdgeRoute readEdge(Agedge_t* e, const Flip& flip) {
  EdgeRoute route;
  const splines* spl = ED_spl(e);
  if (spl == nullptr || spl->size < 1)
    return route;
  const bezier& bz = spl->list[0];
  for (int i = 0; i < bz.size; ++i)
    route.spline.push_back(flip(bz.list[i]));
  if (bz.eflag)
    route.arrowTip = flip(bz.ep);
  return route;
}

void readClusters(Agraph_t* g, const Flip& flip, DotLayout& layout) {
  for (Agraph_t* sub = agfstsubg(g); sub != nullptr; sub = agnxtsubg(sub)) {
    const QString name = QString::fromUtf8(agnameof(sub));
    if (name.startsWith("cluster")) {
      ClusterBox box{flip.box(GD_bb(sub)).normalized(), {}};
      if (const textlabel_t* label = GD_label(sub); label != nullptr && label->set)
        box.labelPos = flip(label->pos);
      layout.clusters.emplace(name, box);
    }
    readClusters(sub, flip, layout);
  }
}

}  // namespace

DotLayout layoutDot(const QString& dot) {
  const QByteArray text = dot.toUtf8();
  QMutexLocker lock(&graphvizMutex());
  GVC_t* gvc = context();
  graphvizMessages().clear();
  agseterrf(onGraphvizMessage);
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> graph(agmemread(text.constData()), agclose);
  if (!graph)
    throw failure("Graphviz could not parse the DOT text");
  if (gvLayout(gvc, graph.get(), "dot") != 0)
    throw failure("Graphviz dot layout failed");
  // Freed however this function leaves: what is read below may throw (bad_alloc).
  const std::unique_ptr<Agraph_t, std::function<void(Agraph_t*)>> laidOut(
      graph.get(), [gvc](Agraph_t* g) { gvFreeLayout(gvc, g); });

  // Note [Layout from Graphviz's structs]
  DotLayout layout;
  Flip flip;
  const boxf bb = GD_bb(graph.get());
  flip.top = bb.UR.y;
  layout.bounds = QRectF(bb.LL.x, 0, bb.UR.x - bb.LL.x, bb.UR.y - bb.LL.y);
  for (Agnode_t* n = agfstnode(graph.get()); n != nullptr; n = agnxtnode(graph.get(), n)) {
    NodeBox box;
    box.center = flip(ND_coord(n));
    box.size = QSizeF(ND_width(n) * 72.0, ND_height(n) * 72.0);  // inches to points
    layout.nodes.emplace(QString::fromUtf8(agnameof(n)), box);
    for (Agedge_t* e = agfstout(graph.get(), n); e != nullptr; e = agnxtout(graph.get(), e)) {
      EdgeRoute route = readEdge(e, flip);
      route.tail = QString::fromUtf8(agnameof(agtail(e)));
      route.head = QString::fromUtf8(agnameof(aghead(e)));
      layout.edges.push_back(std::move(route));
    }
  }
  readClusters(graph.get(), flip, layout);
  return layout;
}

}  // namespace symtune::graphview
