// symtune::bias_dropout_add against the ATen composition residual + (input + bias) · mask /
// (1 - p) with the op's own mask: forward and backward (input, bias and residual gradients through
// autograd) over shapes (size 1, odd sizes, 3-D, a non-contiguous input, a full-shape bias, no
// bias), dtypes (float32, float64, bfloat16) and rates; the mask itself (its rate, seeds that
// differ in either half, neighbours, dtypes, thread counts, torch::manual_seed); evaluation, p = 0
// and p = 1; other shapes through the composition; finite differences in float64; the op from
// TorchScript; bad arguments. CUDA rows run where a GPU is present and say why they skip where
// not.

#include "doctest_torch.h"

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bias_op_cases.h"
#include "cuda_rows.h"
#include "error_of.h"
#include "kernel_dtypes.h"
#include "symtune/kernels/bias_dropout_add.h"
#include "tensor_compare.h"

namespace {

using symtune::test::BiasShape;

// Which of `shape`'s elements the mask of (p, seed) keeps, as a bool tensor.
torch::Tensor keptBy(const std::vector<int64_t>& shape, double p, int64_t seed,
                     torch::Device device = torch::kCPU, torch::Dtype dtype = torch::kFloat32) {
  const auto opts = torch::TensorOptions().device(device).dtype(dtype);
  return symtune::kernels::biasDropoutAddForward(torch::ones(shape, opts), {},
                                                 torch::zeros(shape, opts), p, seed) != 0;
}

double agreement(const torch::Tensor& a, const torch::Tensor& b) {
  return (a == b).to(torch::kDouble).mean().item<double>();
}

// The op in TorchScript IR, as the fused_bias_dropout_add rewrite leaves it in a model's graph.
const char* const kIr = R"IR(graph(%x : Tensor, %b : Tensor, %r : Tensor):
  %p : float = prim::Constant[value=0.25]()
  %train : bool = prim::Constant[value=0]()
  %y : Tensor = symtune::bias_dropout_add(%x, %b, %r, %p, %train)
  return (%y))IR";

const double kRates[] = {0.1, 0.5};

void matchesTheComposition(const BiasShape& s, const char* dtypeName, torch::Dtype dtype, double p,
                           bool cuda) {
  INFO((cuda ? "cuda " : "cpu "), s.name, " ", dtypeName, " p=", p);
  torch::manual_seed(7);
  const auto opts = torch::TensorOptions().dtype(dtype).device(cuda ? torch::kCUDA : torch::kCPU);
  const std::vector<int64_t>& sizes = s.shape;
  const torch::Tensor x = symtune::test::biasInput(sizes, s.transposed, opts);
  CHECK(x.is_contiguous() != s.transposed);
  const auto r = torch::randn(sizes, opts);
  const torch::Tensor b = symtune::test::biasFor(s.bias, sizes, opts);
  auto leaf = [](const torch::Tensor& t) {
    return t.defined() ? t.detach().clone().requires_grad_(true) : t;
  };
  auto x1 = leaf(x), b1 = leaf(b), r1 = leaf(r), x2 = leaf(x), b2 = leaf(b), r2 = leaf(r);
  // The op draws its seed from the default generator: the same generator state, the same mask.
  torch::manual_seed(99);
  const auto fused = symtune::kernels::biasDropoutAdd(x1, b1, r1, p);
  torch::manual_seed(99);
  const auto kept = symtune::kernels::biasDropoutAdd(torch::ones(sizes, opts), {},
                                                     torch::zeros(sizes, opts), p) != 0;
  const auto factor = kept.to(x.scalar_type()) * (1 / (1 - p));
  const auto reference = r2 + (b2.defined() ? x2 + b2 : x2) * factor;
  const auto upstream = torch::randn_like(reference);
  fused.backward(upstream);
  reference.backward(upstream);
  const double tolerance = symtune::test::biasTolerance(dtype);
  const auto check = symtune::test::checkScaledError;
  check("output", fused, reference, tolerance);
  check("input gradient", x1.grad(), x2.grad(), tolerance);
  CHECK(torch::equal(r1.grad(), r2.grad()));
  if (b.defined()) {
    // The bias gradient sums over rows: float32 sums in a different order than ATen's.
    const double sumTolerance = dtype == torch::kFloat32 ? 2e-5 : tolerance * 4;
    check("bias gradient", b1.grad(), b2.grad(), sumTolerance);
  }
}

