// The attach protocol end to end, with real processes on loopback only: symtune-runner serving a
// zoo session, this test's clients and a client process of its own (attach_probe). Handshake,
// graph and steps; a rule toggled from the next step on; garbage and oversized frames closing only
// their own connection; a wrong token refused; a killed client leaving the run training; a client
// that stops reading for 10 s costing the run no throughput and missing no step silently; a
// killed runner reported to the client at once.

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <QProcess>
#include <QTemporaryDir>

#include "symtune/core/attach_client.h"
#include "test_main.h"

namespace {

using symtune::attach::Client;
using symtune::attach::Disconnected;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const QString kRunner = QStringLiteral(SYMTUNE_BIN_DIR "/symtune-runner");
const QString kProbe = QStringLiteral(SYMTUNE_BIN_DIR "/symtune-attach-probe");
const QString kExample = QStringLiteral(SYMTUNE_BIN_DIR "/symtune-example-attachable");

// A session that trains for longer than any test runs, with two rules to toggle.
const QByteArray kSession =
    "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"attach test\",\n"
    " \"model\": {\"zoo\": \"dynamic_resnet\", \"preset\": \"ci\"},\n"
    " \"run\": {\"steps\": 1000000, \"threads\": 1},\n"
    " \"rules\": {\"enable\": [\"nan_guard\", \"loss_spike_guard\"]}}\n";

// symtune-runner SESSION --listen ADDR, up to its "listening on" line.
struct Runner {
  QProcess process;
  std::string endpoint, token;

  bool start(const QString& session, const QString& listen, const QStringList& more = {}) {
    return startProgram(
        kRunner, QStringList{session, "--listen", listen, "--progress-interval", "1000"} + more);
  }

  // Any attachable program that prints "listening on ENDPOINT" (and "token TOKEN").
  bool startProgram(const QString& program, const QStringList& arguments) {
    process.setProcessChannelMode(QProcess::SeparateChannels);
    process.start(program, arguments);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    QByteArray out;
    while (Clock::now() < deadline) {
      if (!process.waitForReadyRead(1000) && process.state() != QProcess::Running)
        break;
      out += process.readAllStandardOutput();
      const int at = out.indexOf("listening on ");
      if (at >= 0 && out.indexOf('\n', at) > at) {
        const int end = out.indexOf('\n', at);
        endpoint = out.mid(at + 13, end - at - 13).toStdString();
        if (endpoint.rfind("tcp:", 0) != 0)
          return true;
        const int t = out.indexOf("token ");
        if (t >= 0 && out.indexOf('\n', t) > t) {
          token = out.mid(t + 6, out.indexOf('\n', t) - t - 6).toStdString();
          return true;
        }
      }
    }
    qWarning("runner did not start: %s / %s", out.constData(),
             process.readAllStandardError().constData());
    return false;
  }

  ~Runner() {
    if (process.state() != QProcess::NotRunning) {
      process.kill();
      process.waitForFinished(5000);
    }
  }
};

// Messages until one of `type` arrives (returned), or nothing after `seconds`.
std::optional<Json> until(Client& client, const std::string& type, double seconds = 30) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    auto m = client.next(0.5);
    if (m && (*m)["type"] == type)
      return m;
  }
  return std::nullopt;
}

QString writeSession(const QTemporaryDir& dir) {
  QFile f(dir.filePath("session.json"));
  if (!f.open(QIODevice::WriteOnly))
    qFatal("cannot write the session");
  f.write(kSession);
  return f.fileName();
}

}  // namespace

