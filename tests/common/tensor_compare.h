#pragma once
// Comparing a kernel's result with its reference: the largest difference against the reference's
// largest entry — rounding differences at the tensor's scale (an element-wise relative
// difference would make an element near zero meaningless).

#include "doctest_torch.h"

#include <vector>

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

// Checks each of `actual` against `expected` at the same place: within `within` (checkScaledError),
// or bit for bit when `within` is 0. `what` names the places ("0: the output, then ...").
inline void checkEach(const std::vector<torch::Tensor>& actual,
                      const std::vector<torch::Tensor>& expected, double within, const char* what) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("value ", i, " (", what, ")");
    if (within == 0)
      CHECK(torch::equal(actual[i].cpu(), expected[i].cpu()));
    else
      checkScaledError("value", actual[i].cpu(), expected[i].cpu(), within);
  }
}

}  // namespace symtune::test
