// symtune-bench-graphview: what drawing a large model costs the studio. Prints JSON.
//   symtune-bench-graphview [--nodes 2000] [--runs 5] [--seconds 3] [--graph GRAPH.json]
//
// - layout_full_s: DOT of the whole forward graph (no group collapsed) + Graphviz `dot` layout.
// - layout_full_default_limits_s: the same with Graphviz's default iteration limits.
// - layout_opened_s: the same for the view a graph opens with (groups collapsed to fit).
// - scene_s: a GraphScene drawing the whole graph: layout on its worker thread + the items.
// - overlay_hz_*: live updates — a `nodes` message with new figures for every node, the overlay
//   recomputed and the scene painted into a 1280×800 image — per second, zoomed to fit (level of
//   detail: boxes) and at 100 % (text). No layout happens during these.
//
// The synthetic graph is a dynamic ResNet: stages of residual blocks, each a module with a
// prim::If (downsample or not), ops chained with a residual edge per block.

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QImage>
#include <QPainter>
#include <QRandomGenerator>

#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "../bench_common.h"
#include "symtune/core/graph.h"
#include "symtune/graphview/dot_layout.h"
#include "symtune/graphview/graph_scene.h"
#include "symtune/graphview/view_dot.h"

using namespace symtune;
using namespace symtune::graphview;

