#pragma once
// The figures painted on graph nodes: what each overlay measures, its unit, and the colour scale.

#include <QColor>
#include <QString>

#include <optional>

namespace symtune::graphview {

enum class Overlay {
  None,
  Latency,   // forward + backward seconds of the last sampled step
  Memory,    // bytes allocated by the node (forward + backward), as a share of the step's peak
  Flops,     // floating-point operations from the cost templates
  GradNorm,  // L2 norm of the gradients of the node's module's parameters
  GpuTime,   // CUDA runs: the GPU's forward + backward seconds (kernel time with CUPTI)
  Kernels,   // CUDA runs traced with CUPTI: kernels launched, forward and backward
  // DynaCompiler: an op site's speedup over the ATen op from the implementation it is bound to
  // (the largest over its shape buckets; 1 where it kept the ATen op). Backward nodes show their
  // forward op's.
  Binding,
  // The memory budget's plan in force (docs/remat.md): 1 on the nodes of a unit it recomputes,
  // 0 on those of a unit it keeps; none outside the units. Backward nodes show their forward op's.
  Remat,
};
inline constexpr Overlay kOverlays[] = {Overlay::None,    Overlay::Latency,  Overlay::Memory,
                                        Overlay::Flops,   Overlay::GradNorm, Overlay::GpuTime,
                                        Overlay::Kernels, Overlay::Binding,  Overlay::Remat};
// Overlays whose group figure is the largest of its nodes' rather than their sum.
inline bool takesLargest(Overlay overlay) {
  return overlay == Overlay::GradNorm || overlay == Overlay::Binding || overlay == Overlay::Remat;
}

QString overlayName(Overlay overlay);  // "Latency", ...
QString overlayUnit(Overlay overlay);  // "ms", "MiB", "GFLOP", ""
// A value as the legend and the node show it ("1.25 ms", "12.0 MiB (4 %)", "3.1 GFLOP").
// `peakBytes` (Memory) adds the share of the step's peak when known.
QString formatValue(Overlay overlay, double value, std::optional<double> peakBytes = {});
// Three significant digits, whole numbers from 1000 up: "1234" where 'g' wrote "1.23e+03" (a
// figure of 1.234 s read "1.23e+03 ms"), "12.3", "0.5".
QString readableNumber(double value);

// The colour of `t` in [0, 1] on the heat scale (cool to hot), readable on light and dark
// backgrounds.
QColor heatColor(double t);

}  // namespace symtune::graphview
