// symtune::kernels::convBlockPairAgain against the ATen composition (conv2d, training batch_norm,
// relu, twice) computed in float64 from the same values: the output, the running statistics
// (updated once), every gradient, in both layouts and dtypes, with strides and groups, with and
// without an input that asks for a gradient; it keeps less than the composition for the
// backward; bad arguments refused, naming the block and what is wrong.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <string>
#include <tuple>
#include <vector>

#include "error_of.h"
#include "symtune/kernels/conv_block_pair.h"
#include "symtune/telemetry/memory_tracker.h"
#include "tensor_compare.h"

namespace {

using symtune::kernels::ConvBlock;

struct Case {
  const char* name;
  std::vector<int64_t> sizes;  // the input's [N, C, H, W]
  int64_t middle, out, stride1, stride2, groups;
  bool channelsLast, inputGrad;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"8x3x12x12 to 8 to 8 (images)", {8, 3, 12, 12}, 8, 8, 1, 1, 1, false, false},
      {"8x3x12x12 to 8 to 8, channels-last", {8, 3, 12, 12}, 8, 8, 1, 1, 1, true, false},
      {"4x6x10x10 to 12 stride 2 to 12, input gradient",
       {4, 6, 10, 10},
       12,
       12,
       2,
       1,
       1,
       false,
       true},
      {"4x8x9x9 to 8 to 16 stride 2, groups 2, channels-last, input gradient",
       {4, 8, 9, 9},
       8,
       16,
       1,
       2,
       2,
       true,
       true},
      // 1 × 1 pixels out, channels-last: the incoming gradient is contiguous, its strides not
      // the output's though both layouts pass. Before, the backward refused it.
      {"8x4x4x4 to 8 stride 2 to 6 stride 2 (1x1 out), channels-last, input gradient",
       {8, 4, 4, 4},
       8,
       6,
       2,
       2,
       1,
       true,
       true},
  };
  return all;
}

struct Result {
  torch::Tensor out, gx, gw1, gg1, gb1, gw2, gg2, gb2, mean1, var1, mean2, var2;
};

Result run(const Case& k, torch::Dtype dtype, bool pair) {
  torch::manual_seed(41);
  const int64_t channels = k.sizes[1];
  const auto x0 = torch::randn(k.sizes, torch::kDouble) * 2 + 0.5;
  const auto w10 = torch::randn({k.middle, channels / k.groups, 3, 3}, torch::kDouble) * 0.3;
  const auto w20 = torch::randn({k.out, k.middle / k.groups, 3, 3}, torch::kDouble) * 0.2;
  const auto g10 = torch::rand({k.middle}, torch::kDouble) + 0.5;
  const auto b10 = torch::randn({k.middle}, torch::kDouble) * 0.1;
  const auto g20 = torch::rand({k.out}, torch::kDouble) + 0.5;
  const auto b20 = torch::randn({k.out}, torch::kDouble) * 0.1;
  const auto type = pair ? dtype : torch::kDouble;
  const auto format =
      k.channelsLast ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  auto x = x0.to(type).contiguous(format).requires_grad_(k.inputGrad);
  ConvBlock first, second;
  first.weight = w10.to(type).contiguous(format).requires_grad_(true);
  first.bnWeight = g10.to(type).requires_grad_(true);
  first.bnBias = b10.to(type).requires_grad_(true);
  first.stride = {k.stride1, k.stride1};
  first.padding = {1, 1};
  first.groups = k.groups;
  first.runningMean = torch::full({k.middle}, 0.25, type);
  first.runningVar = torch::full({k.middle}, 2.0, type);
  second.weight = w20.to(type).contiguous(format).requires_grad_(true);
  second.bnWeight = g20.to(type).requires_grad_(true);
  second.bnBias = b20.to(type).requires_grad_(true);
  second.stride = {k.stride2, k.stride2};
  second.padding = {1, 1};
  second.groups = k.groups;
  second.runningMean = torch::zeros({k.out}, type);
  second.runningVar = torch::ones({k.out}, type);
  second.momentum = 0.3;
  Result r;
  if (pair) {
    r.out = symtune::kernels::convBlockPairAgain(x, first, second);
  } else {
    const auto block = [](const torch::Tensor& in, const ConvBlock& b) {
      return torch::relu(torch::batch_norm(
          torch::conv2d(in, b.weight, {}, b.stride, b.padding, b.dilation, b.groups), b.bnWeight,
          b.bnBias, b.runningMean, b.runningVar, true, b.momentum, b.eps, false));
    };
    r.out = block(block(x, first), second);
  }
  r.out.backward(torch::randn(r.out.sizes(), torch::kDouble).to(type));
  r.gx = x.grad();
  r.gw1 = first.weight.grad();
  r.gg1 = first.bnWeight.grad();
  r.gb1 = first.bnBias.grad();
  r.gw2 = second.weight.grad();
  r.gg2 = second.bnWeight.grad();
  r.gb2 = second.bnBias.grad();
  r.mean1 = first.runningMean;
  r.var1 = first.runningVar;
  r.mean2 = second.runningMean;
  r.var2 = second.runningVar;
  return r;
}

}  // namespace

