// The studio's shell, offscreen: the window opens with its docks, opens a session into the
// Session dock's model, refuses a bad one with the reason as data, and follows a run it attached
// to (a real symtune-runner) until the run dies. Stand-in runs (FakeRun: the protocol's frames
// from a test) check what attaching to one run after another leaves in the docks.

#include <filesystem>

#include <QAbstractItemModelTester>
#include <QAbstractItemView>
#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonObject>
#include <QLabel>
#include <QLocalServer>
#include <QLocalSocket>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>

#include "sample_graph.h"
#include "symtune/core/attach_messages.h"
#include "symtune/core/binding_table.h"
#include "symtune/core/session.h"
#include "symtune/graphview/graph_scene.h"
#include "symtune/ui/binding_table_model.h"
#include "symtune/ui/bindings_dock.h"
#include "symtune/ui/graph_panel.h"
#include "symtune/ui/live_charts.h"
#include "symtune/ui/main_window.h"
#include "symtune/ui/remat_dock.h"
#include "symtune/ui/remat_plan_model.h"
#include "symtune/ui/rule_editor.h"
#include "symtune/ui/rule_list_model.h"
#include "symtune/ui/rules_dock.h"
#include "symtune/ui/run_history_model.h"
#include "symtune/ui/session_model.h"
#include "test_main.h"

#include <signal.h>

using symtune::ui::MainWindow;

namespace {

const QByteArray kBudgetSession =
    "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"studio budget\",\n"
    " \"model\": {\"zoo\": \"dynamic_resnet\", \"preset\": \"ci\"},\n"
    " \"run\": {\"steps\": 1000000, \"threads\": 1},\n"
    " \"remat\": {\"budget_fraction\": 0.9}}\n";

const QByteArray kLongSession =
    "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"studio attach\",\n"
    " \"model\": {\"zoo\": \"dynamic_resnet\", \"preset\": \"ci\"},\n"
    " \"run\": {\"steps\": 1000000, \"threads\": 1}}\n";

// symtune-runner on `session` (written into `dir`), listening on dir/ui.sock, up to its
// "listening on" line; fails the test when it does not get there.
void startRunner(QProcess& runner, const QTemporaryDir& dir, const QByteArray& session) {
  QFile file(dir.filePath("s.json"));
  QVERIFY(file.open(QIODevice::WriteOnly));
  file.write(session);
  file.close();
  runner.start(QStringLiteral(SYMTUNE_BIN_DIR "/symtune-runner"),
               {file.fileName(), "--listen", "unix:" + dir.filePath("ui.sock")});
  QByteArray out;
  QTRY_VERIFY_WITH_TIMEOUT((out += runner.readAllStandardOutput()).contains("listening on"),
                           120000);
}

using Json = nlohmann::json;

// A run as the studio sees one, without training: a Unix socket that says hello (docs/protocol.md,
// the handshake), takes the studio's, welcomes it and sends the frames it was given, then answers
// each command with the next of `answers` (with the command's id), and the rest with nothing; a
// studio that connects again is greeted again.
class FakeRun : public QObject {
 public:
  FakeRun(const QString& path, Json run, std::vector<Json> frames, std::vector<Json> answers = {})
      : run_(std::move(run)), frames_(std::move(frames)), answers_(std::move(answers)) {
    QLocalServer::removeServer(path);
    listening_ = server_.listen(path);
    connect(&server_, &QLocalServer::newConnection, this, [this] {
      socket_ = server_.nextPendingConnection();  // each connection from its handshake on
      received_.clear();
      welcomed_ = false;
      send({{"type", "hello"},
            {"protocol", 1},
            {"engine", "0.1.0"},
            {"auth", "none"},
            {"run", run_}});
      connect(socket_, &QLocalSocket::readyRead, this, [this] {
        received_ += socket_->readAll();
        while (received_.size() >= 4) {
          const auto byte = [&](int i) { return static_cast<quint32>(uchar(received_[i])); };
          const quint32 n = byte(0) << 24 | byte(1) << 16 | byte(2) << 8 | byte(3);
          if (static_cast<quint32>(received_.size()) < 4 + n)
            return;
          const Json frame = Json::parse(received_.mid(4, static_cast<int>(n)).toStdString(),
                                         nullptr, /*allow_exceptions=*/false);
          received_.remove(0, static_cast<int>(4 + n));
          if (!welcomed_) {
            welcomed_ = true;  // the studio's hello: whatever it holds, this run takes it
            send({{"type", "welcome"}});
            for (const Json& f : frames_)
              send(f);
          } else {
            if (frame.is_object() && frame.contains("command") && frame["command"].is_string())
              commands_.push_back(frame["command"].get<std::string>());
            if (answered_ < answers_.size() && frame.is_object() && frame.contains("id")) {
              Json answer = answers_[answered_++];
              answer["id"] = frame["id"];
              send(answer);
            }
          }
        }
      });
    });
  }
  bool listening() const { return listening_; }
  // The commands the studio sent, by name, over every connection.
  const std::vector<std::string>& commands() const { return commands_; }

