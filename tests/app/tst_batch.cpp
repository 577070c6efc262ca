// `symtune --batch` end to end, as a user runs it: a real process, progress on stdout, a report on
// disk, and a one-line reason with a non-zero exit code for bad input.

#include <chrono>
#include <cmath>
#include <csignal>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <QSet>
#include <QTemporaryDir>

#include "child_process.h"
#include "symtune_cli.h"
#include "test_main.h"

using namespace symtune::test::cli;

class TestBatch : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // Ctrl-C on `symtune --batch s.json | tee log` ends tee too: the runner's next progress line met
  // a closed pipe, and SIGPIPE ended it without its report. Until 2026-12-07.
  void writesTheReportWhenItsOutputIsClosed() {
    QTemporaryDir dir;
    const QString session = writeFile(dir, "s.json", kSession);
    const QString reportPath = dir.filePath("report.json");
    // Started as a shell starts it, SIGPIPE at its default (QProcess neither closes the pipe nor
    // says what its child inherits).
    symtune::test::ChildProcess runner;
    runner.start(kSymtune.toStdString(), {"--batch", session.toStdString(), "--report",
                                          reportPath.toStdString(), "--progress-interval", "0"});
    // Up to the first step's line: the run, and its SIGINT handler, are up.
    while (runner.standardOutput().find("step  1/30") == std::string::npos &&
           runner.waitForOutput(std::chrono::minutes(5))) {
    }
    QVERIFY2(runner.standardOutput().find("step  1/30") != std::string::npos,
             runner.standardError().c_str());
    runner.closeStandardOutput();
    QCOMPARE(::kill(runner.pid(), SIGINT), 0);
    QVERIFY(runner.waitForFinished(std::chrono::minutes(5)));
    const std::string err = runner.standardError();
    QVERIFY2(runner.exitedNormally(), err.c_str());  // not ended by SIGPIPE
    QCOMPARE(runner.exitCode(), 130);
    QFile f(reportPath);
    QVERIFY2(f.open(QIODevice::ReadOnly), err.c_str());
    const QJsonObject report = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(report["status"].toString(), QString("interrupted"));
    QVERIFY(report["steps"]["completed"].toInt() >= 1);
  }

  // A misspelt glob made its rule do nothing, without a word: the run warns, and its report says.
  void aRuleThatSelectsNoParameterIsSaid() {
    QTemporaryDir dir;
    // (Not a raw string: moc misreads a raw string holding \".)
    const QString session = writeFile(
        dir, "typo.json",
        "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"typo\",\n"
        " \"model\": {\"zoo\": \"dynamic_resnet\", \"preset\": \"ci\"},\n"
        " \"run\": {\"steps\": 2, \"threads\": 2},\n"
        " \"rules\": {\"source\": \"rule typo { select params \\\"layr1.*\\\"  set grad = grad * "
        "0.5 }\"}}\n");
    const QString said = "rule `typo`: params \"layr1.*\" selects none of the model's ";
    const QString reportPath = dir.filePath("typo.report.json");
    const Result r = run({"--batch", session, "--report", reportPath});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("warning: " + said), qPrintable(r.out));
    QFile f(reportPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject rules = QJsonDocument::fromJson(f.readAll()).object()["rules"].toObject();
    const QJsonArray unselected = rules["unselected"].toArray();
    QCOMPARE(unselected.size(), 1);
    QVERIFY(unselected[0].toString().startsWith(said));
    const Result check = run({"check", session});
    QCOMPARE(check.exitCode, 0);
    QVERIFY2(check.err.contains("symtune: warning: " + said), qPrintable(check.err));
  }

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
