// Gradient statistics from hooks: values against ATen, a planted NaN in the right parameter, the
// update-to-weight ratio of an SGD step, and parameters that get no gradient.

#include <torch/torch.h>

#include "symtune/telemetry/gradient_monitor.h"
#include "test_main.h"

using symtune::GradientMonitor;

namespace {
// Within float32 rounding: the statistics accumulate in double, the references in float.
bool near(double got, double want) {
  return std::abs(got - want) <= 1e-5 * std::max(1.0, std::abs(want));
}
}  // namespace

class TestGradientMonitor : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void statisticsMatchAten() {
    torch::manual_seed(0);
    auto a = torch::randn({5, 7}, torch::requires_grad());
    auto b = torch::randn({7}, torch::requires_grad());
    GradientMonitor monitor({{"a", a}, {"b", b}});
    monitor.beginStep();
    ((a * 3).sum() + (b * b).sum()).backward();
    const auto& s = monitor.stats();
    QCOMPARE(s.size(), size_t{2});
    QCOMPARE(s[0].name, std::string("a"));
    QVERIFY(s[0].hasGradient);
    QCOMPARE(s[0].numel, int64_t{35});
    QVERIFY(near(s[0].norm, a.grad().norm().item<double>()));
    QVERIFY(near(s[0].meanAbs, 3.0));
    QVERIFY(near(s[0].maxAbs, 3.0));
    QVERIFY(near(s[1].norm, (2 * b).norm().item<double>()));
    QVERIFY(near(s[1].maxAbs, (2 * b).abs().max().item<double>()));
    QVERIFY(near(monitor.globalNorm(), std::sqrt(s[0].norm * s[0].norm + s[1].norm * s[1].norm)));
    QCOMPARE(monitor.nanCount(), int64_t{0});
  }

  void plantedNanShowsInTheRightParameter() {
    auto clean = torch::ones({4}, torch::requires_grad());
    auto poisoned = torch::ones({3, 3}, torch::requires_grad());
    GradientMonitor monitor({{"clean", clean}, {"poisoned", poisoned}});
    monitor.beginStep();
    auto mask = torch::ones({3, 3});
    mask[1][2] = std::numeric_limits<float>::quiet_NaN();
    mask[0][0] = std::numeric_limits<float>::infinity();
    ((clean * 2).sum() + (poisoned * mask).sum()).backward();
    const auto& s = monitor.stats();
    QCOMPARE(s[0].nanCount, int64_t{0});
    QCOMPARE(s[1].nanCount, int64_t{1});
    QCOMPARE(s[1].infCount, int64_t{1});
    QCOMPARE(monitor.nanCount(), int64_t{1});
    // Statistics of the finite elements: seven ones.
    QVERIFY(near(s[1].norm, std::sqrt(7.0)));
    QVERIFY(near(s[1].meanAbs, 1.0));
  }

  void updateRatioOfAnSgdStep() {
    auto w = torch::full({10}, 2.0, torch::requires_grad());
    torch::optim::SGD sgd({w}, 0.1);
    GradientMonitor monitor({{"w", w}});
    monitor.beginStep();
    (w * 5).sum().backward();  // gradient 5 everywhere
    monitor.beforeUpdate();
    sgd.step();
    monitor.afterUpdate();
    // ||0.1 * 5|| / ||2|| per element, the same over the vector: 0.5 / 2.
    QVERIFY(monitor.stats()[0].updateRatio.has_value());
    QVERIFY(near(*monitor.stats()[0].updateRatio, 0.25));
  }

  void parametersWithoutGradientAreMarked() {
    auto used = torch::ones({2}, torch::requires_grad());
    auto unused = torch::ones({2}, torch::requires_grad());
    auto frozen = torch::ones({2});
    GradientMonitor monitor({{"used", used}, {"unused", unused}, {"frozen", frozen}});
    QCOMPARE(monitor.stats().size(), size_t{2});  // frozen has no hook
    monitor.beginStep();
    used.sum().backward();
    QVERIFY(monitor.stats()[0].hasGradient);
    QVERIFY(!monitor.stats()[1].hasGradient);
    // A new step starts empty.
    monitor.beginStep();
    QVERIFY(!monitor.stats()[0].hasGradient);
    QCOMPARE(monitor.stats()[0].name, std::string("used"));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestGradientMonitor)
#include "tst_gradient_monitor.moc"