void compositionRows(bool cuda) {
  for (const BiasShape& s : symtune::test::biasShapes()) {
    for (const auto& [dtypeName, dtype] : symtune::test::kernelDtypes()) {
      for (double p : kRates)
        matchesTheComposition(s, dtypeName, dtype, p, cuda);
    }
  }
}

// The share kept is 1 - p; masks of different seeds — differing in the low half, the high
// half, or both — are independent (agreement p² + (1 - p)²), and so are neighbours.
void maskHasTheRateAndIndependence(const torch::Device& device) {
  INFO(device.str());
  const std::vector<int64_t> shape{1000, 1000};
  const int64_t seed = int64_t{0x123456789abc};
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    const double kept = keptBy(shape, p, seed, device).to(torch::kDouble).mean().item<double>();
    // Binomial standard deviation at 10^6 elements: at most 5e-4; allow 6 of them.
    INFO("p=", p, ": kept ", kept);
    CHECK(std::abs(kept - (1 - p)) < 3e-3);
  }
  const auto a = keptBy(shape, 0.5, seed, device);
  CHECK(torch::equal(a, keptBy(shape, 0.5, seed, device)));  // the same seed, the same mask
  for (int64_t other : {seed ^ 1, seed ^ (int64_t{1} << 40), seed + int64_t{0x100000001}}) {
    const double same = agreement(a, keptBy(shape, 0.5, other, device));
    INFO("seed ", other, ": agreement ", same);
    CHECK(std::abs(same - 0.5) < 3e-3);
  }
  const auto flat = a.view(-1);
  const double neighbours = agreement(flat.slice(0, 0, -1), flat.slice(0, 1));
  INFO("neighbours' agreement ", neighbours);
  CHECK(std::abs(neighbours - 0.5) < 3e-3);
  if (device.is_cuda()) {  // Note [Dropout mask]: the same bits on either device
    CHECK(torch::equal(a.cpu(), keptBy(shape, 0.5, seed)));
  }
}

}  // namespace

TEST_CASE("matches the composition on the CPU") {
  compositionRows(false);
}

TEST_CASE("matches the composition on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  compositionRows(true);
}

TEST_CASE("the mask has its rate and is independent across seeds and neighbours on the CPU") {
  maskHasTheRateAndIndependence(torch::kCPU);
}

TEST_CASE(
    "the mask has its rate and is independent across seeds and neighbours on CUDA, and "
    "is the CPU's") {
  if (!symtune::test::cudaRowsRun())
    return;
  maskHasTheRateAndIndependence(torch::Device(torch::kCUDA, 0));
}

// float32 takes the vectorized hash where the build has one; float64 and bfloat16 the scalar
// one: the same mask, on one thread or several.
TEST_CASE("the mask is the same for every dtype and thread count") {
  const std::vector<int64_t> shape{513, 1031};
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = keptBy(shape, 0.3, 42);
  at::set_num_threads(std::max(2, threads));
  const auto many = keptBy(shape, 0.3, 42);
  at::set_num_threads(threads);
  CHECK(torch::equal(one, many));
  CHECK(torch::equal(one, keptBy(shape, 0.3, 42, torch::kCPU, torch::kFloat64)));
  CHECK(torch::equal(one, keptBy(shape, 0.3, 42, torch::kCPU, torch::kBFloat16)));
}

