// symtune::kernels::batchNormReluConv2d against the ATen composition (training batch_norm, relu,
// conv2d) computed in float64 from the same values: the output, the running statistics and every
// gradient, in both layouts and dtypes, with and without the convolution's bias, at strides 1 and
// 2 and with groups; only the gradients asked for; the per-element steps it exports against
// ATen's batch norm and ReLU; bad arguments refused with one line.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <string>
#include <tuple>
#include <vector>

#include "error_of.h"
#include "symtune/kernels/batch_norm_relu_conv.h"
#include "tensor_compare.h"

namespace {

struct Case {
  const char* name;
  std::vector<int64_t> sizes;  // the input's [N, C, H, W]
  int64_t out, stride, groups;
  bool channelsLast, convBias;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"8x16x12x12 to 16", {8, 16, 12, 12}, 16, 1, 1, false, false},
      {"8x16x12x12 to 24, stride 2, channels-last", {8, 16, 12, 12}, 24, 2, 1, true, false},
      {"4x6x9x7 to 8, conv bias", {4, 6, 9, 7}, 8, 1, 1, false, true},
      {"4x8x10x10 to 12, groups 2, stride 2, conv bias, channels-last",
       {4, 8, 10, 10},
       12,
       2,
       2,
       true,
       true},
      {"3x5x5x5 to 5, channels-last (5 channels)", {3, 5, 5, 5}, 5, 1, 1, true, false},
      // 1 × 1 pixels, channels-last: a layout does not fix the gradient's strides there.
      {"3x6x1x1 to 4, channels-last (1x1 pixels)", {3, 6, 1, 1}, 4, 1, 1, true, false},
  };
  return all;
}

struct Result {
  torch::Tensor out, gx, gw, gb, gcw, gcb, mean, var;
};

Result run(const Case& k, torch::Dtype dtype, bool fused) {
  torch::manual_seed(31);
  const int64_t channels = k.sizes[1];
  auto x = torch::randn(k.sizes, torch::kDouble) * 2 + 0.5;
  const auto w0 = torch::rand({channels}, torch::kDouble) + 0.5;
  const auto b0 = torch::randn({channels}, torch::kDouble) * 0.1;
  const auto cw0 = torch::randn({k.out, channels / k.groups, 3, 3}, torch::kDouble) * 0.2;
  const auto cb0 = torch::randn({k.out}, torch::kDouble);
  // The reference in float64 from the same values; the fused op in `dtype`.
  const auto type = fused ? dtype : torch::kDouble;
  const auto format =
      k.channelsLast ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  auto input = x.to(type).contiguous(format).requires_grad_(true);
  auto w = w0.to(type).requires_grad_(true);
  auto b = b0.to(type).requires_grad_(true);
  auto cw = cw0.to(type).contiguous(format).requires_grad_(true);
  auto cb = k.convBias ? cb0.to(type).requires_grad_(true) : torch::Tensor();
  Result r;
  r.mean = torch::full({channels}, 0.25, type);
  r.var = torch::full({channels}, 2.0, type);
  const std::vector<int64_t> stride{k.stride, k.stride}, padding{1, 1}, dilation{1, 1};
  if (fused) {
    r.out = symtune::kernels::batchNormReluConv2d(input, w, b, r.mean, r.var, 0.1, 1e-5, cw, cb,
                                                  stride, padding, dilation, k.groups);
  } else {
    r.out = torch::conv2d(
        torch::relu(torch::batch_norm(input, w, b, r.mean, r.var, true, 0.1, 1e-5, false)), cw, cb,
        stride, padding, dilation, k.groups);
  }
  const auto grad = torch::randn(r.out.sizes(), torch::kDouble).to(type);
  r.out.backward(grad);
  r.gx = input.grad();
  r.gw = w.grad();
  r.gb = b.grad();
  r.gcw = cw.grad();
  if (k.convBias)
    r.gcb = cb.grad();
  return r;
}

}  // namespace

TEST_CASE("batch_norm_relu_conv2d matches batch norm, ReLU and convolution, forward and backward") {
  for (const auto& k : cases()) {
    for (const auto& [dtypeName, dtype, within] :
         std::vector<std::tuple<std::string, torch::Dtype, double>>{
             {"float32", torch::kFloat, 2e-5}, {"float64", torch::kDouble, 1e-11}}) {
      INFO(k.name, " ", dtypeName);
      const Result want = run(k, dtype, false);
      const Result got = run(k, dtype, true);
      CHECK((got.out.scalar_type() == dtype));
      symtune::test::checkScaledError("output", got.out, want.out, within);
      symtune::test::checkScaledError("running mean", got.mean, want.mean, within);
      symtune::test::checkScaledError("running variance", got.var, want.var, within);
      symtune::test::checkScaledError("input gradient", got.gx, want.gx, within);
      symtune::test::checkScaledError("weight gradient", got.gw, want.gw, within);
      symtune::test::checkScaledError("bias gradient", got.gb, want.gb, within);
      symtune::test::checkScaledError("convolution weight gradient", got.gcw, want.gcw, within);
      if (k.convBias)
        symtune::test::checkScaledError("convolution bias gradient", got.gcb, want.gcb, within);
      // The input's layout is its gradient's.
      const auto format =
          k.channelsLast ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
      CHECK(got.gx.is_contiguous(format));
    }
  }
}

