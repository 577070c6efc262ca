// symtune::grad_stats against the ATen composition, over shapes (empty, size 1, odd sizes, more
// than one parallel chunk), dtypes, non-contiguous inputs and non-finite values; on CUDA the same
// table where a GPU is present.

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>
#include "doctest_torch.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_rows.h"
#include "kernel_dtypes.h"
#include "symtune/kernels/grad_stats.h"

using namespace symtune::kernels;

namespace {

// The reference: the same statistics composed from ATen ops, in float64.
torch::Tensor reference(const torch::Tensor& g) {
  const auto d = g.to(torch::kDouble);
  const auto finite = torch::isfinite(d);
  const auto f = torch::where(finite, d, torch::zeros_like(d));
  const double maxAbs = f.numel() ? f.abs().max().item<double>() : 0.0;
  return torch::tensor({f.pow(2).sum().item<double>(), f.abs().sum().item<double>(), maxAbs,
                        torch::isnan(d).sum().item<double>(), torch::isinf(d).sum().item<double>()},
                       torch::kDouble);
}

struct Row {
  std::vector<int64_t> shape;
  const char* dtypeName;
  torch::Dtype dtype;
  bool transposed = false, poison = false;

  std::string name() const {
    std::string s;
    for (auto d : shape)
      s += std::to_string(d) + "x";
    s.pop_back();
    return s + " " + dtypeName + (transposed ? " transposed" : "") +
           (poison ? " with nan and inf" : "");
  }
};

std::vector<Row> rows() {
  const std::vector<std::vector<int64_t>> shapes = {{0}, {1}, {7}, {33, 17}, {300, 301}, {5, 1, 3}};
  std::vector<Row> out;
  for (const auto& shape : shapes) {
    for (const auto& [name, dtype] : symtune::test::kernelDtypes()) {
      out.push_back({shape, name, dtype});
      if (shape.size() == 2) {
        out.push_back({shape, name, dtype, true, false});
        out.push_back({shape, name, dtype, false, true});
      }
    }
  }
  return out;
}

void check(const Row& row, const torch::Device& device) {
  INFO(row.name(), " on ", device.str());
  torch::manual_seed(0);
  auto g = torch::randn(row.shape, torch::TensorOptions().dtype(row.dtype).device(device));
  if (row.transposed)
    g = g.t();
  if (row.poison) {
    g.view(-1)[0] = std::numeric_limits<double>::quiet_NaN();
    g.view(-1)[g.numel() - 1] = std::numeric_limits<double>::infinity();
    g.view(-1)[g.numel() / 2] = -std::numeric_limits<double>::infinity();
  }
  const auto got = gradStats(g);
  CHECK(got.device().str() == device.str());
  CHECK(std::string(c10::toString(got.scalar_type())) == "Double");
  const auto want = reference(g.cpu());
  // float32 sums in float lanes within blocks of 1024 elements (grad_stats_cpu.cpp).
  const double tolerance = g.scalar_type() == torch::kFloat ? 1e-6 : 1e-9;
  INFO("got ", c10::str(got.cpu()), ", want ", c10::str(want));
  CHECK(torch::allclose(got.cpu(), want, tolerance, tolerance));
}

}  // namespace

TEST_CASE("matches ATen on the CPU") {
  for (const Row& row : rows())
    check(row, torch::kCPU);
}

TEST_CASE("matches ATen on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  for (const Row& row : rows())
    check(row, torch::Device(torch::kCUDA, 0));
}

// Many tensors in one call: each row equals the single-tensor result.
TEST_CASE("the multi-tensor call matches the single one") {
  torch::manual_seed(1);
  std::vector<torch::Tensor> grads = {torch::randn({3, 5}), torch::randn({0}),
                                      torch::randn({70000}), torch::randn({4, 4}).t(),
                                      torch::randn({9}, torch::kDouble)};
  grads[2][12345] = std::numeric_limits<float>::quiet_NaN();
  const auto stats = gradStatsMulti(grads);
  CHECK(stats.sizes() == torch::IntArrayRef({5, kGradStatCount}));
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("row ", i);
    CHECK(torch::allclose(stats[static_cast<int64_t>(i)], reference(grads[i]), 1e-6, 1e-9));
  }
  CHECK(stats[2][kNanCount].item<double>() == 1.0);
}

// Finite values whose squares pass float's range: the sums are taken in double, as ATen's
// reference and the CUDA kernel take them. Before, the float fast path's lanes overflowed to inf
// with no infinity in the tensor.
TEST_CASE("large finite float values sum without overflowing") {
  torch::Tensor g = torch::zeros({4096});
  g[100] = 1e20f;
  g[3000] = -4e36f;
  const auto stats = gradStats(g);
  const auto want = reference(g);
  CHECK(std::isfinite(stats[kSumSquares].item<double>()));
  CHECK(torch::allclose(stats, want, 1e-6, 0));
  CHECK(stats[kInfCount].item<double>() == 0.0);
}

// Values whose float squares are subnormal or 0 (below 1e-19, 4e-23): summed in double, as the
// CUDA kernel sums them. Before, a weight's gradient near 1e-26 read as norm 0.
TEST_CASE("tiny float values keep their squares") {
  torch::manual_seed(4);
  for (const double scale : {1e-20, 1e-26, 1e-35}) {
    INFO("scale ", scale);
    const torch::Tensor g = (torch::randn({2048}, torch::kDouble) * scale).to(torch::kFloat);
    const auto stats = gradStats(g);
    const auto want = reference(g);
    CHECK(stats[kSumSquares].item<double>() > 0);
    CHECK(torch::allclose(stats, want, 1e-6, 0));
  }
}

TEST_CASE("integer tensors are refused") {
  CHECK_THROWS_AS(gradStats(torch::ones({3}, torch::kLong)), c10::Error);
}

TEST_CASE("callable from TorchScript IR") {
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%g : Tensor):
  %r : Tensor = symtune::grad_stats(%g)
  return (%r)
)IR",
                      graph.get());
  torch::jit::CompilationUnit cu;
  auto& fn = *cu.create_function("stats", graph);
  const auto out = fn({torch::full({4}, -2.0)}).toTensor();
  CHECK(out[kSumSquares].item<double>() == 16.0);
  CHECK(out[kMaxAbs].item<double>() == 2.0);
}
