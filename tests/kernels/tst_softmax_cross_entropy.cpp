// symtune::softmax_cross_entropy against torch::nn::functional::cross_entropy (mean, with
// ignore_index): loss and gradient through autograd over shapes (one class, odd sizes, a
// vocabulary-sized row, non-contiguous logits, ignored rows, every row ignored) and dtypes;
// finite differences in float64; bad targets refused. CUDA rows skip where no GPU is present.

#include "doctest_torch.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "cuda_rows.h"
#include "error_of.h"
#include "kernel_dtypes.h"
#include "symtune/kernels/softmax_cross_entropy.h"
#include "tensor_compare.h"

namespace {

struct Shape {
  const char* name;
  int rows, classes, ignoredEvery;  // every k-th row's target is ignore_index (0: none)
  bool transposed;
};

const Shape kShapes[] = {{"1x1", 1, 1, 0, false},
                         {"7x13", 7, 13, 0, false},
                         {"64x1000 ignored every 3rd", 64, 1000, 3, false},
                         {"5x257", 5, 257, 0, false},
                         {"transposed 17x9", 17, 9, 0, true},
                         {"all ignored 4x6", 4, 6, 1, false}};

void matchesTorch(const Shape& s, const char* dtypeName, torch::Dtype dtype, bool cuda) {
  INFO((cuda ? "cuda " : "cpu "), s.name, " ", dtypeName);
  torch::manual_seed(9);
  const auto opts = torch::TensorOptions().dtype(dtype).device(cuda ? torch::kCUDA : torch::kCPU);
  torch::Tensor logits = s.transposed ? (torch::randn({s.classes, s.rows}, opts) * 3).t()
                                      : torch::randn({s.rows, s.classes}, opts) * 3;
  auto target = torch::randint(s.classes, {s.rows}, opts.dtype(torch::kLong));
  if (s.ignoredEvery > 0)
    target.index_put_({torch::arange(0, s.rows, s.ignoredEvery, opts.dtype(torch::kLong))}, -100);
  auto a = logits.detach().clone().requires_grad_(true);
  auto b = logits.detach().clone().requires_grad_(true);
  const auto fused = symtune::kernels::softmaxCrossEntropy(a, target);
  const auto reference = torch::nn::functional::cross_entropy(
      b, target, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  if (s.ignoredEvery == 1) {  // every row ignored: NaN, as PyTorch's
    CHECK(std::isnan(fused.item<double>()));
    CHECK(std::isnan(reference.item<double>()));
    return;
  }
  const double tolerance = dtype == torch::kBFloat16  ? 2e-2
                           : dtype == torch::kFloat64 ? 1e-12
                                                      : 1e-5;
  const double got = fused.item<double>(), want = reference.item<double>();
  INFO("loss ", got, " vs ", want);
  CHECK(std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want)));
  fused.backward();
  reference.backward();
  CHECK(symtune::test::scaledError(a.grad(), b.grad()) <= tolerance);
}

// Rows with an infinite logit: +inf makes ATen's loss and that row's gradient NaN (inf - inf
// in its log-softmax); a row of -inf makes them NaN too. Before, a +inf row's loss was inf.
void infiniteLogits(bool cuda) {
  INFO((cuda ? "cuda" : "cpu"));
  const auto opts = torch::TensorOptions().device(cuda ? torch::kCUDA : torch::kCPU);
  const double inf = std::numeric_limits<double>::infinity();
  const auto logits = torch::tensor({0.0, inf, 1.0, 0.5, -1.0, 2.0}, opts).view({2, 3});
  const auto target = torch::tensor({2, 0}, opts.dtype(torch::kLong));
  auto a = logits.clone().requires_grad_(true);
  auto b = logits.clone().requires_grad_(true);
  const auto fused = symtune::kernels::softmaxCrossEntropy(a, target);
  const auto reference = torch::nn::functional::cross_entropy(b, target);
  CHECK(std::isnan(reference.item<double>()));
  CHECK(std::isnan(fused.item<double>()));
  fused.backward();
  reference.backward();
  INFO(a.grad(), b.grad());
  CHECK(torch::equal(a.grad().isnan(), b.grad().isnan()));
}

}  // namespace

TEST_CASE("an infinite logit gives torch's NaN") {
  infiniteLogits(false);
  if (symtune::test::cudaRowsRun())
    infiniteLogits(true);
}

TEST_CASE("matches torch on the CPU") {
  for (const Shape& s : kShapes) {
    for (const auto& [dtypeName, dtype] : symtune::test::kernelDtypes())
      matchesTorch(s, dtypeName, dtype, false);
  }
}

TEST_CASE("matches torch on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  for (const Shape& s : kShapes) {
    for (const auto& [dtypeName, dtype] : symtune::test::kernelDtypes())
      matchesTorch(s, dtypeName, dtype, true);
  }
}

TEST_CASE("finite differences") {
  torch::manual_seed(13);
  auto logits = torch::randn({4, 5}, torch::kFloat64).requires_grad_(true);
  const auto target = torch::tensor({3, -100, 0, 4}, torch::kLong);
  symtune::kernels::softmaxCrossEntropy(logits, target).backward();
  const double h = 1e-6;
  torch::NoGradGuard noGrad;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    auto plus = logits.detach().clone(), minus = logits.detach().clone();
    plus.view(-1)[i] += h;
    minus.view(-1)[i] -= h;
    const double numeric = (symtune::kernels::softmaxCrossEntropy(plus, target) -
                            symtune::kernels::softmaxCrossEntropy(minus, target))
                               .item<double>() /
                           (2 * h);
    INFO("logit ", i);
    CHECK(std::abs(numeric - logits.grad().view(-1)[i].item<double>()) < 1e-7);
  }
}

