#pragma once
// A QGraphicsView on a GraphScene: wheel to zoom, drag to pan, zoom to fit, and the overlay's
// legend (name, colour scale, range with units) drawn over the view.

#include <QGraphicsView>

namespace symtune::graphview {
class GraphScene;
}

namespace symtune::ui {

class GraphView : public QGraphicsView {
  Q_OBJECT

 public:
  explicit GraphView(graphview::GraphScene* scene, QWidget* parent = nullptr);

  graphview::GraphScene* graphScene() const { return scene_; }
  void zoomToFit();
  // How a new graph is first shown: fitted, or from the top at a readable size when fitting
  // would shrink its text below kReadableScale.
  void showStart();
  static constexpr double kReadableScale = 0.45;
  void zoomBy(double factor);
  // The legend's text as drawn ("Latency: 0 – 2.3 ms"), "" when no overlay is on.
  QString legendText() const;
  // The legend in the top right corner of `area` (the view's, or an exported file's), in the
  // painter's coordinates; nothing when legendText() is "".
  void paintLegend(QPainter& painter, const QRectF& area) const;

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void drawForeground(QPainter* painter, const QRectF& rect) override;
  void changeEvent(QEvent* event) override;  // follows the palette, light or dark

 private:
  graphview::GraphScene* scene_;
  bool fitNextLayout_ = true;
};

}  // namespace symtune::ui
