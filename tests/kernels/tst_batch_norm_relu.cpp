// symtune::batch_norm_relu against the ATen composition (training batch_norm, then relu) computed
// in float64: the output, the running statistics, and the gradients of input, weight and bias
// through autograd — over shapes (2-D, odd sizes, few and many channels, a value left over after
// the vector-wide rows of a channels-last activation) in both layouts and dtypes; the layout kept;
// finite differences in float64; bad arguments refused with one line.

#include "doctest_torch.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "error_of.h"
#include "symtune/kernels/batch_norm_relu.h"
#include "tensor_compare.h"

namespace {

struct Shape {
  const char* name;
  std::vector<int64_t> sizes;
  bool channelsLast;
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {"6x5", {6, 5}, false},
      {"3x7x11 (1-d images)", {3, 7, 11}, false},
      {"4x16x9x9", {4, 16, 9, 9}, false},
      {"16x8x32x32", {16, 8, 32, 32}, false},
      {"16x8x32x32 channels-last", {16, 8, 32, 32}, true},
      {"3x8x5x5 channels-last (an odd row left)", {3, 8, 5, 5}, true},
      {"2x12x5x5 channels-last", {2, 12, 5, 5}, true},
      {"7x2x3x3 channels-last", {7, 2, 3, 3}, true},
      {"4x48x8x8 channels-last", {4, 48, 8, 8}, true},
  };
  return all;
}

struct Result {
  torch::Tensor out, gx, gw, gb, mean, var;
};

Result run(const Shape& s, torch::Dtype dtype, bool fused) {
  torch::manual_seed(23);
  const int64_t channels = s.sizes[1];
  auto x = torch::randn(s.sizes, torch::kDouble) * 2 + 0.5;
  if (s.channelsLast)
    x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  const auto w0 = torch::rand({channels}, torch::kDouble) + 0.5;
  const auto b0 = torch::randn({channels}, torch::kDouble) * 0.1;
  const auto grad = torch::randn(s.sizes, torch::kDouble);
  // The reference in float64 from the same values; the fused op in `dtype`.
  const auto type = fused ? dtype : torch::kDouble;
  auto input = x.to(type).detach().requires_grad_(true);
  auto w = w0.to(type).requires_grad_(true);
  auto b = b0.to(type).requires_grad_(true);
  Result r;
  r.mean = torch::full({channels}, 0.25, type);
  r.var = torch::full({channels}, 2.0, type);
  if (fused) {
    r.out = symtune::kernels::batchNormRelu(input, w, b, r.mean, r.var, 0.1, 1e-5);
  } else {
    r.out = torch::relu(torch::batch_norm(input, w, b, r.mean, r.var, true, 0.1, 1e-5, false));
  }
  r.out.backward(grad.to(type));
  r.gx = input.grad();
  r.gw = w.grad();
  r.gb = b.grad();
  return r;
}

}  // namespace

TEST_CASE("batch_norm_relu matches batch norm then ReLU, forward, running statistics, backward") {
  for (const auto& s : shapes()) {
    for (const auto& [dtypeName, dtype, within] :
         std::vector<std::tuple<std::string, torch::Dtype, double>>{
             {"float32", torch::kFloat, 2e-6}, {"float64", torch::kDouble, 1e-12}}) {
      INFO(s.name, " ", dtypeName);
      const Result want = run(s, dtype, false);
      const Result got = run(s, dtype, true);
      CHECK((got.out.scalar_type() == dtype));
      symtune::test::checkScaledError("output", got.out, want.out, within);
      symtune::test::checkScaledError("running mean", got.mean, want.mean, within);
      symtune::test::checkScaledError("running variance", got.var, want.var, within);
      symtune::test::checkScaledError("input gradient", got.gx, want.gx, within);
      symtune::test::checkScaledError("weight gradient", got.gw, want.gw, within);
      symtune::test::checkScaledError("bias gradient", got.gb, want.gb, within);
      // The activation's layout is kept, forward and backward.
      const auto format =
          s.channelsLast ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
      CHECK(got.out.is_contiguous(format));
      CHECK(got.gx.is_contiguous(format));
    }
  }
}

TEST_CASE("batch_norm_relu: without running statistics, and finite differences in float64") {
  torch::manual_seed(5);
  const auto x = torch::randn({3, 4, 2, 3}, torch::kDouble).requires_grad_(true);
  const auto w = (torch::rand({4}, torch::kDouble) + 0.5).requires_grad_(true);
  const auto b = torch::randn({4}, torch::kDouble).requires_grad_(true);
  const auto untracked = symtune::kernels::batchNormRelu(x, w, b, {}, {}, 0.1, 1e-5);
  const auto plain = torch::relu(torch::batch_norm(x, w, b, {}, {}, true, 0.1, 1e-5, false));
  symtune::test::checkScaledError("untracked output", untracked, plain, 1e-12);
  // d/dx of sum(out * k) against central differences (no value sits at the ReLU's kink).
  const auto k = torch::randn({3, 4, 2, 3}, torch::kDouble);
  const auto loss = [&](const torch::Tensor& input) {
    return (symtune::kernels::batchNormRelu(input, w, b, {}, {}, 0.1, 1e-5) * k).sum();
  };
  const auto analytic = torch::autograd::grad({loss(x)}, {x})[0];
  auto numeric = torch::zeros_like(x);
  const double h = 1e-6;
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto plus = x.detach().clone(), minus = x.detach().clone();
    plus.view(-1)[i] += h;
    minus.view(-1)[i] -= h;
    numeric.view(-1)[i] = (loss(plus) - loss(minus)).item<double>() / (2 * h);
  }
  symtune::test::checkScaledError("finite differences", analytic, numeric, 1e-6);
}

