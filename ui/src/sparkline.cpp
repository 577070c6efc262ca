#include "symtune/ui/sparkline.h"

#include "symtune/graphview/overlay.h"

#include <QPainter>
#include <QPainterPath>

#include <algorithm>

namespace symtune::ui {

Sparkline::Sparkline(QWidget* parent) : QWidget(parent), placeholder_(tr("no samples yet")) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

void Sparkline::setPoints(const QVector<QPointF>& points) {
  points_ = points;
  if (!points_.isEmpty()) {
    const auto [lo, hi] =
        std::minmax_element(points_.begin(), points_.end(),
                            [](const QPointF& a, const QPointF& b) { return a.y() < b.y(); });
    yMin_ = lo->y();
    yMax_ = hi->y();
  }
  update();
}

void Sparkline::setUnit(const QString& unit) {
  unit_ = unit;
  update();
}

void Sparkline::setPlaceholderText(const QString& text) {
  placeholder_ = text;
  update();
}

QString Sparkline::label(double value) const {
  return graphview::readableNumber(value) + unit_;
}

QString Sparkline::maxLabel() const {
  return points_.isEmpty() ? QString() : tr("max %1").arg(label(yMax_));
}

QString Sparkline::minLabel() const {
  return points_.isEmpty() ? QString() : tr("min %1").arg(label(yMin_));
}

QSize Sparkline::sizeHint() const {
  const QFontMetrics fm = fontMetrics();
  return {fm.averageCharWidth() * 36, fm.height() * 3};
}

QSize Sparkline::minimumSizeHint() const {
  const QFontMetrics fm = fontMetrics();
  return {fm.averageCharWidth() * 16, fm.height() * 2};
}

void Sparkline::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QRect area = rect().adjusted(2, 2, -2, -2);
  if (points_.isEmpty()) {
    p.setPen(palette().color(QPalette::PlaceholderText));
    p.drawText(area, Qt::AlignCenter, placeholder_);
    return;
  }
  p.setRenderHint(QPainter::Antialiasing);
  QFont small = font();
  small.setPointSizeF(small.pointSizeF() * 0.85);
  p.setFont(small);
  const QFontMetrics fm(small);
  const QString maxText = maxLabel(), minText = minLabel();
  const int labelWidth = std::max(fm.horizontalAdvance(maxText), fm.horizontalAdvance(minText));

  // Labels on the right, the line in the rest.
  const QRectF plot(area.left(), area.top() + 2, std::max(1, area.width() - labelWidth - 6),
                    std::max(1, area.height() - 4));
  p.setPen(palette().color(QPalette::PlaceholderText));
  p.drawText(QRect(area.right() - labelWidth, area.top(), labelWidth, area.height()),
             Qt::AlignRight | Qt::AlignTop, maxText);
  p.drawText(QRect(area.right() - labelWidth, area.top(), labelWidth, area.height()),
             Qt::AlignRight | Qt::AlignBottom, minText);

  const double x0 = points_.front().x(), x1 = points_.back().x();
  const double xSpan = x1 > x0 ? x1 - x0 : 1.0;
  const double ySpan = yMax_ > yMin_ ? yMax_ - yMin_ : 1.0;
  auto map = [&](const QPointF& pt) {
    const double fx = points_.size() == 1 ? 1.0 : (pt.x() - x0) / xSpan;
    const double fy = yMax_ > yMin_ ? (pt.y() - yMin_) / ySpan : 0.5;
    return QPointF(plot.left() + fx * plot.width(), plot.bottom() - fy * plot.height());
  };
  QPainterPath path(map(points_.front()));
  for (qsizetype i = 1; i < points_.size(); ++i)
    path.lineTo(map(points_[i]));
  const QColor colour = palette().color(QPalette::Highlight);
  p.setPen(QPen(colour, 1.5));
  p.drawPath(path);
  p.setBrush(colour);
  p.setPen(Qt::NoPen);
  p.drawEllipse(map(points_.back()), 2.5, 2.5);  // the latest sample
}

}  // namespace symtune::ui
