// The trainer behind `--batch`: the zoo ResNet learns, keeps its data-dependent control flow in the
// IR, is deterministic for a seed; a user's TorchScript file trains the same way; bad model files
// and wrong input specs are setup errors that say what is wrong.

#include <QTemporaryDir>

#include <fstream>

#include <torch/script.h>

#include "batch_run.h"
#include "symtune/runtime/trainer.h"
#include "symtune/zoo/model_zoo.h"
#include "test_main.h"

namespace {

symtune::Session zooSession(int64_t steps) {
  symtune::Session s;
  s.name = "test";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.data.seed = 1;
  s.optimizer.lr = 3e-3;
  s.run.steps = steps;
  return s;
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i)
    sum += v[i];
  return sum / static_cast<double>(to - from);
}

// A two-layer perceptron saved with torch.jit's archive format (what torch.jit.save writes).
void saveMlp(const std::string& path, int64_t in, int64_t classes) {
  torch::jit::Module m("UserMlp");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", torch::randn({32, in}).mul_(0.2).requires_grad_(), false);
  m.register_parameter("b1", torch::zeros({32}).requires_grad_(), false);
  m.register_parameter("w2", torch::randn({classes, 32}).mul_(0.2).requires_grad_(), false);
  m.register_parameter("b2", torch::zeros({classes}).requires_grad_(), false);
  m.define(R"(
def forward(self, x: Tensor) -> Tensor:
    h = torch.relu(torch.addmm(self.b1, x.flatten(1), self.w1.t()))
    return torch.addmm(self.b2, h, self.w2.t())
)");
  m.save(path);
}

symtune::Session fileSession(const std::string& path, std::vector<int64_t> shape, int64_t classes) {
  symtune::Session s;
  s.name = "user";
  s.model.file = path;
  s.model.inputs = {symtune::InputSpec{std::move(shape), symtune::DType::Float32}};
  s.model.classes = classes;
  s.optimizer.lr = 1e-2;
  s.run.steps = 50;
  return s;
}

int countNodes(const std::shared_ptr<torch::jit::Graph>& graph, c10::Symbol kind) {
  int n = 0;
  std::vector<torch::jit::Block*> blocks{graph->block()};
  while (!blocks.empty()) {
    torch::jit::Block* b = blocks.back();
    blocks.pop_back();
    for (torch::jit::Node* node : b->nodes()) {
      n += node->kind() == kind;
      for (torch::jit::Block* inner : node->blocks())
        blocks.push_back(inner);
    }
  }
  return n;
}

}  // namespace

