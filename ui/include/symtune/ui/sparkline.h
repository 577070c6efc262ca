#pragma once
// A word-sized line chart: a series of points drawn in the palette's highlight colour, its
// minimum and maximum written beside it. For histories too small for a real chart (the node
// inspector's time per step).

#include <QPointF>
#include <QVector>
#include <QWidget>

namespace symtune::ui {

class Sparkline : public QWidget {
  Q_OBJECT

 public:
  explicit Sparkline(QWidget* parent = nullptr);

  // Points in x order (a history); none: the placeholder text.
  void setPoints(const QVector<QPointF>& points);
  const QVector<QPointF>& points() const { return points_; }

  // Appended to the min/max labels: " ms".
  void setUnit(const QString& unit);
  QString unit() const { return unit_; }

  // Shown when there are no points.
  void setPlaceholderText(const QString& text);

  // "max 1.25 ms" / "min 0.5 ms"; empty without points.
  QString maxLabel() const;
  QString minLabel() const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  QString label(double value) const;

  QVector<QPointF> points_;
  double yMin_ = 0, yMax_ = 0;
  QString unit_;
  QString placeholder_;
};

}  // namespace symtune::ui
