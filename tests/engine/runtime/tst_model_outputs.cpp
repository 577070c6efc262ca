// The model's signature as a user writes it: a forward that returns a tuple, a list, a dict or a
// named tuple (model.output picks what the loss reads), auxiliary outputs whose losses add to the
// training loss with their weights, and the model's own TorchScript `loss` method. The models are
// the blobs classifier written as each kind (TorchScript source defined here, saved to a file as a
// user would hand it over; the named tuple's from Python, tests/data/aux_mlp.pt), trained on
// tests/data/blobs.npz.

#include "doctest_torch.h"

#include <string>

#include <torch/nn/functional/loss.h>
#include <torch/script.h>

#include "error_of.h"
#include "symtune/runtime/trainer.h"
#include "test_files.h"

namespace {

namespace F = torch::nn::functional;

const std::filesystem::path kData = std::filesystem::path(SYMTUNE_SOURCE_DIR) / "tests" / "data";

struct TwoThreads {
  TwoThreads() { at::set_num_threads(2); }
};

// The blobs classifier (4 features, 3 classes) with a hidden layer and an auxiliary head on it;
// `returns` is the forward's return statement over `logits`, `aux` and `hidden`; `extra` more
// methods.
std::filesystem::path writeModel(const std::filesystem::path& folder, const std::string& name,
                                 const std::string& returnType, const std::string& returns,
                                 const std::string& extra = "") {
  torch::manual_seed(3);
  torch::jit::Module m("Blobs");
  m.register_parameter("w1", torch::randn({16, 4}).mul_(0.5).requires_grad_(), false);
  m.register_parameter("w2", torch::randn({3, 16}).mul_(0.25).requires_grad_(), false);
  m.register_parameter("wa", torch::randn({3, 16}).mul_(0.25).requires_grad_(), false);
  m.define("def forward(self, x: Tensor) -> " + returnType + R"(:
    hidden = torch.relu(torch.matmul(x, self.w1.t()))
    logits = torch.matmul(hidden, self.w2.t())
    aux = torch.matmul(hidden, self.wa.t())
    return )" +
           returns + "\n" + extra);
  const std::filesystem::path file = folder / name;
  m.save(file.string());
  return file;
}

symtune::Session sessionOf(const std::filesystem::path& model, const std::string& modelFields,
                           const std::string& more = "") {
  return symtune::parseSession(
      R"({"format": "symtune-session", "version": 1, "name": "outputs",
          "model": {"file": ")" +
          model.string() + R"(", "classes": 3)" + modelFields + R"(},
          "data": {"format": "npz", "file": ")" +
          (kData / "blobs.npz").string() + R"(", "inputs": ["x"], "target": "y",
                   "batch_size": 16, "seed": 2, "validation_fraction": 0.2},
          "optimizer": {"name": "adamw", "lr": 0.02}, "run": {"steps": 40})" +
          more + "}",
      kData / "outputs.json");
}

// Trains 40 steps and returns the held-out top-1 the trainer measures.
double trainedAccuracy(symtune::Trainer& trainer) {
  for (int i = 0; i < 40; ++i)
    trainer.step();
  const std::optional<symtune::Validation> v = trainer.validate();
  REQUIRE(v.has_value());
  REQUIRE(v->top1.has_value());
  return *v->top1;
}

}  // namespace

TEST_CASE_FIXTURE(TwoThreads, "model.output picks the loss's output from a tuple, list or dict") {
  symtune::test::TempDir dir;
  struct Kind {
    std::string name, type, returns, output;
  };
  const Kind kinds[] = {
      {"tuple", "Tuple[Tensor, Tensor]", "(hidden, logits)", "1"},
      {"list", "List[Tensor]", "[logits, hidden]", "0"},
      {"dict", "Dict[str, Tensor]", "{'hidden': hidden, 'logits': logits}", "\"logits\""},
  };
  for (const Kind& kind : kinds) {
    CAPTURE(kind.name);
    const auto file =
        writeModel(dir.path(), std::string(kind.name) + ".pt", kind.type, kind.returns);
    symtune::Trainer trainer(sessionOf(file, ", \"output\": " + kind.output));
    const double top1 = trainedAccuracy(trainer);
    MESSAGE(kind.name, ": held-out top-1 ", top1, " after 40 steps");
    CHECK(top1 >= 0.9);
  }
}

TEST_CASE_FIXTURE(TwoThreads,
                  "an output the session does not name, or names wrong, is a setup error") {
  symtune::test::TempDir dir;
  const auto tuple =
      writeModel(dir.path(), "tuple.pt", "Tuple[Tensor, Tensor]", "(hidden, logits)");
  const auto dict = writeModel(dir.path(), "dict.pt", "Dict[str, Tensor]",
                               "{'hidden': hidden, 'logits': logits}");
  const auto error = [](const symtune::Session& s) {
    return symtune::test::errorOf([&] { symtune::Trainer trainer(s); });
  };
  CHECK(error(sessionOf(tuple, "")) ==
        "tuple.pt: the model's forward returned a tuple of 2 values; name the one the loss reads "
        "in model.output");
  CHECK(error(sessionOf(tuple, ", \"output\": 2")) ==
        "tuple.pt: the model's forward returned a tuple of 2 values: it has no output 2");
  CHECK(error(sessionOf(tuple, ", \"output\": 0")) ==
        "tuple.pt: forward returned shape [16, 16], expected [16, 3] (batch, model.classes)");
  CHECK(error(sessionOf(dict, ", \"output\": \"scores\"")) ==
        "dict.pt: the model's forward returned a dict with keys hidden, logits: it has no "
        "output \"scores\"");
  CHECK(error(sessionOf(dict, ", \"output\": 0")) ==
        "dict.pt: the model's forward returned a dict with keys hidden, logits: it has no "
        "output 0");
}

