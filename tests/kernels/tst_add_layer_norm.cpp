// symtune::add_layer_norm against the ATen composition (x + r, then layer_norm over the last
// dimension): both outputs, and the gradients of input, residual, weight and bias through
// autograd — with a loss on the output alone and on both outputs — over shapes (one column, odd
// sizes, 3-D, a transformer width, non-contiguous) and dtypes, with and without weight and bias;
// finite differences in float64; bad arguments refused. CUDA rows say why they skip where no GPU
// is present.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda_rows.h"
#include "error_of.h"
#include "kernel_dtypes.h"
#include "symtune/kernels/add_layer_norm.h"

namespace {

struct Shape {
  const char* name;
  std::vector<int64_t> sizes;
  bool affine, transposed, useSum;  // useSum: the loss also reads the sum output
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {{"4x1", {4, 1}, true, false, false},
                                         {"7x13 affine", {7, 13}, true, false, true},
                                         {"7x13 plain", {7, 13}, false, false, false},
                                         {"3x5x129", {3, 5, 129}, true, false, true},
                                         {"64x768", {64, 768}, true, false, false},
                                         {"transposed 24x17", {24, 17}, true, true, true}};
  return all;
}

void matchesTheComposition(const Shape& s, const char* dtypeName, torch::Dtype dtype, bool cuda) {
  INFO((cuda ? "cuda " : "cpu "), s.name, " ", dtypeName);
  torch::manual_seed(17);
  const auto opts = torch::TensorOptions().dtype(dtype).device(cuda ? torch::kCUDA : torch::kCPU);
  auto make = [&] {
    if (!s.transposed)
      return torch::randn(s.sizes, opts) * 2 + 0.5;
    std::vector<int64_t> flipped(s.sizes.rbegin(), s.sizes.rend());
    return (torch::randn(flipped, opts) * 2 + 0.5).t();
  };
  const auto x = make(), r = make();
  const int64_t columns = s.sizes.back();
  torch::Tensor w, b;
  if (s.affine) {
    w = torch::randn({columns}, opts);
    b = torch::randn({columns}, opts);
  }
  auto leaf = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().clone().requires_grad_(true) : torch::Tensor();
  };
  auto x1 = leaf(x), r1 = leaf(r), w1 = leaf(w), b1 = leaf(b);
  auto x2 = leaf(x), r2 = leaf(r), w2 = leaf(w), b2 = leaf(b);
  const auto [out1, sum1] = symtune::kernels::addLayerNorm(x1, r1, w1, b1, 1e-5);
  const auto sum2 = x2 + r2;
  const auto out2 = torch::layer_norm(sum2, {columns}, w2, b2, 1e-5);
  const auto upstream = torch::randn_like(out2), upstreamSum = torch::randn_like(sum2);
  auto loss1 = (out1 * upstream).sum(), loss2 = (out2 * upstream).sum();
  if (s.useSum) {
    loss1 = loss1 + (sum1 * upstreamSum).sum();
    loss2 = loss2 + (sum2 * upstreamSum).sum();
  }
  loss1.backward();
  loss2.backward();
  const double tolerance = dtype == torch::kBFloat16  ? 3e-2
                           : dtype == torch::kFloat64 ? 1e-10
                                                      : 2e-5;
  // Against the reference's largest entry (at least 1e-3: a gradient that is all rounding noise
  // has no scale of its own).
  auto check = [&](const char* what, const torch::Tensor& a, const torch::Tensor& e) {
    const auto actual = a.detach().to(torch::kDouble), expected = e.detach().to(torch::kDouble);
    const double error = (actual - expected).abs().max().item<double>() /
                         std::max(expected.abs().max().item<double>(), 1e-3);
    INFO(what, ": ", error);
    CHECK(error <= tolerance);
  };
  check("output", out1, out2);
  check("sum", sum1, sum2);
  if (columns == 1) {
    // A one-column row normalizes to exactly 0: the input's and the weight's gradients are 0 in
    // exact arithmetic, rounding noise times 1/sqrt(eps) ≈ 316 in float (ours and ATen's).
    CHECK(x1.grad().abs().max().item<double>() <= 100 * tolerance);
    CHECK(w1.grad().abs().max().item<double>() <= 100 * tolerance);
    check("bias gradient", b1.grad(), b2.grad());
    return;
  }
  check("input gradient", x1.grad(), x2.grad());
  check("residual gradient", r1.grad(), r2.grad());
  if (s.affine) {
    check("weight gradient", w1.grad(), w2.grad());
    check("bias gradient", b1.grad(), b2.grad());
  }
}

}  // namespace

