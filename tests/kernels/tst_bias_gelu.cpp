// symtune::bias_gelu against the ATen composition gelu(input + bias): forward and backward (input
// and bias gradients through autograd) over shapes (size 1, odd sizes, 3-D, a non-contiguous
// input, a full-shape bias, no bias, a broadcast bias that takes the composition), dtypes
// (float32, float64, bfloat16) and both approximations; finite-difference gradient checks in
// float64; the op from TorchScript. CUDA rows run where a GPU is present and skip where not.

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "bias_op_cases.h"
#include "error_of.h"
#include "kernel_dtypes.h"
#include "symtune/kernels/bias_gelu.h"
#include "tensor_compare.h"
#include "test_main.h"

namespace {

using symtune::test::BiasKind;

// The op in TorchScript IR, as the fused_bias_gelu rewrite leaves it in a model's graph.
const char* const kIr = R"IR(graph(%x : Tensor, %b : Tensor):
  %tanh : str = prim::Constant[value="tanh"]()
  %y : Tensor = symtune::bias_gelu(%x, %b, %tanh)
  return (%y))IR";

}  // namespace

class TestBiasGelu : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void matchesTheComposition_data() {
    QTest::addColumn<QVector<qint64>>("shape");
    QTest::addColumn<int>("bias");
    QTest::addColumn<bool>("transposed");
    QTest::addColumn<int>("dtype");
    QTest::addColumn<QString>("approximate");
    QTest::addColumn<bool>("cuda");
    auto shapes = symtune::test::biasShapes();
    shapes.push_back({"9x31 broadcast bias 9x1", {9, 31}, BiasKind::Broadcast, false});
    for (bool cuda : {false, true}) {
      for (const auto& s : shapes) {
        for (const auto& [dtypeName, dtype] : symtune::test::kernelDtypes()) {
          for (const char* approximate : {"none", "tanh"}) {
            QTest::addRow("%s %s %s %s", cuda ? "cuda" : "cpu", s.name, dtypeName, approximate)
                << s.shape << int(s.bias) << s.transposed << int(dtype) << QString(approximate)
                << cuda;
          }
        }
      }
    }
  }
  void matchesTheComposition() {
    QFETCH(QVector<qint64>, shape);
    QFETCH(int, bias);
    QFETCH(bool, transposed);
    QFETCH(int, dtype);
    QFETCH(QString, approximate);
    QFETCH(bool, cuda);
    if (cuda && !torch::cuda::is_available())
      QSKIP("no CUDA device: the CUDA rows run on a GPU machine (scripts/gpu-check.sh)");
    torch::manual_seed(7);
    const auto opts = torch::TensorOptions()
                          .dtype(static_cast<torch::Dtype>(dtype))
                          .device(cuda ? torch::kCUDA : torch::kCPU);
    const std::vector<int64_t> sizes(shape.begin(), shape.end());
    const torch::Tensor x = symtune::test::biasInput(sizes, transposed, opts, 2);
    QVERIFY(x.is_contiguous() != transposed);
    const torch::Tensor b = symtune::test::biasFor(static_cast<BiasKind>(bias), sizes, opts);
    const std::string approx = approximate.toStdString();
    auto x1 = x.detach().clone().requires_grad_(true), x2 = x.detach().clone().requires_grad_(true);
    torch::Tensor b1, b2;
    if (b.defined()) {
      b1 = b.detach().clone().requires_grad_(true);
      b2 = b.detach().clone().requires_grad_(true);
    }
    const auto fused = symtune::kernels::biasGelu(x1, b1, approx);
    const auto reference = torch::gelu(b.defined() ? x2 + b2 : x2, approx);
    const auto upstream = torch::randn_like(reference);
    fused.backward(upstream);
    reference.backward(upstream);
    // bfloat16: ATen rounds the sum to bfloat16 before the GELU, the fused op does not.
    const double tolerance = dtype == int(torch::kBFloat16)  ? 2e-2
                             : dtype == int(torch::kFloat64) ? 1e-12
                                                             : 2e-6;
    QVERIFY2(symtune::test::scaledError(fused, reference) <= tolerance,
             qPrintable(QString::number(symtune::test::scaledError(fused, reference))));
    QVERIFY2(symtune::test::scaledError(x1.grad(), x2.grad()) <= tolerance,
             qPrintable(QString::number(symtune::test::scaledError(x1.grad(), x2.grad()))));
    if (b.defined()) {
      // The bias gradient sums over rows: float32 sums in a different order than ATen's.
      const double sumTolerance = dtype == int(torch::kFloat32) ? 2e-5 : tolerance * 4;
      QVERIFY2(symtune::test::scaledError(b1.grad(), b2.grad()) <= sumTolerance,
               qPrintable(QString::number(symtune::test::scaledError(b1.grad(), b2.grad()))));
    }
  }

  // Central differences in float64: the backward is the derivative of the forward.
  void finiteDifferences_data() {
    QTest::addColumn<QString>("approximate");
    QTest::addRow("exact") << "none";
    QTest::addRow("tanh") << "tanh";
  }
  void finiteDifferences() {
    QFETCH(QString, approximate);
    const std::string approx = approximate.toStdString();
    torch::manual_seed(11);
    auto x = torch::randn({3, 5}, torch::kFloat64).requires_grad_(true);
    auto b = torch::randn({5}, torch::kFloat64).requires_grad_(true);
    const auto weights = torch::randn({3, 5}, torch::kFloat64);
    auto loss = [&](const torch::Tensor& xv, const torch::Tensor& bv) {
      return (symtune::kernels::biasGelu(xv, bv, approx) * weights).sum();
    };
    loss(x, b).backward();
    const double h = 1e-6;
    torch::NoGradGuard noGrad;
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto xp = x.detach().clone(), xm = x.detach().clone();
      xp.view(-1)[i] += h;
      xm.view(-1)[i] -= h;
      const double numeric = (loss(xp, b.detach()) - loss(xm, b.detach())).item<double>() / (2 * h);
      QVERIFY2(std::abs(numeric - x.grad().view(-1)[i].item<double>()) < 1e-7,
               qPrintable(QString("x[%1]").arg(i)));
    }
    for (int64_t j = 0; j < b.numel(); ++j) {
      auto bp = b.detach().clone(), bm = b.detach().clone();
      bp[j] += h;
      bm[j] -= h;
      const double numeric = (loss(x.detach(), bp) - loss(x.detach(), bm)).item<double>() / (2 * h);
      QVERIFY2(std::abs(numeric - b.grad()[j].item<double>()) < 1e-7,
               qPrintable(QString("b[%1]").arg(j)));
    }
  }

  void callableFromTorchScriptIr() {
    auto graph = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(kIr, graph.get());
    torch::jit::GraphExecutor executor(graph, "bias_gelu");
    const auto x = torch::randn({4, 6}), b = torch::randn({6});
    torch::jit::Stack stack{x, b};
    executor.run(stack);
    QVERIFY(torch::allclose(stack.front().toTensor(), torch::gelu(x + b, "tanh"), 1e-5, 1e-6));
  }

  void refusesBadArguments() {
    const auto x = torch::randn({2, 3});
    const std::string approx =
        symtune::test::errorOf([&] { symtune::kernels::biasGelu(x, torch::randn({3}), "fast"); });
    QVERIFY2(
        approx.find("approximate must be \"none\" or \"tanh\", got \"fast\"") != std::string::npos,
        approx.c_str());
    const std::string dtype = symtune::test::errorOf(
        [&] { symtune::kernels::biasGelu(x, torch::randn({3}, torch::kFloat64)); });
    QVERIFY2(dtype.find("the bias is Double, the input Float") != std::string::npos, dtype.c_str());
  }
};

SYMTUNE_TEST_MAIN_CORE(TestBiasGelu)
#include "tst_bias_gelu.moc"
