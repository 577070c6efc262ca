#pragma once
// Starts symtune-runner on a session file, attachable on a fresh Unix socket, and says where it
// listens. The runner is detached (Note [Runs outlive the studio]): closing the studio never
// stops a run; File ▸ Attach finds it again, Run ▸ Stop ends it.
//
//   auto* launcher = new RunnerLauncher(this);
//   connect(launcher, &RunnerLauncher::listening, this, [this](const QString& endpoint) { ... });
//   launcher->start("/home/me/.local/share/symtune/runs/…/session.json");

#include <QObject>
#include <QString>
#include <QTimer>

namespace symtune::ui {

class RunnerLauncher : public QObject {
  Q_OBJECT

 public:
  explicit RunnerLauncher(QObject* parent = nullptr);
  ~RunnerLauncher() override;

  // $SYMTUNE_RUNNER when set, else symtune-runner next to this program.
  static QString runnerPath();
  // A fresh run folder under the user's data folder (…/symtune/runs/DATE-NAME), created.
  static QString newRunFolder(const QString& name);

  // Starts the runner on `sessionPath` in run folder `folder` (a fresh newRunFolder() when
  // empty): it runs there, its output goes to runner.log and its report to report.json in it —
  // never beside the session file or in the studio's working directory. listening() or failed()
  // follows. False (and `*error`) when the runner cannot be started.
  bool start(const QString& sessionPath, QString* error = nullptr, QString folder = {});
  bool starting() const { return poll_.isActive(); }  // started, not yet listening nor failed
  // How long a runner may take to listen before it is stopped and failed() says so (2 minutes).
  void setPatience(int milliseconds) { patienceMs_ = milliseconds; }
  const QString& runFolder() const { return folder_; }
  qint64 pid() const { return pid_; }
  const QString& logPath() const { return logPath_; }
  const QString& endpoint() const { return endpoint_; }

 Q_SIGNALS:
  void listening(const QString& endpoint);
  // Exited before listening, or was stopped after the patience without listening.
  void failed(const QString& message);

 private:
  void poll();

  QTimer poll_;
  QString folder_, logPath_, endpoint_;
  qint64 pid_ = 0;
  int polls_ = 0;
  int patienceMs_;
};

}  // namespace symtune::ui
