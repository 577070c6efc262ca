// Checkpoints and resume (Note [Checkpoints] in trainer.h). A run of symtune-runner killed with
// SIGKILL at several moments and resumed with --resume each time ends with the parameters of an
// uninterrupted run, bit for bit (CPU, two threads), and its report holds every step once, with
// the same losses; SIGTERM writes a checkpoint where the run stopped; a checkpoint of another run,
// a missing one, or --resume without run.checkpoint is a setup error naming the file.

#include "doctest_torch.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include <torch/script.h>

#include "batch_run.h"
#include "child_process.h"
#include "error_of.h"
#include "symtune/core/report.h"
#include "symtune/runtime/trainer.h"
#include "test_files.h"

namespace {

using namespace std::chrono_literals;

const std::filesystem::path kData = std::filesystem::path(SYMTUNE_SOURCE_DIR) / "tests" / "data";
const std::string kRunner = std::string(SYMTUNE_BIN_DIR) + "/symtune-runner";

// The blobs classifier with dropout, so the random generator's state matters.
void writeModel(const std::filesystem::path& file, int hidden = 32) {
  torch::manual_seed(5);
  torch::jit::Module m("Dropout");
  m.register_attribute("training", c10::BoolType::get(), true);  // as nn.Module's
  m.register_parameter("w1", torch::randn({hidden, 4}).mul_(0.5).requires_grad_(), false);
  m.register_parameter("b1", torch::zeros({hidden}).requires_grad_(), false);
  m.register_parameter("w2", torch::randn({3, hidden}).mul_(0.2).requires_grad_(), false);
  m.define(R"(
def forward(self, x: Tensor) -> Tensor:
    h = torch.relu(torch.matmul(x, self.w1.t()) + self.b1)
    h = torch.dropout(h, 0.3, self.training)
    return torch.matmul(h, self.w2.t())
)");
  m.save(file.string());
}

// A run in `folder`: its session (steps, a checkpoint every 7), model and outputs there.
std::filesystem::path writeRun(const std::filesystem::path& folder, int64_t steps) {
  std::filesystem::create_directories(folder);
  writeModel(folder / "model.pt");
  const std::filesystem::path session = folder / "run.json";
  std::ofstream(session) << R"({"format": "symtune-session", "version": 1, "name": "resumable",
    "model": {"file": "model.pt", "classes": 3},
    "data": {"format": "npz", "file": ")"
                         << (kData / "blobs.npz").string() << R"(", "inputs": ["x"],
             "target": "y", "batch_size": 16, "seed": 4, "validation_fraction": 0.2,
             "validate_every": 50},
    "optimizer": {"name": "adamw", "lr": 0.01, "weight_decay": 0.01},
    "rules": {"source": "rule halve { when step == 150  set lr = lr * 0.5 }"},
    "binding": {"exact": true},
    "run": {"steps": )" << steps
                         << R"(, "threads": 2, "save": "trained.pt", "checkpoint": "run.ckpt",
            "checkpoint_every": 7}})";
  return session;
}

symtune::RunReport readReport(const std::filesystem::path& file) {
  return symtune::reportFromJson(symtune::test::readFile(file));
}

// Runs symtune-runner to its end; its exit code.
int runToEnd(const std::filesystem::path& session, const std::vector<std::string>& more = {}) {
  symtune::test::ChildProcess runner;
  std::vector<std::string> args = {"--batch", session.string(), "--report",
                                   (session.parent_path() / "report.json").string()};
  args.insert(args.end(), more.begin(), more.end());
  runner.start(kRunner, args);
  REQUIRE(runner.waitForFinished(300s));
  INFO(runner.standardOutput(), runner.standardError());
  return runner.exitCode();
}

void checkSameParameters(const std::filesystem::path& a, const std::filesystem::path& b) {
  torch::jit::Module ma = torch::jit::load(a.string()), mb = torch::jit::load(b.string());
  auto pa = ma.named_parameters(), pb = mb.named_parameters();
  size_t n = 0;
  for (auto ia = pa.begin(), ib = pb.begin(); ia != pa.end() && ib != pb.end(); ++ia, ++ib, ++n) {
    CAPTURE((*ia).name);
    CHECK((*ia).name == (*ib).name);
    CHECK(torch::equal((*ia).value, (*ib).value));  // bit for bit
  }
  CHECK(n == 3);
}

}  // namespace