// Evaluation and p = 0 add; p = 1 drops everything (the input's gradient is zero).
TEST_CASE("evaluation and the edge rates") {
  const auto x = torch::randn({5, 33}), b = torch::randn({33}), r = torch::randn({5, 33});
  CHECK(torch::equal(symtune::kernels::biasDropoutAdd(x, b, r, 0.5, false), x + b + r));
  CHECK(torch::equal(symtune::kernels::biasDropoutAdd(x, b, r, 0.0), x + b + r));
  auto xg = x.clone().requires_grad_(true), bg = b.clone().requires_grad_(true);
  const auto all = symtune::kernels::biasDropoutAdd(xg, bg, r, 1.0);
  CHECK(torch::equal(all, r));
  all.sum().backward();
  CHECK(torch::equal(xg.grad(), torch::zeros_like(x)));
  CHECK(torch::equal(bg.grad(), torch::zeros_like(b)));
}

// Central differences in float64 with a fixed seed: the backward is the forward's derivative.
TEST_CASE("finite differences") {
  torch::manual_seed(11);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const auto x = torch::randn({3, 5}, opts), b = torch::randn({5}, opts);
  const auto r = torch::randn({3, 5}, opts), weights = torch::randn({3, 5}, opts);
  const double p = 0.4;
  const int64_t seed = 2024;
  auto loss = [&](const torch::Tensor& xv, const torch::Tensor& bv) {
    return (symtune::kernels::biasDropoutAddForward(xv, bv, r, p, seed) * weights)
        .sum()
        .item<double>();
  };
  const auto [dx, db] = symtune::kernels::biasDropoutAddBackward(weights, b, p, seed);
  const double h = 1e-6;
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto xp = x.clone(), xm = x.clone();
    xp.view(-1)[i] += h;
    xm.view(-1)[i] -= h;
    const double numeric = (loss(xp, b) - loss(xm, b)) / (2 * h);
    INFO("x[", i, "]");
    CHECK(std::abs(numeric - dx.view(-1)[i].item<double>()) < 1e-7);
  }
  for (int64_t j = 0; j < b.numel(); ++j) {
    auto bp = b.clone(), bm = b.clone();
    bp[j] += h;
    bm[j] -= h;
    const double numeric = (loss(x, bp) - loss(x, bm)) / (2 * h);
    INFO("b[", j, "]");
    CHECK(std::abs(numeric - db[j].item<double>()) < 1e-7);
  }
}

TEST_CASE("callable from TorchScript IR") {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(kIr, graph.get());
  torch::jit::GraphExecutor executor(graph, "bias_dropout_add");
  const auto x = torch::randn({4, 6}), b = torch::randn({6}), r = torch::randn({4, 6});
  torch::jit::Stack stack{x, b, r};
  executor.run(stack);
  CHECK(torch::equal(stack.front().toTensor(), x + b + r));
}

// A bias that broadcasts another way, or a residual of another shape, takes the composition.
TEST_CASE("other shapes take the composition") {
  const auto x = torch::randn({4, 6}), r = torch::randn({4, 6});
  const auto column = torch::randn({4, 1}), row = torch::randn({1, 6});
  CHECK(torch::allclose(symtune::kernels::biasDropoutAdd(x, column, r, 0.3, false),
                        r + (x + column)));
  CHECK(torch::allclose(symtune::kernels::biasDropoutAdd(x, {}, row, 0.3, false), row + x));
  auto xg = x.clone().requires_grad_(true);
  const auto y = symtune::kernels::biasDropoutAdd(xg, column, r, 0.5);
  y.sum().backward();
  const auto kept = xg.grad() != 0;  // ATen's mask, through ATen's autograd
  CHECK(torch::allclose(y, r + (x + column) * kept * 2.0));
}