namespace {

Graph syntheticResNet(int targetNodes) {
  Graph g;
  g.name = "synthetic dynamic ResNet";
  GraphRegion method;
  method.kind = RegionKind::Method;
  method.label = "forward";
  const RegionId root = g.addRegion(method);
  auto region = [&](RegionKind kind, RegionId parent, const std::string& label) {
    GraphRegion r;
    r.kind = kind;
    r.parent = parent;
    r.label = label;
    return g.addRegion(r);
  };
  auto op = [&](const char* kind, RegionId in, const std::string& module, NodeId after) {
    GraphNode n;
    n.kind = kind;
    n.region = in;
    n.modulePath = module;
    n.features.flops = 1e8;
    const NodeId id = g.addNode(n);
    if (after.valid())
      g.addEdge(after, id);
    return id;
  };
  NodeId last = op("aten::conv2d", root, "stem", {});
  const int blocksPerStage = std::max(1, targetNodes / (4 * 11));
  for (int stage = 1; stage <= 4; ++stage) {
    const std::string layer = "layer" + std::to_string(stage);
    const RegionId stageRegion = region(RegionKind::Module, root, layer);
    for (int b = 0; b < blocksPerStage && static_cast<int>(g.nodes().size()) < targetNodes; ++b) {
      const std::string block = layer + "." + std::to_string(b);
      const RegionId blockRegion = region(RegionKind::Module, stageRegion, block);
      const NodeId input = last;
      last = op("aten::conv2d", blockRegion, block + ".conv1", last);
      last = op("aten::batch_norm", blockRegion, block + ".bn1", last);
      last = op("aten::relu", blockRegion, block, last);
      last = op("aten::conv2d", blockRegion, block + ".conv2", last);
      last = op("aten::batch_norm", blockRegion, block + ".bn2", last);
      const NodeId branch = op("prim::If", blockRegion, block, last);
      RegionId then = region(RegionKind::IfThen, blockRegion, block);
      g.region(then).owner = branch;
      g.region(then).taken = b == 0;
      RegionId otherwise = region(RegionKind::IfElse, blockRegion, block);
      g.region(otherwise).owner = branch;
      g.region(otherwise).taken = b != 0;
      const NodeId down = op("aten::conv2d", then, block + ".down", branch);
      const NodeId downBn = op("aten::batch_norm", then, block + ".down", down);
      const NodeId same = op("aten::clone", otherwise, block, branch);
      const NodeId add = op("aten::add", blockRegion, block, downBn);
      g.addEdge(same, add);
      g.addEdge(input, add);  // the residual
      last = op("aten::relu", blockRegion, block, add);
    }
  }
  while (static_cast<int>(g.nodes().size()) < targetNodes)
    last = op("aten::linear", root, "fc", last);
  return g;
}

attach::NodesMessage randomFigures(const Graph& g, QRandomGenerator& random, int step) {
  attach::NodesMessage m;
  m.step = step;
  for (const auto& n : g.nodes()) {
    attach::NodeFigures f;
    f.node = n.id.value();
    f.calls = 1;
    f.forwardSeconds = random.generateDouble() * 1e-3;
    f.backwardSeconds = random.generateDouble() * 2e-3;
    f.bytesAllocated = random.bounded(1 << 24);
    m.nodes.push_back(f);
  }
  return m;
}

double secondsOf(const std::function<void()>& f) {
  QElapsedTimer t;
  t.start();
  f();
  return static_cast<double>(t.nsecsElapsed()) * 1e-9;
}

// Overlay updates per second for `seconds`, painting `source` of the scene into a 1280×800 image.
double overlayRate(GraphModel& model, GraphScene& scene, const QRectF& source, double seconds) {
  QImage image(1280, 800, QImage::Format_ARGB32_Premultiplied);
  QRandomGenerator random(42);
  QElapsedTimer clock;
  clock.start();
  int frames = 0;
  while (static_cast<double>(clock.nsecsElapsed()) * 1e-9 < seconds) {
    model.addNodeStats(randomFigures(*model.graph(), random, frames));
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    scene.render(&painter, QRectF(image.rect()), source, Qt::KeepAspectRatio);
    ++frames;
  }
  return frames / (static_cast<double>(clock.nsecsElapsed()) * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
    qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  int targetNodes = 2000, runs = 5;
  double seconds = 3;
  QString graphFile;
  const QStringList args = app.arguments();
  for (int i = 1; i < args.size(); ++i) {
    const bool hasValue = i + 1 < args.size();
    if (args[i] == "--nodes" && hasValue) {
      targetNodes = args[++i].toInt();
    } else if (args[i] == "--runs" && hasValue) {
      runs = args[++i].toInt();
    } else if (args[i] == "--seconds" && hasValue) {
      seconds = args[++i].toDouble();
    } else if (args[i] == "--graph" && hasValue) {
      graphFile = args[++i];
    } else {
      std::cerr << "usage: symtune-bench-graphview [--nodes N] [--runs N] [--seconds S] "
                   "[--graph GRAPH.json]\n";
      return 2;
    }
  }

  auto graph = std::make_shared<Graph>();
  std::string source = "synthetic dynamic ResNet";
  if (!graphFile.isEmpty()) {
    QFile file(graphFile);
    if (!file.open(QIODevice::ReadOnly)) {
      std::cerr << graphFile.toStdString() << ": cannot read\n";
      return 1;
    }
    *graph = graphFromJson(file.readAll().toStdString());
    source = graphFile.toStdString();
  } else {
    *graph = syntheticResNet(targetNodes);
  }

  ViewOptions full;
  ViewDot fullView = buildViewDot(*graph, full);
  ViewOptions opened;
  opened.collapsed = collapseToFit(*graph, GraphSide::Forward, GraphModel::kOpenDrawn);
  ViewDot openedView = buildViewDot(*graph, opened);
  ViewOptions fullDefault = full;  // Graphviz's own iteration limits (Note [Fast layout])
  fullDefault.fastLayoutAbove = std::numeric_limits<int>::max();
  std::vector<double> layoutFull, layoutFullDefault, layoutOpened, sceneFull;
  for (int r = 0; r < runs; ++r) {
    layoutFull.push_back(
        secondsOf([&] { layoutDot(QString::fromStdString(buildViewDot(*graph, full).dot)); }));
    layoutFullDefault.push_back(secondsOf(
        [&] { layoutDot(QString::fromStdString(buildViewDot(*graph, fullDefault).dot)); }));
    layoutOpened.push_back(
        secondsOf([&] { layoutDot(QString::fromStdString(buildViewDot(*graph, opened).dot)); }));
  }

  GraphModel model(GraphSide::Forward);
  GraphScene scene(&model);
  for (int r = 0; r < runs; ++r) {
    // A fresh model each time: the scene's layout cache must not answer.
    GraphModel fresh(GraphSide::Forward);
    GraphScene freshScene(&fresh);
    QEventLoop loop;
    QObject::connect(&freshScene, &GraphScene::layoutFinished, &loop, &QEventLoop::quit);
    sceneFull.push_back(secondsOf([&] {
      fresh.setGraph(graph);
      fresh.expandAll();
      loop.exec();
    }));
  }
  {
    QEventLoop loop;
    QObject::connect(&scene, &GraphScene::layoutFinished, &loop, &QEventLoop::quit);
    model.setGraph(graph);
    model.expandAll();
    loop.exec();  // one layout: the opened view's request is superseded by the full one
  }
  scene.setOverlay(Overlay::Latency);
  const QRectF all = scene.sceneRect();
  const QRectF oneToOne(all.center() - QPointF(640, 400), QSizeF(1280, 800));
  const double fitHz = overlayRate(model, scene, all, seconds);
  const double fullSizeHz = overlayRate(model, scene, oneToOne, seconds);

  nlohmann::ordered_json out = {
      {"bench", "graphview"},
      {"machine", bench::cpuModel()},
      {"graph",
       {{"source", source},
        {"forward_nodes", graph->countNodes(GraphSide::Forward)},
        {"edges", graph->edges().size()},
        {"regions", graph->regions().size()}}},
      {"runs", runs},
      {"full_view", {{"drawn", fullView.entries.size()}, {"clusters", fullView.clusters.size()}}},
      {"opened_view",
       {{"drawn", openedView.entries.size()}, {"clusters", openedView.clusters.size()}}},
      {"layout_full_s", bench::summary(layoutFull)},
      {"layout_full_default_limits_s", bench::summary(layoutFullDefault)},
      {"layout_opened_s", bench::summary(layoutOpened)},
      {"scene_full_s", bench::summary(sceneFull)},
      {"scene_items", scene.drawnNodes()},
      {"overlay_hz_fit", fitHz},
      {"overlay_hz_100_percent", fullSizeHz},
  };
  std::cout << out.dump(2) << std::endl;
  return 0;
}