TEST_CASE("a run killed with SIGKILL and resumed ends as the uninterrupted run, bit for bit") {
  symtune::test::TempDir dir;
  const int64_t steps = 300;
  const auto reference = writeRun(dir.path() / "reference", steps);
  REQUIRE(runToEnd(reference) == 0);
  const symtune::RunReport uninterrupted = readReport(dir.path() / "reference" / "report.json");
  REQUIRE(uninterrupted.stepsCompleted() == steps);

  const auto killed = writeRun(dir.path() / "killed", steps);
  const auto checkpoint = dir.path() / "killed" / "run.ckpt";
  int kills = 0;
  // Killed at moments after a checkpoint exists (at once, and part-way to the next ones), then
  // resumed, until a run gets to its end.
  for (const auto delay : {0ms, 45ms, 110ms, 20ms}) {
    symtune::test::ChildProcess runner;
    std::vector<std::string> args = {"--batch", killed.string(), "--report",
                                     (killed.parent_path() / "report.json").string()};
    if (std::filesystem::exists(checkpoint))
      args.push_back("--resume");
    const auto before = std::filesystem::exists(checkpoint)
                            ? std::filesystem::last_write_time(checkpoint)
                            : std::filesystem::file_time_type::min();
    runner.start(kRunner, args);
    // Until this run has written a checkpoint of its own (or ended).
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (!runner.waitForFinished(2ms) && std::chrono::steady_clock::now() < deadline) {
      if (std::filesystem::exists(checkpoint) &&
          std::filesystem::last_write_time(checkpoint) != before)
        break;
    }
    std::this_thread::sleep_for(delay);
    if (runner.waitForFinished(0ms)) {
      INFO(runner.standardOutput(), runner.standardError());
      REQUIRE(runner.exitCode() == 0);
      break;
    }
    runner.kill();
    REQUIRE(runner.waitForFinished(30s));
    CHECK(runner.exitSignal() == SIGKILL);
    ++kills;
  }
  MESSAGE("killed ", kills, " times");
  CHECK(kills >= 2);
  REQUIRE(runToEnd(killed, {"--resume"}) == 0);

  checkSameParameters(dir.path() / "reference" / "trained.pt",
                      dir.path() / "killed" / "trained.pt");
  const symtune::RunReport resumed = readReport(dir.path() / "killed" / "report.json");
  REQUIRE(resumed.stepsCompleted() == steps);  // every step once
  CHECK(resumed.loss == uninterrupted.loss);   // the same losses, bit for bit
  CHECK(resumed.stepSeconds.size() == static_cast<size_t>(steps));
  // Each kill before the last checkpoint made one resume; a kill after it (the run had done its
  // steps) makes none: that resume is the completed run again.
  CHECK(resumed.resumedAt.size() <= static_cast<size_t>(kills));
  CHECK(resumed.resumedAt.size() + 1 >= static_cast<size_t>(kills));
  for (size_t i = 1; i < resumed.resumedAt.size(); ++i)
    CHECK(resumed.resumedAt[i] >= resumed.resumedAt[i - 1]);
  // The validations of the steps before each resume were kept, those after made again.
  REQUIRE(resumed.validation.size() == uninterrupted.validation.size());
  for (size_t i = 0; i < resumed.validation.size(); ++i) {
    CHECK(resumed.validation[i].step == uninterrupted.validation[i].step);
    CHECK(resumed.validation[i].loss == uninterrupted.validation[i].loss);
  }
}

