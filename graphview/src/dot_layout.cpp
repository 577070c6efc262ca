#include "symtune/graphview/dot_layout.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <QMutex>
#include <QMutexLocker>
#include <QStringList>

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

QString attr(void* obj, const char* name) {
  const char* v = agget(obj, const_cast<char*>(name));
  return v != nullptr ? QString::fromLatin1(v) : QString();
}

// Graphviz points have y up; the scene's y points down from the top of the bounding box.
struct Flip {
  double top = 0;
  QPointF operator()(double x, double y) const { return {x, top - y}; }
  std::optional<QPointF> point(const QString& text) const {
    const QStringList xy = text.split(',');
    if (xy.size() != 2)
      return std::nullopt;
    return (*this)(xy[0].toDouble(), xy[1].toDouble());
  }
  std::optional<QRectF> box(const QString& text) const {  // "llx,lly,urx,ury"
    const QStringList v = text.split(',');
    if (v.size() != 4)
      return std::nullopt;
    return QRectF((*this)(v[0].toDouble(), v[3].toDouble()),
                  (*this)(v[2].toDouble(), v[1].toDouble()));
  }
};

// An edge's `pos`: "[s,x,y ][e,x,y ]x,y x,y x,y x,y ..." (one spline; ';' separates several,
// which only happens for concentrated edges: the first is kept).
EdgeRoute parseEdge(const QString& pos, const Flip& flip) {
  EdgeRoute route;
  for (const QString& token : pos.section(';', 0, 0).split(' ', Qt::SkipEmptyParts)) {
    if (token.startsWith("e,")) {
      route.arrowTip = flip.point(token.mid(2));
    } else if (!token.startsWith("s,")) {
      if (auto p = flip.point(token))
        route.spline.push_back(*p);
    }
  }
  return route;
}

void readClusters(Agraph_t* g, const Flip& flip, DotLayout& layout) {
  for (Agraph_t* sub = agfstsubg(g); sub != nullptr; sub = agnxtsubg(sub)) {
    const QString name = QString::fromUtf8(agnameof(sub));
    if (name.startsWith("cluster")) {
      if (auto rect = flip.box(attr(sub, "bb"))) {
        ClusterBox box{rect->normalized(), {}};
        if (auto lp = flip.point(attr(sub, "lp")))
          box.labelPos = *lp;
        layout.clusters.emplace(name, box);
      }
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
  // Freed however this function leaves: attributes read below may throw (bad_alloc).
  const std::unique_ptr<Agraph_t, std::function<void(Agraph_t*)>> laidOut(
      graph.get(), [gvc](Agraph_t* g) { gvFreeLayout(gvc, g); });
  attach_attrs(graph.get());  // the computed positions as attributes: pos, width, height, bb, lp

  DotLayout layout;
  Flip flip;
  const QStringList bb = attr(graph.get(), "bb").split(',');
  if (bb.size() == 4) {
    flip.top = bb[3].toDouble();
    layout.bounds = QRectF(bb[0].toDouble(), 0, bb[2].toDouble() - bb[0].toDouble(),
                           flip.top - bb[1].toDouble());
  }
  for (Agnode_t* n = agfstnode(graph.get()); n != nullptr; n = agnxtnode(graph.get(), n)) {
    NodeBox box;
    if (auto center = flip.point(attr(n, "pos")))
      box.center = *center;
    box.size = QSizeF(attr(n, "width").toDouble() * 72.0, attr(n, "height").toDouble() * 72.0);
    layout.nodes.emplace(QString::fromUtf8(agnameof(n)), box);
    for (Agedge_t* e = agfstout(graph.get(), n); e != nullptr; e = agnxtout(graph.get(), e)) {
      EdgeRoute route = parseEdge(attr(e, "pos"), flip);
      route.tail = QString::fromUtf8(agnameof(agtail(e)));
      route.head = QString::fromUtf8(agnameof(aghead(e)));
      layout.edges.push_back(std::move(route));
    }
  }
  readClusters(graph.get(), flip, layout);
  return layout;
}

}  // namespace symtune::graphview
