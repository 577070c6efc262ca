#pragma once
// Planted gradients for rule tests: a parameter whose gradient holds chosen values, and a check
// of a tensor's values element by element (relative tolerance 1e-5).

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <torch/types.h>

namespace symtune::test {

inline torch::Tensor withGrad(std::vector<float> value, std::vector<float> grad,
                              std::vector<int64_t> shape) {
  auto p = torch::tensor(value).reshape(shape).requires_grad_();
  p.mutable_grad() = torch::tensor(grad).reshape(shape);
  return p;
}

// A mismatch fails the calling test case (each element is its own assertion).
inline void expectValues(const torch::Tensor& t, std::vector<float> expected) {
  const auto flat = t.flatten().contiguous();
  REQUIRE(flat.numel() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const float got = flat[static_cast<int64_t>(i)].item<float>();
    INFO("element ", i, ": ", got, ", expected ", expected[i]);
    CHECK(std::abs(got - expected[i]) <= 1e-5f * std::max(1.0f, std::abs(expected[i])));
  }
}

}  // namespace symtune::test
