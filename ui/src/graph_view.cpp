#include "symtune/ui/graph_view.h"

#include <QLinearGradient>
#include <QPainter>
#include <QScrollBar>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

#include "symtune/graphview/graph_scene.h"

namespace symtune::ui {

using graphview::GraphScene;
using graphview::Overlay;

GraphView::GraphView(GraphScene* scene, QWidget* parent)
    : QGraphicsView(scene, parent), scene_(scene) {
  setRenderHints(QPainter::Antialiasing | QPainter::TextAntialiasing);
  setDragMode(QGraphicsView::ScrollHandDrag);
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  setViewportUpdateMode(QGraphicsView::SmartViewportUpdate);
  setOptimizationFlags(QGraphicsView::DontSavePainterState);
  setBackgroundBrush(palette().color(QPalette::Base));
  scene_->setPalette(palette());
  // A new graph is shown whole; later layouts (a group collapsed) keep the user's zoom.
  connect(scene_->model(), &graphview::GraphModel::graphChanged, this,
          [this] { fitNextLayout_ = true; });
  connect(scene_, &GraphScene::layoutFinished, this, [this] {
    if (fitNextLayout_) {
      fitNextLayout_ = false;
      showStart();
    }
  });
  connect(scene_, &GraphScene::figuresChanged, viewport(), qOverload<>(&QWidget::update));
  connect(scene_, &GraphScene::layoutFailed, viewport(), qOverload<>(&QWidget::update));
}

void GraphView::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) {
    setBackgroundBrush(palette().color(QPalette::Base));
    scene_->setPalette(palette());
  }
  QGraphicsView::changeEvent(event);
}

void GraphView::zoomToFit() {
  if (!scene_->sceneRect().isEmpty())
    fitInView(scene_->sceneRect(), Qt::KeepAspectRatio);
  // Never blow a small graph up past 150 %.
  if (transform().m11() > 1.5)
    setTransform(QTransform::fromScale(1.5, 1.5));
}

// A graph fits when that keeps its text readable; a long one (a deep network's chain) is shown at
// its full width from the top instead, to be scrolled or zoomed out.
void GraphView::showStart() {
  const QRectF r = scene_->sceneRect();
  if (r.isEmpty() || viewport()->width() <= 0)
    return;
  const double fit = std::min(viewport()->width() / r.width(), viewport()->height() / r.height());
  if (fit >= kReadableScale) {
    zoomToFit();
    return;
  }
  const double scale = std::clamp(viewport()->width() / r.width(), kReadableScale, 1.0);
  setTransform(QTransform::fromScale(scale, scale));
  centerOn(r.center().x(), r.top() + viewport()->height() / (2 * scale));
}

void GraphView::zoomBy(double factor) {
  const double scale = transform().m11() * factor;
  if (scale < 0.02 || scale > 8)
    return;
  this->scale(factor, factor);
}

void GraphView::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  if (steps != 0)
    zoomBy(std::pow(1.15, steps));
  event->accept();
}

QString GraphView::legendText() const {
  if (!scene_->layoutError().isEmpty())
    return tr("Layout failed: %1").arg(scene_->layoutError());
  const Overlay overlay = scene_->overlay();
  if (overlay == Overlay::None)
    return {};
  const auto range = scene_->overlayRange();
  if (overlay == Overlay::Remat)  // two states, not a scale: what each end of it means
    return range ? tr("Remat plan: kept – recomputed")
                 : tr("Remat plan: no unit of the plan drawn here");
  if (!range)
    return tr("%1: not measured yet").arg(graphview::overlayName(overlay));
  const auto peak = scene_->model()->peakMemory();
  // The colour scale runs from zero to the largest figure drawn.
  return tr("%1: 0 – %2")
      .arg(graphview::overlayName(overlay), graphview::formatValue(overlay, range->second, peak));
}

void GraphView::drawForeground(QPainter* painter, const QRectF&) {
  painter->save();
  painter->resetTransform();  // viewport coordinates: the legend stays put while zooming
  paintLegend(*painter, viewport()->rect());
  painter->restore();
}

void GraphView::paintLegend(QPainter& painter, const QRectF& area) const {
  const QString text = legendText();
  if (text.isEmpty())
    return;
  painter.save();
  painter.setFont(font());
  const QFontMetrics metrics(font());
  const int width = std::max(metrics.horizontalAdvance(text), 160) + 16;
  const QRect box(static_cast<int>(area.right()) - width - 10, static_cast<int>(area.top()) + 10,
                  width, metrics.height() * 2 + 18);
  QColor background = palette().color(QPalette::Window);
  background.setAlphaF(0.9f);
  painter.setPen(palette().color(QPalette::Mid));
  painter.setBrush(background);
  painter.drawRoundedRect(box, 4, 4);
  painter.setPen(palette().color(QPalette::WindowText));
  painter.drawText(box.adjusted(8, 6, -8, 0), Qt::AlignLeft | Qt::AlignTop, text);
  if (scene_->layoutError().isEmpty()) {  // a failed layout's message has no scale
    QLinearGradient scale(box.left() + 8, 0, box.right() - 8, 0);
    for (double t : {0.0, 0.25, 0.5, 0.75, 1.0})
      scale.setColorAt(t, graphview::heatColor(t));
    const QRect bar(box.left() + 8, box.bottom() - metrics.height() / 2 - 8, box.width() - 16,
                    metrics.height() / 2 + 2);
    painter.fillRect(bar, scale);
  }
  painter.restore();
}

}  // namespace symtune::ui
