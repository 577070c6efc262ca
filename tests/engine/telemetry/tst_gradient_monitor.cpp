// Gradient statistics from hooks: values against ATen, a planted NaN in the right parameter, the
// update-to-weight ratio of an SGD step, and parameters that get no gradient.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "symtune/telemetry/gradient_monitor.h"

using symtune::GradientMonitor;

namespace {
// Within float32 rounding: the statistics accumulate in double, the references in float.
bool near(double got, double want) {
  return std::abs(got - want) <= 1e-5 * std::max(1.0, std::abs(want));
}
}  // namespace

TEST_CASE("the statistics match ATen's on the same gradients") {
  torch::manual_seed(0);
  auto a = torch::randn({5, 7}, torch::requires_grad());
  auto b = torch::randn({7}, torch::requires_grad());
  GradientMonitor monitor({{"a", a}, {"b", b}});
  monitor.beginStep();
  ((a * 3).sum() + (b * b).sum()).backward();
  const auto& s = monitor.stats();
  REQUIRE(s.size() == 2u);
  CHECK(s[0].name == "a");
  CHECK(s[0].hasGradient);
  CHECK(s[0].numel == 35);
  CHECK(near(s[0].norm, a.grad().norm().item<double>()));
  CHECK(near(s[0].meanAbs, 3.0));
  CHECK(near(s[0].maxAbs, 3.0));
  CHECK(near(s[1].norm, (2 * b).norm().item<double>()));
  CHECK(near(s[1].maxAbs, (2 * b).abs().max().item<double>()));
  CHECK(near(monitor.globalNorm(), std::sqrt(s[0].norm * s[0].norm + s[1].norm * s[1].norm)));
  CHECK(monitor.nanCount() == 0);
}

TEST_CASE("a planted NaN shows in the parameter it was planted in") {
  auto clean = torch::ones({4}, torch::requires_grad());
  auto poisoned = torch::ones({3, 3}, torch::requires_grad());
  GradientMonitor monitor({{"clean", clean}, {"poisoned", poisoned}});
  monitor.beginStep();
  auto mask = torch::ones({3, 3});
  mask[1][2] = std::numeric_limits<float>::quiet_NaN();
  mask[0][0] = std::numeric_limits<float>::infinity();
  ((clean * 2).sum() + (poisoned * mask).sum()).backward();
  const auto& s = monitor.stats();
  REQUIRE(s.size() == 2u);
  CHECK(s[0].nanCount == 0);
  CHECK(s[1].nanCount == 1);
  CHECK(s[1].infCount == 1);
  CHECK(monitor.nanCount() == 1);
  // Statistics of the finite elements: seven ones.
  CHECK(near(s[1].norm, std::sqrt(7.0)));
  CHECK(near(s[1].meanAbs, 1.0));
}

TEST_CASE("the update ratio of an SGD step is the step's norm over the weight's") {
  auto w = torch::full({10}, 2.0, torch::requires_grad());
  torch::optim::SGD sgd({w}, 0.1);
  GradientMonitor monitor({{"w", w}});
  monitor.beginStep();
  (w * 5).sum().backward();  // gradient 5 everywhere
  monitor.beforeUpdate();
  sgd.step();
  monitor.afterUpdate();
  // ||0.1 * 5|| / ||2|| per element, the same over the vector: 0.5 / 2.
  REQUIRE(monitor.stats()[0].updateRatio.has_value());
  CHECK(near(*monitor.stats()[0].updateRatio, 0.25));
}

TEST_CASE("parameters without a gradient are marked, and a new step starts empty") {
  auto used = torch::ones({2}, torch::requires_grad());
  auto unused = torch::ones({2}, torch::requires_grad());
  auto frozen = torch::ones({2});
  GradientMonitor monitor({{"used", used}, {"unused", unused}, {"frozen", frozen}});
  REQUIRE(monitor.stats().size() == 2u);  // frozen has no hook
  monitor.beginStep();
  used.sum().backward();
  CHECK(monitor.stats()[0].hasGradient);
  CHECK(!monitor.stats()[1].hasGradient);
  monitor.beginStep();
  CHECK(!monitor.stats()[0].hasGradient);
  CHECK(monitor.stats()[0].name == "used");
}

// A sparse gradient (an embedding's with sparse=True, an index repeated): its statistics are the
// dense gradient's. The kernels take dense tensors; handed the sparse one, every step of such a
// model failed.
TEST_CASE("a sparse gradient's statistics are the dense one's") {
  torch::manual_seed(1);
  auto w = torch::randn({10, 4}, torch::requires_grad());
  GradientMonitor monitor({{"w", w}});
  monitor.beginStep();
  const auto rows = torch::tensor({1, 3, 3, 7}, torch::kLong);
  torch::embedding(w, rows, -1, false, /*sparse=*/true).pow(2).sum().backward();
  REQUIRE(w.grad().is_sparse());
  const auto dense = w.grad().to_dense();
  const auto& s = monitor.stats();
  REQUIRE(s.size() == 1u);
  CHECK(s[0].hasGradient);
  CHECK(near(s[0].norm, dense.norm().item<double>()));
  CHECK(near(s[0].maxAbs, dense.abs().max().item<double>()));
  CHECK(near(s[0].meanAbs, dense.abs().mean().item<double>()));
}