TEST_CASE("SIGTERM writes a checkpoint where the run stopped, and --resume finishes it") {
  symtune::test::TempDir dir;
  const auto session = writeRun(dir.path() / "run", 100000);
  symtune::test::ChildProcess runner;
  runner.start(kRunner, {"--batch", session.string(), "--report",
                         (dir.path() / "run" / "report.json").string()});
  const auto checkpoint = dir.path() / "run" / "run.ckpt";
  for (int i = 0; i < 6000 && !std::filesystem::exists(checkpoint); ++i)
    runner.waitForFinished(10ms);
  REQUIRE(std::filesystem::exists(checkpoint));
  runner.terminate();
  REQUIRE(runner.waitForFinished(60s));
  INFO(runner.standardOutput(), runner.standardError());
  CHECK(runner.exitCode() == 130);
  const symtune::RunReport stopped = readReport(dir.path() / "run" / "report.json");
  CHECK(runner.standardOutput().find("checkpoint after step " +
                                     std::to_string(stopped.stepsCompleted())) !=
        std::string::npos);
  // The checkpoint holds the steps the report does: resumed, the run goes on from there.
  symtune::Session s = symtune::loadSession(session);
  s.run.steps = stopped.stepsCompleted() + 5;
  {
    // Its report's wall time is the run's so far, to which a resume adds its own (it was left at
    // what the process had carried in: 0, below the training time it holds).
    symtune::Trainer trainer(s);
    const auto carried = symtune::reportFromJson(trainer.resume(s.run.checkpoint).report);
    CHECK(carried.trainSeconds > 0);
    CHECK(carried.wallSeconds >= carried.trainSeconds);
  }
  symtune::BatchOptions options;
  options.resume = true;
  const symtune::RunReport finished = symtune::runBatch(s, options);
  CHECK((finished.status == symtune::RunReport::Status::Completed));
  CHECK(finished.stepsCompleted() == stopped.stepsCompleted() + 5);
  CHECK(finished.resumedAt == std::vector<int64_t>{stopped.stepsCompleted()});
  CHECK(finished.wallSeconds >= finished.trainSeconds);
}

TEST_CASE("the online controller's state comes back with the checkpoint") {
  symtune::test::TempDir dir;
  symtune::Session s = symtune::loadSession(writeRun(dir.path() / "online", 12));
  s.control.enabled = true;
  s.control.mode = "online";
  symtune::Trainer first(s);
  for (int i = 0; i < 12; ++i)
    first.step();
  first.saveCheckpoint(s.run.checkpoint, "");
  symtune::Trainer second(s);
  const symtune::Trainer::Resumed resumed = second.resume(s.run.checkpoint);
  CHECK(resumed.steps == 12);
  CHECK(resumed.notes.empty());  // everything carried over
  const symtune::control::OnlineController* a = first.controller();
  const symtune::control::OnlineController* b = second.controller();
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  REQUIRE(b->log().size() == 1);  // the last decision
  CHECK(b->log().back().step == 11);
  CHECK(b->log().back().chosen == a->log().back().chosen);
  CHECK(second.configuration() == first.configuration());
  // What it learnt of each configuration's time came back, to the bit.
  const std::string bucket = a->log().back().bucket;
  for (const symtune::control::Configuration& c : a->space().grid()) {
    CAPTURE(c.text());
    CHECK(b->predictedSamplesPerSecond(c, bucket) == a->predictedSamplesPerSecond(c, bucket));
  }
  second.step();
  CHECK(second.stepsDone() == 13);
}

TEST_CASE("the rematerializer's calibration and measurements come back with the checkpoint") {
  symtune::test::TempDir dir;
  const symtune::Session s = symtune::parseSession(
      R"({"format": "symtune-session", "version": 1, "name": "remat",
          "model": {"zoo": "dynamic_tagger", "preset": "ci"},
          "remat": {"budget_fraction": 0.95},
          "run": {"steps": 6, "threads": 2, "checkpoint": "remat.ckpt"}})",
      dir.path() / "remat.json");
  symtune::Trainer first(s);
  for (int i = 0; i < 3; ++i)
    first.step();
  REQUIRE(first.rematerializer() != nullptr);
  REQUIRE_FALSE(first.rematerializer()->calibrating());
  first.saveCheckpoint(s.run.checkpoint, "");
  symtune::Trainer second(s);
  REQUIRE(second.rematerializer()->calibrating());  // a new run calibrates first
  CHECK(second.resume(s.run.checkpoint).notes.empty());
  CHECK_FALSE(second.rematerializer()->calibrating());  // the resumed one does not again
  const auto a = first.rematerializer()->measurements();
  const auto b = second.rematerializer()->measurements();
  CHECK(b.plainSteps == a.plainSteps);
  CHECK(b.plainPeak == a.plainPeak);
  CHECK(b.budgetedSeen == a.budgetedSeen);
  CHECK((b.steps == a.steps));
  // Its next step is held to the budget the first run calibrated.
  const symtune::StepResult next = second.step();
  REQUIRE(next.remat.has_value());
  CHECK_FALSE(next.remat->plan.calibrating);
  CHECK(next.remat->plan.limitBytes.has_value());
}

