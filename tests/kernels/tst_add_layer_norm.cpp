// symtune::add_layer_norm against the ATen composition (x + r, then layer_norm over the last
// dimension): both outputs, and the gradients of input, residual, weight and bias through
// autograd — with a loss on the output alone and on both outputs — over shapes (one column, odd
// sizes, 3-D, a transformer width, non-contiguous) and dtypes, with and without weight and bias;
// finite differences in float64; bad arguments refused. CUDA rows say why they skip where no GPU
// is present.

#include "doctest_torch.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_rows.h"
#include "error_of.h"
#include "kernel_dtypes.h"
#include "symtune/kernels/add_layer_norm.h"

namespace {

using Optional = std::optional<at::Tensor>;
using BackwardSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const Optional&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const Optional&);

// The backward operator as TorchScript calls it, past autograd.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backwardOperator(
    const at::Tensor& gradOut, const Optional& gradSum, const at::Tensor& sum,
    const at::Tensor& mean, const at::Tensor& rstd, const Optional& weight) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::add_layer_norm_backward", "")
                             .typed<BackwardSignature>();
  return op.call(gradOut, gradSum, sum, mean, rstd, weight);
}

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

TEST_CASE("the backward operator refuses arguments that do not fit the sum") {
  // Until 2026-12-07 the backward checked none of its arguments: a grad_sum of [1, 64] or a mean
  // of 3 values for 4096 rows was read past its end (a segfault), a sum without columns divided
  // by zero.
  const auto f = torch::TensorOptions().dtype(torch::kFloat);
  const auto sum = torch::randn({4096, 64}, f);
  const auto dy = torch::ones({4096, 64}, f);
  const auto mean = torch::zeros({4096}, f), rstd = torch::ones({4096}, f);
  const struct {
    const char* name;
    at::Tensor gradOut;
    Optional gradSum;
    at::Tensor sum, mean, rstd;
    Optional weight;
    std::string message;
  } rows[] = {
      {"grad_sum of [1, 64] for a sum of [4096, 64]", dy, torch::ones({1, 64}, f), sum, mean, rstd,
       std::nullopt, "grad_sum must be Float [4096, 64] on cpu as the sum is, got Float [1, 64]"},
      {"grad_output of another width", torch::ones({4096, 32}, f), std::nullopt, sum, mean, rstd,
       std::nullopt,
       "grad_output must be Float [4096, 64] on cpu as the sum is, got Float [4096, 32]"},
      {"grad_output of another dtype", dy.to(torch::kDouble), std::nullopt, sum, mean, rstd,
       std::nullopt, "grad_output must be Float [4096, 64] on cpu as the sum is, got Double"},
      {"a mean of 3 values for 4096 rows", dy, std::nullopt, sum, torch::zeros({3}, f), rstd,
       std::nullopt, "mean must hold one Float per row of the sum (4096) on cpu, got Float [3]"},
      {"rstd in double for a float sum", dy, std::nullopt, sum, mean, rstd.to(torch::kDouble),
       std::nullopt,
       "rstd must hold one Float per row of the sum (4096) on cpu, got Double [4096]"},
      {"a weight of another width", dy, std::nullopt, sum, mean, rstd, torch::ones({32}, f),
       "the weight must be Float [64] on cpu, got Float [32]"},
      {"a sum without columns", torch::ones({4, 0}, f), std::nullopt, torch::ones({4, 0}, f),
       torch::zeros({4}, f), torch::ones({4}, f), std::nullopt,
       "the sum needs a last dimension to normalize, got [4, 0]"},
  };
  for (const auto& row : rows) {
    const std::string error = symtune::test::errorOf([&] {
      backwardOperator(row.gradOut, row.gradSum, row.sum, row.mean, row.rstd, row.weight);
    });
    INFO(row.name, ": ", error);
    CHECK(error.find("symtune::add_layer_norm_backward: ") != std::string::npos);
    CHECK(error.find(row.message) != std::string::npos);
  }
}

TEST_CASE("the backward operator reads strided row statistics, and takes zero rows") {
  // Until 2026-12-07 the CPU backward read mean and rstd as if contiguous: every other value of a
  // strided view was the wrong row's.
  torch::manual_seed(23);
  const auto sum = torch::randn({6, 10}), dy = torch::randn({6, 10}), w = torch::randn({10});
  const auto mean = torch::randn({6}), rstd = torch::rand({6}) + 0.5;
  // The same values, every other element of a buffer twice as long.
  const auto strided = [](const torch::Tensor& t) {
    return torch::stack({t, torch::full_like(t, 1e3)}, 1).select(1, 0);
  };
  REQUIRE(!strided(mean).is_contiguous());
  const auto [ds, dw, db] = backwardOperator(dy, std::nullopt, sum, mean, rstd, w);
  const auto [dsS, dwS, dbS] =
      backwardOperator(dy, std::nullopt, sum, strided(mean), strided(rstd), w);
  CHECK(torch::equal(dsS, ds));
  CHECK(torch::equal(dwS, dw));
  CHECK(torch::equal(dbS, db));
  // No rows: an empty gradient for the sum, zeros for the weight and the bias.
  const auto [dsEmpty, dwEmpty, dbEmpty] =
      backwardOperator(torch::ones({0, 5}), std::nullopt, torch::ones({0, 5}), torch::zeros({0}),
                       torch::ones({0}), torch::ones({5}));
  CHECK((dsEmpty.sizes().vec() == std::vector<int64_t>{0, 5}));
  CHECK(torch::equal(dwEmpty, torch::zeros({5})));
  CHECK(torch::equal(dbEmpty, torch::zeros({5})));
}

TEST_CASE("the backward operator on CUDA refuses statistics left on the CPU") {
  if (!symtune::test::cudaRowsRun())
    return;
  // Until 2026-12-07 a CPU mean among CUDA tensors was dispatched to the CUDA kernel and read
  // there as a device pointer (an illegal access that poisons the context).
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto sum = torch::randn({4096, 64}, cuda);
  const std::string error = symtune::test::errorOf([&] {
    backwardOperator(torch::ones_like(sum), std::nullopt, sum, torch::zeros({4096}),
                     torch::ones({4096}, cuda), std::nullopt);
  });
  INFO(error);
  CHECK(error.find("mean must hold one Float per row of the sum (4096) on cuda:0, got Float "
                   "[4096] on cpu") != std::string::npos);
}
