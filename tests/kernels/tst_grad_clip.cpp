// symtune::rms_clamp_ and symtune::clip_grad_norm_ against the ATen compositions (the built-in
// gradient_steering rule's clamp; torch::nn::utils::clip_grad_norm_): shapes with size 1, odd
// sizes, several chunks and a non-contiguous gradient; float32, float64, bfloat16; a norm below
// and above the limit. CUDA rows run where a GPU is present and say why they skip where not.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <limits>
#include <string>
#include <vector>

#include "cuda_rows.h"
#include "error_of.h"
#include "symtune/kernels/grad_clip.h"
#include "tensor_compare.h"

namespace {

std::vector<torch::Tensor> gradients(torch::Dtype dtype, torch::Device device, double scale) {
  torch::manual_seed(5);
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  std::vector<torch::Tensor> gs = {torch::randn({1}, opts), torch::randn({7}, opts),
                                   torch::randn({33, 17}, opts), torch::randn({70001}, opts),
                                   torch::randn({17, 33}, opts).t()};
  for (auto& g : gs)
    g.mul_(scale);
  gs[3].view(-1)[5] = 40 * scale;  // an outsized entry for the clamp to catch
  return gs;
}

struct DtypeRow {
  const char* name;
  torch::Dtype dtype;
  double tolerance;
};
const DtypeRow kDtypes[] = {{"float32", torch::kFloat32, 1e-6},
                            {"float64", torch::kFloat64, 1e-12},
                            {"bfloat16", torch::kBFloat16, 1e-2}};

void rmsClampMatchesTheComposition(const DtypeRow& row, const torch::Device& device) {
  INFO(device.str(), " ", row.name);
  auto fused = gradients(row.dtype, device, 1.0);
  auto reference = gradients(row.dtype, device, 1.0);
  REQUIRE(!fused[4].is_contiguous());
  const torch::Tensor rms = symtune::kernels::rmsClamp_(fused);
  REQUIRE(rms.numel() == int64_t(fused.size()));
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO("gradient ", i);
    const auto g = reference[i].to(torch::kDouble);
    const double t = g.pow(2).mean().sqrt().item<double>();
    CHECK(std::abs(rms[static_cast<int64_t>(i)].item<double>() - t) <= row.tolerance * t);
    reference[i].clamp_(-t, t);
    CHECK(symtune::test::scaledError(fused[i], reference[i]) <= row.tolerance);
  }
  CHECK(fused[3].abs().max().item<double>() < 40);  // the outsized entry was clamped
}

void clipGradNormMatchesTorch(const DtypeRow& row, double scale, const torch::Device& device) {
  INFO(device.str(), " ", row.name, " scale ", scale);
  auto fused = gradients(row.dtype, device, scale);
  // torch's clip_grad_norm_ works on parameters' gradients.
  std::vector<torch::Tensor> params;
  for (const auto& g : gradients(row.dtype, device, scale)) {
    auto p = torch::zeros_like(g).requires_grad_(true);
    p.mutable_grad() = g.clone();
    params.push_back(p);
  }
  const double maxNorm = 1.0;
  const double norm = symtune::kernels::clipGradNorm_(fused, maxNorm).item<double>();
  const double expected = torch::nn::utils::clip_grad_norm_(params, maxNorm);
  INFO("norm ", norm, " vs ", expected);
  CHECK(std::abs(norm - expected) <= row.tolerance * expected);
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("gradient ", i);
    CHECK(symtune::test::scaledError(fused[i], params[i].grad()) <= row.tolerance);
  }
}

// Non-finite gradients come out as torch::clamp leaves them with their RMS as bounds: one holding
// a NaN has a NaN RMS, and every element becomes NaN; one holding an infinity has an infinite
// RMS, and is left as it is. Before, the fused clamp left the first unclamped where the
// interpreted rule made it NaN.
void rmsClampOfNonFinite(const DtypeRow& row, const torch::Device& device) {
  INFO(device.str(), " ", row.name);
  auto fused = gradients(row.dtype, device, 1.0);
  fused[3].view(-1)[7] = std::numeric_limits<double>::quiet_NaN();
  fused[2].view(-1)[3] = std::numeric_limits<double>::infinity();
  std::vector<torch::Tensor> reference;
  for (const auto& g : fused)
    reference.push_back(g.clone());
  symtune::kernels::rmsClamp_(fused);
  for (size_t i = 0; i < reference.size(); ++i) {
    INFO("gradient ", i);
    const torch::Tensor t = reference[i].to(torch::kDouble).pow(2).mean().sqrt();
    const torch::Tensor want = torch::clamp(reference[i].to(torch::kDouble), -t, t);
    const torch::Tensor got = fused[i].to(torch::kDouble);
    CHECK(torch::equal(got.isnan(), want.isnan()));
    CHECK(torch::equal(got.isinf(), want.isinf()));
  }
  CHECK(fused[3].isnan().all().item<bool>());
  CHECK(torch::equal(fused[2], reference[2]));
}