// Under a memory budget the run draws the same dropout masks as without one, and resumed as
// uninterrupted: the rematerializer timed its rates on torch::rand, which drew from the run's
// generator on the first step of every process (so after a resume's restore too).
TEST_CASE("a run under a memory budget resumes as the uninterrupted run, dropout masks and all") {
  symtune::test::TempDir dir;
  symtune::Session s = symtune::loadSession(writeRun(dir.path() / "budget", 12));
  s.remat.enabled = true;
  s.remat.budgetMb = 1000;  // room for every step: nothing is recomputed
  symtune::Session plain = s;
  plain.remat = {};
  std::vector<double> uninterrupted, unbudgeted;
  {
    symtune::Trainer t(s);
    for (int i = 0; i < 12; ++i)
      uninterrupted.push_back(t.step().loss);
  }
  {
    symtune::Trainer t(plain);
    for (int i = 0; i < 12; ++i)
      unbudgeted.push_back(t.step().loss);
  }
  CHECK(uninterrupted == unbudgeted);
  std::vector<double> resumed;
  {
    symtune::Trainer first(s);
    for (int i = 0; i < 6; ++i)
      resumed.push_back(first.step().loss);
    first.saveCheckpoint(s.run.checkpoint, "");
  }
  symtune::Trainer second(s);
  REQUIRE(second.resume(s.run.checkpoint).steps == 6);
  for (int i = 6; i < 12; ++i)
    resumed.push_back(second.step().loss);
  CHECK(resumed == uninterrupted);
}

// A loss gone NaN is written as null (JSON has no NaN): the checkpoint's loss average and the
// report's curve read back as NaN. Before, the resume failed with nlohmann's type_error naming
// the session, and a resumed report would have read the NaN losses as 0.
TEST_CASE("a run whose loss went NaN resumes, its NaN losses kept") {
  symtune::test::TempDir dir;
  symtune::Session s = symtune::loadSession(writeRun(dir.path() / "nan", 4));
  s.optimizer.name = "sgd";
  s.optimizer.lr = 1e30;
  const symtune::RunReport first = symtune::runBatch(s, {});
  REQUIRE(first.stepsCompleted() == 4);
  REQUIRE(std::isnan(first.loss.back()));
  s.run.steps = 6;
  symtune::BatchOptions options;
  options.resume = true;
  const symtune::RunReport resumed = symtune::runBatch(s, options);
  CHECK((resumed.status == symtune::RunReport::Status::Completed));
  REQUIRE(resumed.stepsCompleted() == 6);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK((std::isnan(resumed.loss[i]) ? std::isnan(first.loss[i])
                                       : resumed.loss[i] == first.loss[i]));
  }
}

