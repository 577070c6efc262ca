#pragma once
// Comparing a kernel's result with its reference: the largest difference against the reference's
// largest entry — rounding differences at the tensor's scale (an element-wise relative
// difference would make an element near zero meaningless).

#include "doctest_torch.h"

#include <torch/types.h>

namespace symtune::test {

inline double scaledError(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto x = actual.detach().to(torch::kDouble), y = expected.detach().to(torch::kDouble);
  return ((x - y).abs().max() / (y.abs().max() + 1e-30)).item<double>();
}

// Checks that `actual` is within `within` of `expected` (scaledError), naming `what` and the
// error when it is not.
inline void checkScaledError(const char* what, const torch::Tensor& actual,
                             const torch::Tensor& expected, double within) {
  const double error = scaledError(actual, expected);
  INFO(what, ": ", error);
  CHECK(error <= within);
}

}  // namespace symtune::test