// A NaN gradient makes the norm NaN, and torch's clip multiplies every gradient by the NaN
// factor. Before, the CPU kernel's `factor < 1` was false for NaN and left them as they were.
void clipGradNormOfNaN(const torch::Device& device) {
  INFO(device.str());
  auto fused = gradients(torch::kFloat, device, 1.0);
  fused[1].view(-1)[2] = std::numeric_limits<double>::quiet_NaN();
  std::vector<torch::Tensor> params;
  for (const auto& g : fused) {
    auto p = torch::zeros_like(g).requires_grad_(true);
    p.mutable_grad() = g.clone();
    params.push_back(p);
  }
  CHECK(std::isnan(symtune::kernels::clipGradNorm_(fused, 1.0).item<double>()));
  CHECK(std::isnan(torch::nn::utils::clip_grad_norm_(params, 1.0)));
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("gradient ", i);
    CHECK(torch::equal(fused[i].isnan(), params[i].grad().isnan()));
    CHECK(fused[i].isnan().all().item<bool>());
  }
}

// Above the limit in every dtype; below it (nothing to clip) in float32.
void clipRows(const torch::Device& device) {
  for (const DtypeRow& row : kDtypes)
    clipGradNormMatchesTorch(row, 1.0, device);
  clipGradNormMatchesTorch(kDtypes[0], 1e-4, device);
}

}  // namespace

TEST_CASE("rms_clamp_ matches the composition on the CPU") {
  for (const DtypeRow& row : kDtypes)
    rmsClampMatchesTheComposition(row, torch::kCPU);
}

TEST_CASE("rms_clamp_ matches the composition on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  for (const DtypeRow& row : kDtypes)
    rmsClampMatchesTheComposition(row, torch::Device(torch::kCUDA, 0));
}

TEST_CASE("rms_clamp_ of gradients with a NaN or an infinity is torch::clamp's on the CPU") {
  for (const DtypeRow& row : kDtypes)
    rmsClampOfNonFinite(row, torch::kCPU);
}

TEST_CASE("rms_clamp_ of gradients with a NaN or an infinity is torch::clamp's on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  for (const DtypeRow& row : kDtypes)
    rmsClampOfNonFinite(row, torch::Device(torch::kCUDA, 0));
}

TEST_CASE("clip_grad_norm_ matches torch on the CPU") {
  clipRows(torch::kCPU);
}

TEST_CASE("clip_grad_norm_ matches torch on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  clipRows(torch::Device(torch::kCUDA, 0));
}

TEST_CASE("clip_grad_norm_ of a NaN gradient is torch's on the CPU") {
  clipGradNormOfNaN(torch::kCPU);
}

TEST_CASE("clip_grad_norm_ of a NaN gradient is torch's on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  clipGradNormOfNaN(torch::Device(torch::kCUDA, 0));
}

TEST_CASE("bad input is refused") {
  const std::string empty = symtune::test::errorOf([] { symtune::kernels::rmsClamp_({}); });
  INFO(empty);
  CHECK(empty.find("symtune::rms_clamp_: no gradients") != std::string::npos);
  const std::string ints = symtune::test::errorOf(
      [] { symtune::kernels::clipGradNorm_({torch::ones({3}, torch::kLong)}, 1.0); });
  INFO(ints);
  CHECK(ints.find("gradient 0 is Long, not floating point") != std::string::npos);
  const std::string norm =
      symtune::test::errorOf([] { symtune::kernels::clipGradNorm_({torch::ones({3})}, 0.0); });
  INFO(norm);
  CHECK(norm.find("max_norm must be positive, got 0") != std::string::npos);
}
