#include "symtune/graphview/scene_export.h"

#include <QFileInfo>
#include <QGraphicsScene>
#include <QImage>
#include <QPainter>
#include <QPalette>
#include <QSaveFile>
#include <QSvgGenerator>

#include <algorithm>
#include <cmath>

namespace symtune::graphview {

namespace {

constexpr double kLargestSide = 16384;

void paintScene(QGraphicsScene& scene, QPainter& painter, const QRectF& target,
                const Decoration& decorate) {
  painter.setRenderHint(QPainter::Antialiasing);
  painter.setRenderHint(QPainter::TextAntialiasing);
  painter.fillRect(target, scene.palette().color(QPalette::Base));
  scene.render(&painter, target, scene.sceneRect());
  if (decorate)
    decorate(painter, target);
}

}  // namespace

QString exportSvg(QGraphicsScene& scene, const QString& path, const QString& title,
                  const Decoration& decorate) {
  const QRectF rect = scene.sceneRect();
  if (rect.isEmpty())
    return QObject::tr("there is no graph to export");
  QSaveFile file(path);  // all or nothing: a failed export leaves an older file as it was
  if (!file.open(QIODevice::WriteOnly))
    return QObject::tr("cannot write %1: %2").arg(path, file.errorString());
  QSvgGenerator svg;
  svg.setOutputDevice(&file);
  svg.setSize(rect.size().toSize());
  svg.setViewBox(QRectF(QPointF(0, 0), rect.size()));
  svg.setTitle(title.isEmpty() ? QFileInfo(path).completeBaseName() : title);
  svg.setDescription(QObject::tr("Model graph exported by Symtune"));
  {
    QPainter painter(&svg);
    paintScene(scene, painter, QRectF(QPointF(0, 0), rect.size()), decorate);
  }
  if (!file.commit())
    return QObject::tr("cannot write %1: %2").arg(path, file.errorString());
  return {};
}

QString exportPng(QGraphicsScene& scene, const QString& path, double scale,
                  const Decoration& decorate) {
  const QRectF rect = scene.sceneRect();
  if (rect.isEmpty())
    return QObject::tr("there is no graph to export");
  scale = std::min(scale, kLargestSide / std::max(rect.width(), rect.height()));
  const QSize size(static_cast<int>(std::ceil(rect.width() * scale)),
                   static_cast<int>(std::ceil(rect.height() * scale)));
  QImage image(size, QImage::Format_ARGB32_Premultiplied);
  if (image.isNull())
    return QObject::tr("not enough memory for a %1×%2 image").arg(size.width()).arg(size.height());
  {
    QPainter painter(&image);
    paintScene(scene, painter, QRectF(QPointF(0, 0), QSizeF(size)), decorate);
  }
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly) || !image.save(&file, "PNG") || !file.commit())
    return QObject::tr("cannot write %1: %2").arg(path, file.errorString());
  return {};
}

}  // namespace symtune::graphview
