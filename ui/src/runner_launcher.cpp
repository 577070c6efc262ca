#include "symtune/ui/runner_launcher.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>

#include <csignal>

namespace symtune::ui {

namespace {
constexpr int kPollMs = 100;
constexpr int kLingerSeconds = 600;  // Note [Runs outlive the studio]
constexpr int kPatienceMs = 120000;  // a cpu-preset model builds in seconds; a large one, CUDA's
                                     // start-up and a large data set take longer
constexpr int kStopGraceMs = 5000;   // after SIGTERM, before SIGKILL

bool alive(qint64 pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0;
}
}  // namespace

// Note [Runs outlive the studio]
// A crash or a close of the studio never takes a run down (docs/architecture.md, "Processes"). So
// the runner is started detached, in its own session, with its output in a log file that the studio
// polls for the "listening on ENDPOINT" line — a pipe would tie the runner to the studio's life.
// After its last step a runner serves on (the studio can still inspect it) until stopped, or until
// no studio has been attached for kLingerSeconds: a finished run nobody looks at does not stay
// forever.

RunnerLauncher::RunnerLauncher(QObject* parent) : QObject(parent), patienceMs_(kPatienceMs) {
  poll_.setInterval(kPollMs);
  connect(&poll_, &QTimer::timeout, this, &RunnerLauncher::poll);
}

RunnerLauncher::~RunnerLauncher() = default;

QString RunnerLauncher::runnerPath() {
  const QString fromEnvironment = qEnvironmentVariable("SYMTUNE_RUNNER");
  if (!fromEnvironment.isEmpty())
    return fromEnvironment;
  return QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("symtune-runner"));
}

QString RunnerLauncher::newRunFolder(const QString& name) {
  QString safe = name;
  safe.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_.-]+")), QStringLiteral("-"));
  const QString base = QStandardPaths::writableLocation(QStandardPaths::GenericDataLocation) +
                       QStringLiteral("/symtune/runs/") +
                       QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-")) +
                       (safe.isEmpty() ? QStringLiteral("run") : safe);
  QString folder = base;
  for (int n = 2; QFileInfo::exists(folder); ++n)
    folder = base + QStringLiteral("-%1").arg(n);
  QDir().mkpath(folder);
  return folder;
}

bool RunnerLauncher::start(const QString& sessionPath, QString* error, QString folder) {
  const QString runner = runnerPath();
  auto refuse = [&](const QString& message) {
    if (error != nullptr)
      *error = message;
    return false;
  };
  if (!QFileInfo(runner).isExecutable())
    return refuse(tr("symtune-runner was not found at %1 (set SYMTUNE_RUNNER)").arg(runner));
  if (folder.isEmpty())
    folder = newRunFolder(QFileInfo(sessionPath).completeBaseName());
  folder_ = folder;
  logPath_ = QDir(folder).filePath(QStringLiteral("runner.log"));
  endpoint_.clear();
  polls_ = 0;
  QProcess process;
  process.setProgram(runner);
  process.setWorkingDirectory(folder);
  process.setArguments({QFileInfo(sessionPath).absoluteFilePath(), QStringLiteral("--listen"),
                        QString(), QStringLiteral("--linger"), QString::number(kLingerSeconds),
                        QStringLiteral("--report"),
                        QDir(folder).filePath(QStringLiteral("report.json"))});
  process.setStandardOutputFile(logPath_, QIODevice::Append);
  process.setStandardErrorFile(logPath_, QIODevice::Append);
  process.setStandardInputFile(QProcess::nullDevice());
  if (!process.startDetached(&pid_))
    return refuse(tr("cannot start %1: %2").arg(runner, process.errorString()));
  poll_.start();
  return true;
}

void RunnerLauncher::poll() {
  ++polls_;
  QFile log(logPath_);
  QString text;
  if (log.open(QIODevice::ReadOnly))
    text = QString::fromUtf8(log.readAll());
  static const QRegularExpression listeningLine(QStringLiteral("^listening on (\\S+)$"),
                                                QRegularExpression::MultilineOption);
  const auto match = listeningLine.match(text);
  if (match.hasMatch()) {
    poll_.stop();
    endpoint_ = match.captured(1);
    Q_EMIT listening(endpoint_);
    return;
  }
  // Gone before listening: the runner said why on its last line (a bad session, a bad model).
  const bool running = alive(pid_);
  if (!running || polls_ * kPollMs > patienceMs_) {
    poll_.stop();
    const QStringList lines = text.trimmed().split('\n', Qt::SkipEmptyParts);
    const QString last = lines.isEmpty() ? tr("no output") : lines.last();
    if (!running) {
      Q_EMIT failed(tr("symtune-runner stopped: %1").arg(last));
      return;
    }
    // Given up on, it is stopped: left alone it would train unseen, and linger after, while the
    // studio let another run start (its log stays in the run folder).
    const qint64 pid = pid_;
    ::kill(static_cast<pid_t>(pid), SIGTERM);
    QTimer::singleShot(kStopGraceMs, [pid] {
      if (alive(pid))
        ::kill(static_cast<pid_t>(pid), SIGKILL);
    });
    Q_EMIT failed(tr("symtune-runner did not start listening within %1 s, so it was stopped (%2; "
                     "its log: %3)")
                      .arg(patienceMs_ / 1000.0)
                      .arg(last, logPath_));
  }
}

}  // namespace symtune::ui