class TestTrainer : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { at::set_num_threads(2); }

  void ciPresetLossFallsOver50Steps() {
    symtune::Trainer trainer(zooSession(50));
    std::vector<double> loss;
    for (int i = 0; i < 50; ++i) {
      const auto r = trainer.step();
      QCOMPARE(r.step, int64_t{i});
      QVERIFY(std::isfinite(r.loss));
      QVERIFY(r.seconds >= r.closureSeconds + r.updateSeconds);
      loss.push_back(r.loss);
    }
    const double first = mean(loss, 0, 5), last = mean(loss, 45, 50);
    qInfo("mean loss: steps 1-5 %.4f, steps 46-50 %.4f", first, last);
    QVERIFY2(first > 2.0, "10 classes: the untrained loss is about ln 10");
    QVERIFY2(last < 0.8 * first, "the loss must fall by a fifth or more in 50 steps");
    QCOMPARE(trainer.stepsDone(), int64_t{50});
  }

  void zooModelKeepsDataDependentControlFlow() {
    auto zoo = symtune::buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
    int ifs = 0, gated = 0;
    for (const auto& child : zoo.module.named_modules()) {
      if (child.value.type()->name()->name() == "GatedBlock") {
        ++gated;
        ifs += countNodes(child.value.get_method("forward").graph(), c10::prim::If);
      }
    }
    QCOMPARE(gated, 4);  // ci preset: 2 blocks per stage, the first of each is a DownBlock
    QCOMPARE(ifs, gated);
    // Module paths follow torch.nn naming: layer3's second block's first convolution.
    bool found = false;
    for (const auto& child : zoo.module.named_modules())
      found |= child.name == "layer3.1.body.conv1";
    QVERIFY(found);
  }

  void sameSeedSameLosses() {
    symtune::Trainer a(zooSession(3)), b(zooSession(3));
    for (int i = 0; i < 3; ++i)
      QCOMPARE(a.step().loss, b.step().loss);
  }

  void userTorchScriptFileTrains() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("mlp.pt").toStdString();
    saveMlp(path, 12, 3);
    symtune::Trainer trainer(fileSession(path, {16, 3, 4}, 3));
    QCOMPARE(trainer.parameterCount(), int64_t{32 * 12 + 32 + 3 * 32 + 3});
    std::vector<double> loss;
    for (int i = 0; i < 50; ++i)
      loss.push_back(trainer.step().loss);
    QVERIFY2(mean(loss, 45, 50) < 0.7 * mean(loss, 0, 5), "the user's model must learn");
  }

  void setupErrors_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("expected");
    QTest::addRow("missing file") << "missing"
                                  << "no such model file";
    QTest::addRow("not an archive") << "garbage"
                                    << "not a loadable TorchScript archive";
    QTest::addRow("wrong class count") << "classes"
                                       << "forward returned shape [16, 3], expected [16, 5]";
    QTest::addRow("wrong input shape") << "shape"
                                       << "forward failed on inputs of model.inputs";
  }

  void setupErrors() {
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const std::string path = dir.filePath("m.pt").toStdString();
    if (kind == "garbage")
      std::ofstream(path) << "not a zip archive";
    if (kind == "classes" || kind == "shape")
      saveMlp(path, 12, 3);
    auto session = fileSession(
        path, kind == "shape" ? std::vector<int64_t>{16, 5} : std::vector<int64_t>{16, 12},
        kind == "classes" ? 5 : 3);
    try {
      symtune::Trainer trainer(session);
      QFAIL("the trainer accepted a bad model");
    } catch (const symtune::SetupError& e) {
      const QString what = QString::fromStdString(e.what());
      QVERIFY2(what.contains(expected), qPrintable(what));
      QVERIFY2(!what.contains('\n'), "setup errors are one line");
    }
  }

  void cudaRequestWithoutGpuIsASetupError() {
    if (torch::cuda::is_available())
      QSKIP("a CUDA device is present");
    auto s = zooSession(1);
    s.run.device = "cuda";
    QVERIFY_THROWS_EXCEPTION(symtune::SetupError, symtune::Trainer{s});
    s.run.device = "auto";
    QVERIFY(symtune::Trainer(s).device().is_cpu());
  }

  void metaOptimizerZeroesGradientsAndChecksTheClosure() {
    auto w = torch::ones({3}, torch::requires_grad());
    symtune::MetaOptimizer opt(
        std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{w}, 0.1));
    auto closure = [&] {
      auto loss = (w * w).sum();
      loss.backward();
      return loss;
    };
    opt.step(closure);
    QVERIFY(torch::allclose(w, torch::full({3}, 0.8)));  // 1 - 0.1 * 2
    const auto stats = opt.step(closure);                // gradient 1.6, not 2 + 1.6
    QVERIFY(torch::allclose(w, torch::full({3}, 0.64)));
    QCOMPARE(stats.step, int64_t{1});
    QCOMPARE(opt.stepCount(), int64_t{2});
    QVERIFY_THROWS_EXCEPTION(c10::Error, opt.step([] { return torch::Tensor(); }));
  }

  void batchRunFillsTheReport() {
    std::ostringstream progress;
    symtune::BatchOptions options;
    options.progress = &progress;
    options.progressIntervalSeconds = 0;  // a line per step
    const auto report = symtune::runBatch(zooSession(5), options);
    QCOMPARE(report.status, symtune::RunReport::Status::Completed);
    QCOMPARE(report.stepsCompleted(), int64_t{5});
    QCOMPARE(report.stepSeconds.size(), size_t{5});
    QVERIFY(report.samplesPerSecond() > 0);
    QVERIFY(report.peakRssBytes > 0);
    QCOMPARE(report.torchVersion, std::string(TORCH_VERSION));
    const QString text = QString::fromStdString(progress.str());
    QCOMPARE(text.count("step "), 5);
    QVERIFY(text.contains("step 5/5  loss "));
  }

  void failureMidRunKeepsTheStepsDone() {
    // A model that fails on its 5th call (an impossible view): the setup probe is call 1, steps
    // 1-3 are calls 2-4.
    QTemporaryDir dir;
    const std::string path = dir.filePath("flaky.pt").toStdString();
    torch::jit::Module m("Flaky");
    m.register_attribute("training", c10::BoolType::get(), true);
    m.register_attribute("calls", c10::IntType::get(), int64_t{0});
    m.register_parameter("w", torch::randn({3, 4}).requires_grad_(), false);
    m.define(R"(
def forward(self, x: Tensor) -> Tensor:
    self.calls += 1
    if self.calls > 4:
        x = x.view(-1, 7)
    return torch.mm(x, self.w.t())
)");
    m.save(path);
    auto session = fileSession(path, {8, 4}, 3);
    session.run.steps = 10;
    const auto report = symtune::runBatch(session, {});
    QCOMPARE(report.status, symtune::RunReport::Status::Failed);
    QCOMPARE(report.stepsCompleted(), int64_t{3});
    QVERIFY2(QString::fromStdString(report.error).startsWith("step 3: "), report.error.c_str());
    QVERIFY2(QString::fromStdString(report.error).contains("is invalid for input of size 32"),
             report.error.c_str());
    QVERIFY(report.error.find('\n') == std::string::npos);
  }

  void stopFlagInterruptsAtAStepBoundary() {
    std::atomic<bool> stop{true};
    symtune::BatchOptions options;
    options.stop = &stop;
    const auto report = symtune::runBatch(zooSession(5), options);
    QCOMPARE(report.status, symtune::RunReport::Status::Interrupted);
    QCOMPARE(report.stepsCompleted(), int64_t{0});
  }
};

SYMTUNE_TEST_MAIN_CORE(TestTrainer)
#include "tst_trainer.moc"
