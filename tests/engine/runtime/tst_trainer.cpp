// The trainer behind `--batch`: the zoo ResNet learns, keeps its data-dependent control flow in the
// IR, is deterministic for a seed; a user's TorchScript file trains the same way; bad model files
// and wrong input specs are setup errors that say what is wrong. Where a GPU is present, a CUDA
// request trains on it; elsewhere that row says why it skips.

#include "doctest_torch.h"

#include <torch/cuda.h>
#include <torch/script.h>

#include <atomic>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "batch_run.h"
#include "cuda_rows.h"
#include "symtune/binding/binder.h"
#include "symtune/kernels/fused_optimizers.h"
#include "symtune/runtime/trainer.h"
#include "symtune/zoo/model_zoo.h"
#include "test_files.h"

namespace {

// Every test runs on two intra-op threads, as many as the CI machine has cores.
struct TwoThreads {
  TwoThreads() { at::set_num_threads(2); }
};

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

// How many times `needle` occurs in `text`, not overlapping.
int occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size()))
    ++n;
  return n;
}

// A bad model setup and the words its SetupError must contain.
struct SetupErrorRow {
  const char* name;
  const char* kind;
  const char* expected;
};
const SetupErrorRow kSetupErrors[] = {
    {"missing file", "missing", "no such model file"},
    {"not an archive", "garbage", "not a loadable TorchScript archive"},
    {"wrong class count", "classes", "forward returned shape [16, 3], expected [16, 5]"},
    {"wrong input shape", "shape", "forward failed on inputs of model.inputs"},
};

}  // namespace

TEST_CASE_FIXTURE(TwoThreads, "the ci preset's loss falls over 50 steps") {
  symtune::Trainer trainer(zooSession(50));
  std::vector<double> loss;
  for (int i = 0; i < 50; ++i) {
    INFO("step ", i);
    const auto r = trainer.step();
    CHECK(r.step == int64_t{i});
    CHECK(std::isfinite(r.loss));
    CHECK(r.seconds >= r.closureSeconds + r.updateSeconds);
    loss.push_back(r.loss);
  }
  const double first = mean(loss, 0, 5), last = mean(loss, 45, 50);
  MESSAGE("mean loss: steps 1-5 ", first, ", steps 46-50 ", last);
  {
    INFO("10 classes: the untrained loss is about ln 10");
    CHECK(first > 2.0);
  }
  {
    INFO("the loss must fall by a fifth or more in 50 steps");
    CHECK(last < 0.8 * first);
  }
  CHECK(trainer.stepsDone() == int64_t{50});
}

TEST_CASE_FIXTURE(TwoThreads, "the zoo model keeps its data-dependent control flow") {
  auto zoo = symtune::buildZooModel("dynamic_resnet", {"ci", 0, std::nullopt});
  int ifs = 0, gated = 0;
  for (const auto& child : zoo.module.named_modules()) {
    if (child.value.type()->name()->name() == "GatedBlock") {
      ++gated;
      ifs += countNodes(child.value.get_method("forward").graph(), c10::prim::If);
    }
  }
  CHECK(gated == 4);  // ci preset: 2 blocks per stage, the first of each is a DownBlock
  CHECK(ifs == gated);
  // Module paths follow torch.nn naming: layer3's second block's first convolution.
  bool found = false;
  for (const auto& child : zoo.module.named_modules())
    found |= child.name == "layer3.1.body.conv1";
  CHECK(found);
}

TEST_CASE_FIXTURE(TwoThreads, "the same seed gives the same losses") {
  // Binding only bit-for-bit candidates: any two runs.
  symtune::Session exact = zooSession(3);
  exact.binding.exact = true;
  symtune::Trainer a(exact), b(exact);
  for (int i = 0; i < 3; ++i) {
    INFO("step ", i);
    // The same computation run twice: equal to a relative 1e-12.
    CHECK(a.step().loss == doctest::Approx(b.step().loss).epsilon(1e-12));
  }
  // By default candidates within a tolerance may be bound (channels-last images here), so two
  // runs that measured apart may round apart; a run reading the table another wrote binds as it
  // did, and trains as it did.
  symtune::Trainer first(zooSession(3)), second(zooSession(3));
  std::vector<double> losses;
  for (int i = 0; i < 3; ++i)
    losses.push_back(first.step().loss);
  REQUIRE(first.binder() != nullptr);
  REQUIRE(second.binder() != nullptr);
  REQUIRE_FALSE(second.binder()->adopt(first.binder()->table()).has_value());
  for (int i = 0; i < 3; ++i) {
    INFO("step ", i, " with the first run's table");
    CHECK(second.step().loss == doctest::Approx(losses[static_cast<size_t>(i)]).epsilon(1e-12));
  }
  CHECK(second.binder()->measurements() == 0);
}

