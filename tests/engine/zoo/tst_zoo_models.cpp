// The six benchmark models (resources/models/): each builds on its ci preset, keeps its control
// flow in the IR (no tracing), learns (the loss falls), runs through SyMuGen's evaluator with the
// module's own result, trains the same under full checkpointing, and gets data that is
// deterministic per batch yet changes shape or routing from batch to batch.

#include <cmath>
#include <set>

#include <torch/script.h>

#include "error_of.h"
#include "symtune/core/zoo_catalog.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/graph/symugen.h"
#include "symtune/rules/rule_registry.h"
#include "symtune/rules/rule_rewrite.h"
#include "symtune/runtime/trainer.h"
#include "symtune/zoo/model_zoo.h"
#include "symtune/zoo/zoo_data.h"
#include "test_main.h"

namespace {

struct Expect {
  const char* model;
  int steps;         // training steps for the loss check
  double fallRatio;  // mean loss of the last 5 steps must be below this share of the first 5
  bool ifs, loops;   // control flow the inlined forward IR must hold
  double lr;
};

const Expect kModels[] = {
    {"dynamic_resnet", 50, 0.8, true, false, 3e-3}, {"transformer_xl", 60, 0.8, false, true, 2e-3},
    {"dynamic_tagger", 60, 0.8, false, true, 5e-3}, {"moe_topk", 60, 0.8, true, true, 3e-3},
    {"early_exit", 50, 0.8, true, false, 3e-3},     {"tree_rnn", 80, 0.9, false, true, 3e-3},
};

const Expect& expectFor(const QString& name) {
  for (const auto& e : kModels) {
    if (name == e.model)
      return e;
  }
  qFatal("no expectation for %s", qPrintable(name));
}

symtune::Session sessionFor(const Expect& e) {
  symtune::Session s;
  s.name = e.model;
  s.model.zoo = e.model;
  s.model.preset = "ci";
  s.data.seed = 3;
  s.optimizer.lr = e.lr;
  s.run.steps = e.steps;
  return s;
}

void countControl(const torch::jit::Block* block, int& ifs, int& loops) {
  for (const torch::jit::Node* node : block->nodes()) {
    ifs += node->kind() == c10::prim::If;
    loops += node->kind() == c10::prim::Loop;
    for (const torch::jit::Block* inner : node->blocks())
      countControl(inner, ifs, loops);
  }
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i)
    sum += v[i];
  return sum / static_cast<double>(to - from);
}

// A batch's shape signature: every tensor input's sizes and every int / int list.
std::string signature(const symtune::Batch& b) {
  std::ostringstream s;
  for (const auto& in : b.inputs) {
    if (in.isTensor())
      s << in.toTensor().sizes();
    else
      s << in;
    s << ";";
  }
  return s.str();
}

// A scripted block in training mode: `source` its forward, parameters w of `weight`'s shape and,
// when `bias` is given, b of that size — random, from the current seed.
torch::jit::Module scriptedBlock(const char* name, const char* source, std::vector<int64_t> weight,
                                 int64_t bias = 0) {
  torch::jit::Module m(name);
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w", torch::randn(weight).requires_grad_(), false);
  if (bias > 0)
    m.register_parameter("b", torch::randn({bias}).requires_grad_(), false);
  m.define(source);
  return m;
}

}  // namespace