class TestAttach : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    session_ = writeSession(dir_);
    socket_ = dir_.filePath("runner.sock");
    QVERIFY(runner_.start(session_, "unix:" + socket_));
    QCOMPARE(runner_.endpoint, "unix:" + socket_.toStdString());
  }

  void socketIsPrivate() {
    struct stat st {};
    QCOMPARE(::stat(socket_.toLocal8Bit().constData(), &st), 0);
    QVERIFY(S_ISSOCK(st.st_mode));
    QCOMPARE(st.st_mode & 0777, mode_t{0600});
  }

  void handshakeGraphRulesAndSteps() {
    Client client;
    const Json hello = client.connect(runner_.endpoint);
    QCOMPARE(hello["protocol"].get<int>(), 1);
    QCOMPARE(hello["auth"].get<std::string>(), std::string("none"));
    QCOMPARE(hello["run"]["session"].get<std::string>(), std::string("attach test"));
    QVERIFY(hello["run"]["parameters"].get<int64_t>() > 0);
    bool graph = false, rules = false, state = false;
    size_t backward = 0, linked = 0;  // of the latest graph
    std::vector<int64_t> steps;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (steps.size() < 5 && Clock::now() < deadline) {
      auto m = client.next(0.5);
      if (!m)
        continue;
      const std::string type = (*m)["type"];
      if (type == "graph") {
        graph = true;
        QVERIFY((*m)["graph"]["nodes"].size() > 10);
        // The static graph first (when the client came early), then the second step's
        // captured one (Note [Attached step graph]): autograd nodes linked to forward ops.
        backward = linked = 0;
        for (const auto& n : (*m)["graph"]["nodes"]) {
          backward += n["side"] == "backward";
          linked += n["side"] == "backward" && !n["forward"].is_null();
        }
      } else if (type == "rules") {
        rules = true;
        QCOMPARE((*m)["rules"].size(), size_t{2});
        QCOMPARE((*m)["rules"][0]["name"].get<std::string>(), std::string("nan_guard"));
        QCOMPARE((*m)["rules"][0]["origin"].get<std::string>(), std::string("pack builtin 1.3.0"));
      } else if (type == "state") {
        state = true;
      } else if (type == "step") {
        QCOMPARE((*m)["features"].size(), size_t{24});
        QVERIFY((*m)["loss"].is_number());
        QCOMPARE((*m)["rules"]["in_force"].size(), size_t{2});
        steps.push_back((*m)["step"].get<int64_t>());
      }
    }
    QVERIFY(graph && rules && state);
    QVERIFY2(backward > 10 && linked > 5, qPrintable(QString("%1 %2").arg(backward).arg(linked)));
    QCOMPARE(steps.size(), size_t{5});
    for (size_t i = 1; i < steps.size(); ++i)
      QCOMPARE(steps[i], steps[i - 1] + 1);  // none lost, none coalesced: this client reads
  }

  void toggleChangesRulesFromTheNextStep() {
    Client client;
    client.connect(runner_.endpoint);
    QVERIFY(until(client, "step"));
    const Json ack =
        client.command({{"command", "toggle_rule"}, {"rule", "nan_guard"}, {"enabled", false}});
    QCOMPARE(ack["type"].get<std::string>(), std::string("ack"));
    QCOMPARE(ack["rules"][0]["enabled"].get<bool>(), false);
    // The ack comes at a step boundary and names the first step with the change; steps published
    // before it may still be on their way. Every step from that one on has the change.
    const int64_t from = ack["from_step"].get<int64_t>();
    int checked = 0;
    while (checked < 3) {
      const auto step = until(client, "step");
      QVERIFY(step);
      if ((*step)["step"].get<int64_t>() < from) {
        QCOMPARE((*step)["rules"]["in_force"].size(), size_t{2});
        continue;
      }
      QCOMPARE((*step)["rules"]["in_force"], Json::array({"loss_spike_guard"}));
      ++checked;
    }
    const Json back =
        client.command({{"command", "toggle_rule"}, {"rule", "nan_guard"}, {"enabled", true}});
    QCOMPARE(back["type"].get<std::string>(), std::string("ack"));

    const Json unknown =
        client.command({{"command", "toggle_rule"}, {"rule", "nope"}, {"enabled", true}});
    QCOMPARE(unknown["type"].get<std::string>(), std::string("error"));
    QCOMPARE(unknown["reason"].get<std::string>(), std::string("no rule named `nope`"));
    const Json bad =
        client.command({{"command", "add_rule"}, {"source", "rule x { set gard = 1 }"}});
    QCOMPARE(bad["type"].get<std::string>(), std::string("error"));
    QCOMPARE(bad["reason"].get<std::string>(),
             std::string("1:14: expected `grad` or `lr` after `set`, found `gard`"));
    const Json missing = client.command({{"command", "toggle_rule"}, {"rule", "nan_guard"}});
    QCOMPARE(missing["reason"].get<std::string>(),
             std::string("\"enabled\" must be true or false"));
    const Json snapshot = client.command({{"command", "snapshot"}});
    QCOMPARE(snapshot["session"]["rules"]["enable"],
             Json::array({"nan_guard", "loss_spike_guard"}));
    QCOMPARE(snapshot["session"]["model"]["zoo"].get<std::string>(), std::string("dynamic_resnet"));
  }

  void samplingPauseResumeAndRemove() {
    Client client;
    client.connect(runner_.endpoint);
    QVERIFY(until(client, "step"));
    // Per-node statistics every 2 steps, then off again.
    const Json sampling = client.command({{"command", "set_sampling"}, {"every", 2}});
    QCOMPARE(sampling["every"].get<int>(), 2);
    const auto nodes = until(client, "nodes");
    QVERIFY(nodes);
    QCOMPARE((*nodes)["nodes"]["step"].get<int64_t>() % 2, int64_t{0});
    QVERIFY((*nodes)["nodes"]["nodes"].size() > 10);
    QVERIFY((*nodes)["nodes"]["nodes"][0]["forward_s"].get<double>() >= 0);
    // Each parameter's gradient norm of the sampled step, for the studio's overlay.
    const Json& parameters = (*nodes)["nodes"]["parameters"];
    QVERIFY(parameters.size() > 10);
    for (const auto& p : parameters) {
      QVERIFY(!p["name"].get<std::string>().empty());
      QVERIFY(p["grad_norm"].is_null() || p["grad_norm"].get<double>() >= 0);
    }
    client.command({{"command", "set_sampling"}, {"every", 0}});

    // Pause holds the loop between steps; resume lets it go.
    QCOMPARE(client.command({{"command", "pause"}})["state"].get<std::string>(),
             std::string("paused"));
    QVERIFY(until(client, "state"));  // "paused"
    int64_t last = -1;
    while (auto m = client.next(1.0)) {  // drain what was sent before the pause took hold
      if ((*m)["type"] == "step")
        last = (*m)["step"].get<int64_t>();
    }
    QVERIFY(!client.next(2.0));  // nothing more while paused
    QCOMPARE(client.command({{"command", "resume"}})["state"].get<std::string>(),
             std::string("training"));
    const auto resumed = until(client, "step");
    QVERIFY(resumed);
    QVERIFY((*resumed)["step"].get<int64_t>() > last);

    // A rule removed and added back, in force again from the ack's step on.
    const Json removed = client.command({{"command", "remove_rule"}, {"rule", "loss_spike_guard"}});
    QCOMPARE(removed["rules"].size(), size_t{1});
    const Json added = client.command(
        {{"command", "add_rule"},
         {"source", "rule loss_spike_guard { when step > 10 && loss > 3 * loss_ema  skip step }"}});
    QCOMPARE(added["rules"].size(), size_t{2});
    QCOMPARE(added["rules"][1]["origin"].get<std::string>(), std::string("this run"));
  }

  void badFramesCloseOnlyTheirConnection_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addRow("not JSON") << QByteArray("\0\0\0\x05{oops", 9);
    QTest::addRow("not an object") << QByteArray("\0\0\0\x02[]", 6);
    QTest::addRow("no type") << QByteArray("\0\0\0\x02{}", 6);
    QTest::addRow("oversized") << QByteArray("\x7f\xff\xff\xff", 4);
  }

  void badFramesCloseOnlyTheirConnection() {
    QFETCH(QByteArray, bytes);
    Client good;
    good.connect(runner_.endpoint);
    const auto before = until(good, "step");
    QVERIFY(before);
    Client bad;
    bad.connect(runner_.endpoint);
    bad.sendBytes(bytes.toStdString());
    bool closed = false;
    try {
      for (int i = 0; i < 20 && !closed; ++i)
        bad.next(0.5);
    } catch (const Disconnected&) {
      closed = true;
    }
    QVERIFY(closed);
    // The other client and the run go on.
    const auto after = until(good, "step");
    QVERIFY(after);
    QVERIFY((*after)["step"].get<int64_t>() > (*before)["step"].get<int64_t>());
  }

  void killedClientLeavesTheRunnerTraining() {
    QProcess probe;
    probe.start(kProbe, {QString::fromStdString(runner_.endpoint)});
    QVERIFY(probe.waitForStarted());
    QByteArray out;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!out.contains("step") && Clock::now() < deadline) {
      probe.waitForReadyRead(500);
      out += probe.readAllStandardOutput();
    }
    QVERIFY2(out.contains("step"), out.constData());
    ::kill(static_cast<pid_t>(probe.processId()), SIGKILL);
    QVERIFY(probe.waitForFinished(5000));
    Client client;
    client.connect(runner_.endpoint);
    const auto first = until(client, "step");
    QVERIFY(first);
    const auto later = until(client, "step");
    QVERIFY(later);
    QVERIFY((*later)["step"].get<int64_t>() > (*first)["step"].get<int64_t>());
    QCOMPARE(runner_.process.state(), QProcess::Running);
  }

  // --linger: after its last step a runner serves while a client is attached, and exits once
  // none has been for the linger time (a studio-started run the studio has left).
  void finishedRunnerLingersWhileAttendedThenExits() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QFile f(dir.filePath("short.json"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray(kSession).replace("1000000", "3"));
    f.close();
    Runner runner;
    QVERIFY(runner.start(f.fileName(), "unix:" + dir.filePath("short.sock"),
                         {"--linger", "1", "--report", dir.filePath("short.report.json")}));
    {
      Client client;
      client.connect(runner.endpoint);
      bool finished = false;
      for (int i = 0; i < 200 && !finished; ++i) {
        const auto m = until(client, "state", 1);
        finished = m && (*m)["state"] == "finished";
      }
      QVERIFY(finished);
      // Attended: still serving well past the linger time.
      QVERIFY(!runner.process.waitForFinished(2500));
      QCOMPARE(runner.process.state(), QProcess::Running);
    }  // the client leaves
    QVERIFY(runner.process.waitForFinished(30000));
    QCOMPARE(runner.process.exitStatus(), QProcess::NormalExit);
    QCOMPARE(runner.process.exitCode(), 0);
  }

  void wrongTokenIsRefused() {
    Runner tcp;
    QVERIFY(tcp.start(session_, "tcp:127.0.0.1:0"));
    QCOMPARE(tcp.token.size(), size_t{32});
    Client client;
    try {
      client.connect(tcp.endpoint, std::string(32, '0'));
      QFAIL("a wrong token was accepted");
    } catch (const Disconnected& e) {
      QCOMPARE(std::string(e.what()), std::string("refused: wrong token"));
    }
    try {
      client.connect(tcp.endpoint);
      QFAIL("no token was accepted");
    } catch (const Disconnected& e) {
      QCOMPARE(std::string(e.what()), std::string("refused: wrong token"));
    }
    const Json hello = client.connect(tcp.endpoint, tcp.token);
    QCOMPARE(hello["auth"].get<std::string>(), std::string("token"));
    QVERIFY(until(client, "step"));
  }

  void tcpIsLoopbackOnly() {
    QProcess p;
    p.start(kRunner, {session_, "--listen", "tcp:0.0.0.0:0"});
    QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitCode(), 2);
    QVERIFY2(p.readAllStandardError().contains("TCP is for loopback only"), "");
  }

  void stalledClientCostsTheRunNothing() {
    // Two 10-second windows of one run: in the first no client is attached; in the second a
    // client attaches and stops reading. The trainer's own step times (the report's step_s, their
    // median) over each window give the throughput ratio.
    Runner run;
    const QString report = dir_.filePath("stall.report.json");
    QVERIFY(run.start(session_, "unix:" + dir_.filePath("stall.sock"), {"--report", report}));
    auto latestStep = [&] {
      Client c;
      c.connect(run.endpoint);
      return (*until(c, "step"))["step"].get<int64_t>();
    };
    QTest::qWait(3000);  // past the first steps (TorchScript's profiling runs)
    const int64_t a0 = latestStep();
    QTest::qWait(10000);
    const int64_t a1 = latestStep();

    Client stalled;
    stalled.connect(run.endpoint);
    const int64_t b0 = (*until(stalled, "step"))["step"].get<int64_t>();
    QTest::qWait(10000);  // it reads nothing meanwhile
    Client control;
    control.connect(run.endpoint);
    const int64_t b1 = (*until(control, "step"))["step"].get<int64_t>();

    // The stalled client, reading again, accounts for every step: each step message stands for
    // itself and the `coalesced` steps folded into it.
    int64_t accounted = 0, last = b0, messages = 0;
    while (last < b1) {
      const auto m = until(stalled, "step", 60);
      QVERIFY(m);
      accounted += 1 + m->value("coalesced", int64_t{0});
      last = (*m)["step"].get<int64_t>();
      ++messages;
    }
    QCOMPARE(accounted, last - b0);
    qInfo("the stalled client got %lld step messages for %lld steps",
          static_cast<long long>(messages), static_cast<long long>(accounted));
    QCOMPARE(control.command({{"command", "stop"}})["type"].get<std::string>(), std::string("ack"));
    QVERIFY(run.process.waitForFinished(60000));

    QFile f(report);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const Json steps = Json::parse(f.readAll().toStdString())["throughput"]["step_s"];
    // Medians: a step slowed by something else on the machine (a compile, another test) moves a
    // mean, not a median, and what the stalled client would cost shows in every step.
    auto medianSeconds = [&](int64_t from, int64_t to) {
      std::vector<double> v;
      for (int64_t i = from; i <= to; ++i)
        v.push_back(steps[static_cast<size_t>(i)].get<double>());
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    const double ratio = medianSeconds(a0 + 1, a1) / medianSeconds(b0 + 1, b1);
    qInfo(
        "throughput with a stalled client / without a client: %.4f (steps %lld-%lld vs "
        "%lld-%lld)",
        ratio, static_cast<long long>(b0 + 1), static_cast<long long>(b1),
        static_cast<long long>(a0 + 1), static_cast<long long>(a1));
    // The target is at most 2 % lost; the bound is generous for a shared 2-core machine.
    QVERIFY2(ratio > 0.9, qPrintable(QString::number(ratio)));
  }

  void embeddedProgramIsAttachable() {
    // examples/attachable_mlp: a plain torch::nn loop behind AttachedLoop.
    Runner program;
    QVERIFY(program.startProgram(kExample, {"unix:" + dir_.filePath("mlp.sock"), "100000000"}));
    Client client;
    const Json hello = client.connect(program.endpoint);
    QCOMPARE(hello["run"]["session"].get<std::string>(), std::string("attachable MLP"));
    QCOMPARE(hello["run"]["parameters"].get<int64_t>(),
             int64_t{8 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4});
    // The rules as the program set them up (the loop republishes them when they change).
    std::optional<Json> rules;
    while ((rules = until(client, "rules")) && (*rules)["rules"].empty()) {
    }
    QVERIFY(rules);
    QCOMPARE((*rules)["rules"][0]["name"].get<std::string>(), std::string("nan_guard"));
    const auto step = until(client, "step");
    QVERIFY(step);
    QCOMPARE((*step)["features"].size(), size_t{24});
    QVERIFY((*step)["features"]["grad_global_norm"].get<double>() > 0);
    const Json added = client.command(
        {{"command", "add_rule"},
         {"source", "rule clip { select params \"*\"  set grad = clamp(grad, -1, 1) }"}});
    QCOMPARE(added["type"].get<std::string>(), std::string("ack"));
    const int64_t from = added["from_step"].get<int64_t>();
    while (true) {
      const auto s = until(client, "step");
      QVERIFY(s);
      if ((*s)["step"].get<int64_t>() >= from) {
        QCOMPARE((*s)["rules"]["in_force"], Json::array({"nan_guard", "clip"}));
        QCOMPARE((*s)["rules"]["fired"], Json::array({"clip"}));
        break;
      }
    }
    const Json paused = client.command({{"command", "pause"}});
    QCOMPARE(paused["state"].get<std::string>(), std::string("paused"));
    const Json snapshot = client.command({{"command", "snapshot"}});
    QCOMPARE(snapshot["reason"].get<std::string>(),
             std::string("this run has no session to snapshot"));
    QCOMPARE(client.command({{"command", "stop"}})["type"].get<std::string>(), std::string("ack"));
    QVERIFY(program.process.waitForFinished(30000));
    QCOMPARE(program.process.exitCode(), 0);
    QVERIFY(program.process.readAllStandardOutput().contains("stopped by a client"));
  }

  void killedRunnerIsReportedAtOnce() {
    Client client;
    client.connect(runner_.endpoint);
    QVERIFY(until(client, "step"));
    ::kill(static_cast<pid_t>(runner_.process.processId()), SIGKILL);
    const auto killed = Clock::now();
    bool reported = false;
    try {
      while (Clock::now() - killed < std::chrono::seconds(5))
        client.next(0.1);
    } catch (const Disconnected& e) {
      reported = true;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
    QVERIFY(reported);
    QVERIFY2(seconds < 1.0, qPrintable(QString("reported after %1 s").arg(seconds)));
    runner_.process.waitForFinished(5000);
  }

 private:
  QTemporaryDir dir_;
  QString session_, socket_;
  Runner runner_;
};

SYMTUNE_TEST_MAIN_CORE(TestAttach)
#include "tst_attach.moc"