TEST_CASE("matches the composition on the CPU") {
  for (const Shape& s : shapes()) {
    for (const auto& [dtypeName, dtype] : symtune::test::kernelDtypes())
      matchesTheComposition(s, dtypeName, dtype, false);
  }
}

TEST_CASE("matches the composition on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  for (const Shape& s : shapes()) {
    for (const auto& [dtypeName, dtype] : symtune::test::kernelDtypes())
      matchesTheComposition(s, dtypeName, dtype, true);
  }
}

TEST_CASE("finite differences") {
  torch::manual_seed(19);
  auto x = torch::randn({3, 6}, torch::kFloat64).requires_grad_(true);
  auto r = torch::randn({3, 6}, torch::kFloat64).requires_grad_(true);
  auto w = torch::randn({6}, torch::kFloat64).requires_grad_(true);
  auto b = torch::randn({6}, torch::kFloat64).requires_grad_(true);
  const auto upstream = torch::randn({3, 6}, torch::kFloat64);
  const auto upstreamSum = torch::randn({3, 6}, torch::kFloat64);
  auto loss = [&](const torch::Tensor& xv, const torch::Tensor& rv, const torch::Tensor& wv,
                  const torch::Tensor& bv) {
    const auto [out, sum] = symtune::kernels::addLayerNorm(xv, rv, wv, bv, 1e-5);
    return (out * upstream).sum() + (sum * upstreamSum).sum();
  };
  loss(x, r, w, b).backward();
  const double h = 1e-6;
  torch::NoGradGuard noGrad;
  std::vector<std::pair<const char*, torch::Tensor*>> params = {
      {"x", &x}, {"r", &r}, {"w", &w}, {"b", &b}};
  for (auto& [name, p] : params) {
    for (int64_t i = 0; i < p->numel(); ++i) {
      auto plus = p->detach().clone(), minus = p->detach().clone();
      plus.view(-1)[i] += h;
      minus.view(-1)[i] -= h;
      auto at = [&](const torch::Tensor& v) {
        return loss(p == &x ? v : x.detach(), p == &r ? v : r.detach(), p == &w ? v : w.detach(),
                    p == &b ? v : b.detach())
            .item<double>();
      };
      const double numeric = (at(plus) - at(minus)) / (2 * h);
      INFO(name, "[", i, "]");
      CHECK(std::abs(numeric - p->grad().view(-1)[i].item<double>()) < 1e-6);
    }
  }
}

// A loss on the sum alone: its gradient passes to both inputs, the norm's parameters get none.
TEST_CASE("only the sum used") {
  auto x = torch::randn({4, 9}).requires_grad_(true), r = torch::randn({4, 9}).requires_grad_(true);
  auto w = torch::randn({9}).requires_grad_(true), b = torch::randn({9}).requires_grad_(true);
  const auto upstream = torch::randn({4, 9});
  const auto sum = std::get<1>(symtune::kernels::addLayerNorm(x, r, w, b, 1e-5));
  (sum * upstream).sum().backward();
  CHECK(torch::equal(x.grad(), upstream));
  CHECK(torch::equal(r.grad(), upstream));
  CHECK((!w.grad().defined() || torch::equal(w.grad(), torch::zeros_like(w))));
  CHECK((!b.grad().defined() || torch::equal(b.grad(), torch::zeros_like(b))));
}

TEST_CASE("bad arguments are refused") {
  const struct {
    std::vector<int64_t> residualShape;
    int64_t weightSize;
    double eps;
    std::string message;
  } cases[] = {
      {{3, 5}, 4, 1e-5, "the residual has shape [3, 5], the input [3, 4]"},
      {{3, 4}, 5, 1e-5, "weight and bias must be [4], got [5]"},
      {{3, 4}, 4, -1.0, "eps must not be negative, got -1"},
  };
  const auto x = torch::randn({3, 4});
  for (const auto& c : cases) {
    const auto r = torch::randn(c.residualShape);
    const auto w = torch::ones({c.weightSize});
    const std::string error = symtune::test::errorOf(
        [&] { symtune::kernels::addLayerNorm(x, r, w, torch::Tensor(), c.eps); });
    INFO(error);
    CHECK(error.find(c.message) != std::string::npos);
  }
  // Another device (meta stands in for a CPU weight given with a CUDA input).
  const auto elsewhere = torch::ones({4}, torch::TensorOptions().device(torch::kMeta));
  const std::string error = symtune::test::errorOf([&] {
    symtune::kernels::addLayerNorm(x, torch::randn({3, 4}), elsewhere, {}, 1e-5);
  });
  INFO(error);
  CHECK(error.find("weight and bias must be on cpu with the input, got meta") != std::string::npos);
}
