#include "symtune/remat/memory_predictor.h"

#include <c10/util/Exception.h>

namespace symtune::remat {

MemoryPredictor::MemoryPredictor(size_t window) : window_(window) {
  TORCH_CHECK(window_ >= 1, "MemoryPredictor: the window must hold at least one step");
}

std::vector<std::array<double, 3>> MemoryPredictor::observed() const {
  std::vector<std::array<double, 3>> out;
  for (const Seen& s : seen_)
    out.push_back({s.saved, s.peak, s.recomputed});
  return out;
}

void MemoryPredictor::observe(double savedBytes, double peakBytes, double recomputedBytes) {
  TORCH_CHECK(savedBytes >= 0 && peakBytes >= 0 && recomputedBytes >= 0,
              "MemoryPredictor: saved, peak and recomputed bytes cannot be negative, got ",
              savedBytes, ", ", peakBytes, " and ", recomputedBytes);
  seen_.push_back({savedBytes, peakBytes, recomputedBytes});
  if (seen_.size() > window_)
    seen_.pop_front();
}

std::optional<double> MemoryPredictor::predict(double savedBytes, double recomputedBytes) const {
  const auto f = fit();
  if (!f)
    return std::nullopt;
  return f->intercept + f->slope * savedBytes + f->recomputedSlope * recomputedBytes;
}

std::optional<MemoryPredictor::Fit> MemoryPredictor::fit() const {
  if (seen_.empty())
    return std::nullopt;
  const double n = static_cast<double>(seen_.size());
  double mx = 0, mr = 0, my = 0;
  for (const auto& s : seen_) {
    mx += s.saved / n;
    mr += s.recomputed / n;
    my += s.peak / n;
  }
  double sxx = 0, srr = 0, sxr = 0, sxy = 0, sry = 0;
  for (const auto& s : seen_) {
    const double x = s.saved - mx, r = s.recomputed - mr, y = s.peak - my;
    sxx += x * x;
    srr += r * r;
    sxr += x * r;
    sxy += x * y;
    sry += r * y;
  }
  // Through the origin instead where the intercept would come out negative (Note [Memory
  // predictor]): sums about zero, not about the means.
  double zxx = 0, zrr = 0, zxr = 0, zxy = 0, zry = 0;
  for (const auto& s : seen_) {
    zxx += s.saved * s.saved;
    zrr += s.recomputed * s.recomputed;
    zxr += s.saved * s.recomputed;
    zxy += s.saved * s.peak;
    zry += s.recomputed * s.peak;
  }
  // Both terms, when the steps tell them apart and neither comes out negative.
  const double det = sxx * srr - sxr * sxr;
  if (seen_.size() >= 3 && det > 1e-6 * sxx * srr && sxx > 0 && srr > 0) {
    const double b = (sxy * srr - sry * sxr) / det;
    const double c = (sry * sxx - sxy * sxr) / det;
    if (b >= 0 && c >= 0 && my - b * mx - c * mr >= 0)
      return Fit{my - b * mx - c * mr, b, c};
    const double zdet = zxx * zrr - zxr * zxr;
    if (b >= 0 && c >= 0 && zdet > 1e-6 * zxx * zrr) {
      const double zb = (zxy * zrr - zry * zxr) / zdet;
      const double zc = (zry * zxx - zxy * zxr) / zdet;
      if (zb >= 0 && zc >= 0)
        return Fit{0, zb, zc};
    }
  }
  // The kept bytes alone: distinct sizes and a rising fit give the line (through the origin where
  // it would cross below it). Else the mean ratio of peak to saved bytes (or the mean peak, when
  // the templates saw nothing saved).
  if (sxx > 1e-9 * mx * mx && sxy > 0) {
    const double slope = sxy / sxx;
    if (my - slope * mx >= 0)
      return Fit{my - slope * mx, slope, 0};
    return Fit{0, zxy / zxx, 0};
  }
  return mx > 0 ? Fit{0, my / mx, 0} : Fit{my, 0, 0};
}

}  // namespace symtune::remat
