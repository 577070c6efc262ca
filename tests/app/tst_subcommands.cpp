// The `symtune` subcommands end to end, as a user runs them: graph, bindings, tune, check and
// rules (check, export, import, list), each a real process with its output, files and exit
// status; a session whose rules a plugin registers works in every one of them.

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>

#include "symtune/core/rule_pack.h"
#include "symtune_cli.h"
#include "test_main.h"

using namespace symtune::test::cli;

class TestSubcommands : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  // A session whose rules a plugin registers: graph and tune load the plugins too, as --batch and
  // check do. They refused it ("no rule named `gradient_centralization` is registered").
  void everyCommandTakesAPluginsRules() {
    QTemporaryDir dir;
    const QString session = writeFile(dir, "rules.json", kRulesSession);
    const Result graph = run({"graph", session, "--output", dir.filePath("graph.json")});
    QVERIFY2(graph.exitCode == 0, qPrintable(graph.err));
    const Result tune =
        run({"tune", session, "--budget-steps", "5", "--output", dir.filePath("tuned.json")});
    QVERIFY2(tune.exitCode == 0, qPrintable(tune.err));
    QVERIFY(QFile::exists(dir.filePath("tuned.json")));
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
};

SYMTUNE_TEST_MAIN_CORE(TestSubcommands)
#include "tst_subcommands.moc"
