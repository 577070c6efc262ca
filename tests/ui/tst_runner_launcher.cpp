// RunnerLauncher against stand-in runners (shell scripts named by SYMTUNE_RUNNER): one that
// listens, one that fails on its session, and one that never listens, which is stopped once the
// launcher's patience runs out rather than left training unseen.

#include <QSignalSpy>
#include <QTemporaryDir>

#include <csignal>

#include "symtune/ui/runner_launcher.h"
#include "test_main.h"

using symtune::ui::RunnerLauncher;

namespace {

// An executable script in `dir` that the launcher starts as its runner.
QString standIn(const QTemporaryDir& dir, const QString& name, const QByteArray& body) {
  const QString path = dir.filePath(name);
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly))
    return {};
  f.write("#!/bin/sh\n" + body);
  f.close();
  f.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  return path;
}

bool alive(qint64 pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0;
}

}  // namespace

class TestRunnerLauncher : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  // Starts the stand-in `script` on an empty session file in a run folder of its own.
  bool start(RunnerLauncher& launcher, const QString& script, const QString& folder) {
    qputenv("SYMTUNE_RUNNER", script.toUtf8());
    QDir().mkpath(folder);
    QString error;
    const bool ok = launcher.start(dir_.filePath("session.json"), &error, folder);
    if (!ok)
      qWarning() << error;
    return ok;
  }

 private Q_SLOTS:
  void saysWhereItListens() {
    RunnerLauncher launcher;
    QSignalSpy listening(&launcher, &RunnerLauncher::listening);
    QVERIFY(start(launcher,
                  standIn(dir_, "listens.sh", "echo 'listening on unix:/tmp/x.sock'\nsleep 30\n"),
                  dir_.filePath("run1")));
    QVERIFY(launcher.starting());
    QVERIFY(listening.wait(10000));
    QCOMPARE(listening.first().at(0).toString(), QString("unix:/tmp/x.sock"));
    QVERIFY(!launcher.starting());
    ::kill(static_cast<pid_t>(launcher.pid()), SIGKILL);
  }

  void saysWhyItStopped() {
    RunnerLauncher launcher;
    QSignalSpy failed(&launcher, &RunnerLauncher::failed);
    QVERIFY(start(launcher,
                  standIn(dir_, "fails.sh", "echo 'symtune: error: no such model' >&2\nexit 2\n"),
                  dir_.filePath("run2")));
    QVERIFY(failed.wait(10000));
    QCOMPARE(failed.first().at(0).toString(),
             QString("symtune-runner stopped: symtune: error: no such model"));
  }

  // A runner that outlasts the patience is stopped: SIGTERM, then SIGKILL for one that ignores
  // it. Before, it was given up on and kept training, and another could be started beside it.
  void stopsARunnerThatNeverListens() {
    RunnerLauncher launcher;
    launcher.setPatience(500);
    QSignalSpy failed(&launcher, &RunnerLauncher::failed);
    QVERIFY(start(launcher,
                  standIn(dir_, "silent.sh",
                          "trap '' TERM\necho 'building the model'\nwhile :; do sleep 0.1; done\n"),
                  dir_.filePath("run3")));
    const qint64 pid = launcher.pid();
    QVERIFY(alive(pid));
    QVERIFY(failed.wait(10000));
    const QString message = failed.first().at(0).toString();
    QVERIFY2(message.startsWith("symtune-runner did not start listening within 0.5 s, so it was "
                                "stopped (building the model; its log: "),
             qPrintable(message));
    QVERIFY(!launcher.starting());
    QTRY_VERIFY_WITH_TIMEOUT(!alive(pid), 15000);
  }
};

SYMTUNE_TEST_MAIN_CORE(TestRunnerLauncher)
#include "tst_runner_launcher.moc"