TEST_CASE("a checkpoint that is missing or of another run is a setup error naming the file") {
  symtune::test::TempDir dir;
  const auto session = writeRun(dir.path() / "a", 10);
  symtune::Session s = symtune::loadSession(session);
  symtune::BatchOptions options;
  options.resume = true;
  const std::string file = (dir.path() / "a" / "run.ckpt").string();
  CHECK(symtune::test::errorOf([&] { symtune::runBatch(s, options); }) ==
        file + ": no checkpoint to resume from");
  REQUIRE((symtune::runBatch(s, {}).status == symtune::RunReport::Status::Completed));

  // A wider model: its parameters do not fit.
  writeModel(dir.path() / "a" / "model.pt", 8);
  s = symtune::loadSession(session);
  CHECK(symtune::test::errorOf([&] { symtune::runBatch(s, options); }) ==
        file + ": a checkpoint of another model: its parameter w1 has another shape");
  writeModel(dir.path() / "a" / "model.pt");
  // What decides the samples each step trains on and which are held out, and the optimizer's
  // settings (LibTorch's load put the checkpoint's lr over the session's, unsaid): another run.
  const struct {
    std::function<void(symtune::Session&)> change;
    std::string message;
  } others[] = {
      {[](symtune::Session& o) { o.optimizer.name = "sgd"; },
       "its optimizer is \"adamw\", this session's \"sgd\""},
      {[](symtune::Session& o) { o.optimizer.lr = 0.5; }, "its lr is 0.01, this session's 0.5"},
      {[](symtune::Session& o) { o.data.batchSize = 40; },
       "its batch_size is 16, this session's 40"},
      {[](symtune::Session& o) { o.data.files.validationFraction = 0.5; },
       "its data.validation_fraction is 0.2, this session's 0.5"},
      {[](symtune::Session& o) { o.data.files.shuffle = false; },
       "its data.shuffle is true, this session's false"},
  };
  for (const auto& other : others) {
    symtune::Session o = symtune::loadSession(session);
    other.change(o);
    CHECK(symtune::test::errorOf([&] { symtune::runBatch(o, options); }) ==
          file + ": a checkpoint of another run: " + other.message);
  }
  // Synthetic data in its place: another run (it resumed, on other samples, until 2026-12-07).
  symtune::Session synthetic = symtune::loadSession(session);
  synthetic.data.files = symtune::DataFilesSpec{};
  synthetic.model.inputs = {symtune::InputSpec{{16, 4}}};
  const std::string onSynthetic =
      symtune::test::errorOf([&] { symtune::runBatch(synthetic, options); });
  CHECK(onSynthetic.rfind(file + ": a checkpoint of another run: its data is {", 0) == 0);
  CHECK(onSynthetic.find("\"format\":\"npz\"") != std::string::npos);
  const std::string tail = ", this session's null";
  REQUIRE(onSynthetic.size() > tail.size());
  CHECK(onSynthetic.compare(onSynthetic.size() - tail.size(), tail.size(), tail) == 0);
  // The run's folder moved elsewhere: the same run.
  const auto moved = dir.path() / "moved";
  std::filesystem::copy(dir.path() / "a", moved);
  symtune::Session there = symtune::loadSession(moved / "run.json");
  there.run.steps = 12;  // two more than it holds: a checkpoint of a finished run resumes nothing
  CHECK(symtune::test::errorOf([&] { symtune::runBatch(there, options); }) == "(no error)");
  // The fused step keeps torch::optim's state: a run checkpointed unfused (the CPU's default)
  // resumes fused (a GPU's), and the other way. Before, it was refused as another run.
  there.optimizer.fused = true;
  there.run.steps = 14;
  CHECK(symtune::test::errorOf([&] { symtune::runBatch(there, options); }) == "(no error)");
  // Killed after its last checkpoint, the run resumed is the completed run again: its report as
  // it was (no resume noted, its features kept), and its model saved where the kill came before
  // that (until 2026-12-07 a run so resumed stepped nothing and saved nothing). One asking for
  // fewer steps than the checkpoint holds is refused.
  const auto saved = dir.path() / "a" / "trained.pt", kept = dir.path() / "kept.pt";
  std::filesystem::rename(saved, kept);
  const symtune::RunReport again = symtune::runBatch(s, options);
  REQUIRE(std::filesystem::exists(saved));
  checkSameParameters(saved, kept);
  CHECK((again.status == symtune::RunReport::Status::Completed));
  CHECK(again.stepsCompleted() == 10);
  CHECK(again.resumedAt.empty());
  CHECK(again.features.size() == static_cast<size_t>(symtune::kFeatureCount));
  symtune::Session fewer = s;
  fewer.run.steps = 5;
  CHECK(symtune::test::errorOf([&] { symtune::runBatch(fewer, options); }) ==
        file + ": it holds 10 steps, more than run.steps 5 asks for (raise run.steps to train on)");
  // Not a checkpoint at all.
  symtune::test::writeFile(file, "not a checkpoint");
  CHECK(symtune::test::errorOf([&] {
          symtune::runBatch(s, options);
        }).rfind(file + ": not a readable checkpoint: ", 0) == 0);
  s.run.checkpoint.clear();
  CHECK(symtune::test::errorOf([&] { symtune::runBatch(s, options); }) ==
        "--resume needs run.checkpoint in the session, the file it resumes from");
}
