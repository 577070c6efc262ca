// MetaInfoBroker: 24 features, each documented once in docs/features.md, with sane values on the
// ci preset; subscribers see every step; the history is bounded.

#include <torch/torch.h>

#include <QFile>
#include <QRegularExpression>

#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/meta_info_broker.h"
#include "test_main.h"

using symtune::Feature;

class TestMetaInfoBroker : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void everyFeatureIsDocumentedOnceInOrder() {
    QFile doc(SYMTUNE_SOURCE_DIR "/docs/features.md");
    QVERIFY(doc.open(QIODevice::ReadOnly));
    const QRegularExpression row(R"(^\| (\d+) \| `([a-z_]+)` \|)",
                                 QRegularExpression::MultilineOption);
    QStringList documented;
    for (auto it = row.globalMatch(QString::fromUtf8(doc.readAll())); it.hasNext();) {
      const auto m = it.next();
      QCOMPARE(m.captured(1).toInt(), documented.size());
      documented << m.captured(2);
    }
    QCOMPARE(documented.size(), symtune::kFeatureCount);
    for (int i = 0; i < symtune::kFeatureCount; ++i) {
      QCOMPARE(documented[i], QString(symtune::featureName(static_cast<Feature>(i))));
    }
  }

  void saneValuesOnTheCiPreset() {
    at::set_num_threads(2);
    symtune::Session s;
    s.name = "features";
    s.model.zoo = "dynamic_resnet";
    s.model.preset = "ci";
    s.optimizer.lr = 3e-3;
    symtune::Trainer trainer(s);
    std::vector<symtune::StepResult> steps;
    for (int i = 0; i < 12; ++i)
      steps.push_back(trainer.step());
    for (const auto& r : steps) {
      const auto& f = r.features;
      QCOMPARE(f[Feature::Step], static_cast<double>(r.step));
      QVERIFY(f[Feature::StepTime] > 0);
      QCOMPARE(f[Feature::StepTime], r.seconds);
      const double parts = f[Feature::DataTime] + f[Feature::ForwardTime] +
                           f[Feature::BackwardTime] + f[Feature::OptimizerTime];
      QVERIFY(parts > 0 && parts <= f[Feature::StepTime]);
      QCOMPARE(f[Feature::SamplesPerSecond], 16.0 / f[Feature::StepTime]);
      QCOMPARE(f[Feature::BatchSize], 16.0);
      QCOMPARE(f[Feature::SequenceLength], 0.0);  // images
      QVERIFY(f[Feature::PeakMemory] > 1e5);
      QVERIFY(f[Feature::Allocations] > 50);
      QCOMPARE(f[Feature::Loss], r.loss);
      QVERIFY(f[Feature::GradGlobalNorm] > 0 && std::isfinite(f[Feature::GradGlobalNorm]));
      QVERIFY(f[Feature::GradMaxParamNorm] <= f[Feature::GradGlobalNorm] + 1e-12);
      QVERIFY(f[Feature::GradMinParamNorm] <= f[Feature::GradMaxParamNorm]);
      QVERIFY(f[Feature::GradMeanAbs] > 0);
      QCOMPARE(f[Feature::GradNanCount], 0.0);
      QCOMPARE(f[Feature::GradInfCount], 0.0);
      QVERIFY(f[Feature::ParamsWithoutGrad] >= 0);
      QCOMPARE(f[Feature::LearningRate], 3e-3);
      // The update ratio is measured on every 10th step only.
      QCOMPARE(std::isnan(f[Feature::UpdateRatioMax]), r.step % 10 != 0);
    }
    QCOMPARE(steps[1].features[Feature::LossDelta], steps[1].loss - steps[0].loss);
    QCOMPARE(steps[0].features[Feature::LossEma], steps[0].loss);
    QVERIFY(steps[0].features[Feature::UpdateRatioMax] > 0);
    QCOMPARE(trainer.broker().history().size(), size_t{12});
  }

  void subscribersSeeEveryStepAndHistoryIsBounded() {
    auto w = torch::ones({4}, torch::requires_grad());
    symtune::MetaInfoBrokerOptions options;
    options.historySize = 3;
    symtune::MetaInfoBroker broker({{"w", w}}, options);
    std::vector<double> seen;
    const int id =
        broker.subscribe([&](const symtune::StepFeatures& f) { seen.push_back(f[Feature::Step]); });
    for (int i = 0; i < 5; ++i) {
      auto active = broker.beginStep();
      (w * static_cast<double>(i)).sum().backward();
      symtune::StepTimings t;
      t.total = 0.5;
      broker.endStep(t, 1.0 / (i + 1), 0.1, 8, 12);
      if (i == 3)
        broker.unsubscribe(id);
    }
    QCOMPARE(seen, (std::vector<double>{0, 1, 2, 3}));
    QCOMPARE(broker.history().size(), size_t{3});
    QCOMPARE(broker.history().front()[Feature::Step], 2.0);
    QCOMPARE(broker.history().back()[Feature::SequenceLength], 12.0);
    QCOMPARE(broker.history().back()[Feature::SamplesPerSecond], 16.0);
  }
};

SYMTUNE_TEST_MAIN_CORE(TestMetaInfoBroker)
#include "tst_meta_info_broker.moc"
