#pragma once
// A drawn graph written to a file, as it is drawn (overlays included): SVG for documents, PNG for
// chat and slides. Each returns "" on success or what went wrong.

#include <QString>

class QGraphicsScene;

namespace symtune::graphview {

QString exportSvg(QGraphicsScene& scene, const QString& path, const QString& title = {});
// `scale` pixels per point, lowered as needed to keep the image within 16,384 pixels a side.
QString exportPng(QGraphicsScene& scene, const QString& path, double scale = 2.0);

}  // namespace symtune::graphview
