// symtune::grad_stats against the ATen composition, over shapes (empty, size 1, odd sizes, more
// than one parallel chunk), dtypes, non-contiguous inputs and non-finite values; on CUDA the same
// table where a GPU is present.

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include "symtune/kernels/grad_stats.h"
#include "test_main.h"

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

void addRows() {
  QTest::addColumn<QVector<qint64>>("shape");
  QTest::addColumn<int>("dtype");
  QTest::addColumn<bool>("transposed");
  QTest::addColumn<bool>("poison");
  const QVector<QVector<qint64>> shapes = {{0}, {1}, {7}, {33, 17}, {300, 301}, {5, 1, 3}};
  const std::vector<std::pair<const char*, torch::ScalarType>> dtypes = {
      {"float32", torch::kFloat}, {"float64", torch::kDouble}, {"bfloat16", torch::kBFloat16}};
  for (const auto& shape : shapes) {
    for (const auto& [name, dtype] : dtypes) {
      QString s;
      for (auto d : shape)
        s += QString::number(d) + "x";
      s.chop(1);
      QTest::addRow("%s %s", qPrintable(s), name) << shape << int(dtype) << false << false;
      if (shape.size() == 2) {
        QTest::addRow("%s %s transposed", qPrintable(s), name)
            << shape << int(dtype) << true << false;
        QTest::addRow("%s %s with nan and inf", qPrintable(s), name)
            << shape << int(dtype) << false << true;
      }
    }
  }
}

void check(const torch::Device& device) {
  QFETCH(QVector<qint64>, shape);
  QFETCH(int, dtype);
  QFETCH(bool, transposed);
  QFETCH(bool, poison);
  torch::manual_seed(0);
  auto g = torch::randn(std::vector<int64_t>(shape.begin(), shape.end()),
                        torch::TensorOptions().dtype(torch::ScalarType(dtype)).device(device));
  if (transposed)
    g = g.t();
  if (poison) {
    g.view(-1)[0] = std::numeric_limits<double>::quiet_NaN();
    g.view(-1)[g.numel() - 1] = std::numeric_limits<double>::infinity();
    g.view(-1)[g.numel() / 2] = -std::numeric_limits<double>::infinity();
  }
  const auto got = gradStats(g);
  QCOMPARE(got.device(), device);
  QCOMPARE(got.scalar_type(), torch::kDouble);
  const auto want = reference(g.cpu());
  // float32 sums in float lanes within blocks of 1024 elements (grad_stats_cpu.cpp).
  const double tolerance = g.scalar_type() == torch::kFloat ? 1e-6 : 1e-9;
  QVERIFY2(torch::allclose(got.cpu(), want, tolerance, tolerance),
           qPrintable(QString("got %1, want %2")
                          .arg(QString::fromStdString(c10::str(got.cpu())),
                               QString::fromStdString(c10::str(want)))));
}

}  // namespace

class TestGradStats : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void matchesAtenOnCpu_data() { addRows(); }
  void matchesAtenOnCpu() { check(torch::kCPU); }

  // Skipped as a whole (from the _data function) where it cannot run, with the reason.
  void matchesAtenOnCuda_data() {
#ifndef SYMTUNE_HAVE_TORCH_CUDA
    QSKIP("this build has no CUDA kernels (SYMTUNE_WITH_CUDA=OFF)");
#endif
    if (!torch::cuda::is_available())
      QSKIP("no CUDA device here: the CUDA kernel is not tested");
    addRows();
  }
  void matchesAtenOnCuda() {
    check(torch::Device(torch::kCUDA, 0));
  }

  // Many tensors in one call: each row equals the single-tensor result.
  void multiMatchesSingle() {
    torch::manual_seed(1);
    std::vector<torch::Tensor> grads = {torch::randn({3, 5}), torch::randn({0}),
                                        torch::randn({70000}), torch::randn({4, 4}).t(),
                                        torch::randn({9}, torch::kDouble)};
    grads[2][12345] = std::numeric_limits<float>::quiet_NaN();
    const auto rows = gradStatsMulti(grads);
    QCOMPARE(rows.sizes(), (torch::IntArrayRef{5, kGradStatCount}));
    for (size_t i = 0; i < grads.size(); ++i) {
      QVERIFY2(torch::allclose(rows[static_cast<int64_t>(i)], reference(grads[i]), 1e-6, 1e-9),
               qPrintable(QString("row %1").arg(i)));
    }
    QCOMPARE(rows[2][kNanCount].item<double>(), 1.0);
  }

  void rejectsIntegerTensors() {
    QVERIFY_THROWS_EXCEPTION(c10::Error, gradStats(torch::ones({3}, torch::kLong)));
  }

  void callableFromTorchScriptIr() {
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
    QCOMPARE(out[kSumSquares].item<double>(), 16.0);
    QCOMPARE(out[kMaxAbs].item<double>(), 2.0);
  }
};

SYMTUNE_TEST_MAIN_CORE(TestGradStats)
#include "tst_grad_stats.moc"
