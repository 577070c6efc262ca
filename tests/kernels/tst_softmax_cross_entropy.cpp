// symtune::softmax_cross_entropy against torch::nn::functional::cross_entropy (mean, with
// ignore_index): loss and gradient through autograd over shapes (one class, odd sizes, a
// vocabulary-sized row, non-contiguous logits, ignored rows, every row ignored) and dtypes;
// finite differences in float64; bad targets refused. CUDA rows skip where no GPU is present.

#include <torch/torch.h>

#include "error_of.h"
#include "kernel_dtypes.h"
#include "symtune/kernels/softmax_cross_entropy.h"
#include "tensor_compare.h"
#include "test_main.h"

class TestSoftmaxCrossEntropy : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void matchesTorch_data() {
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("classes");
    QTest::addColumn<int>("ignoredEvery");  // every k-th row's target is ignore_index (0: none)
    QTest::addColumn<bool>("transposed");
    QTest::addColumn<int>("dtype");
    QTest::addColumn<bool>("cuda");
    const struct {
      const char* name;
      int rows, classes, ignoredEvery;
      bool transposed;
    } shapes[] = {{"1x1", 1, 1, 0, false},
                  {"7x13", 7, 13, 0, false},
                  {"64x1000 ignored every 3rd", 64, 1000, 3, false},
                  {"5x257", 5, 257, 0, false},
                  {"transposed 17x9", 17, 9, 0, true},
                  {"all ignored 4x6", 4, 6, 1, false}};
    for (bool cuda : {false, true}) {
      for (const auto& s : shapes) {
        for (const auto& [dtypeName, dtype] : symtune::test::kernelDtypes()) {
          QTest::addRow("%s %s %s", cuda ? "cuda" : "cpu", s.name, dtypeName)
              << s.rows << s.classes << s.ignoredEvery << s.transposed << int(dtype) << cuda;
        }
      }
    }
  }
  void matchesTorch() {
    QFETCH(int, rows);
    QFETCH(int, classes);
    QFETCH(int, ignoredEvery);
    QFETCH(bool, transposed);
    QFETCH(int, dtype);
    QFETCH(bool, cuda);
    if (cuda && !torch::cuda::is_available())
      QSKIP("no CUDA device: the CUDA rows run on a GPU machine (scripts/gpu-check.sh)");
    torch::manual_seed(9);
    const auto opts = torch::TensorOptions()
                          .dtype(static_cast<torch::Dtype>(dtype))
                          .device(cuda ? torch::kCUDA : torch::kCPU);
    torch::Tensor logits = transposed ? (torch::randn({classes, rows}, opts) * 3).t()
                                      : torch::randn({rows, classes}, opts) * 3;
    auto target = torch::randint(classes, {rows}, opts.dtype(torch::kLong));
    if (ignoredEvery > 0)
      target.index_put_({torch::arange(0, rows, ignoredEvery, opts.dtype(torch::kLong))}, -100);
    auto a = logits.detach().clone().requires_grad_(true);
    auto b = logits.detach().clone().requires_grad_(true);
    const auto fused = symtune::kernels::softmaxCrossEntropy(a, target);
    const auto reference = torch::nn::functional::cross_entropy(
        b, target, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
    if (ignoredEvery == 1) {  // every row ignored: NaN, as PyTorch's
      QVERIFY(std::isnan(fused.item<double>()));
      QVERIFY(std::isnan(reference.item<double>()));
      return;
    }
    const double tolerance = dtype == int(torch::kBFloat16)  ? 2e-2
                             : dtype == int(torch::kFloat64) ? 1e-12
                                                             : 1e-5;
    QVERIFY2(
        std::abs(fused.item<double>() - reference.item<double>()) <=
            tolerance * std::max(1.0, std::abs(reference.item<double>())),
        qPrintable(QString("%1 vs %2").arg(fused.item<double>()).arg(reference.item<double>())));
    fused.backward();
    reference.backward();
    const double error = symtune::test::scaledError(a.grad(), b.grad());
    QVERIFY2(error <= tolerance, qPrintable(QString::number(error)));
  }

  void finiteDifferences() {
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
      QVERIFY2(std::abs(numeric - logits.grad().view(-1)[i].item<double>()) < 1e-7,
               qPrintable(QString("logit %1").arg(i)));
    }
  }

  void refusesBadTargets_data() {
    QTest::addColumn<QVector<qint64>>("target");
    QTest::addColumn<QString>("message");
    QTest::addRow("past the classes")
        << QVector<qint64>{0, 5, 1} << "target 5 of row 1 is out of range [0, 5)";
    QTest::addRow("negative") << QVector<qint64>{-1, 0, 1}
                              << "target -1 of row 0 is out of range [0, 5)";
    QTest::addRow("wrong length") << QVector<qint64>{0, 1} << "target must be [N] = [3], got [2]";
  }
  void refusesBadTargets() {
    QFETCH(QVector<qint64>, target);
    QFETCH(QString, message);
    const auto logits = torch::randn({3, 5});
    const auto t = torch::tensor(std::vector<int64_t>(target.begin(), target.end()), torch::kLong);
    const std::string error =
        symtune::test::errorOf([&] { symtune::kernels::softmaxCrossEntropy(logits, t); });
    QVERIFY2(error.find(message.toStdString()) != std::string::npos, error.c_str());
  }
};

SYMTUNE_TEST_MAIN_CORE(TestSoftmaxCrossEntropy)
#include "tst_softmax_cross_entropy.moc"
