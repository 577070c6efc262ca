#pragma once
// A drawn graph written to a file, as it is drawn (overlays included): SVG for documents, PNG for
// chat and slides. Each returns "" on success or what went wrong. `decorate`, when given, paints
// over the graph in the file's coordinates (the overlay's legend: what the colours mean).

#include <QRectF>
#include <QString>

#include <functional>

class QGraphicsScene;
class QPainter;

namespace symtune::graphview {

using Decoration = std::function<void(QPainter& painter, const QRectF& area)>;

QString exportSvg(QGraphicsScene& scene, const QString& path, const QString& title = {},
                  const Decoration& decorate = {});
// `scale` pixels per point, lowered as needed to keep the image within 16,384 pixels a side.
QString exportPng(QGraphicsScene& scene, const QString& path, double scale = 2.0,
                  const Decoration& decorate = {});

}  // namespace symtune::graphview
