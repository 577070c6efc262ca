#include "symtune/graphview/overlay.h"

#include <algorithm>
#include <cmath>

namespace symtune::graphview {

QString overlayName(Overlay overlay) {
  switch (overlay) {
    case Overlay::None:
      return QStringLiteral("None");
    case Overlay::Latency:
      return QStringLiteral("Latency");
    case Overlay::Memory:
      return QStringLiteral("Memory");
    case Overlay::Flops:
      return QStringLiteral("FLOPs");
    case Overlay::GradNorm:
      return QStringLiteral("Gradient norm");
    case Overlay::GpuTime:
      return QStringLiteral("GPU time");
    case Overlay::Kernels:
      return QStringLiteral("GPU kernels");
    case Overlay::Binding:
      return QStringLiteral("Binding");
    case Overlay::Remat:
      return QStringLiteral("Remat plan");
  }
  return {};
}

QString overlayUnit(Overlay overlay) {
  switch (overlay) {
    case Overlay::Latency:
    case Overlay::GpuTime:
      return QStringLiteral("ms");
    case Overlay::Memory:
      return QStringLiteral("MiB");
    case Overlay::Flops:
      return QStringLiteral("GFLOP");
    case Overlay::Kernels:
      return QStringLiteral("kernels");
    case Overlay::Binding:
      return QStringLiteral("× over aten");
    case Overlay::None:
    case Overlay::GradNorm:
    case Overlay::Remat:
      break;
  }
  return {};
}

QString readableNumber(double value) {
  // 'g' writes an exponent once the value rounds to 1000 or more at three digits.
  if (std::isfinite(value) && std::abs(value) >= 999.5)
    return QString::number(value, 'f', 0);
  return QString::number(value, 'g', 3);
}

QString formatValue(Overlay overlay, double value, std::optional<double> peakBytes) {
  switch (overlay) {
    case Overlay::Latency:
    case Overlay::GpuTime:
      return QStringLiteral("%1 ms").arg(readableNumber(value * 1e3));
    case Overlay::Kernels:
      return QStringLiteral("%1 kernels").arg(value, 0, 'f', 0);
    case Overlay::Memory: {
      // A node's few KiB read "0.0 MiB" in MiB. KiB up to what rounds below 1024 of them (a byte
      // short of 1 MiB read "1024 KiB").
      QString text = value < 1023.5 * 1024.0
                         ? QStringLiteral("%1 KiB").arg(readableNumber(value / 1024.0))
                         : QStringLiteral("%1 MiB").arg(value / (1024.0 * 1024.0), 0, 'f', 1);
      if (peakBytes && *peakBytes > 0)
        text += QStringLiteral(" (%1 %)").arg(100.0 * value / *peakBytes, 0, 'f', 0);
      return text;
    }
    case Overlay::Flops:
      return QStringLiteral("%1 GFLOP").arg(readableNumber(value / 1e9));
    case Overlay::GradNorm:
      return QString::number(value, 'g', 3);
    case Overlay::Binding:
      return QStringLiteral("%1× over aten").arg(value, 0, 'f', 2);
    case Overlay::Remat:
      return value >= 0.5 ? QStringLiteral("recomputed") : QStringLiteral("kept");
    case Overlay::None:
      break;
  }
  return {};
}

QColor heatColor(double t) {
  // Blue (cool) through yellow to red (hot) in HSV: hue 220° → 0°, saturated enough to read as a
  // fill under dark text and light text alike.
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0);
  return QColor::fromHsvF(static_cast<float>((1.0 - t) * 220.0 / 360.0), 0.55f + 0.3f * float(t),
                          0.95f);
}

}  // namespace symtune::graphview
