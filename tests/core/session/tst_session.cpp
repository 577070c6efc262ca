// Session file validation: valid files parse with their defaults; every kind of mistake is
// refused with a message naming the file, the field and what was expected.

#include <QTemporaryDir>

#include <fstream>

#include "symtune/core/session.h"
#include "test_main.h"

using symtune::Session;
using symtune::SessionError;

namespace {
const std::filesystem::path kOrigin = "/sessions/s.json";

// A valid session with `patch` applied as text replacements of the valid body.
std::string sessionText(const std::string& model = R"("model": {"zoo": "dynamic_resnet"})",
                        const std::string& extra = "") {
  return R"({"format": "symtune-session", "version": 1, )" + model + extra + "}";
}
}  // namespace

class TestSession : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void minimalZooSessionTakesDefaults() {
    const Session s = symtune::parseSession(sessionText(), kOrigin);
    QCOMPARE(s.name, std::string("s"));  // the file's stem
    QCOMPARE(s.model.zoo, std::string("dynamic_resnet"));
    QCOMPARE(s.model.preset, std::string("ci"));
    QVERIFY(!s.data.batchSize.has_value());
    QCOMPARE(s.optimizer.name, std::string("adamw"));
    QCOMPARE(s.optimizer.lr, 1e-3);
    QCOMPARE(s.run.steps, int64_t{100});
    QCOMPARE(s.run.device, std::string("cpu"));
  }

  void fullFileSessionResolvesRelativePaths() {
    const Session s = symtune::parseSession(
        sessionText(R"("name": "mine", "model": {"file": "../models/m.pt", "classes": 4,
                       "inputs": [{"shape": [8, 3, 5]}, {"shape": [8], "dtype": "int64"}]})",
                    R"(, "data": {"seed": 3, "batch_size": 32},
                       "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
                       "run": {"steps": 7, "device": "auto", "threads": 2})"),
        kOrigin);
    QCOMPARE(s.name, std::string("mine"));
    QCOMPARE(s.model.file, std::filesystem::path("/models/m.pt"));
    QCOMPARE(s.model.inputs.size(), size_t{2});
    QCOMPARE(s.model.inputs[0].shape, (std::vector<int64_t>{8, 3, 5}));
    QCOMPARE(s.model.inputs[1].dtype, symtune::DType::Int64);
    QCOMPARE(s.model.classes, int64_t{4});
    QCOMPARE(s.data.seed, uint64_t{3});
    QCOMPARE(*s.data.batchSize, int64_t{32});
    QCOMPARE(s.optimizer.momentum, 0.9);
    QCOMPARE(s.run.steps, int64_t{7});
    QCOMPARE(s.run.threads, 2);
  }

  void rejectsWithAMessage_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("message");
    const QString file = QString::fromStdString(kOrigin.string()) + ": ";
    auto row = [&](const char* what, const std::string& text, const QString& message) {
      QTest::addRow("%s", what) << QString::fromStdString(text) << file + message;
    };
    row("not JSON", "{\"format\": \n  ,}", "not valid JSON at line 2, column 3");
    row("not an object", "[1, 2]", "expected a JSON object at the top, found an array");
    row("missing format", R"({"version": 1})", "format: missing (required)");
    row("wrong format", R"({"format": "other", "version": 1})",
        "format: expected \"symtune-session\", found \"other\"");
    row("wrong version", R"({"format": "symtune-session", "version": 2, "model": {}})",
        "version: unsupported session version 2 (this Symtune reads version 1)");
    row("version of wrong type", R"({"format": "symtune-session", "version": "1"})",
        "version: expected an integer, found a string");
    row("missing model", R"({"format": "symtune-session", "version": 1})",
        "model: missing (required)");
    row("model of wrong type", sessionText(R"("model": 3)"),
        "model: expected an object, found an integer");
    row("neither zoo nor file", sessionText(R"("model": {})"),
        "model: missing \"zoo\" (a bundled model) or \"file\" (a TorchScript archive)");
    row("unknown zoo model", sessionText(R"("model": {"zoo": "vgg"})"),
        "model.zoo: unknown zoo model \"vgg\" (known: dynamic_resnet, transformer_xl, "
        "dynamic_tagger, moe_topk, early_exit, tree_rnn)");
    row("unknown preset", sessionText(R"("model": {"zoo": "dynamic_resnet", "preset": "xl"})"),
        "model.preset: expected one of ci, cpu, gpu, found \"xl\"");
    row("unknown top-level field",
        sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "stepz": 3)"),
        "stepz: unknown field (known here: format, version, name, model, data, optimizer, run, "
        "rules)");
    row("steps of wrong type",
        sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"steps": "10"})"),
        "run.steps: expected an integer, found a string");
    row("negative steps",
        sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"steps": -3})"),
        "run.steps: expected a positive integer, found -3");
    row("unknown device",
        sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"device": "tpu"})"),
        "run.device: expected one of cpu, cuda, auto, found \"tpu\"");
    row("lr not a number",
        sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "optimizer": {"lr": true})"),
        "optimizer.lr: expected a number, found a boolean");
    row("momentum without sgd",
        sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "optimizer": {"momentum": 0.9})"),
        "optimizer.momentum: only the sgd optimizer takes a momentum");
    row("file model without inputs", sessionText(R"("model": {"file": "m.pt", "classes": 3})"),
        "model.inputs: missing (required)");
    row("input dimension not positive",
        sessionText(R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4, 0]}]})"),
        "model.inputs[0].shape[1]: expected a positive integer, found 0");
    row("unknown input dtype",
        sessionText(
            R"("model": {"file": "m.pt", "classes": 3, "inputs": [{"shape": [4], "dtype": "int8"}]})"),
        "model.inputs[0].dtype: expected one of float32, float64, int64, found \"int8\"");
    row("one class",
        sessionText(R"("model": {"file": "m.pt", "classes": 1, "inputs": [{"shape": [4]}]})"),
        "model.classes: expected an integer of at least 2, found 1");
  }

  void rejectsWithAMessage() {
    QFETCH(QString, text);
    QFETCH(QString, message);
    try {
      symtune::parseSession(text.toStdString(), kOrigin);
      QFAIL("the session was accepted");
    } catch (const SessionError& e) {
      QCOMPARE(QString::fromStdString(e.what()), message);
    }
  }

  void errorCarriesFieldAndProblem() {
    try {
      symtune::parseSession(
          sessionText(R"("model": {"zoo": "dynamic_resnet"})", R"(, "run": {"steps": 0})"),
          kOrigin);
      QFAIL("accepted");
    } catch (const SessionError& e) {
      QCOMPARE(e.file(), kOrigin.string());
      QCOMPARE(e.field(), std::string("run.steps"));
      QCOMPARE(e.problem(), std::string("expected a positive integer, found 0"));
    }
  }

  void loadsFromDiskAndReportsMissingFiles() {
    QTemporaryDir dir;
    const auto path = std::filesystem::path(dir.path().toStdString()) / "a.json";
    std::ofstream(path) << sessionText();
    QCOMPARE(symtune::loadSession(path).path, path);
    try {
      symtune::loadSession(path.parent_path() / "missing.json");
      QFAIL("a missing file loaded");
    } catch (const SessionError& e) {
      QCOMPARE(QString::fromStdString(e.what()),
               QString::fromStdString((path.parent_path() / "missing.json").string()) +
                   ": cannot open the file");
    }
  }

  void bundledSessionsAreValid() {
    const auto dir = std::filesystem::path(SYMTUNE_SOURCE_DIR) / "resources" / "sessions";
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".json")
        continue;
      const Session s = symtune::loadSession(entry.path());
      QVERIFY2(!s.name.empty(), entry.path().c_str());
      ++count;
    }
    QVERIFY(count >= 1);
  }
};

SYMTUNE_TEST_MAIN_CORE(TestSession)
#include "tst_session.moc"