TEST_CASE("batch_norm_relu_conv2d computes the gradients asked for, without running statistics") {
  torch::manual_seed(7);
  const auto x = torch::randn({4, 6, 8, 8}, torch::kDouble);
  const auto w = torch::rand({6}, torch::kDouble) + 0.5;
  const auto b = torch::randn({6}, torch::kDouble);
  const auto cw = torch::randn({6, 6, 3, 3}, torch::kDouble) * 0.2;
  const auto fused = [&](const torch::Tensor& input, const torch::Tensor& convWeight) {
    return symtune::kernels::batchNormReluConv2d(input, w, b, {}, {}, 0.1, 1e-5, convWeight, {},
                                                 {1, 1}, {1, 1}, {1, 1}, 1);
  };
  const auto plain = [&](const torch::Tensor& input, const torch::Tensor& convWeight) {
    return torch::conv2d(
        torch::relu(torch::batch_norm(input, w, b, {}, {}, true, 0.1, 1e-5, false)), convWeight, {},
        1, 1);
  };
  // Only the convolution's weight asks for one: the input's is not computed.
  auto cw1 = cw.clone().requires_grad_(true), cw2 = cw.clone().requires_grad_(true);
  fused(x, cw1).sum().backward();
  plain(x, cw2).sum().backward();
  symtune::test::checkScaledError("convolution weight gradient", cw1.grad(), cw2.grad(), 1e-11);
  // Only the input asks for one.
  auto x1 = x.clone().requires_grad_(true), x2 = x.clone().requires_grad_(true);
  fused(x1, cw).sum().backward();
  plain(x2, cw).sum().backward();
  symtune::test::checkScaledError("input gradient", x1.grad(), x2.grad(), 1e-11);
  // A non-contiguous input (a transposed view) is read as its values.
  const auto t = x.transpose(2, 3);
  symtune::test::checkScaledError("transposed input", fused(t, cw), plain(t, cw), 1e-11);
}

TEST_CASE("the in-place steps: batch norm and ReLU forward, and their backward over the gradient") {
  torch::manual_seed(11);
  for (const bool channelsLast : {false, true}) {
    const std::string layout = channelsLast ? "channels-last" : "contiguous";
    INFO(layout);
    const auto format =
        channelsLast ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    const auto x = (torch::randn({5, 7, 6, 6}, torch::kDouble) * 3 + 1).contiguous(format);
    const auto w = torch::rand({7}, torch::kDouble) + 0.5;
    const auto b = torch::randn({7}, torch::kDouble);
    auto [unused, mean, invstd] = torch::native_batch_norm(x, w, b, {}, {}, true, 0.1, 1e-5);
    auto activation = x.clone();
    symtune::kernels::batchNormReluInPlace(activation, w, b, mean, invstd);
    const auto input = x.clone().requires_grad_(true);
    const auto wg = w.clone().requires_grad_(true), bg = b.clone().requires_grad_(true);
    const auto reference =
        torch::relu(torch::batch_norm(input, wg, bg, {}, {}, true, 0.1, 1e-5, false));
    symtune::test::checkScaledError("activation", activation, reference, 1e-12);
    const auto grad = torch::randn(x.sizes(), torch::kDouble).contiguous(format);
    reference.backward(grad);
    auto written = grad.clone();
    const auto [gradWeight, gradBias] =
        symtune::kernels::batchNormReluBackwardInPlace(written, x, w, b, mean, invstd);
    symtune::test::checkScaledError("input gradient", written, input.grad(), 1e-11);
    symtune::test::checkScaledError("weight gradient", gradWeight, wg.grad(), 1e-11);
    symtune::test::checkScaledError("bias gradient", gradBias, bg.grad(), 1e-11);
  }
}

TEST_CASE("batch_norm_relu_conv2d refuses what it does not compute, in one line") {
  const auto x = torch::randn({2, 3, 4, 4});
  const auto v = torch::ones({3});
  const auto cw = torch::randn({3, 3, 3, 3});
  using symtune::test::errorOf;
  const auto call = [&](const torch::Tensor& input, const torch::Tensor& weight,
                        const torch::Tensor& convWeight) {
    symtune::kernels::batchNormReluConv2d(input, weight, v, {}, {}, 0.1, 1e-5, convWeight, {},
                                          {1, 1}, {1, 1}, {1, 1}, 1);
  };
  CHECK(errorOf([&] {
          call(torch::randn({2, 3, 4}), v, cw);
        }).find("the input must be [N, C, H, W]") != std::string::npos);
  CHECK(errorOf([&] {
          call(x, torch::ones({4}), cw);
        }).find("the weight must be a vector of 3 Float on cpu") != std::string::npos);
  CHECK(errorOf([&] { call(x.to(torch::kInt), v, cw); }).find("float or double input") !=
        std::string::npos);
  CHECK(errorOf([&] {
          call(x, v, cw.to(torch::kDouble));
        }).find("the convolution's weight must be [out, in / groups, kH, kW] of Float") !=
        std::string::npos);
  auto wrongLayout = torch::randn({2, 3, 4, 4}).contiguous(torch::MemoryFormat::ChannelsLast);
  const auto [unused, mean, invstd] = torch::native_batch_norm(x, v, v, {}, {}, true, 0.1, 1e-5);
  CHECK(errorOf([&] {
          symtune::kernels::batchNormReluBackwardInPlace(wrongLayout, x, v, v, mean, invstd);
        }).find("the gradient must have the input's shape, layout and dtype") != std::string::npos);
}