class TestZooModels : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { at::set_num_threads(2); }

  void catalogueListsTheSixModels() {
    QCOMPARE(symtune::zooCatalog().size(), std::size(kModels));
    for (const auto& e : kModels) {
      const auto* entry = symtune::findZooEntry(e.model);
      QVERIFY2(entry != nullptr, e.model);
      QCOMPARE(entry->presets, (std::vector<std::string>{"ci", "cpu", "gpu"}));
    }
  }

  // A data source built with sizes it cannot use says which and what it got.
  void dataSourcesNameTheBadSize_data() {
    QTest::addColumn<std::function<void()>>("build");
    QTest::addColumn<QString>("expected");
    QTest::addRow("a three-token vocabulary") << std::function<void()>([] {
      symtune::MarkovText(3, 8, 2, {4, 8}, {0, 4}, 1);
    }) << "got vocabulary 3, batch size 8, segments 2";
    QTest::addRow("an empty segment length range") << std::function<void()>([] {
      symtune::MarkovText(16, 8, 2, {8, 4}, {0, 4}, 1);
    }) << "MarkovText segment length must be a range [lo, hi] with 1 <= lo <= hi; got [8, 4]";
    QTest::addRow("one class") << std::function<void()>([] {
      symtune::RandomTrees(1, 8, {2, 6}, 1);
    }) << "got classes 1, batch size 8";
  }
  void dataSourcesNameTheBadSize() {
    QFETCH(std::function<void()>, build);
    QFETCH(QString, expected);
    const std::string error = symtune::test::errorOf(build);
    QVERIFY2(error.find(expected.toStdString()) != std::string::npos, error.c_str());
  }

  void models_data() {
    QTest::addColumn<QString>("model");
    for (const auto& e : kModels)
      QTest::newRow(e.model) << QString(e.model);
  }

  void irKeepsControlFlow_data() { models_data(); }
  void irKeepsControlFlow() {
    QFETCH(QString, model);
    const Expect& e = expectFor(model);
    auto zoo = symtune::buildZooModel(e.model, {"ci", 0, std::nullopt});
    symtune::SyMuGen gen(zoo.module, e.model);
    int ifs = 0, loops = 0, fromModelFile = 0;
    for (const auto& n : gen.staticGraph().nodes()) {
      ifs += n.kind == "prim::If";
      loops += n.kind == "prim::Loop";
      fromModelFile += n.source.file == "resources/models/" + model.toStdString() + ".py";
    }
    qInfo("%s: %d prim::If, %d prim::Loop, %zu nodes", e.model, ifs, loops,
          gen.staticGraph().nodes().size());
    QCOMPARE(ifs > 0, e.ifs);
    QCOMPARE(loops > 0, e.loops);
    QVERIFY2(fromModelFile > 0, "source ranges point into the model file");
    QVERIFY(!zoo.description.empty());
  }

  void ciPresetLearns_data() { models_data(); }
  void ciPresetLearns() {
    QFETCH(QString, model);
    const Expect& e = expectFor(model);
    symtune::Trainer trainer(sessionFor(e));
    std::vector<double> loss;
    for (int i = 0; i < e.steps; ++i) {
      const auto r = trainer.step();
      QVERIFY2(std::isfinite(r.loss), qPrintable(QString("step %1").arg(i)));
      loss.push_back(r.loss);
    }
    const double first = mean(loss, 0, 5), last = mean(loss, loss.size() - 5, loss.size());
    qInfo("%s: mean loss of steps 1-5 %.4f, of the last 5 %.4f (%.0f%%)", e.model, first, last,
          100 * last / first);
    QVERIFY2(last < e.fallRatio * first, "the loss must fall");
  }

  void evaluatorMatchesModule_data() { models_data(); }
  void evaluatorMatchesModule() {
    QFETCH(QString, model);
    const Expect& e = expectFor(model);
    auto zoo = symtune::buildZooModel(e.model, {"ci", 0, std::nullopt});
    zoo.module.eval();  // batch statistics would be updated by both runs
    torch::NoGradGuard noGrad;
    const symtune::Batch b = zoo.data->batch(2);
    const torch::Tensor expected = zoo.module.forward(b.inputs).toTensor();
    symtune::SyMuGen gen(zoo.module, e.model);
    const torch::Tensor got = gen.forward(b.inputs).output.toTensor();
    QCOMPARE(got.sizes(), expected.sizes());
    QVERIFY(torch::allclose(got, expected, 1e-4, 1e-5));
    QCOMPARE(expected.size(0), b.target.size(0));  // one row of logits per target
  }

  // Full checkpointing recomputes every top-level block in backward: the step must train exactly
  // as without it (same losses, same updated parameters).
  void checkpointingTrainsTheSame_data() { models_data(); }
  void checkpointingTrainsTheSame() {
    QFETCH(QString, model);
    const Expect& e = expectFor(model);
    symtune::Trainer plain(sessionFor(e)), checkpointed(sessionFor(e));
    auto executor =
        std::make_unique<symtune::SegmentExecutor>(*checkpointed.executor().scriptModule());
    auto* ckpt = executor.get();
    QVERIFY(!ckpt->segments().empty());
    ckpt->setPlan(ckpt->recomputeAll());
    checkpointed.setExecutor(std::move(executor));
    for (int i = 0; i < 3; ++i) {
      const double a = plain.step().loss, b = checkpointed.step().loss;
      QVERIFY2(std::abs(a - b) <= 1e-5 * std::abs(a),
               qPrintable(QString("step %1: %2 vs %3").arg(i).arg(a, 0, 'g', 9).arg(b, 0, 'g', 9)));
    }
    QVERIFY2(ckpt->lastRecomputed() > 0, "some block ran checkpointed");
    const auto p = plain.executor().parameters(), q = checkpointed.executor().parameters();
    QCOMPARE(p.size(), q.size());
    for (size_t i = 0; i < p.size(); ++i)
      QVERIFY(torch::allclose(p[i], q[i], 1e-4, 1e-6));
    qInfo("%s: %zu top-level blocks, %lld block calls checkpointed in the last step", e.model,
          ckpt->segments().size(), static_cast<long long>(ckpt->lastRecomputed()));
  }

  // Blocks checkpointing would get wrong run as usual: one that writes to its input in place (an
  // in-place ReLU) and one whose output nests a tuple in a tuple. Gradients match the plain run.
  void unsafeBlocksAreNotCheckpointed() {
    auto module = [] {
      torch::manual_seed(5);
      auto make = [](const char* name, const char* source) {
        return scriptedBlock(name, source, {4, 4});
      };
      auto lin = make("Lin", "def forward(self, x: Tensor) -> Tensor:\n    return x.mm(self.w)\n");
      auto act =
          make("Act", "def forward(self, x: Tensor) -> Tensor:\n    return torch.relu_(x)\n");
      auto pair = make("Pair",
                       "def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:\n"
                       "    h = x.mm(self.w)\n"
                       "    return h, (h * 2.0, h * 3.0)\n");
      torch::jit::Module root("Root");
      root.register_attribute("training", c10::BoolType::get(), true);
      root.register_module("lin", lin);
      root.register_module("act", act);
      root.register_module("pair", pair);
      root.define(R"(
def forward(self, x: Tensor) -> Tensor:
    y = self.act.forward(self.lin.forward(x))
    a, bc = self.pair.forward(y)
    b, c = bc
    return a + b + c
)");
      return root;
    };
    const auto x = torch::randn({3, 4});
    auto plain = module();
    plain.forward({x}).toTensor().sum().backward();
    auto checkpointed = module();
    symtune::SegmentExecutor executor(checkpointed);
    executor.setPlan(executor.recomputeAll());
    executor.forward({x}).sum().backward();
    QCOMPARE(executor.lastRecomputed(), int64_t{1});  // only `lin`
    const auto p = plain.parameters(), q = checkpointed.parameters();
    auto pi = p.begin(), qi = q.begin();
    int compared = 0;
    for (; pi != p.end(); ++pi, ++qi) {
      QCOMPARE((*qi).grad().defined(), (*pi).grad().defined());  // `act` uses no parameter
      if ((*pi).grad().defined()) {
        QVERIFY(torch::allclose((*pi).grad(), (*qi).grad()));
        ++compared;
      }
    }
    QCOMPARE(compared, 2);
  }

  // Note [Checkpoint RNG]: a dropout inside a checkpointed block draws the same mask when the
  // block is recomputed — aten::dropout and symtune::bias_dropout_add alike — so gradients equal
  // the plain run's, and the generator continues as if nothing had been recomputed.
  void checkpointedDropoutRecomputesTheSameMask() {
    auto module = [] {
      torch::manual_seed(5);
      auto make = [](const char* name, const char* source) {
        return scriptedBlock(name, source, {16, 16}, 16);
      };
      auto first = make("DropA",
                        "def forward(self, x: Tensor) -> Tensor:\n"
                        "    return torch.dropout(torch.relu(x.mm(self.w) + self.b), 0.5, True)\n");
      // symtune::bias_dropout_add by the built-in rewrite (TorchScript source compiled here
      // does not resolve torch.ops).
      auto second = make("DropB",
                         "def forward(self, x: Tensor) -> Tensor:\n"
                         "    return x + torch.dropout(x.mm(self.w) + self.b, 0.5, True)\n");
      const auto rule = *symtune::rules::Registry::global().get("fused_bias_dropout_add").rule;
      if (symtune::rules::applyRewrites(second, {rule}).front().sites != 1)
        throw std::runtime_error("fused_bias_dropout_add did not rewrite the block");
      torch::jit::Module root("DropRoot");
      root.register_attribute("training", c10::BoolType::get(), true);
      root.register_module("first", first);
      root.register_module("second", second);
      root.define(R"(
def forward(self, x: Tensor) -> Tensor:
    return self.second.forward(self.first.forward(x))
)");
      return root;
    };
    const auto x = torch::randn({8, 16});
    auto plain = module();
    torch::manual_seed(42);
    const auto plainOut = plain.forward({x}).toTensor();
    plainOut.sum().backward();
    const double plainNext = torch::rand({1}).item<double>();
    auto checkpointed = module();
    symtune::SegmentExecutor executor(checkpointed);
    executor.setPlan(executor.recomputeAll());
    torch::manual_seed(42);
    const auto checkpointedOut = executor.forward({x});
    checkpointedOut.sum().backward();
    const double checkpointedNext = torch::rand({1}).item<double>();
    QCOMPARE(executor.lastRecomputed(), int64_t{2});
    QVERIFY(torch::equal(checkpointedOut, plainOut));
    const auto p = plain.parameters(), q = checkpointed.parameters();
    auto pi = p.begin(), qi = q.begin();
    for (; pi != p.end(); ++pi, ++qi)
      QVERIFY(torch::allclose((*pi).grad(), (*qi).grad(), 1e-5, 1e-6));
    QCOMPARE(checkpointedNext, plainNext);
  }

  void dataIsDeterministicAndVaries_data() { models_data(); }
  void dataIsDeterministicAndVaries() {
    QFETCH(QString, model);
    const Expect& e = expectFor(model);
    auto a = symtune::buildZooModel(e.model, {"ci", 5, std::nullopt});
    auto b = symtune::buildZooModel(e.model, {"ci", 5, std::nullopt});
    std::set<std::string> shapes;
    for (int64_t i = 0; i < 6; ++i) {
      const auto x = a.data->batch(i), y = b.data->batch(i);
      QCOMPARE(signature(x), signature(y));
      QVERIFY(torch::equal(x.target, y.target));
      for (size_t k = 0; k < x.inputs.size(); ++k) {
        if (x.inputs[k].isTensor())
          QVERIFY(torch::equal(x.inputs[k].toTensor(), y.inputs[k].toTensor()));
      }
      shapes.insert(signature(x));
    }
    // The sequence and tree models' inputs change shape per batch; the others change routing.
    const bool shaped =
        model == "transformer_xl" || model == "dynamic_tagger" || model == "tree_rnn";
    if (shaped)
      QVERIFY2(shapes.size() > 1, "input shapes must vary between batches");
  }
};

SYMTUNE_TEST_MAIN_CORE(TestZooModels)
#include "tst_zoo_models.moc"
