// `symtune --batch` end to end, as a user runs it: a real process, progress on stdout, a report on
// disk, and a one-line reason with a non-zero exit code for bad input.

#include <cmath>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QProcess>
#include <QSet>
#include <QTemporaryDir>

#include "symtune/core/rule_pack.h"
#include "test_main.h"

namespace {

const QString kSymtune = QStringLiteral(SYMTUNE_BIN_DIR "/symtune");

struct Result {
  int exitCode = -1;
  QString out, err;
};

Result run(const QStringList& args, int timeoutMs = 300000) {
  QProcess p;
  p.start(kSymtune, args);
  if (!p.waitForFinished(timeoutMs)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
          QString::fromUtf8(p.readAllStandardOutput()),
          QString::fromUtf8(p.readAllStandardError())};
}

// docs/rules.md's example pack: the built-in nan_guard under another pack's name.
const QByteArray kGuardsPack = R"({
  "format": "symtune-rulepack", "version": 1, "name": "guards", "pack_version": "1.0.0",
  "description": "Steps that go wrong, skipped",
  "rules": [
    {"name": "nan_guard", "description": "Skips a step whose gradients hold a NaN or an infinity.",
     "source": "rule nan_guard {\n  when grad_nan_count + grad_inf_count > 0\n  skip step\n}"}
  ],
  "checksum": "fnv1a64:186950ab51cbea6e"
})";

QString writeFile(const QTemporaryDir& dir, const QString& name, const QByteArray& text) {
  QFile f(dir.filePath(name));
  if (!f.open(QIODevice::WriteOnly))
    qFatal("cannot write %s", qPrintable(f.fileName()));
  f.write(text);
  return f.fileName();
}

// The tagger's `ci` preset for three steps, bound (a session that says nothing of binding), as
// tagger.json in `dir`.
QString boundTagger(const QTemporaryDir& dir) {
  return writeFile(dir, "tagger.json", R"({
    "format": "symtune-session", "version": 1, "name": "tagger",
    "model": {"zoo": "dynamic_tagger", "preset": "ci"}, "run": {"steps": 3, "threads": 2}})");
}

const QByteArray kSession = R"({
  "format": "symtune-session", "version": 1, "name": "batch test",
  "model": {"zoo": "dynamic_resnet", "preset": "ci"},
  "data": {"seed": 2}, "optimizer": {"lr": 0.003}, "run": {"steps": 30, "threads": 2}
})";

// A rewrite whose sides take different inputs.
const QByteArray kBadRewrite =
    "rule bad {\n"
    "  rewrite \"\"\"graph(%x):\n"
    "  %y = aten::relu(%x)\n"
    "  return (%y)\"\"\" => \"\"\"graph(%x, %z):\n"
    "  return (%x)\"\"\"\n"
    "}\n";

// The built-in pack's GELU rewrite, its NaN guard, the example plugin's C++ rule and a rule of
// the session's own.
// (Not a raw string: moc misreads a raw string holding \".)
const QByteArray kRulesSession =
    "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"rules\",\n"
    " \"model\": {\"zoo\": \"transformer_xl\", \"preset\": \"ci\"}, \"run\": {\"steps\": 5},\n"
    " \"rules\": {\"enable\": [\"tanh_gelu\", \"nan_guard\", \"gradient_centralization\"],\n"
    "           \"source\": \"rule every_step { select params \\\"*\\\"  set grad = grad * 1 "
    "}\"}}\n";

}  // namespace

