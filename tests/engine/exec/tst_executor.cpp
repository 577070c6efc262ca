// The execution seam (Note [The execution seam]): every forward the trainer runs — plain,
// per-node telemetry, captured, with segments recomputed, and every combination of them — is one
// Executor::run call carrying what the step measures; every combination trains with the plain
// run's losses; and measuring a step does not change how much it keeps alive.

#include <algorithm>
#include <memory>

#include "symtune/exec/segment_executor.h"
#include "symtune/runtime/trainer.h"
#include "test_main.h"

namespace {

symtune::Session session(const char* zoo) {
  symtune::Session s;
  s.name = "seam";
  s.model.zoo = zoo;
  s.model.preset = "ci";
  s.data.seed = 3;
  s.optimizer.lr = 3e-3;
  s.run.device = "cpu";
  return s;
}

// Runs another executor and notes what each call asked for: the seam as the trainer uses it.
class Witness final : public symtune::Executor {
 public:
  explicit Witness(std::unique_ptr<symtune::Executor> inner) : inner_(std::move(inner)) {}

  struct Call {
    bool attributeOps = false, recorded = false;
    int64_t recomputed = 0;
  };
  std::vector<Call> calls;

  symtune::ForwardResult run(const std::vector<torch::jit::IValue>& inputs,
                             const symtune::ForwardRequest& request) override {
    symtune::ForwardResult r = inner_->run(inputs, request);
    calls.push_back({request.attributeOps, request.record != nullptr, r.recomputed});
    return r;
  }
  std::vector<torch::Tensor> parameters() override { return inner_->parameters(); }
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override {
    return inner_->namedParameters();
  }
  void setTraining(bool on) override { inner_->setTraining(on); }
  void to(const torch::Device& device) override { inner_->to(device); }
  torch::jit::Module* scriptModule() override { return inner_->scriptModule(); }
  symtune::SyMuGen* symugen() override { return inner_->symugen(); }
  const char* name() const override { return "witness"; }

 private:
  std::unique_ptr<symtune::Executor> inner_;
};

// The trainer's executor, or a SegmentExecutor recomputing every segment, behind a witness.
Witness* installWitness(symtune::Trainer& trainer, bool recompute) {
  std::unique_ptr<symtune::Executor> inner;
  torch::jit::Module& module = *trainer.executor().scriptModule();
  if (recompute) {
    auto segments = std::make_unique<symtune::SegmentExecutor>(module);
    segments->setPlan(segments->recomputeAll());
    inner = std::move(segments);
  } else {
    inner = std::make_unique<symtune::ScriptModuleExecutor>(module);
  }
  auto witness = std::make_unique<Witness>(std::move(inner));
  Witness* seen = witness.get();
  trainer.setExecutor(std::move(witness));
  return seen;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

class TestExecutor : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void everyCombinationRunsThroughTheSeam_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<bool>("perNode");
    QTest::addColumn<bool>("recompute");
    QTest::addColumn<bool>("capture");
    for (const char* model : {"dynamic_resnet", "transformer_xl"}) {
      for (int bits = 0; bits < 8; ++bits) {
        const bool perNode = bits & 1, recompute = bits & 2, capture = bits & 4;
        QTest::addRow("%s%s%s%s", model, perNode ? " per-node" : "", recompute ? " recompute" : "",
                      capture ? " capture" : "")
            << model << perNode << recompute << capture;
      }
    }
  }
  void everyCombinationRunsThroughTheSeam() {
    QFETCH(QString, model);
    QFETCH(bool, perNode);
    QFETCH(bool, recompute);
    QFETCH(bool, capture);
    const symtune::Session s = session(qPrintable(model));
    symtune::Trainer plain(s), measured(s);
    Witness* seam = installWitness(measured, recompute);
    if (perNode)
      measured.setTelemetry(symtune::Telemetry::PerNode);
    constexpr int kSteps = 3;
    for (int i = 0; i < kSteps; ++i) {
      const double expected = plain.step().loss;
      symtune::StepResult r;
      symtune::Graph graph;
      if (capture)
        graph = measured.captureStep(&r);
      else
        r = measured.step();
      QVERIFY2(std::abs(r.loss - expected) <= 1e-5 * std::abs(expected),
               qPrintable(QString("step %1: %2 vs the plain run's %3")
                              .arg(i)
                              .arg(r.loss, 0, 'g', 9)
                              .arg(expected, 0, 'g', 9)));
      QCOMPARE(r.nodes != nullptr, perNode);
      if (perNode) {
        QVERIFY(!r.nodes->nodes.empty());
        QVERIFY2(r.nodes->attributedSeconds > 0, "ops were attributed to graph nodes");
      }
      if (capture) {
        QVERIFY(graph.countNodes(symtune::GraphSide::Backward) > 0);
        const auto& nodes = graph.nodes();
        const bool shaped = std::any_of(nodes.begin(), nodes.end(), [](const auto& n) {
          return n.side == symtune::GraphSide::Forward && !n.outputs.empty() &&
                 n.outputs.front().shape.has_value();
        });
        QVERIFY2(shaped, "the step's shapes were recorded");
        const bool linked = std::any_of(nodes.begin(), nodes.end(),
                                        [](const auto& n) { return n.forward.valid(); });
        QVERIFY2(linked, "autograd nodes are linked to the forward ops that made them");
      }
    }
    // One executor call per step, asking for what the step measured.
    QCOMPARE(seam->calls.size(), size_t{kSteps});
    for (const auto& call : seam->calls) {
      QCOMPARE(call.attributeOps, perNode);
      QCOMPARE(call.recorded, capture);
      QCOMPARE(call.recomputed > 0, recompute);
    }
  }

