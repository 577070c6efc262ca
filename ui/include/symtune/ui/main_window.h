#pragma once
// The studio's main window: the Graph panel in the centre (forward and backward views with live
// overlays), and docks that remember their layout — Live charts, Rules, Node inspector, Session.
// It opens sessions, starts them (symtune-runner, attached), attaches to running processes, and
// says at once when the run it follows ends.

#include <QJsonObject>
#include <QMainWindow>
#include <QMap>
#include <QPointer>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <memory>

#include "symtune/core/attach_messages.h"
#include "symtune/core/attach_protocol.h"
#include "symtune/core/graph.h"
#include "symtune/graphview/overlay.h"

class QDockWidget;
class QLabel;
class QMenu;
class QTreeView;

namespace symtune::ui {

class AttachConnection;
class BindingsDock;
class GraphPanel;
class LiveCharts;
class NodeInspector;
class ControlDock;
class RematDock;
class RulesDock;
class RunHistoryModel;
class RunnerLauncher;
class SessionModel;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Loads and shows a session, and draws its model's graph (symtune-runner reads it). On failure
  // leaves the current session as it was, shows the reason in the status bar and in *error,
  // emits sessionFailed and returns false.
  bool openSession(const QString& path, QString* error = nullptr);
  // Starts a session: writes it into a fresh run folder, launches symtune-runner on it and
  // attaches. `samplingEvery`: per-node statistics every N steps (0: off). False (and *error)
  // when the session does not check or the runner cannot start; runStarted() or runFailed()
  // follows otherwise.
  bool startSession(const QJsonObject& session, int samplingEvery = 5, QString* error = nullptr);
  // Starts the open session file (Run ▸ Start), in `runFolder` (a fresh run folder when empty).
  bool startOpenSession(QString* error = nullptr, const QString& runFolder = {});

  // File ▸ Save Session As without its dialog: the attached run's session as it stands (rules
  // included; written when the run answers) while the open session is the run's, else the open
  // session file's.
  void saveSessionTo(const QString& path);

  // Attaches to a running process (symtune-runner --listen, or any attachable program).
  void attachTo(const QString& endpoint, const QString& token = {});
  // The status bar's lasting line: the session loaded, the attached run's step and loss, how it
  // ended (Note [The status line and notices]; a notice covers it for a few seconds).
  const QString& status() const { return status_; }
  bool isAttached() const;
  const QString& sessionPath() const { return sessionPath_; }  // the open session file
  const QString& runState() const { return runState_; }

  // Commands to the attached run (docs/protocol.md); each returns the command's id, 0 when no
  // run is attached. The answer comes back as commandAnswered().
  int sendCommand(const attach::Command& command);
  int pauseRun() { return sendCommand(attach::Command::named("pause")); }
  int resumeRun() { return sendCommand(attach::Command::named("resume")); }
  int stopRun() { return sendCommand(attach::Command::named("stop")); }
  int setSampling(int every) { return sendCommand(attach::Command::setSampling(every)); }

  SessionModel* sessionModel() const { return sessionModel_; }
  GraphPanel* graphPanel() const { return graphPanel_; }
  LiveCharts* liveCharts() const { return charts_; }
  RulesDock* rulesDock() const { return rules_; }
  BindingsDock* bindingsDock() const { return bindings_; }
  RematDock* rematDock() const { return remat_; }
  ControlDock* controlDock() const { return control_; }
  NodeInspector* nodeInspector() const { return inspector_; }
  RunHistoryModel* currentRun() const { return currentRun_; }
  QDockWidget* dock(const QString& objectName) const;
  QStringList recentSessions() const;
  qint64 launchedRunnerPid() const;

 Q_SIGNALS:
  void sessionOpened(const QString& path);
  void sessionFailed(const QString& message);
  void runStarted(const QString& endpoint);  // a started session's runner is listening
  void runFailed(const QString& message);    // it stopped before it listened
  void attached();
  void attachEnded(const QString& reason);
  void graphShown();
  void commandAnswered(int id, const symtune::attach::ReplyMessage& reply);

 protected:
  void closeEvent(class QCloseEvent* event) override;

 private:
  void buildMenus();
  QDockWidget* addDock(const QString& title, const QString& objectName, QWidget* content,
                       Qt::DockWidgetArea area);
  void onMessage(const attach::ServerMessage& message);
  void onCommandAnswered(int id, const attach::ReplyMessage& reply);
  void showGraph(const attach::GraphMessage& graph);
  void loadGraphOf(const QString& sessionPath);
  void stopGraphPreview();
  // Whether `endpoint` is the run this studio launched last.
  bool launchedHere(const QString& endpoint) const;
  void setStatus(const QString& text);
  void showRunSession(const attach::HelloMessage& hello);
  void forgetSnapshots(const QString& why);
  QString whyNotStart() const;
  void setConnection(const QString& text, bool attached);
  void rememberRecent(const QString& path);
  void refreshRecentMenu();
  void chooseSession();
  void chooseNewSession();
  void chooseAttach();
  void chooseExportGraph();
  void chooseSaveSession();
  // Answers the commands still waiting for the run attached until now, `why` they never will be.
  void forgetCommands(const QString& why);
  void chooseSampling();
  void showAbout();

  AttachConnection* attach_ = nullptr;
  RunnerLauncher* launcher_ = nullptr;
  QString status_, runName_, runState_, sessionPath_;
  // The open session when the run attached (its own, or none): another opened since is not it.
  QString runSessionPath_;
  // The endpoint attached to last; empty while attaching (and before). The token given for the
  // endpoint opened last, and the run attached before it (with its token), to go back to should
  // that one not answer.
  QString attachedEndpoint_, tokenNow_, backEndpoint_, backToken_;
  int samplingOnAttach_ = -1;  // sent once the launched run is attached; -1: leave the run's
  // What set_sampling this studio last had acknowledged, per endpoint: sent again when it attaches
  // there again (a run samples nothing while no client is attached).
  QMap<QString, int> samplingOf_;
  // The commands sent and not answered, by id: the name says which dock hears the answer, the
  // rule which row a refused toggle_rule puts back.
  struct Pending {
    QString name, rule;
  };
  QMap<int, Pending> pending_;
  // Save Session As on an attached run: snapshot command id → the file it goes to, and the run's
  // session file its relative paths are relative to (empty: unknown).
  struct Snapshot {
    QString path, origin;
  };
  QMap<int, Snapshot> snapshots_;
  QPointer<QProcess> graphProcess_;  // `symtune-runner graph` reading the open session's graph

  GraphPanel* graphPanel_ = nullptr;
  LiveCharts* charts_ = nullptr;
  RulesDock* rules_ = nullptr;
  BindingsDock* bindings_ = nullptr;
  RematDock* remat_ = nullptr;
  ControlDock* control_ = nullptr;
  NodeInspector* inspector_ = nullptr;
  RunHistoryModel* currentRun_ = nullptr;
  SessionModel* sessionModel_ = nullptr;
  QTreeView* sessionView_ = nullptr;
  QLabel* runStateLabel_ = nullptr;
  QLabel* connectionLabel_ = nullptr;
  QLabel* statusLabel_ = nullptr;
  QMenu* recentMenu_ = nullptr;
};

}  // namespace symtune::ui
