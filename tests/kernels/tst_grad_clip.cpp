// symtune::rms_clamp_ and symtune::clip_grad_norm_ against the ATen compositions (the built-in
// gradient_steering rule's clamp; torch::nn::utils::clip_grad_norm_): shapes with size 1, odd
// sizes, several chunks and a non-contiguous gradient; float32, float64, bfloat16; a norm below
// and above the limit. CUDA rows run where a GPU is present and skip where not.

#include <torch/torch.h>

#include "error_of.h"
#include "symtune/kernels/grad_clip.h"
#include "tensor_compare.h"
#include "test_main.h"

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

}  // namespace

class TestGradClip : public QObject {
  Q_OBJECT

  static void rows() {
    QTest::addColumn<int>("dtype");
    QTest::addColumn<bool>("cuda");
    QTest::addColumn<double>("tolerance");
    for (bool cuda : {false, true}) {
      const char* where = cuda ? "cuda" : "cpu";
      QTest::addRow("%s float32", where) << int(torch::kFloat32) << cuda << 1e-6;
      QTest::addRow("%s float64", where) << int(torch::kFloat64) << cuda << 1e-12;
      QTest::addRow("%s bfloat16", where) << int(torch::kBFloat16) << cuda << 1e-2;
    }
  }

 private Q_SLOTS:
  void rmsClampMatchesTheComposition_data() { rows(); }
  void rmsClampMatchesTheComposition() {
    QFETCH(int, dtype);
    QFETCH(bool, cuda);
    QFETCH(double, tolerance);
    if (cuda && !torch::cuda::is_available())
      QSKIP("no CUDA device: the CUDA rows run on a GPU machine (scripts/gpu-check.sh)");
    const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
    auto fused = gradients(static_cast<torch::Dtype>(dtype), device, 1.0);
    auto reference = gradients(static_cast<torch::Dtype>(dtype), device, 1.0);
    QVERIFY(!fused[4].is_contiguous());
    const torch::Tensor rms = symtune::kernels::rmsClamp_(fused);
    QCOMPARE(rms.numel(), int64_t(fused.size()));
    for (size_t i = 0; i < reference.size(); ++i) {
      const auto g = reference[i].to(torch::kDouble);
      const auto t = g.pow(2).mean().sqrt();
      QVERIFY2(std::abs(rms[static_cast<int64_t>(i)].item<double>() - t.item<double>()) <=
                   tolerance * t.item<double>(),
               qPrintable(QString("rms %1").arg(i)));
      reference[i].clamp_(-t.item<double>(), t.item<double>());
      QVERIFY2(symtune::test::scaledError(fused[i], reference[i]) <= tolerance,
               qPrintable(QString("gradient %1: %2")
                              .arg(i)
                              .arg(symtune::test::scaledError(fused[i], reference[i]))));
    }
    QVERIFY(fused[3].abs().max().item<double>() < 40);  // the outsized entry was clamped
  }

  void clipGradNormMatchesTorch_data() {
    QTest::addColumn<int>("dtype");
    QTest::addColumn<bool>("cuda");
    QTest::addColumn<double>("scale");
    QTest::addColumn<double>("tolerance");
    for (bool cuda : {false, true}) {
      const char* where = cuda ? "cuda" : "cpu";
      QTest::addRow("%s float32 above the limit", where)
          << int(torch::kFloat32) << cuda << 1.0 << 1e-6;
      QTest::addRow("%s float32 below the limit", where)
          << int(torch::kFloat32) << cuda << 1e-4 << 1e-6;
      QTest::addRow("%s float64 above the limit", where)
          << int(torch::kFloat64) << cuda << 1.0 << 1e-12;
      QTest::addRow("%s bfloat16 above the limit", where)
          << int(torch::kBFloat16) << cuda << 1.0 << 1e-2;
    }
  }
  void clipGradNormMatchesTorch() {
    QFETCH(int, dtype);
    QFETCH(bool, cuda);
    QFETCH(double, scale);
    QFETCH(double, tolerance);
    if (cuda && !torch::cuda::is_available())
      QSKIP("no CUDA device: the CUDA rows run on a GPU machine (scripts/gpu-check.sh)");
    const torch::Device device = cuda ? torch::kCUDA : torch::kCPU;
    auto fused = gradients(static_cast<torch::Dtype>(dtype), device, scale);
    // torch's clip_grad_norm_ works on parameters' gradients.
    std::vector<torch::Tensor> params;
    for (const auto& g : gradients(static_cast<torch::Dtype>(dtype), device, scale)) {
      auto p = torch::zeros_like(g).requires_grad_(true);
      p.mutable_grad() = g.clone();
      params.push_back(p);
    }
    const double maxNorm = 1.0;
    const double norm = symtune::kernels::clipGradNorm_(fused, maxNorm).item<double>();
    const double expected = torch::nn::utils::clip_grad_norm_(params, maxNorm);
    QVERIFY2(std::abs(norm - expected) <= tolerance * expected,
             qPrintable(QString("%1 vs %2").arg(norm).arg(expected)));
    for (size_t i = 0; i < fused.size(); ++i)
      QVERIFY2(symtune::test::scaledError(fused[i], params[i].grad()) <= tolerance,
               qPrintable(QString("gradient %1").arg(i)));
  }

  void refusesBadInput() {
    const std::string empty = symtune::test::errorOf([] { symtune::kernels::rmsClamp_({}); });
    QVERIFY2(empty.find("symtune::rms_clamp_: no gradients") != std::string::npos, empty.c_str());
    const std::string ints = symtune::test::errorOf(
        [] { symtune::kernels::clipGradNorm_({torch::ones({3}, torch::kLong)}, 1.0); });
    QVERIFY2(ints.find("gradient 0 is Long, not floating point") != std::string::npos,
             ints.c_str());
    const std::string norm =
        symtune::test::errorOf([] { symtune::kernels::clipGradNorm_({torch::ones({3})}, 0.0); });
    QVERIFY2(norm.find("max_norm must be positive, got 0") != std::string::npos, norm.c_str());
  }
};

SYMTUNE_TEST_MAIN_CORE(TestGradClip)
#include "tst_grad_clip.moc"