  // A sampled step (per-node telemetry, or a capture) runs as an unsampled one does: through a
  // SegmentExecutor both run the evaluator with the same plan, so their peaks agree within a few
  // percent; through the TorchScript executor the measured step runs in the evaluator, which
  // frees each value after its last use and so must keep no more alive than TorchScript does.
  void samplingKeepsThePeak_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<bool>("recompute");
    for (const char* model : {"dynamic_resnet", "transformer_xl"}) {
      QTest::addRow("%s torchscript", model) << model << false;
      QTest::addRow("%s segments", model) << model << true;
    }
  }
  void samplingKeepsThePeak() {
    QFETCH(QString, model);
    QFETCH(bool, recompute);
    symtune::Trainer trainer(session(qPrintable(model)));
    installWitness(trainer, recompute);
    std::vector<double> plain, perNode, captured;
    for (int i = 0; i < 11; ++i) {
      const int kind = i % 3;
      trainer.setTelemetry(kind == 1 ? symtune::Telemetry::PerNode : symtune::Telemetry::Features);
      symtune::StepResult r;
      if (kind == 2)
        trainer.captureStep(&r);
      else
        r = trainer.step();
      if (i < 2)
        continue;  // TorchScript's profiling runs
      const double peak = r.features[symtune::Feature::PeakMemory];
      (kind == 0 ? plain : kind == 1 ? perNode : captured).push_back(peak);
    }
    const double base = median(plain);
    const double nodeRatio = median(perNode) / base, captureRatio = median(captured) / base;
    qInfo("%s %s: peak %.2f MiB unsampled; per-node %.3fx, captured %.3fx", qPrintable(model),
          recompute ? "segments" : "torchscript", base / 1048576.0, nodeRatio, captureRatio);
    QVERIFY(base > 0);
    const double low = recompute ? 0.95 : 0.0;
    QVERIFY2(nodeRatio <= 1.05 && nodeRatio >= low, qPrintable(QString::number(nodeRatio)));
    QVERIFY2(captureRatio <= 1.05 && captureRatio >= low,
             qPrintable(QString::number(captureRatio)));
  }

  // A plan names segments by their blocks; a block that is not one is an error that lists them.
  void planNamesSegments() {
    symtune::Trainer trainer(session("dynamic_resnet"));
    symtune::SegmentExecutor executor(*trainer.executor().scriptModule());
    const auto segments = executor.segments();
    QVERIFY(segments.size() > 2);
    symtune::SegmentPlan plan;
    plan.recompute = {segments[1]};
    executor.setPlan(plan);
    QCOMPARE(executor.plan().recompute.size(), size_t{1});
    plan.recompute = {"no.such.block"};
    try {
      executor.setPlan(plan);
      QFAIL("an unknown block was accepted");
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      QVERIFY2(what.find("\"no.such.block\" is not a segment") != std::string::npos, e.what());
      QVERIFY2(what.find(segments[1]) != std::string::npos, e.what());
    }
    QCOMPARE(executor.plan().recompute.size(), size_t{1});  // the old plan stays
  }

  // One recomputed segment trains like the plain run and recomputes that block's calls alone.
  void partialPlanTrainsTheSame() {
    const symtune::Session s = session("dynamic_resnet");
    symtune::Trainer plain(s), planned(s);
    auto executor = std::make_unique<symtune::SegmentExecutor>(*planned.executor().scriptModule());
    auto* segments = executor.get();
    symtune::SegmentPlan plan;
    plan.recompute = {segments->segments().front()};
    segments->setPlan(plan);
    planned.setExecutor(std::move(executor));
    for (int i = 0; i < 3; ++i) {
      const double a = plain.step().loss, b = planned.step().loss;
      QVERIFY(std::abs(a - b) <= 1e-5 * std::abs(a));
    }
    QCOMPARE(segments->lastRecomputed(), int64_t{1});
  }
};

SYMTUNE_TEST_MAIN_CORE(TestExecutor)
#include "tst_executor.moc"