// Note [Lanes flushed to double] in kernels/src/cpu/batch_norm_relu_cpu.cpp: a channel's plane
// of 512 x 512 values around 100, summed in float lanes whole, gave a mean 4e-5 off and outputs
// 3.7e-5 off a float64 reference (ATen's: 1.8e-6); the weight's gradient 8e-5 off.
TEST_CASE("batch_norm_relu keeps float64's digits over a large plane") {
  const auto x = (torch::randn({1, 2, 512, 512}) + 100).requires_grad_();
  const auto w = torch::ones({2}).requires_grad_(), b = torch::full({2}, 0.5).requires_grad_();
  const auto y = symtune::kernels::batchNormRelu(x, w, b, {}, {}, 0.1, 1e-5);
  const auto gy = torch::randn_like(y);
  y.backward(gy);
  const auto x64 = x.detach().to(torch::kDouble).requires_grad_();
  const auto w64 = w.detach().to(torch::kDouble).requires_grad_();
  const auto b64 = b.detach().to(torch::kDouble).requires_grad_();
  const auto z64 = torch::batch_norm(x64, w64, b64, {}, {}, true, 0.1, 1e-5, false);
  const auto y64 = torch::relu(z64);
  // The gradients through the kernel's own ReLU mask: an output within rounding of zero may take
  // the other side in float64, and one such value moves a sum more than its rounding does.
  const auto mask = (y.detach() > 0).to(torch::kDouble);
  (z64 * mask * gy.to(torch::kDouble)).sum().backward();
  const auto off = [](const torch::Tensor& got, const torch::Tensor& want) {
    return (got.to(torch::kDouble) - want).abs().max().item<double>() /
           std::max(1.0, want.abs().max().item<double>());
  };
  MESSAGE("output ", off(y.detach(), y64.detach()), ", weight gradient ", off(w.grad(), w64.grad()),
          " off float64");
  CHECK(off(y.detach(), y64.detach()) < 1e-5);
  CHECK(off(w.grad(), w64.grad()) < 1e-5);
}

TEST_CASE("batch_norm_relu refuses what it does not compute, in one line") {
  const auto x = torch::randn({4, 3, 5});
  const auto v = torch::ones({3});
  using symtune::test::errorOf;
  CHECK(errorOf([&] {
          symtune::kernels::batchNormRelu(x, torch::ones({4}), v, {}, {}, 0.1, 1e-5);
        }).find("the weight must be a vector of 3 Float on cpu") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::batchNormRelu(x.to(torch::kInt), v, v, {}, {}, 0.1, 1e-5);
        }).find("float or double input") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::batchNormRelu(torch::randn({1, 3}), v, v, {}, {}, 0.1, 1e-5);
        }).find("expected more than 1 value per channel") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::batchNormRelu(x, v, v, v.clone(), {}, 0.1, 1e-5);
        }).find("both running statistics or neither") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::batchNormRelu(torch::randn({5}), v, v, {}, {}, 0.1, 1e-5);
        }).find("the input must be [N, C, ...]") != std::string::npos);
}

TEST_CASE("batch_norm_relu_backward refuses statistics that do not fit the channels") {
  // Until 2026-12-07 the backward operator, called as it is, never checked save_mean and
  // save_invstd: one value for 64 channels was read past its end.
  static const auto backward = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("symtune::batch_norm_relu_backward", "")
                                   .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                       const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  const auto x = torch::randn({8, 64, 4, 4});
  const auto y = torch::relu(x), w = torch::ones({64});
  const auto mean = torch::zeros({64}), invstd = torch::ones({64});
  const struct {
    const char* name;
    at::Tensor grad, mean, invstd;
    std::string message;
  } rows[] = {
      {"save_mean of one value for 64 channels", torch::ones_like(x), torch::zeros({1}), invstd,
       "save_mean must be a vector of 64 Float on cpu, got [1] Float"},
      {"save_invstd of 65 values", torch::ones_like(x), mean, torch::ones({65}),
       "save_invstd must be a vector of 64 Float on cpu, got [65] Float"},
      {"save_invstd in double", torch::ones_like(x), mean, invstd.to(torch::kDouble),
       "save_invstd must be a vector of 64 Float on cpu, got [64] Double"},
      {"save_mean as a [64, 1] matrix", torch::ones_like(x), mean.view({64, 1}), invstd,
       "save_mean must be a vector of 64 Float on cpu, got [64, 1] Float"},
      {"a gradient in double", torch::ones_like(x, torch::kDouble), mean, invstd,
       "the gradient must be Float on cpu as the input is, got Double on cpu"},
  };
  for (const auto& row : rows) {
    const std::string error =
        symtune::test::errorOf([&] { backward.call(row.grad, x, y, w, row.mean, row.invstd); });
    INFO(row.name, ": ", error);
    CHECK(error.find("symtune::batch_norm_relu_backward: " + row.message) != std::string::npos);
  }
  // Statistics of any layout are read by value: a strided save_mean gives the contiguous one's
  // gradients.
  const auto stats = torch::rand({64, 2}) + 0.5;
  const auto strided = stats.select(1, 0);
  REQUIRE(!strided.is_contiguous());
  const auto [gxS, gwS, gbS] = backward.call(torch::ones_like(x), x, y, w, strided, invstd);
  const auto [gx, gw, gb] =
      backward.call(torch::ones_like(x), x, y, w, strided.contiguous(), invstd);
  CHECK(torch::equal(gxS, gx));
  CHECK(torch::equal(gwS, gw));
  CHECK(torch::equal(gbS, gb));
}