TEST_CASE("conv_block_pair_again matches two convolution blocks, forward and backward") {
  for (const auto& k : cases()) {
    for (const auto& [dtypeName, dtype, within] :
         std::vector<std::tuple<std::string, torch::Dtype, double>>{
             {"float32", torch::kFloat, 3e-5}, {"float64", torch::kDouble, 1e-11}}) {
      INFO(k.name, " ", dtypeName);
      const Result want = run(k, dtype, false);
      const Result got = run(k, dtype, true);
      CHECK((got.out.scalar_type() == dtype));
      symtune::test::checkScaledError("output", got.out, want.out, within);
      // Updated by the forward only: the backward runs the blocks again without them.
      symtune::test::checkScaledError("first running mean", got.mean1, want.mean1, within);
      symtune::test::checkScaledError("first running variance", got.var1, want.var1, within);
      symtune::test::checkScaledError("second running mean", got.mean2, want.mean2, within);
      symtune::test::checkScaledError("second running variance", got.var2, want.var2, within);
      symtune::test::checkScaledError("first weight gradient", got.gw1, want.gw1, within);
      symtune::test::checkScaledError("first bn weight gradient", got.gg1, want.gg1, within);
      symtune::test::checkScaledError("first bn bias gradient", got.gb1, want.gb1, within);
      symtune::test::checkScaledError("second weight gradient", got.gw2, want.gw2, within);
      symtune::test::checkScaledError("second bn weight gradient", got.gg2, want.gg2, within);
      symtune::test::checkScaledError("second bn bias gradient", got.gb2, want.gb2, within);
      CHECK(got.gx.defined() == k.inputGrad);
      if (k.inputGrad)
        symtune::test::checkScaledError("input gradient", got.gx, want.gx, within);
    }
  }
}

TEST_CASE("conv_block_pair_again keeps its input and statistics only for the backward") {
  REQUIRE(symtune::CpuAllocationCounter::active());
  torch::manual_seed(5);
  const auto x = torch::randn({16, 8, 16, 16});
  const auto make = [](int64_t in, int64_t out) {
    ConvBlock b;
    b.weight = (torch::randn({out, in, 3, 3}) * 0.2).requires_grad_(true);
    b.bnWeight = torch::ones({out}).requires_grad_(true);
    b.bnBias = torch::zeros({out}).requires_grad_(true);
    b.padding = {1, 1};
    return b;
  };
  const ConvBlock first = make(8, 8), second = make(8, 8);
  const auto keeps = [&](bool pair) {
    const int64_t before = symtune::CpuAllocationCounter::counters().current;
    torch::Tensor out;
    if (pair) {
      out = symtune::kernels::convBlockPairAgain(x, first, second);
    } else {
      const auto block = [](const torch::Tensor& in, const ConvBlock& b) {
        return torch::relu(torch::batch_norm(torch::conv2d(in, b.weight, {}, 1, 1), b.bnWeight,
                                             b.bnBias, {}, {}, true, 0.1, 1e-5, false));
      };
      out = block(block(x, first), second);
    }
    const int64_t kept = symtune::CpuAllocationCounter::counters().current - before;
    out.sum().backward();
    return kept;
  };
  const int64_t activation = x.numel() * 4;
  const int64_t plain = keeps(false), pair = keeps(true);
  INFO("composition ", plain, " bytes, pair ", pair, " bytes, one activation ", activation);
  // The output and four activations (the last ReLU's output is the output) against the output
  // and a few vectors of statistics.
  CHECK(plain >= 4 * activation);
  CHECK(pair < activation + activation / 8);
}

TEST_CASE("conv_block_pair_again refuses what it does not compute, saying which block and why") {
  ConvBlock b;
  b.weight = torch::randn({4, 3, 3, 3});
  b.bnWeight = torch::ones({4});
  b.bnBias = torch::zeros({4});
  b.padding = {1, 1};
  ConvBlock c = b;
  c.weight = torch::randn({4, 4, 3, 3});
  const auto x = torch::randn({2, 3, 6, 6});
  using symtune::kernels::convBlockPairAgain;
  using symtune::test::errorOf;
  CHECK(errorOf([&] {
          convBlockPairAgain(torch::randn({2, 3, 6}), b, c);
        }).find("the input must be [N, C, H, W]") != std::string::npos);
  CHECK(errorOf([&] {
          convBlockPairAgain(x.to(torch::kInt), b, c);
        }).find("float or double CPU tensors only") != std::string::npos);
  CHECK(errorOf([&] {
          convBlockPairAgain(x, b, b);
        }).find("the second block's convolution weight must be [out, 4 / groups, kH, kW]") !=
        std::string::npos);
  ConvBlock noBias = c;
  noBias.bnBias = torch::zeros({5});
  CHECK(errorOf([&] {
          convBlockPairAgain(x, b, noBias);
        }).find("the second block's batch-norm weight and bias must be vectors of its 4") !=
        std::string::npos);
  ConvBlock half = b;
  half.runningMean = torch::zeros({4});
  CHECK(errorOf([&] { convBlockPairAgain(x, half, c); }).find("running statistics must be both") !=
        std::string::npos);
}
