#include "symtune/remat/memory_predictor.h"

#include <c10/util/Exception.h>

namespace symtune::remat {

MemoryPredictor::MemoryPredictor(size_t window) : window_(window) {
  TORCH_CHECK(window_ >= 1, "MemoryPredictor: the window must hold at least one step");
}

void MemoryPredictor::observe(double savedBytes, double peakBytes) {
  TORCH_CHECK(savedBytes >= 0 && peakBytes >= 0,
              "MemoryPredictor: saved and peak bytes cannot be negative, got ", savedBytes, " and ",
              peakBytes);
  seen_.emplace_back(savedBytes, peakBytes);
  if (seen_.size() > window_)
    seen_.pop_front();
}

std::optional<double> MemoryPredictor::predict(double savedBytes) const {
  if (seen_.empty())
    return std::nullopt;
  const double n = static_cast<double>(seen_.size());
  double sx = 0, sy = 0;
  for (const auto& [x, y] : seen_) {
    sx += x;
    sy += y;
  }
  const double mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0;
  for (const auto& [x, y] : seen_) {
    sxx += (x - mx) * (x - mx);
    sxy += (x - mx) * (y - my);
  }
  // Distinct sizes and a rising fit: the line. Else the mean ratio of peak to saved bytes (or
  // the mean peak, when the templates saw nothing saved).
  if (sxx > 1e-9 * mx * mx && sxy > 0) {
    const double slope = sxy / sxx;
    return my + slope * (savedBytes - mx);
  }
  return mx > 0 ? my / mx * savedBytes : my;
}

}  // namespace symtune::remat