 private:
  void send(const Json& message) {
    const QByteArray payload = QByteArray::fromStdString(message.dump());
    const quint32 n = static_cast<quint32>(payload.size());
    const char length[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                            static_cast<char>(n >> 8), static_cast<char>(n)};
    socket_->write(length, 4);
    socket_->write(payload);
    socket_->flush();
  }

  QLocalServer server_;
  QLocalSocket* socket_ = nullptr;
  QByteArray received_;
  bool listening_ = false, welcomed_ = false;
  Json run_;
  std::vector<Json> frames_, answers_;
  std::vector<std::string> commands_;
  size_t answered_ = 0;
};

Json stepFrame(int64_t step, double loss) {
  symtune::attach::StepMessage m;
  m.step = step;
  m.loss = loss;
  m.seconds = 0.01;
  m.features.values.fill(0.0);
  return symtune::attach::encode(m);
}

Json runDescription(const std::string& name, const QString& sessionPath) {
  return {{"session", name},       {"session_path", sessionPath.toStdString()},
          {"model", "a stand-in"}, {"parameters", 10},
          {"batch_size", 4},       {"device", "cpu"},
          {"steps", 100}};
}

}  // namespace

class TestMainWindow : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);  // QSettings and run folders in a test location
    qputenv("SYMTUNE_RUNNER", SYMTUNE_BIN_DIR "/symtune-runner");
    QSettings().remove("rules/draft");  // an earlier run's closing window left one
  }

  // Rules typed and neither applied nor exported are in the editor of the next window.
  void keepsTheRuleEditorsTextForTheNextWindow() {
    const QString draft = "# not applied yet\nrule half { when step == 100 set lr = lr * 0.5 }\n";
    {
      MainWindow w;
      w.show();
      w.rulesDock()->editor()->setPlainText(draft);
      QVERIFY(w.close());
    }
    MainWindow next;
    QCOMPARE(next.rulesDock()->editor()->toPlainText(), draft);
    QVERIFY(next.rulesDock()->editor()->isOk());
    // Kept as it is edited, not only when the window closes: a window that never closes (a crash)
    // leaves it too.
    const QString edited = draft + "# edited\n";
    next.rulesDock()->editor()->setPlainText(edited);
    QTRY_COMPARE_WITH_TIMEOUT(QSettings().value("rules/draft").toString(), edited, 5000);
    QSettings().remove("rules/draft");
  }

  void opensWithItsDocks() {
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    for (const char* name : {"chartsDock", "rulesDock", "inspectorDock", "sessionDock"}) {
      QDockWidget* d = w.dock(name);
      QVERIFY2(d != nullptr, name);
      QVERIFY2(d->isVisible(), name);
    }
    QCOMPARE(w.sessionModel()->rowCount(), 0);
  }

  void opensTheBundledSession() {
    MainWindow w;
    new QAbstractItemModelTester(w.sessionModel(),
                                 QAbstractItemModelTester::FailureReportingMode::QtTest, &w);
    QSignalSpy opened(&w, &MainWindow::sessionOpened);
    const QString path = SYMTUNE_SOURCE_DIR "/resources/sessions/demo.json";
    QVERIFY(w.openSession(path));
    QCOMPARE(opened.count(), 1);
    QVERIFY(w.windowTitle().startsWith("dynamic-resnet demo"));
    auto* m = w.sessionModel();
    QStringList groups;
    for (int r = 0; r < m->rowCount(); ++r)
      groups << m->index(r, 0).data().toString();
    QCOMPARE(groups, (QStringList{"name", "file", "model", "data", "optimizer", "run"}));
    const QModelIndex model = m->index(2, 0);
    QCOMPARE(m->index(2, 1).data().toString(), QString("dynamic_resnet (ci)"));
    QCOMPARE(m->rowCount(model), 2);
    QCOMPARE(m->index(1, 1, model).data().toString(), QString("ci"));
  }

  // The new-session flow end to end: the studio writes the session, launches symtune-runner,
  // attaches; feature vectors reach the charts, the graph is drawn with per-node figures, a rule
  // toggled in the Rules dock is acknowledged from a step on, and Stop ends the run.
  void startsARunChartsItAndTogglesARule() {
    MainWindow w;
    w.show();
    QSignalSpy attached(&w, &MainWindow::attached);
    QSignalSpy answered(&w, &MainWindow::commandAnswered);
    const QJsonObject session{{"format", "symtune-session"},
                              {"version", 1},
                              {"name", "studio steering"},
                              {"model", QJsonObject{{"zoo", "dynamic_resnet"}, {"preset", "ci"}}},
                              {"run", QJsonObject{{"steps", 1000000}, {"threads", 1}}},
                              {"rules", QJsonObject{{"enable", QJsonArray{"nan_guard"}}}}};
    QString error;
    QVERIFY2(w.startSession(session, 2, &error), qPrintable(error));
    // The runner is detached (it outlives the studio): a failing check must not leave it behind.
    struct KillAtExit {
      qint64 pid;
      ~KillAtExit() { ::kill(static_cast<pid_t>(pid), SIGKILL); }
    } guard{w.launchedRunnerPid()};
    QTRY_VERIFY_WITH_TIMEOUT(attached.count() == 1, 120000);
    const QString runFolder = QFileInfo(w.sessionPath()).path();
    QVERIFY(QFileInfo(runFolder + "/runner.log").exists());

    // Feature vectors into the charts.
    QTRY_VERIFY_WITH_TIMEOUT(w.currentRun() != nullptr && w.currentRun()->rowCount() >= 3, 60000);
    QCOMPARE(w.currentRun()->runName(), QString("studio steering"));
    w.liveCharts()->flush();
    using symtune::ui::LiveCharts;
    QVERIFY(w.liveCharts()->pointCount(LiveCharts::LossChart, 0) >= 3);
    QVERIFY(w.liveCharts()->pointCount(LiveCharts::SamplesChart, 0) >= 3);

    // The run's graph, drawn, with live per-node figures (sampled every 2 steps).
    auto* panel = w.graphPanel();
    QTRY_VERIFY_WITH_TIMEOUT(panel->forwardScene()->drawnNodes() > 0, 30000);
    panel->setOverlay(symtune::graphview::Overlay::Latency);
    QTRY_VERIFY_WITH_TIMEOUT(panel->forwardScene()->overlayRange().has_value(), 60000);
    QVERIFY(panel->forwardScene()->overlayRange()->second > 0);

    // Toggle nan_guard off in the Rules dock: the run acknowledges it from a step on.
    symtune::ui::RuleListModel* rules = w.rulesDock()->model();
    QTRY_VERIFY_WITH_TIMEOUT(rules->rowOf("nan_guard") >= 0, 10000);
    const QModelIndex rule = rules->index(rules->rowOf("nan_guard"), 0);
    QVERIFY(rule.data(symtune::ui::RuleListModel::EnabledRole).toBool());
    answered.clear();  // set_sampling's ack came first
    QVERIFY(rules->setData(rule, Qt::Unchecked, Qt::CheckStateRole));
    QTRY_VERIFY_WITH_TIMEOUT(!answered.isEmpty(), 30000);
    const auto ack = answered.first().at(1).value<symtune::attach::ReplyMessage>();
    QVERIFY(ack.ok);
    QCOMPARE(ack.command, std::string("toggle_rule"));
    QVERIFY2(w.rulesDock()->statusText().startsWith("Applied from step "),
             qPrintable(w.rulesDock()->statusText()));
    QTRY_VERIFY_WITH_TIMEOUT(!rules->index(rules->rowOf("nan_guard"), 0)
                                  .data(symtune::ui::RuleListModel::EnabledRole)
                                  .toBool(),
                             10000);

    // Stop: the runner writes its report and exits; the studio says the run ended.
    QSignalSpy ended(&w, &MainWindow::attachEnded);
    const qint64 pid = w.launchedRunnerPid();
    QVERIFY(pid > 0);
    QVERIFY(w.stopRun() > 0);
    QTRY_VERIFY_WITH_TIMEOUT(ended.count() == 1, 60000);
    QTRY_VERIFY_WITH_TIMEOUT(::kill(static_cast<pid_t>(pid), 0) != 0, 30000);
    QVERIFY2(w.status().contains(" (its log and report: "), qPrintable(w.status()));
    // The run's report went to its run folder, not to the studio's working directory.
    QVERIFY(QFileInfo(runFolder + "/report.json").exists());
    QVERIFY(!QFileInfo::exists("session.report.json"));
    QDir(runFolder).removeRecursively();
  }

  void followsAnAttachedRunUntilItDies() {
    QTemporaryDir dir;
    QProcess runner;
    startRunner(runner, dir, kLongSession);
    if (QTest::currentTestFailed())
      return;

    MainWindow w;
    w.show();
    QSignalSpy ended(&w, &MainWindow::attachEnded);
    w.attachTo("unix:" + dir.filePath("ui.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("studio attach: step "), 60000);
    QCOMPARE(w.windowTitle(), QString("Symtune — studio attach"));
    QCOMPARE(w.statusBar()->findChild<QLabel*>("statusLine")->text(), w.status());

    runner.kill();
    QElapsedTimer sinceKill;
    sinceKill.start();
    QTRY_VERIFY_WITH_TIMEOUT(ended.count() == 1, 5000);
    QVERIFY2(sinceKill.elapsed() < 1000, qPrintable(QString::number(sinceKill.elapsed())));
    QCOMPARE(w.status(), QString("The run ended: the server closed the connection"));
    runner.waitForFinished();
  }

  // A run held to a memory budget: the Memory budget dock shows its plan, the Remat plan overlay
  // paints the units kept and recomputed, the memory chart gains the budget and the prediction,
  // and a budget typed in the dock holds on the running job from the step its ack names.
  void showsTheBudgetsPlanAndChangesTheBudget() {
    QTemporaryDir dir;
    QProcess runner;
    startRunner(runner, dir, kBudgetSession);
    if (QTest::currentTestFailed())
      return;
    struct KillAtExit {
      QProcess& p;
      ~KillAtExit() {
        p.kill();
        p.waitForFinished();
      }
    } guard{runner};

    MainWindow w;
    w.show();
    w.attachTo("unix:" + dir.filePath("ui.sock"));
    symtune::ui::RematDock* dock = w.rematDock();
    QVERIFY(w.dock("rematDock") != nullptr);
    symtune::ui::RematPlanModel* plan = dock->model();
    QTRY_VERIFY_WITH_TIMEOUT(plan->rowCount() > 0 && plan->lastStep().has_value() &&
                                 plan->lastStep()->budgetBytes.has_value(),
                             120000);
    int recomputed = 0;
    for (int r = 0; r < plan->rowCount(); ++r)
      recomputed += plan->index(r, 0).data(symtune::ui::RematPlanModel::RecomputedRole).toBool();
    QVERIFY(recomputed > 0);
    QVERIFY2(dock->summary().startsWith("Budget 0.9 of the plain peak · step "),
             qPrintable(dock->summary()));

    auto* panel = w.graphPanel();
    QTRY_VERIFY_WITH_TIMEOUT(panel->forwardScene()->drawnNodes() > 0, 30000);
    panel->setOverlay(symtune::graphview::Overlay::Remat);
    QTRY_VERIFY_WITH_TIMEOUT(panel->forwardScene()->overlayRange().has_value(), 30000);
    QCOMPARE(panel->forwardScene()->overlayRange()->second, 1.0);  // a recomputed unit shows

    w.liveCharts()->flush();
    QVERIFY(w.liveCharts()->budgetSeries(0) != nullptr);
    QVERIFY(w.liveCharts()->budgetedPeakSeries(0) != nullptr);
    QTRY_VERIFY_WITH_TIMEOUT(
        (w.liveCharts()->flush(), w.liveCharts()->predictedSeries(0) != nullptr), 30000);

    dock->setBudget(symtune::ui::RematDock::Unit::Megabytes, 8);
    dock->apply();
    QTRY_VERIFY_WITH_TIMEOUT(dock->status().startsWith("Applied from step "), 30000);
    QTRY_VERIFY_WITH_TIMEOUT(plan->plan()->budgetMb == 8.0, 30000);
    QTRY_VERIFY_WITH_TIMEOUT(plan->lastStep()->budgetBytes == 8e6, 30000);
    dock->setBudget(symtune::ui::RematDock::Unit::Megabytes, 0.001);
    dock->apply();
    QTRY_VERIFY_WITH_TIMEOUT(dock->status().startsWith("Refused: "), 30000);
    QVERIFY2(dock->status().contains("smallest feasible budget"), qPrintable(dock->status()));
  }

  // Attaching to a second run: what the docks showed was the first run's, and the second sends
  // no rules, no binding table and no graph (an embedded loop without IR), so they must not keep
  // the first's — nor the Session dock its session, which Run ▸ Start would then start. Its last
  // validation comes before its last step (the handshake's order) and stays on the chart and in
  // the status bar after the steps that follow.
  void aSecondRunReplacesWhatTheFirstShowed() {
    QTemporaryDir dir;
    const QString demo =
        QFileInfo(SYMTUNE_SOURCE_DIR "/resources/sessions/demo.json").absoluteFilePath();
    const auto sample = symtune::testing::sampleGraph();
    symtune::BindingTable table;
    table.model = "stand-in:00";
    symtune::Binding b;
    b.site = "#1 aten::matmul";
    b.node = 1;
    b.bucket = "[4, 8]";
    b.reference = "aten";
    b.winner = "aten";
    b.candidates.push_back({"aten", 1e-3, 0, 0, ""});
    table.put(b);
    symtune::attach::RulesMessage rules;
    rules.rules = {{"nan_guard", true, "pack builtin 1.3.0", ""}};
    FakeRun first(dir.filePath("first.sock"), runDescription("first", demo),
                  {{{"type", "graph"}, {"graph", Json::parse(symtune::toJson(sample.graph))}},
                   symtune::attach::encode(rules),
                   symtune::attach::encode(table),
                   {{"type", "state"}, {"state", "training"}},
                   stepFrame(3, 1.5)});
    QVERIFY(first.listening());
    MainWindow w;
    QSignalSpy attached(&w, &MainWindow::attached);
    w.attachTo("unix:" + dir.filePath("first.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("first: step 3"), 10000);
    QCOMPARE(w.rulesDock()->model()->rowCount(), 1);
    QCOMPARE(w.bindingsDock()->model()->rowCount(), 1);
    QVERIFY(w.graphPanel()->graph() != nullptr);
    QCOMPARE(w.sessionPath(), demo);  // the run's session, readable here
    QString error;
    QVERIFY(!w.startOpenSession(&error));  // it trains: a second start would orphan it
    QCOMPARE(error, QString("first is training: stop it first (Run ▸ Stop, Shift+F5)"));

    symtune::attach::ValidationMessage validation;
    validation.step = 8;
    validation.samples = 16;
    validation.loss = 0.75;
    FakeRun second(dir.filePath("second.sock"), runDescription("second", ""),
                   {{{"type", "graph"}, {"graph", {{"error", "no TorchScript IR to show"}}}},
                    {{"type", "state"}, {"state", "training"}},
                    symtune::attach::encode(validation),
                    stepFrame(7, 0.9)});
    QVERIFY(second.listening());
    w.attachTo("unix:" + dir.filePath("second.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("second: step 7"), 10000);
    QCOMPARE(attached.count(), 2);
    QCOMPARE(w.rulesDock()->model()->rowCount(), 0);
    QCOMPARE(w.bindingsDock()->model()->rowCount(), 0);
    QVERIFY(w.graphPanel()->graph() == nullptr);
    QCOMPARE(w.sessionPath(), QString());
    QCOMPARE(w.sessionModel()->rowCount(), 0);
    QVERIFY(!w.startOpenSession(&error));
    QVERIFY2(error.startsWith("Open a session first"), qPrintable(error));
    QCOMPARE(w.currentRun()->rowCount(), 1);
    QCOMPARE(w.currentRun()->value(0, symtune::ui::RunHistoryModel::ValidationLoss), 0.75);
    QVERIFY2(w.statusBar()->currentMessage().startsWith("second: validation after step 8"),
             qPrintable(w.statusBar()->currentMessage()));
    QCOMPARE(w.statusBar()->findChild<QLabel*>("statusLine")->text(), w.status());
  }

  // Save Session As while a run is attached and another session has been opened since: the
  // open session is saved, not the run's under its name (until 2026-12-07).
  void savesTheOpenSessionNotTheRunsOnceAnotherIsOpen() {
    QTemporaryDir dir;
    const QString demo =
        QFileInfo(SYMTUNE_SOURCE_DIR "/resources/sessions/demo.json").absoluteFilePath();
    const QString other =
        QFileInfo(SYMTUNE_SOURCE_DIR "/resources/sessions/tree_rnn.json").absoluteFilePath();
    FakeRun run(dir.filePath("run.sock"), runDescription("run", demo),
                {{{"type", "state"}, {"state", "training"}}, stepFrame(1, 1.0)});
    QVERIFY(run.listening());
    MainWindow w;
    w.attachTo("unix:" + dir.filePath("run.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("run: step 1"), 10000);
    QCOMPARE(w.sessionPath(), demo);
    QVERIFY(w.openSession(other));
    const QString saved = dir.filePath("saved.json");
    w.saveSessionTo(saved);
    QVERIFY(QFileInfo::exists(saved));  // written now: no snapshot asked of the run
    QCOMPARE(symtune::loadSession(saved.toStdString()).name,
             symtune::loadSession(other.toStdString()).name);
  }

  // Note [A snapshot written elsewhere]: the run's session, saved into another folder, names the
  // run's files where they are. Written unchanged, `"save": "trained.pt"` named one beside the
  // copy.
  void savesTheRunsSessionWithItsPathsWhereTheyAre() {
    QTemporaryDir dir;
    QVERIFY(QDir(dir.path()).mkpath("run"));
    const QString origin = dir.filePath("run/s.json");
    const std::string text =
        R"({"format": "symtune-session", "version": 1, "name": "s",
            "model": {"zoo": "tree_rnn", "preset": "ci"}, "run": {"save": "trained.pt"}})";
    {
      QFile f(origin);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QByteArray::fromStdString(text));
    }
    FakeRun run(
        dir.filePath("run.sock"), runDescription("s", origin), {stepFrame(1, 1.0)},
        {{{"type", "ack"}, {"command", "snapshot"}, {"session", Json::parse(text)}, {"step", 1}}});
    QVERIFY(run.listening());
    MainWindow w;
    QSignalSpy answered(&w, &MainWindow::commandAnswered);
    w.attachTo("unix:" + dir.filePath("run.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("s: step 1"), 10000);
    const QString copy = dir.filePath("copy.json");
    w.saveSessionTo(copy);
    QTRY_COMPARE_WITH_TIMEOUT(answered.count(), 1, 10000);
    QVERIFY2(QFileInfo::exists(copy), qPrintable(w.statusBar()->currentMessage()));
    namespace fs = std::filesystem;
    QCOMPARE(fs::weakly_canonical(symtune::loadSession(copy.toStdString()).run.save).string(),
             fs::weakly_canonical(dir.filePath("run/trained.pt").toStdString()).string());
  }

  // A run samples nothing while no client is attached: attached to it again (here back after an
  // attach that failed), the studio asks it again for the node statistics it asked it for.
  void asksARunAttachedAgainForItsNodeStatistics() {
    QTemporaryDir dir;
    FakeRun first(dir.filePath("first.sock"), runDescription("first", ""), {stepFrame(1, 1.0)},
                  {{{"type", "ack"}, {"command", "set_sampling"}, {"every", 3}}});
    QVERIFY(first.listening());
    MainWindow w;
    QSignalSpy answered(&w, &MainWindow::commandAnswered);
    QSignalSpy attached(&w, &MainWindow::attached);
    w.attachTo("unix:" + dir.filePath("first.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("first: step 1"), 10000);
    QVERIFY(w.setSampling(3) > 0);
    QTRY_COMPARE_WITH_TIMEOUT(answered.count(), 1, 10000);
    w.attachTo("unix:" + dir.filePath("nobody.sock"));
    QTRY_COMPARE_WITH_TIMEOUT(attached.count(), 2, 10000);
    QTRY_COMPARE_WITH_TIMEOUT(first.commands().size(), size_t{2}, 10000);
    QCOMPARE(first.commands().back(), std::string("set_sampling"));
  }

  // Until the next run says hello the docks show the run before: nothing in them is sent, and
  // what they asked it and it never answered is answered (a toggle's italic mark stayed).
  void aSwitchOfRunsStopsTheDocksUntilTheNewRunSpeaks() {
    QTemporaryDir dir;
    symtune::attach::RulesMessage rules;
    rules.rules.push_back({"nan_guard", true, "builtin", ""});
    FakeRun first(dir.filePath("first.sock"), runDescription("first", ""),
                  {symtune::attach::encode(rules), stepFrame(1, 1.0)});  // answers nothing
    QVERIFY(first.listening());
    QLocalServer silent;  // accepts and never says hello
    QVERIFY(silent.listen(dir.filePath("silent.sock")));
    MainWindow w;
    w.attachTo("unix:" + dir.filePath("first.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("first: step 1"), 10000);
    auto* model = w.rulesDock()->model();
    QTRY_COMPARE_WITH_TIMEOUT(model->rowCount(), 1, 10000);
    QVERIFY(model->setData(model->index(0, 0), Qt::Unchecked, Qt::CheckStateRole));
    QTRY_COMPARE_WITH_TIMEOUT(first.commands().size(), size_t{1}, 10000);
    QVERIFY(model->isPending("nan_guard"));
    w.attachTo("unix:" + dir.filePath("silent.sock"));
    QVERIFY(!model->isPending("nan_guard"));
    QVERIFY2(w.rulesDock()->statusText().contains("another run was attached first"),
             qPrintable(w.rulesDock()->statusText()));
    // Still the first run's rule, and no toggle of it goes anywhere.
    QVERIFY(!w.rulesDock()->findChild<QAbstractItemView*>()->isEnabled());
  }

  // A run that has ended sends no graph: a session opened after it shows its own (it kept the
  // run's, docs/studio.md said otherwise).
  void aSessionOpenedAfterTheRunEndedShowsItsGraph() {
    QTemporaryDir dir;
    FakeRun run(dir.filePath("done.sock"), runDescription("done", ""),
                {{{"type", "state"}, {"state", "finished"}}, stepFrame(1, 1.0)});
    QVERIFY(run.listening());
    MainWindow w;
    w.attachTo("unix:" + dir.filePath("done.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("done: step 1"), 10000);
    QVERIFY(w.openSession(SYMTUNE_SOURCE_DIR "/resources/sessions/tree_rnn.json"));
    QTRY_VERIFY_WITH_TIMEOUT(w.graphPanel()->forwardScene()->drawnNodes() > 0, 120000);
    QVERIFY(w.isAttached());
  }

  void leavesARunThatNeverAnswersAtOnce() {
    QTemporaryDir dir;
    QLocalServer silent;  // accepts (the kernel does) and never says hello
    QVERIFY(silent.listen(dir.filePath("silent.sock")));
    FakeRun answering(dir.filePath("answering.sock"), runDescription("answering", ""),
                      {stepFrame(2, 1.0)});
    QVERIFY(answering.listening());
    MainWindow w;
    w.attachTo("unix:" + dir.filePath("silent.sock"));
    QTest::qWait(200);  // the worker is waiting for the hello
    QElapsedTimer elapsed;
    elapsed.start();
    w.attachTo("unix:" + dir.filePath("answering.sock"));
    // It was the handshake's whole timeout (5 s) with the window frozen.
    QVERIFY2(elapsed.elapsed() < 2000, qPrintable(QString::number(elapsed.elapsed()) + " ms"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("answering: step 2"), 10000);
  }

  // An attach that fails says so under the endpoint tried, not as the end of the run before
  // (which opening it closed), and the studio attaches to that run again.
  void saysWhyItCannotAttach() {
    QTemporaryDir dir;
    const QString nobody = "unix:" + dir.filePath("nobody.sock");
    {
      MainWindow alone;
      QSignalSpy ended(&alone, &MainWindow::attachEnded);
      alone.attachTo(nobody);
      QTRY_COMPARE_WITH_TIMEOUT(ended.count(), 1, 10000);
      QVERIFY2(alone.status().startsWith("Cannot attach to " + nobody + ": "),
               qPrintable(alone.status()));
      QCOMPARE(alone.findChild<QLabel*>("runState")->text(), QString("Not attached"));
    }
    FakeRun first(dir.filePath("first.sock"), runDescription("first", ""), {stepFrame(1, 1.0)});
    QVERIFY(first.listening());
    MainWindow w;
    QSignalSpy ended(&w, &MainWindow::attachEnded);
    QSignalSpy attached(&w, &MainWindow::attached);
    w.attachTo("unix:" + dir.filePath("first.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("first: step 1"), 10000);
    w.attachTo(nobody);
    QTRY_COMPARE_WITH_TIMEOUT(ended.count(), 1, 10000);
    QVERIFY2(w.statusBar()->currentMessage().startsWith("Cannot attach to " + nobody + ": "),
             qPrintable(w.statusBar()->currentMessage()));
    QTRY_COMPARE_WITH_TIMEOUT(attached.count(), 2, 10000);
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("first: step 1"), 10000);
    QVERIFY(w.isAttached());
  }

  // Answers whose fields have the wrong type are taken as holding nothing, and the studio goes
  // on: a string for set_sampling's `every`, or a null snapshot `step`, threw out of the slot,
  // which ends the studio.
  void takesAnswersWithFieldsOfTheWrongType() {
    QTemporaryDir dir;
    FakeRun run(dir.filePath("odd.sock"), runDescription("odd", ""), {stepFrame(1, 1.0)},
                {{{"type", "ack"}, {"command", "set_sampling"}, {"every", "often"}},
                 {{"type", "ack"},
                  {"command", "snapshot"},
                  {"session", Json::object()},
                  {"step", nullptr}}});
    QVERIFY(run.listening());
    MainWindow w;
    QSignalSpy answered(&w, &MainWindow::commandAnswered);
    w.attachTo("unix:" + dir.filePath("odd.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.status().startsWith("odd: step 1"), 10000);
    QVERIFY(w.setSampling(3) > 0);
    QTRY_COMPARE_WITH_TIMEOUT(answered.count(), 1, 10000);
    w.saveSessionTo(dir.filePath("snapshot.json"));
    QTRY_COMPARE_WITH_TIMEOUT(answered.count(), 2, 10000);
    QCOMPARE(w.statusBar()->currentMessage(),
             QString("No snapshot: the run's answer holds no step"));
    QVERIFY(!QFileInfo::exists(dir.filePath("snapshot.json")));
    QVERIFY(w.isAttached());
  }

  void refusesABadSessionAndKeepsTheCurrentOne() {
    MainWindow w;
    QVERIFY(w.openSession(SYMTUNE_SOURCE_DIR "/resources/sessions/demo.json"));
    const int rows = w.sessionModel()->rowCount();
    QTemporaryDir dir;
    QFile f(dir.filePath("bad.json"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"format": "symtune-session", "version": 1, "model": {"zoo": "nope"}})");
    f.close();
    QSignalSpy failed(&w, &MainWindow::sessionFailed);
    QString error;
    QVERIFY(!w.openSession(f.fileName(), &error));
    QCOMPARE(failed.count(), 1);
    QVERIFY2(error.contains("model.zoo: unknown zoo model \"nope\""), qPrintable(error));
    QCOMPARE(w.status(), error);
    QCOMPARE(w.sessionModel()->rowCount(), rows);
  }
};

SYMTUNE_TEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