TEST_CASE_FIXTURE(TwoThreads, "auxiliary outputs add their weighted losses to the training loss") {
  symtune::test::TempDir dir;
  const auto file =
      writeModel(dir.path(), "aux.pt", "Dict[str, Tensor]", "{'logits': logits, 'aux': aux}");
  const symtune::Session s = sessionOf(
      file, R"(, "output": "logits", "auxiliary_outputs": [{"output": "aux", "weight": 0.3}])");
  symtune::Trainer trainer(s);
  // The first step's loss, computed here from the model before it.
  const symtune::Batch b = trainer.batch(0);
  torch::Tensor expected;
  {
    torch::NoGradGuard noGrad;
    const auto out = trainer.executor().scriptModule()->forward(b.inputs).toGenericDict();
    expected = F::cross_entropy(out.at("logits").toTensor(), b.target) +
               0.3 * F::cross_entropy(out.at("aux").toTensor(), b.target);
  }
  const symtune::StepResult first = trainer.step();
  CHECK(first.loss == doctest::Approx(expected.item<double>()).epsilon(1e-6));
  // Validation reads the main output alone.
  for (int i = 1; i < 40; ++i)
    trainer.step();
  const auto v = trainer.validate();
  REQUIRE(v.has_value());
  MESSAGE("held-out top-1 ", v->top1.value_or(-1), ", loss ", v->loss);
  CHECK(v->top1.value_or(0) >= 0.9);

  const symtune::Session wrong =
      sessionOf(file, R"(, "output": "logits", "auxiliary_outputs": [{"output": "hidden"}])");
  CHECK(symtune::test::errorOf([&] { symtune::Trainer t(wrong); }) ==
        "aux.pt: the model's forward returned a dict with keys logits, aux: it has no output "
        "\"hidden\"");
}

TEST_CASE_FIXTURE(TwoThreads, "a named tuple from Python, its auxiliary output None in eval mode") {
  // aux_mlp.pt (make_test_data.py): forward returns Outputs(logits, aux), aux None in eval mode.
  const symtune::Session s =
      sessionOf(kData / "aux_mlp.pt",
                R"(, "output": "logits", "auxiliary_outputs": [{"output": "aux", "weight": 0.4}])");
  symtune::Trainer trainer(s);
  const double top1 = trainedAccuracy(trainer);
  MESSAGE("named tuple: held-out top-1 ", top1, " after 40 steps");
  CHECK(top1 >= 0.9);
  const symtune::Session byIndex = sessionOf(kData / "aux_mlp.pt", R"(, "output": 0)");
  CHECK_NOTHROW(symtune::Trainer{byIndex});
}

TEST_CASE_FIXTURE(TwoThreads, "the model's own loss method computes the training loss") {
  symtune::test::TempDir dir;
  // A loss the session's kinds do not have: cross-entropy plus a penalty on the logits' size.
  const auto file = writeModel(dir.path(), "method.pt", "Tuple[Tensor, Tensor]", "(logits, aux)",
                               R"(
def loss(self, out: Tuple[Tensor, Tensor], target: Tensor) -> Tensor:
    logits = out[0]
    picked = logits.log_softmax(1).gather(1, target.unsqueeze(1))
    return -picked.mean() + 0.01 * logits.pow(2).mean()
)");
  const symtune::Session s = sessionOf(file, R"(, "output": 0)", R"(, "loss": {"method": "loss"})");
  symtune::Trainer trainer(s);
  const symtune::Batch b = trainer.batch(0);
  double expected = 0;
  {
    torch::NoGradGuard noGrad;
    torch::jit::Module* m = trainer.executor().scriptModule();
    const c10::IValue out = m->forward(b.inputs);
    expected = m->get_method("loss")({out, b.target}).toTensor().item<double>();
  }
  CHECK(trainer.step().loss == doctest::Approx(expected).epsilon(1e-6));
  for (int i = 1; i < 40; ++i)
    trainer.step();
  const auto v = trainer.validate();
  REQUIRE(v.has_value());
  MESSAGE("loss method: held-out top-1 ", v->top1.value_or(-1), ", loss ", v->loss);
  CHECK(v->top1.value_or(0) >= 0.9);

  const symtune::Session missing =
      sessionOf(file, R"(, "output": 0)", R"(, "loss": {"method": "criterion"})");
  CHECK(symtune::test::errorOf([&] { symtune::Trainer t(missing); }) ==
        "method.pt: loss.method: the model has no method \"criterion\" (its methods: forward, "
        "loss)");
}