TEST_CASE("bad targets are refused") {
  const struct {
    std::vector<int64_t> target;
    std::string message;
  } cases[] = {{{0, 5, 1}, "target 5 of row 1 is out of range [0, 5)"},
               {{-1, 0, 1}, "target -1 of row 0 is out of range [0, 5)"},
               {{0, 1}, "target must be [N] = [3], got [2]"}};
  const auto logits = torch::randn({3, 5});
  for (const auto& c : cases) {
    const auto t = torch::tensor(c.target, torch::kLong);
    const std::string error =
        symtune::test::errorOf([&] { symtune::kernels::softmaxCrossEntropy(logits, t); });
    INFO(error);
    CHECK(error.find(c.message) != std::string::npos);
  }
  // The backward operator called as it is, past autograd: a target out of range wrote outside
  // the gradient it made (a segfault).
  static const auto backward =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("symtune::softmax_cross_entropy_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, int64_t)>();
  const std::string error = symtune::test::errorOf([&] {
    backward.call(torch::ones({}), logits, torch::tensor({0, 1, 1000000000}, torch::kLong),
                  torch::zeros({3}), -100);
  });
  INFO(error);
  CHECK(error.find("target 1000000000 of row 2 is out of range [0, 5)") != std::string::npos);
}

namespace {

at::Tensor backwardOperator(const at::Tensor& grad, const at::Tensor& logits,
                            const at::Tensor& target, const at::Tensor& lse) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("symtune::softmax_cross_entropy_backward", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(grad, logits, target, lse, -100);
}

}  // namespace

TEST_CASE("the backward operator refuses an lse or a grad that does not fit the logits") {
  // Until 2026-12-07 an lse of the wrong dtype failed deep in the kernel with ATen's generic
  // message, and the CUDA backward checked neither lse nor grad (one on the CPU among CUDA
  // tensors was handed to the kernel as a device pointer).
  const struct {
    const char* name;
    bool logitsOnCuda, gradOnCuda;  // the target with the logits; lse always on the CPU
    torch::Dtype lseDtype;
    std::vector<int64_t> gradShape;
    torch::Dtype gradDtype;
    std::string message;
  } rows[] = {
      {"lse in double for float logits",
       false,
       false,
       torch::kDouble,
       {},
       torch::kFloat,
       "lse must be Float on cpu for Float logits, got Double on cpu"},
      {"a grad of two values",
       false,
       false,
       torch::kFloat,
       {2},
       torch::kFloat,
       "grad must be the loss's, one value, got shape [2]"},
      {"an integer grad",
       false,
       false,
       torch::kFloat,
       {},
       torch::kLong,
       "grad must be floating point, on cpu with the logits or a CPU scalar, got Long on cpu"},
      {"CUDA logits, lse on the CPU",
       true,
       false,
       torch::kFloat,
       {},
       torch::kFloat,
       "lse must be Float on cuda:0 for Float logits, got Float on cpu"},
      {"CPU logits, a grad on CUDA",
       false,
       true,
       torch::kFloat,
       {},
       torch::kFloat,
       "grad must be floating point, on cpu with the logits or a CPU scalar, got Float on cuda:0"},
  };
  const bool cudaRuns = symtune::test::cudaRowsRun();
  for (const auto& row : rows) {
    if ((row.logitsOnCuda || row.gradOnCuda) && !cudaRuns)
      continue;
    const auto deviceOf = [](bool cuda) { return cuda ? torch::kCUDA : torch::kCPU; };
    const auto logits =
        torch::randn({3, 5}, torch::TensorOptions().device(deviceOf(row.logitsOnCuda)));
    const auto target = torch::tensor({0, 1, 4}, torch::kLong).to(deviceOf(row.logitsOnCuda));
    const auto lse = torch::zeros({3}, torch::TensorOptions().dtype(row.lseDtype));
    const auto grad =
        torch::ones(row.gradShape,
                    torch::TensorOptions().dtype(row.gradDtype).device(deviceOf(row.gradOnCuda)));
    const std::string error =
        symtune::test::errorOf([&] { backwardOperator(grad, logits, target, lse); });
    INFO(row.name, ": ", error);
    CHECK(error.find("symtune::softmax_cross_entropy_backward: " + row.message) !=
          std::string::npos);
  }
  // A CPU scalar grad is taken beside CUDA logits, as ATen's ops take one.
  if (cudaRuns) {
    const auto cuda = torch::TensorOptions().device(torch::kCUDA);
    const auto logits = torch::randn({3, 5}, cuda);
    const auto target = torch::tensor({0, 1, 4}, torch::kLong).to(torch::kCUDA);
    const auto lse = torch::logsumexp(logits, 1);
    const auto onCpu = backwardOperator(torch::ones({}), logits, target, lse);
    const auto onCuda = backwardOperator(torch::ones({}, cuda), logits, target, lse);
    CHECK(torch::allclose(onCpu.cpu(), onCuda.cpu()));
  }
}