TEST_CASE_FIXTURE(TwoThreads, "a user's TorchScript file trains") {
  symtune::test::TempDir dir;
  const std::string path = dir.filePath("mlp.pt");
  saveMlp(path, 12, 3);
  symtune::Trainer trainer(fileSession(path, {16, 3, 4}, 3));
  CHECK(trainer.parameterCount() == int64_t{32 * 12 + 32 + 3 * 32 + 3});
  std::vector<double> loss;
  for (int i = 0; i < 50; ++i)
    loss.push_back(trainer.step().loss);
  INFO("the user's model must learn");
  CHECK(mean(loss, 45, 50) < 0.7 * mean(loss, 0, 5));
}

TEST_CASE_FIXTURE(TwoThreads, "bad model files and input specs are one-line setup errors") {
  for (const SetupErrorRow& row : kSetupErrors) {
    INFO(row.name);
    const std::string kind = row.kind;
    symtune::test::TempDir dir;
    const std::string path = dir.filePath("m.pt");
    if (kind == "garbage")
      symtune::test::writeFile(path, "not a zip archive");
    if (kind == "classes" || kind == "shape")
      saveMlp(path, 12, 3);
    auto session = fileSession(
        path, kind == "shape" ? std::vector<int64_t>{16, 5} : std::vector<int64_t>{16, 12},
        kind == "classes" ? 5 : 3);
    try {
      symtune::Trainer trainer(session);
      FAIL("the trainer accepted a bad model");
    } catch (const symtune::SetupError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(row.expected) != std::string::npos);
      INFO("setup errors are one line");
      CHECK(what.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE_FIXTURE(TwoThreads, "a CUDA request without a GPU is a setup error") {
  if (torch::cuda::is_available()) {
    MESSAGE("skipped: a CUDA device is present");
    return;
  }
  auto s = zooSession(1);
  s.run.device = "cuda";
  CHECK_THROWS_AS(symtune::Trainer{s}, symtune::SetupError);
  s.run.device = "auto";
  CHECK(symtune::Trainer(s).device().is_cpu());
}

// The GPU side of the test above: "cuda" and "auto" put the model on the GPU, and it trains there.
TEST_CASE_FIXTURE(TwoThreads, "a CUDA request trains the zoo ResNet on the GPU") {
  if (!symtune::test::cudaRowsRun())
    return;
  auto s = zooSession(5);
  s.run.device = "cuda";
  symtune::Trainer trainer(s);
  REQUIRE(trainer.device().is_cuda());
  for (const auto& p : trainer.executor().parameters())
    CHECK(p.is_cuda());
  // A session that does not say takes the fused optimizer step on CUDA.
  CHECK(trainer.session().optimizer.fused == std::optional<bool>(true));
  CHECK(dynamic_cast<symtune::optim::FusedAdamW*>(&trainer.optimizer().inner()) != nullptr);
  for (int i = 0; i < 5; ++i) {
    INFO("step ", i);
    CHECK(std::isfinite(trainer.step().loss));
  }
  CHECK(trainer.stepsDone() == int64_t{5});
  s.run.device = "auto";
  CHECK(symtune::Trainer(s).device().is_cuda());
}

TEST_CASE_FIXTURE(TwoThreads, "the optimizer step: torch::optim's on the CPU unless told") {
  auto s = zooSession(1);
  {
    symtune::Trainer trainer(s);
    CHECK(trainer.session().optimizer.fused == std::optional<bool>(false));
    CHECK(dynamic_cast<torch::optim::AdamW*>(&trainer.optimizer().inner()) != nullptr);
  }
  s.optimizer.fused = true;
  symtune::Trainer fused(s);
  CHECK(dynamic_cast<symtune::optim::FusedAdamW*>(&fused.optimizer().inner()) != nullptr);
  CHECK(std::isfinite(fused.step().loss));
}

TEST_CASE_FIXTURE(TwoThreads, "the meta-optimizer zeroes gradients and checks the closure") {
  auto w = torch::ones({3}, torch::requires_grad());
  symtune::MetaOptimizer opt(
      std::make_unique<torch::optim::SGD>(std::vector<torch::Tensor>{w}, 0.1));
  auto closure = [&] {
    auto loss = (w * w).sum();
    loss.backward();
    return loss;
  };
  opt.step(closure);
  CHECK(torch::allclose(w, torch::full({3}, 0.8)));  // 1 - 0.1 * 2
  const auto stats = opt.step(closure);              // gradient 1.6, not 2 + 1.6
  CHECK(torch::allclose(w, torch::full({3}, 0.64)));
  CHECK(stats.step == int64_t{1});
  CHECK(opt.stepCount() == int64_t{2});
  CHECK_THROWS_AS(opt.step([] { return torch::Tensor(); }), c10::Error);
}

// LBFGS evaluates the loss several times a step and refuses a step without a closure: it got
// none, and every step threw after the closure had run.
TEST_CASE_FIXTURE(TwoThreads, "the meta-optimizer hands its closure to an optimizer that asks") {
  auto w = torch::full({2}, 3.0, torch::requires_grad());
  symtune::MetaOptimizer opt(std::make_unique<torch::optim::LBFGS>(
      std::vector<torch::Tensor>{w}, torch::optim::LBFGSOptions(1).max_iter(5)));
  int calls = 0;
  const auto stats = opt.step([&] {
    ++calls;
    auto loss = (w - 1).pow(2).sum();
    loss.backward();
    return loss;
  });
  CHECK(stats.loss.item<double>() == doctest::Approx(8.0));  // the first evaluation's
  CHECK(calls > 1);
  // A quadratic: five iterations all but solve it (one iteration without the closure again
  // moves w to 2.5 only).
  CHECK((w - 1).abs().max().item<double>() < 0.1);
  CHECK(opt.stepCount() == int64_t{1});
}

TEST_CASE_FIXTURE(TwoThreads, "a batch run fills the report") {
  std::ostringstream progress;
  symtune::BatchOptions options;
  options.progress = &progress;
  options.progressIntervalSeconds = 0;  // a line per step
  const auto report = symtune::runBatch(zooSession(5), options);
  CHECK(std::string(symtune::toString(report.status)) == "completed");
  CHECK(report.stepsCompleted() == int64_t{5});
  CHECK(report.stepSeconds.size() == size_t{5});
  CHECK(report.samplesPerSecond() > 0);
  CHECK(report.peakRssBytes > 0);
  CHECK(report.torchVersion == std::string(TORCH_VERSION));
  CHECK(report.optimizer == "adamw");
  CHECK_FALSE(report.optimizerFused);  // the CPU's default
  const std::string text = progress.str();
  INFO(text);
  CHECK(occurrences(text, "step ") == 5);
  CHECK(text.find("step 5/5  loss ") != std::string::npos);
}

TEST_CASE_FIXTURE(TwoThreads, "a failure mid-run keeps the steps done") {
  // A model that fails on its 5th call (an impossible view): the setup probe is call 1, steps
  // 1-3 are calls 2-4.
  symtune::test::TempDir dir;
  const std::string path = dir.filePath("flaky.pt");
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
  CHECK(std::string(symtune::toString(report.status)) == "failed");
  CHECK(report.stepsCompleted() == int64_t{3});
  INFO(report.error);
  CHECK(report.error.substr(0, 8) == "step 3: ");
  CHECK(report.error.find("is invalid for input of size 32") != std::string::npos);
  CHECK(report.error.find('\n') == std::string::npos);
}

TEST_CASE_FIXTURE(TwoThreads, "the stop flag interrupts at a step boundary") {
  std::atomic<bool> stop{true};
  symtune::BatchOptions options;
  options.stop = &stop;
  const auto report = symtune::runBatch(zooSession(5), options);
  CHECK(std::string(symtune::toString(report.status)) == "interrupted");
  CHECK(report.stepsCompleted() == int64_t{0});
}

TEST_CASE_FIXTURE(TwoThreads, "binding is on by default; a second run reuses the saved table") {
  symtune::test::TempDir dir;
  symtune::Session s = zooSession(4);
  s.model.zoo = "dynamic_tagger";  // a loop over time steps: sites to bind
  s.path = dir.filePath("tagger.json");
  const std::string table = dir.filePath("tagger.bindings.json");

  const auto first = symtune::runBatch(s, {});
  CHECK(std::string(symtune::toString(first.status)) == "completed");
  REQUIRE(first.bindings.has_value());
  CHECK_FALSE(first.bindings->bindings.empty());
  CHECK(first.bindingTableFile == table);
  CHECK(first.bindingNote.empty());  // there was no table to read
  REQUIRE(first.bindingMeasurements.size() == size_t{4});
  CHECK(first.bindingMeasurements[0] > 0);  // the first batch meets every site's first bucket
  const std::string json = symtune::toJson(first);
  CHECK(json.find("\"measurements_per_step\"") != std::string::npos);

  const auto second = symtune::runBatch(s, {});
  REQUIRE(second.bindings.has_value());
  CHECK(second.bindingNote == "bindings from " + table);
  int64_t measured = 0;
  for (int64_t n : second.bindingMeasurements)
    measured += n;
  CHECK(measured == 0);
  CHECK(second.loss == first.loss);  // the same steps, bound the same way

  // A table measured on another kind of machine is not used: the run measures anew.
  std::string text = symtune::test::readFile(table);
  const auto at = text.find("\"threads\": ");
  REQUIRE(at != std::string::npos);
  text.replace(at, 12, "\"threads\": 9");
  symtune::test::writeFile(table, text);
  const auto third = symtune::runBatch(s, {});
  INFO(third.bindingNote);
  CHECK(third.bindingNote.find("not used: measured on another kind of machine") !=
        std::string::npos);
  CHECK(third.bindingMeasurements[0] > 0);

  // A broken table is not fatal either.
  symtune::test::writeFile(table, "{ nonsense");
  const auto fourth = symtune::runBatch(s, {});
  CHECK(std::string(symtune::toString(fourth.status)) == "completed");
  CHECK(fourth.bindingNote.find("binding table not used:") == 0);

  // Off: TorchScript's executor, no binder, no table.
  s.binding.enabled = false;
  const auto off = symtune::runBatch(s, {});
  CHECK_FALSE(off.bindings.has_value());
  CHECK(symtune::toJson(off).find("\"binding\": null") != std::string::npos);
}