TEST_CASE("bad arguments are refused") {
  const auto x = torch::randn({2, 3}), r = torch::randn({2, 3});
  using symtune::kernels::biasDropoutAdd;
  using symtune::kernels::biasDropoutAddForward;
  const std::string rate = symtune::test::errorOf([&] { biasDropoutAdd(x, {}, r, 1.5); });
  INFO(rate);
  CHECK(rate.find("p must be in [0, 1], got 1.5") != std::string::npos);
  const std::string residual = symtune::test::errorOf([&] {
    biasDropoutAddForward(x, {}, torch::randn({3, 2}), 0.1, 1);
  });
  INFO(residual);
  CHECK(residual.find("the residual has shape [3, 2], the input [2, 3]") != std::string::npos);
  const std::string bias = symtune::test::errorOf([&] {
    biasDropoutAddForward(x, torch::randn({2, 1}), r, 0.1, 1);
  });
  INFO(bias);
  CHECK(bias.find("the bias must be a vector of the input's last dimension") != std::string::npos);
  const std::string dtype = symtune::test::errorOf(
      [&] { biasDropoutAdd(x, torch::randn({3}, torch::kFloat64), r, 0.1); });
  INFO(dtype);
  CHECK(dtype.find("the bias is Double, the input Float") != std::string::npos);
  // errorOf says "(no error)" when nothing is thrown: an empty message would not tell.
  const std::string mismatch = symtune::test::errorOf([&] {
    biasDropoutAdd(x, {}, torch::randn({3, 2}), 0.1);
  });
  INFO("a residual that does not broadcast is an error: ", mismatch);
  CHECK(mismatch != "(no error)");
}

// Note [Bias dropout add saves no bias] in kernels/src/bias_dropout_add_op.cpp. Until 2026-12-07
// the forward saved the bias for its layout alone, and an in-place update of it before the
// backward (an optimizer step) failed the backward with "modified by an inplace operation",
// where ATen's composition runs.
TEST_CASE("a bias updated in place between forward and backward") {
  const struct {
    const char* name;
    std::vector<int64_t> biasShape;
  } rows[] = {{"row bias", {6}}, {"full bias", {4, 6}}};
  for (const auto& row : rows) {
    INFO(row.name);
    torch::manual_seed(5);
    const auto x0 = torch::randn({4, 6}), b0 = torch::randn(row.biasShape);
    const auto r = torch::randn({4, 6}), upstream = torch::randn({4, 6});
    // Twice from the same generator state (the same mask): the bias left alone, then updated.
    auto run = [&](bool update) {
      auto x = x0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
      torch::manual_seed(99);
      const auto y = symtune::kernels::biasDropoutAdd(x, b, r, 0.3);
      if (update) {
        torch::NoGradGuard noGrad;
        b.add_(1);
      }
      const std::string error = symtune::test::errorOf([&] { y.backward(upstream); });
      INFO(error);
      CHECK(error == "(no error)");
      return std::make_pair(x.grad(), b.grad());
    };
    const auto [gx, gb] = run(false);
    const auto [gxUpdated, gbUpdated] = run(true);
    REQUIRE(gxUpdated.defined());
    REQUIRE(gbUpdated.defined());
    CHECK(torch::equal(gxUpdated, gx));
    CHECK(torch::equal(gbUpdated, gb));
    // The bias's gradient is the input's, summed over the rows for a row bias.
    CHECK(torch::allclose(gb, gx.sum_to_size(row.biasShape), 1e-5, 1e-6));
  }
}

// Until 2026-12-07 the CUDA backward threw on a zero-width last dimension (the row bias's
// gradient reshaped dx to [-1, 0]); the CPU one gave an empty gradient.
TEST_CASE("a zero-width gradient gives a row bias an empty gradient, on the CPU and CUDA") {
  const bool cuda = symtune::test::cudaRowsRun();
  for (const bool onCuda : {false, true}) {
    if (onCuda && !cuda)
      continue;
    const auto opts = torch::TensorOptions().device(onCuda ? torch::kCUDA : torch::kCPU);
    for (const auto& sizes : std::vector<std::vector<int64_t>>{{4, 0}, {0, 5}, {2, 3, 0}}) {
      INFO((onCuda ? "cuda " : "cpu "), torch::IntArrayRef(sizes));
      const auto grad = torch::ones(sizes, opts);
      const auto [dx, db] = symtune::kernels::biasDropoutAddBackward(
          grad, torch::randn({sizes.back()}, opts), 0.5, 7);
      CHECK((dx.sizes() == grad.sizes()));
      CHECK(torch::equal(db.cpu(), torch::zeros({sizes.back()})));
    }
  }
}