class TestBatch : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void writesReportAndProgress() {
    QTemporaryDir dir;
    const QString session = writeFile(dir, "s.json", kSession);
    const QString reportPath = dir.filePath("out/report.json");
    const Result r = run({"--batch", session, "--report", reportPath, "--progress-interval", "0"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QVERIFY(r.out.contains("step  1/30  loss "));
    QVERIFY(r.out.contains("step 30/30  loss "));
    QVERIFY(r.out.contains("samples/s"));
    QVERIFY(r.out.contains("eta "));
    QVERIFY(r.out.contains("report: " + reportPath));

    QFile f(reportPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject report = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(report["format"].toString(), QString("symtune-report"));
    QCOMPARE(report["version"].toInt(), 1);
    QCOMPARE(report["status"].toString(), QString("completed"));
    QCOMPARE(report["versions"]["torch"].toString(), QString("2.11.0"));
    QVERIFY(!report["versions"]["symtune"].toString().isEmpty());
    QCOMPARE(report["session"]["name"].toString(), QString("batch test"));
    QCOMPARE(report["model"]["name"].toString(), QString("dynamic_resnet"));
    QVERIFY(report["model"]["parameters"].toInt() > 0);
    QCOMPARE(report["steps"]["planned"].toInt(), 30);
    QCOMPARE(report["steps"]["completed"].toInt(), 30);
    const QJsonArray curve = report["loss"]["curve"].toArray();
    QCOMPARE(curve.size(), 30);
    QVERIFY(report["loss"]["last"].toDouble() < report["loss"]["first"].toDouble());
    QVERIFY(report["throughput"]["samples_per_s"].toDouble() > 0);
    QCOMPARE(report["throughput"]["step_s"].toArray().size(), 30);
    QVERIFY(report["memory"]["peak_rss_bytes"].toDouble() > 0);
    QVERIFY(report["wall_time_s"].toDouble() >= report["throughput"]["train_s"].toDouble());
    QCOMPARE(report["batch_size"].toInt(), 16);
    QCOMPARE(report["throughput"]["samples"].toInt(), 30 * 16);  // each step's batch, as it held
    const QJsonObject features = report["features"].toObject();
    QCOMPARE(features.size(), 24);  // docs/features.md
    QCOMPARE(features["step"].toInt(), 29);
    QCOMPARE(features["batch_size"].toInt(), 16);
    QCOMPARE(features["loss"].toDouble(), curve.last().toDouble());
    QCOMPARE(report["threads"].toInt(), 2);
  }

  void writesAChromeTrace() {
    QTemporaryDir dir;
    const QString session = writeFile(dir, "s.json", kSession);
    const QString tracePath = dir.filePath("trace.json");
    const Result r = run({"--batch", session, "--report", dir.filePath("r.json"), "--trace",
                          tracePath, "--trace-steps", "2"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QFile f(tracePath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject trace = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(trace["displayTimeUnit"].toString(), QString("ms"));
    const QJsonArray events = trace["traceEvents"].toArray();
    QSet<QString> names;
    QSet<int> steps;
    QMap<QString, int> counters;
    int complete = 0, convWithNode = 0, convBackwardWithNode = 0;
    // The Trace Event Format's required fields: name, ph, pid, tid and ts (complete events: dur;
    // counters: numeric args).
    for (const auto& v : events) {
      const QJsonObject e = v.toObject();
      QVERIFY(e["name"].isString() && e["ph"].isString() && e["pid"].isDouble());
      const QString ph = e["ph"].toString();
      if (ph == "M")
        continue;
      QVERIFY(e["ts"].isDouble() && e["ts"].toDouble() >= 0);
      if (ph == "X") {
        ++complete;
        QVERIFY(e["tid"].isDouble());
        QVERIFY(e["dur"].isDouble() && e["dur"].toDouble() >= 0);
        const QString name = e["name"].toString();
        const QJsonObject args = e["args"].toObject();
        names << name;
        steps << args["step"].toInt();
        QVERIFY(args["bytes_allocated"].isDouble() && args["bytes_freed"].isDouble());
        // Ops carry their graph node, module path and input shapes (per-node telemetry).
        if (name == "aten::conv2d" && args["node"].isDouble() &&
            args["node_kind"].toString() == "aten::conv2d" &&
            args["input_shapes"].toString().startsWith("[[16, ")) {
          ++convWithNode;
          QVERIFY(args["source"].toString().contains("dynamic_resnet.py:"));
        }
        if (name == "ConvolutionBackward0" && args["node_kind"].toString() == "aten::conv2d")
          ++convBackwardWithNode;
      } else {
        QCOMPARE(ph, QString("C"));
        counters[e["name"].toString()] += 1;
        QVERIFY(e["args"].toObject()["value"].isDouble());
      }
    }
    QVERIFY(complete > 100);
    // Peak and live memory after each of the two steps; live bytes after every outermost op.
    QCOMPARE(counters["peak_memory_bytes"], 2);
    QCOMPARE(counters["live_memory_bytes"], 2);
    QVERIFY(counters["live_bytes"] > 100);
    QVERIFY(convWithNode > 10);
    QVERIFY(convBackwardWithNode > 10);
    QCOMPARE(steps, (QSet<int>{1, 2}));
    QVERIFY(names.contains("aten::conv2d"));
    QVERIFY(names.contains("ConvolutionBackward0"));
  }

  // A batch size above what the data hold: each step trains the 64 samples there are, and the
  // throughput counts those, not the 100 asked for (it said 140 million samples/s for such a run).
  void throughputCountsTheSamplesTrained() {
    QTemporaryDir dir;
    const QString data = SYMTUNE_SOURCE_DIR "/resources/sessions/data/";
    const QJsonObject json{
        {"format", "symtune-session"},
        {"version", 1},
        {"name", "few samples"},
        {"model", QJsonObject{{"file", data + "linear.pt"}, {"classes", 1}}},
        {"data", QJsonObject{{"format", "csv"},
                             {"file", data + "regression.csv"},
                             {"inputs", QJsonArray{QJsonArray{"x1", "x2", "x3"}}},
                             {"target", "y"},
                             {"batch_size", 100}}},
        {"loss", QJsonObject{{"kind", "mse"}}},
        {"run", QJsonObject{{"steps", 3}}}};
    const QString session = writeFile(dir, "s.json", QJsonDocument(json).toJson());
    const QString reportPath = dir.filePath("r.json");
    const Result r = run({"--batch", session, "--report", reportPath});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QFile f(reportPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject throughput =
        QJsonDocument::fromJson(f.readAll()).object()["throughput"].toObject();
    QCOMPARE(throughput["samples"].toInt(), 3 * 80);
    QCOMPARE(throughput["samples_per_s"].toDouble(), 3 * 80 / throughput["train_s"].toDouble());
  }

  // A pack that reuses a built-in rule's name would never give a session its rule (the registry
  // keeps the built-in one and skips the pack): `rules import` refuses it, and installs nothing.
  void rulesImportRefusesABuiltInRulesName() {
    QTemporaryDir dir;
    const QString pack = writeFile(dir, "guards.json", kGuardsPack);
    const Result r = run({"rules", "import", pack, "--library", dir.filePath("lib")});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("symtune: error: rule \"nan_guard\" of pack \"guards\" is already "
                            "registered by pack builtin "),
             qPrintable(r.err));
    QVERIFY(!QFile::exists(dir.filePath("lib/guards.json")));
  }

  void badInputExitsWithOneLine_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QByteArray>("session");  // written to s.json when not empty
    QTest::addColumn<int>("exitCode");
    QTest::addColumn<QString>("message");
    QTest::addRow("missing session file") << QStringList{"--batch", "@/nope.json"} << QByteArray()
                                          << 2 << "nope.json: cannot open the file";
    QTest::addRow("invalid field") << QStringList{"--batch", "@/s.json"}
                                   << QByteArray(R"({"format": "symtune-session", "version": 1,
                                        "model": {"zoo": "dynamic_resnet"}, "run": {"steps": "x"}})")
                                   << 2 << "s.json: run.steps: expected an integer, found a string";
    QTest::addRow("wrong version") << QStringList{"--batch", "@/s.json"}
                                   << QByteArray(R"({"format": "symtune-session", "version": 9})")
                                   << 2 << "version: unsupported session version 9";
    QTest::addRow("model file missing") << QStringList{"--batch", "@/s.json"}
                                        << QByteArray(R"({"format": "symtune-session", "version": 1,
             "model": {"file": "m.pt", "classes": 2, "inputs": [{"shape": [2, 2]}]}})")
                                        << 2 << "m.pt: no such model file";
    QTest::addRow("unknown option") << QStringList{"--batch", "@/s.json", "--fast"} << kSession << 2
                                    << "unknown option --fast (see --help)";
    QTest::addRow("option without value")
        << QStringList{"--batch"} << QByteArray() << 2 << "--batch needs a value";
    QTest::addRow("attach with batch")
        << QStringList{"--batch", "@/s.json", "--attach", "unix:/x"} << kSession << 2
        << "--attach opens the studio: it does not go with --batch or graph";
    QTest::addRow("token without attach")
        << QStringList{"--token", "abc"} << QByteArray() << 2 << "--token goes with --attach ADDR";
    QTest::addRow("linger without listen") << QStringList{"--batch", "@/s.json", "--linger", "5"}
                                           << kSession << 2 << "--linger goes with --listen ADDR";
    QTest::addRow("negative linger")
        << QStringList{"@/s.json", "--listen", "", "--linger", "-1"} << kSession << 2
        << "--linger expects seconds >= 0, got \"-1\"";
    QTest::addRow("listen on any address")
        << QStringList{"@/s.json", "--listen", "tcp:0.0.0.0:0"} << kSession << 2
        << "TCP is for loopback only (127.0.0.1 or ::1)";
    QTest::addRow("run without a session") << QStringList{"--run"} << QByteArray() << 2
                                           << "--run needs a session (symtune --run SESSION)";
    QTest::addRow("run with batch") << QStringList{"--batch", "@/s.json", "--run"} << kSession << 2
                                    << "--run, --overlay and --screenshot are the studio's";
    QTest::addRow("unknown overlay") << QStringList{"--overlay", "heat"} << QByteArray() << 2
                                     << "--overlay expects none, latency, memory, flops, gradnorm, "
                                        "gpu-time, kernels, binding or "
                                        "remat, got \"heat\"";
    QTest::addRow("nvtx without batch")
        << QStringList{"--nvtx"} << QByteArray() << 2 << "--nvtx only applies with --batch";
    QTest::addRow("no GPU trace without batch")
        << QStringList{"@/s.json", "--no-gpu-trace"} << kSession << 2
        << "--no-gpu-trace only applies with --batch";
    QTest::addRow("screenshot after no steps")
        << QStringList{"--screenshot", "x.png", "--screenshot-after", "0"} << QByteArray() << 2
        << "--screenshot-after expects a positive number of steps, got \"0\"";
    // Where the results go is checked before the run trains (it was after, and the work lost).
    QTest::addRow("report into a folder")
        << QStringList{"--batch", "@/s.json", "--report", "@"} << kSession << 2 << ": is a folder";
    QTest::addRow("trace under a file")
        << QStringList{"--batch", "@/s.json", "--trace", "@/s.json/t.json"} << kSession << 2
        << "/s.json/t.json: cannot create the folder ";
    // A checkpoint named as the session wrote a zip archive over it.
    QTest::addRow("a checkpoint over the session")
        << QStringList{"--batch", "@/s.json"}
        << QByteArray(R"({"format": "symtune-session", "version": 1,
             "model": {"zoo": "dynamic_resnet", "preset": "ci"},
             "run": {"steps": 1, "checkpoint": "s.json"}})")
        << 2 << "run.checkpoint and the session are one file, ";
    QTest::addRow("a binding table over the session")
        << QStringList{"--batch", "@/s.json"}
        << QByteArray(R"({"format": "symtune-session", "version": 1,
             "model": {"zoo": "dynamic_resnet", "preset": "ci"},
             "binding": {"table": "s.json"}, "run": {"steps": 1}})")
        << 2 << "binding.table and the session are one file, ";
    // nlohmann reports a number past a double's range as out_of_range, not as a parse error:
    // uncaught, it aborted the runner (exit 134).
    QTest::addRow("a number out of range")
        << QStringList{"check", "@/s.json"}
        << QByteArray(R"({"format": "symtune-session", "version": 1,
             "model": {"zoo": "dynamic_resnet"}, "optimizer": {"lr": 1e400}})")
        << 2
        << "s.json: not valid JSON at line 2, column 70: the number 1e400 is out of a "
           "double's range";
    // Commands that wrote over what they read, and said nothing (2026-12-07).
    QTest::addRow("a graph over its session")
        << QStringList{"graph", "@/s.json", "--output", "@/s.json"} << kSession << 2
        << "--output and the session are one file, ";
    QTest::addRow("a pack over its rules")
        << QStringList{"rules",     "export", "@/s.json", "--name",  "n",
                       "--version", "1.0.0",  "--output", "@/s.json"}
        << kSession << 2 << "--output and the rules file are one file, ";
    QTest::addRow("a pack not named .json")
        << QStringList{"rules",     "export", "@/s.json", "--name", "n",
                       "--version", "1.0.0",  "--output", "@/pack"}
        << kSession << 2 << "/pack: a pack's file name ends in .json";
    QTest::addRow("a tuned session over its model")
        << QStringList{"tune", "@/s.json", "--budget-steps", "10", "--output", "@/m.pt"}
        << QByteArray(R"({"format": "symtune-session", "version": 1,
             "model": {"file": "m.pt", "inputs": [{"shape": [4, 3]}], "classes": 2}})")
        << 2 << "--output and model.file are one file, ";
    QTest::addRow("a report over the session")
        << QStringList{"--batch", "@/s.json", "--report", "@/./s.json"} << kSession << 2
        << "--report and the session are one file, ";
    QTest::addRow("tuned session into a folder")
        << QStringList{"tune", "@/s.json", "--budget-steps", "10", "--output", "@"} << kSession << 2
        << "cannot write the tuned session: ";
    QTest::addRow("a folder for a session")
        << QStringList{"--batch", "@"} << QByteArray() << 2 << ": is a folder, not a session file";
    QTest::addRow("a folder for a rules file") << QStringList{"rules", "check", "@"} << QByteArray()
                                               << 2 << ": is a folder, not a rules file or a pack";
    QTest::addRow("a folder for a table") << QStringList{"bindings", "@"} << QByteArray() << 2
                                          << ": is a folder, not a session, a report or a table";
    // check runs a zoo model on its first batch too: one too large for memory is said there.
    QTest::addRow("a first batch too large")
        << QStringList{"check", "@/s.json"}
        << QByteArray(R"({"format": "symtune-session", "version": 1,
             "model": {"zoo": "dynamic_resnet", "preset": "ci"},
             "data": {"batch_size": 1000000000000}})")
        << 2 << ": the first batch: ";
    QTest::addRow("rules list with an argument")
        << QStringList{"rules", "list", "x"} << QByteArray() << 2
        << "rules list takes no arguments";
  }

  // `symtune rules list` hands over to the runner, whose registry holds the built-in pack (and
  // the build's example plugin): JSON the New Session dialog reads.
  void rulesListIsTheRegistryAsJson() {
    const Result r = run({"rules", "list"});
    QCOMPARE(r.exitCode, 0);
    const QJsonDocument doc = QJsonDocument::fromJson(r.out.toUtf8());
    QVERIFY2(doc.isArray(), qPrintable(r.out.left(200)));
    QStringList names;
    for (const auto& v : doc.array()) {
      const QJsonObject rule = v.toObject();
      QVERIFY(!rule["description"].toString().isEmpty());
      QVERIFY(!rule["origin"].toString().isEmpty());
      names << rule["name"].toString();
    }
    for (const char* name : {"gradient_steering", "nan_guard", "tanh_gelu", "fused_bias_gelu",
                             "fused_bias_dropout_add"})
      QVERIFY2(names.contains(name), name);
  }

  void badInputExitsWithOneLine() {
    QFETCH(QStringList, args);
    QFETCH(QByteArray, session);
    QFETCH(int, exitCode);
    QFETCH(QString, message);
    QTemporaryDir dir;
    if (!session.isEmpty())
      writeFile(dir, "s.json", session);
    for (auto& a : args)
      a.replace("@", dir.path());
    const Result r = run(args);
    QCOMPARE(r.exitCode, exitCode);
    QVERIFY2(r.err.startsWith("symtune: error: "), qPrintable(r.err));
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QCOMPARE(r.err.count('\n'), 1);
    QVERIFY(!QFile::exists(dir.filePath("s.report.json")));
  }

  void graphCommandPrintsJsonAndDot() {
    const QString session = SYMTUNE_SOURCE_DIR "/resources/sessions/demo.json";
    const Result json = run({"graph", session});
    QVERIFY2(json.exitCode == 0, qPrintable(json.err));
    const QJsonObject graph = QJsonDocument::fromJson(json.out.toUtf8()).object();
    QCOMPARE(graph["format"].toString(), QString("symtune-graph"));
    QVERIFY(graph["nodes"].toArray().size() > 100);

    QTemporaryDir dir;
    const QString dotPath = dir.filePath("step.dot");
    const Result dot = run({"graph", session, "--step", "--format", "dot", "--output", dotPath});
    QVERIFY2(dot.exitCode == 0, qPrintable(dot.err));
    QFile f(dotPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(f.readAll());
    QVERIFY(text.startsWith("digraph \"dynamic-resnet demo\" {"));
    QVERIFY(text.contains("ConvolutionBackward0"));
    QVERIFY(text.contains("(taken)"));
  }

  void bindingsCommandPrintsTheTable() {
    // A tagger trains with op sites bound; `symtune bindings` shows the table from the session,
    // the report and the table file, as text and as JSON.
    QTemporaryDir dir;
    const QString session = boundTagger(dir);
    const QString reportPath = dir.filePath("tagger.report.json");
    const Result trained = run({"--batch", session, "--report", reportPath});
    QVERIFY2(trained.exitCode == 0, qPrintable(trained.err));
    QVERIFY(QFile::exists(dir.filePath("tagger.bindings.json")));
    for (const QString& target : {session, reportPath, dir.filePath("tagger.bindings.json")}) {
      const Result text = run({"bindings", target});
      QVERIFY2(text.exitCode == 0, qPrintable(text.err));
      QVERIFY2(text.out.startsWith("bindings of tagger:"), qPrintable(text.out));
      QVERIFY(text.out.contains("aten::select rnn"));
      QVERIFY(text.out.contains("unbind-once: forward "));
      const Result json = run({"bindings", target, "--json"});
      QCOMPARE(json.exitCode, 0);
      const QJsonObject table = QJsonDocument::fromJson(json.out.toUtf8()).object();
      QCOMPARE(table["format"].toString(), QString("symtune-bindings"));
      QVERIFY(!table["bindings"].toArray().isEmpty());
    }
  }

  void tuneCommandWritesTheFastestConfiguration() {
    // `symtune tune` searches the tagger's configurations with a budget of 12 steps (4 of 1 + 2:
    // two searched, then the fastest two side by side) and writes the fastest into a copy of the
    // session, which then trains as tuned.
    QTemporaryDir dir;
    const QString session = writeFile(dir, "tagger.json", R"({
      "format": "symtune-session", "version": 1, "name": "tagger",
      "model": {"zoo": "dynamic_tagger", "preset": "ci"}, "binding": {"enabled": false},
      "run": {"steps": 3, "threads": 2}})");
    const QString tunedPath = dir.filePath("tagger.tuned.json");
    const Result tuned = run({"tune", session, "--budget-steps", "12", "--warmup", "1", "--measure",
                              "2", "--output", tunedPath, "--json"});
    QVERIFY2(tuned.exitCode == 0, qPrintable(tuned.err));
    QVERIFY2(tuned.err.contains("(the session's)"), qPrintable(tuned.err));
    const QJsonObject search = QJsonDocument::fromJson(tuned.out.toUtf8()).object();
    QCOMPARE(search["format"].toString(), QString("symtune-tune"));
    const QJsonArray evaluations = search["evaluations"].toArray();
    QVERIFY(!evaluations.isEmpty());
    QVERIFY(evaluations.size() <= 2);
    QCOMPARE(evaluations[0].toObject()["configuration"].toString(),
             QString("microbatches 1, threads 2, remat_budget as the session"));
    const QString best = search["best"].toObject()["configuration"].toString();
    QVERIFY(!best.isEmpty());
    double fastest = 0;
    QString fastestConfiguration;
    for (const auto& e : evaluations) {
      if (e.toObject()["samples_per_s"].toDouble() > fastest) {
        fastest = e.toObject()["samples_per_s"].toDouble();
        fastestConfiguration = e.toObject()["configuration"].toString();
      }
    }
    // The search's fastest two measured again side by side; the faster there is the choice, and
    // the budget holds for both together.
    int64_t sideBySideEvaluations = 0;
    if (search["runner_up"].isObject()) {
      const QJsonObject side = search["side_by_side"].toObject();
      QVERIFY2(!side.isEmpty(), qPrintable(tuned.out));
      sideBySideEvaluations = 2;
      QCOMPARE(side["first"].toString(), fastestConfiguration);
      // Each one's search figure and its figure side by side together.
      const auto searched = [&](const QString& configuration) {
        for (const auto& e : evaluations) {
          if (e.toObject()["configuration"].toString() == configuration)
            return e.toObject()["samples_per_s"].toDouble();
        }
        return 0.0;
      };
      const bool reversed =
          std::sqrt(searched(side["second"].toString()) * side["second_samples_per_s"].toDouble()) >
          std::sqrt(fastest * side["first_samples_per_s"].toDouble());
      QCOMPARE(side["reversed"].toBool(), reversed);
      QCOMPARE(best, side[reversed ? "second" : "first"].toString());
      QCOMPARE(search["runner_up"].toObject()["configuration"].toString(),
               side[reversed ? "first" : "second"].toString());
      QCOMPARE(side["steps"].toInt(), 6);
      QVERIFY(search["steps"].toInt() + side["steps"].toInt() <= 12);
    } else {
      QVERIFY(search["side_by_side"].isNull());
      QCOMPARE(search["best"].toObject()["samples_per_s"].toDouble(), fastest);
      QVERIFY(search["steps"].toInt() <= 12);
    }
    // The original is untouched; the copy holds the configuration and the search.
    QFile original(session);
    QVERIFY(original.open(QIODevice::ReadOnly));
    QVERIFY(!original.readAll().contains("tuned"));
    QFile written(tunedPath);
    QVERIFY(written.open(QIODevice::ReadOnly));
    const QJsonObject control =
        QJsonDocument::fromJson(written.readAll()).object()["control"].toObject();
    QCOMPARE(control["mode"].toString(), QString("tuned"));
    QCOMPARE(QString("microbatches %1, threads %2, remat_budget as the session")
                 .arg(control["microbatches"].toInt())
                 .arg(control["threads"].toInt()),
             best);
    QCOMPARE(control["tuned"].toObject()["evaluations"].toInt(),
             evaluations.size() + sideBySideEvaluations);
    const Result again = run({"--batch", tunedPath, "--report", dir.filePath("r.json")});
    QVERIFY2(again.exitCode == 0, qPrintable(again.err));
    QVERIFY2(again.out.contains("control: tuned, " + best + " (auto_tune measured "),
             qPrintable(again.out));
    // Bad input: a budget that buys nothing, and no budget at all.
    const Result tooSmall = run({"tune", session, "--budget-steps", "2"});
    QCOMPARE(tooSmall.exitCode, 2);
    QVERIFY2(tooSmall.err.startsWith("symtune: error: "), qPrintable(tooSmall.err));
    QVERIFY2(tooSmall.err.contains("a budget of 2 steps buys no evaluation (each takes 5"),
             qPrintable(tooSmall.err));
    const Result none = run({"tune", session});
    QCOMPARE(none.exitCode, 2);
    QVERIFY(none.err.contains("tune needs --budget-steps N"));
  }

  void tuneCommandSharesOneBindingTable() {
    // A bound tagger: the search's trainers share one binding table (Note [One binding table for
    // the search] in symtune/runtime/tuning.h), which goes beside the tuned session; a run of
    // the tuned session reads it and, on the batches the search trained on, measures nothing.
    QTemporaryDir dir;
    const QString session = boundTagger(dir);
    const QString tunedPath = dir.filePath("tagger.tuned.json");
    const QString table = dir.filePath("tagger.tuned.bindings.json");
    const Result tuned = run({"tune", session, "--budget-steps", "6", "--warmup", "1", "--measure",
                              "2", "--output", tunedPath, "--json"});
    QVERIFY2(tuned.exitCode == 0, qPrintable(tuned.err));
    const QJsonObject search = QJsonDocument::fromJson(tuned.out.toUtf8()).object();
    QCOMPARE(search["evaluations"].toArray().size(), 2);
    QCOMPARE(search["binding_table"].toString(), table);
    // The search writes no table beside the session it was given: only the tuned one's.
    QVERIFY(!QFile::exists(dir.filePath("tagger.bindings.json")));
    const Result shown = run({"bindings", table, "--json"});
    QVERIFY2(shown.exitCode == 0, qPrintable(shown.err));
    QVERIFY(!QJsonDocument::fromJson(shown.out.toUtf8()).object()["bindings"].toArray().isEmpty());
    const QString reportPath = dir.filePath("tuned.report.json");
    const Result again = run({"--batch", tunedPath, "--report", reportPath});
    QVERIFY2(again.exitCode == 0, qPrintable(again.err));
    QFile reportFile(reportPath);
    QVERIFY(reportFile.open(QIODevice::ReadOnly));
    const QJsonObject binding =
        QJsonDocument::fromJson(reportFile.readAll()).object()["binding"].toObject();
    QCOMPARE(binding["note"].toString(), "bindings from " + table);
    QCOMPARE(binding["measurements"].toInt(), 0);
  }

  // `symtune check SESSION`: the run set up as --batch would, no step taken; what is wrong in one
  // line, exit status 2.
  void checkCommandSetsTheRunUp() {
    const QString sessions = QStringLiteral(SYMTUNE_SOURCE_DIR "/resources/sessions/");
    const Result ok = run({"check", sessions + "image_classifier.json"});
    QVERIFY2(ok.exitCode == 0, qPrintable(ok.err));
    QCOMPARE(ok.out.trimmed(),
             QString("cnn.pt, 1443 parameters, batch 16, cpu; images: 54 training samples (18 "
                     "held out), inputs images [3, 16, 16] Float; target labels [] Long"));
    QTemporaryDir dir;
    // The shorter side to 16 keeps the aspect: the images come out of different sizes.
    const QString wrong = writeFile(dir, "wrong.json",
                                    R"({"format": "symtune-session", "version": 1,
                   "model": {"file": ")" +
                                        QByteArray(SYMTUNE_SOURCE_DIR) +
                                        R"(/tests/data/cnn.pt", "classes": 3},
                   "data": {"format": "images", "file": ")" +
                                        QByteArray(SYMTUNE_SOURCE_DIR) +
                                        R"(/tests/data/images", "batch_size": 8,
                            "image": {"resize": 16}}})");
    const Result bad = run({"check", wrong});
    QCOMPARE(bad.exitCode, 2);
    QVERIFY2(bad.err.contains(wrong + ": " SYMTUNE_SOURCE_DIR "/tests/data/images/"),
             qPrintable(bad.err));
    QVERIFY2(bad.err.contains("give data.image.resize or crop so that every image comes out the "
                              "same"),
             qPrintable(bad.err));
    QCOMPARE(bad.err.count('\n'), 1);
    QCOMPARE(run({"check"}).exitCode, 2);
  }

  void bindingsCommandErrors_data() {
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<QString>("message");
    QTest::addRow("not JSON") << QByteArray("{") << "not JSON";
    QTest::addRow("another format") << QByteArray(R"({"format": "symtune-rulepack"})")
                                    << "expected a session, a report or a binding table";
    QTest::addRow("no table yet") << QByteArray(R"({"format": "symtune-session", "version": 1,
                          "model": {"zoo": "dynamic_tagger"}})")
                                  << "no binding table yet at";
    QTest::addRow("binding off") << QByteArray(R"({"format": "symtune-session", "version": 1,
                          "model": {"zoo": "dynamic_tagger"}, "binding": {"enabled": false}})")
                                 << "binding is off";
  }

  void bindingsCommandErrors() {
    QFETCH(QByteArray, file);
    QFETCH(QString, message);
    QTemporaryDir dir;
    const Result r = run({"bindings", writeFile(dir, "x.json", file)});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.startsWith("symtune: error: "), qPrintable(r.err));
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QCOMPARE(r.err.count('\n'), 1);
  }

  void graphCommandErrors_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::addRow("--step on an archive")
        << QStringList{"graph", "m.pt", "--step"} << "graph --step needs a session";
    QTest::addRow("missing archive") << QStringList{"graph", "m.pt"} << "m.pt: no such model file";
    QTest::addRow("unknown format") << QStringList{"graph", "m.pt", "--format", "svg"}
                                    << "--format expects json or dot, got \"svg\"";
    QTest::addRow("no target") << QStringList{"graph"}
                               << "graph needs a session (.json) or a TorchScript archive (.pt)";
  }

  void graphCommandErrors() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const Result r = run(args);
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
  }

  void batchRunAppliesTheSessionsRules() {
    // The built-in pack's GELU rewrite, its NaN guard, the example plugin's C++ rule (from the
    // build tree's install plugin folder; the user's is empty) and a rule of the session's own:
    // the report says what was rewritten, what was in force and what fired.
    QTemporaryDir dir;
    qputenv("XDG_DATA_HOME", dir.filePath("xdg").toUtf8());
    qputenv("SYMTUNE_RULEPACKS", dir.filePath("library").toUtf8());
    const QString session = writeFile(dir, "s.json", kRulesSession);
    const QString reportPath = dir.filePath("r.json");
    const Result r = run({"--batch", session, "--report", reportPath});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("rewrite tanh_gelu: 1 sites"), qPrintable(r.out));
    QVERIFY2(r.out.contains("rules: nan_guard gradient_centralization every_step"),
             qPrintable(r.out));
    QVERIFY2(r.err.contains("symtune: plugin gradient_centralization 1.0.0 (") &&
                 r.err.contains("): gradient_centralization sparsify_gradients"),
             qPrintable(r.err));
    QFile f(reportPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject rules = QJsonDocument::fromJson(f.readAll()).object()["rules"].toObject();
    QCOMPARE(rules["in_force"].toArray(),
             (QJsonArray{"nan_guard", "gradient_centralization", "every_step"}));
    QCOMPARE(rules["fired_steps"].toObject(),
             (QJsonObject{{"gradient_centralization", 5}, {"every_step", 5}}));
    QCOMPARE(rules["skipped_steps"].toInt(), 0);
    QCOMPARE(rules["rewrites"].toArray(),
             (QJsonArray{QJsonObject{{"rule", "tanh_gelu"}, {"sites", 1}}}));
  }

  void batchRunUnderAMemoryBudget() {
    // Transformer-XL held to 60 % of its plain peak: the report shows each step's budget and
    // peak (the first runs plain to measure it), and no step over its budget.
    QTemporaryDir dir;
    const QString session =
        writeFile(dir, "s.json",
                  R"({"format": "symtune-session", "version": 1, "name": "remat",
             "model": {"zoo": "transformer_xl", "preset": "ci"}, "run": {"steps": 6},
             "binding": {"enabled": false}, "remat": {"budget_fraction": 0.6}})");
    const QString reportPath = dir.filePath("r.json");
    const Result r = run({"--batch", session, "--report", reportPath});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QFile f(reportPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject remat = QJsonDocument::fromJson(f.readAll()).object()["remat"].toObject();
    const QJsonArray steps = remat["steps"].toArray();
    QCOMPARE(steps.size(), 6);
    QVERIFY(steps[0].toObject()["limit_bytes"].isNull());  // the calibration step
    for (int i = 1; i < steps.size(); ++i) {
      const QJsonObject step = steps[i].toObject();
      QVERIFY2(step["peak_bytes"].toDouble() <= step["limit_bytes"].toDouble(),
               qPrintable(QString("step %1").arg(i)));
    }
    QVERIFY(remat["plans_made"].toInt() + remat["cache_hits"].toInt() >= 4);
    // Buckets by the tokens' shape and the segment and memory lengths (ints), each rounded up to
    // a power of two: at least one, and no more than one a step.
    QVERIFY(remat["buckets"].toInt() >= 1 && remat["buckets"].toInt() <= 6);
    // Transformer-XL's forward runs on shapes alone: its batches are counted so, on a batch only
    // when that cost more than its share of these small steps (and the report says so).
    QVERIFY(remat["shape_profiles"].toInt() >= 1 && remat["shape_profiles"].toInt() <= 6);
    QVERIFY(remat["profiles"].toInt() == 0 || remat["shapes_refused"].isString());

    // A budget no plan fits: the run fails at its first step and the report says the smallest.
    const QString tight = writeFile(dir, "t.json",
                                    R"({"format": "symtune-session", "version": 1, "name": "tight",
             "model": {"zoo": "dynamic_tagger", "preset": "ci"}, "run": {"steps": 6},
             "binding": {"enabled": false}, "remat": {"budget_mb": 0.01}})");
    const QString tightReport = dir.filePath("t.report.json");
    const Result t = run({"--batch", tight, "--report", tightReport});
    QCOMPARE(t.exitCode, 1);
    QFile g(tightReport);
    QVERIFY(g.open(QIODevice::ReadOnly));
    const QJsonObject failed = QJsonDocument::fromJson(g.readAll()).object();
    QCOMPARE(failed["status"].toString(), QString("failed"));
    QVERIFY2(failed["error"].toString().startsWith("step 0: remat: ") &&
                 failed["error"].toString().contains("the smallest feasible budget"),
             qPrintable(failed["error"].toString()));
  }

  void rulesCheckValidatesRewriteIr() {
    // symtune hands a file with rewrites to symtune-runner, whose engine parses the IR.
    const Result ok = run(
        {"rules", "check", QStringLiteral(SYMTUNE_SOURCE_DIR "/resources/rulepacks/builtin.json")});
    QVERIFY2(ok.exitCode == 0, qPrintable(ok.err));
    QVERIFY2(ok.out.contains("tanh_gelu: rewrite (IR checked)"), qPrintable(ok.out));
    QVERIFY(ok.out.contains("nan_guard: per step"));
    QTemporaryDir dir;
    const QString bad = writeFile(dir, "bad.rules", kBadRewrite);
    const Result r = run({"rules", "check", bad});
    QCOMPARE(r.exitCode, 2);
    QCOMPARE(r.err.trimmed(),
             "symtune: error: " + bad +
                 ": rule `bad`: 2:3: the pattern takes 1 input, the replacement 2 inputs: they "
                 "must match (the replacement gets the pattern's inputs)");
  }

  // A pack with a rewrite whose IR the engine refuses is skipped whole at run time, its good rules
  // with it: `rules export` refuses to write one, and `rules import` to install one (made here
  // past export, as a hand-edited pack would be).
  void rulesExportAndImportValidateRewriteIr() {
    QTemporaryDir dir;
    const QByteArray rules = kBadRewrite + "rule fine { when loss > 100 skip step }\n";
    const QString bad = writeFile(dir, "bad.rules", rules);
    const QString message =
        ": rule `bad`: 2:3: the pattern takes 1 input, the replacement 2 "
        "inputs: they must match (the replacement gets the pattern's inputs)";
    const Result exported = run({"rules", "export", bad, "--name", "bad", "--version", "1.0.0",
                                 "--output", dir.filePath("bad.json")});
    QCOMPARE(exported.exitCode, 2);
    QCOMPARE(exported.err.trimmed(), "symtune: error: " + bad + message);
    QVERIFY(!QFile::exists(dir.filePath("bad.json")));

    const QString pack = dir.filePath("handmade.json");
    symtune::rules::saveRulePack(
        pack.toStdString(), symtune::rules::packFromText(rules.toStdString(), "handmade", "1.0.0",
                                                         "a pack past export"));
    const Result imported = run({"rules", "import", pack, "--library", dir.filePath("lib")});
    QCOMPARE(imported.exitCode, 2);
    QCOMPARE(imported.err.trimmed(), "symtune: error: " + pack + message);
    QVERIFY(!QFile::exists(dir.filePath("lib/handmade.json")));
  }

  void versionAndHelp() {
    const Result v = run({"--version"});
    QCOMPARE(v.exitCode, 0);
    QVERIFY(v.out.startsWith("symtune 0."));
    const Result h = run({"--help"});
    QCOMPARE(h.exitCode, 0);
    QVERIFY(h.out.contains("--batch SESSION"));
    QVERIFY(h.out.contains("--report FILE"));
  }
};

SYMTUNE_TEST_MAIN_CORE(TestBatch)
#include "tst_batch.moc"
