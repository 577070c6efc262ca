#include "symtune/ui/main_window.h"

#include <algorithm>
#include <cmath>

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QInputDialog>
#include <QJsonDocument>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProcess>
#include <QScreen>
#include <QSettings>
#include <QStatusBar>
#include <QTimer>
#include <QTreeView>
#include <QVBoxLayout>

#include "symtune/core/session.h"
#include "symtune/core/version.h"
#include "symtune/graphview/graph_model.h"
#include "symtune/ui/attach_connection.h"
#include "symtune/ui/binding_table_model.h"
#include "symtune/ui/bindings_dock.h"
#include "symtune/ui/control_dock.h"
#include "symtune/ui/control_log_model.h"
#include "symtune/ui/graph_panel.h"
#include "symtune/ui/live_charts.h"
#include "symtune/ui/new_session_dialog.h"
#include "symtune/ui/node_inspector.h"
#include "symtune/ui/node_inspector_model.h"
#include "symtune/ui/remat_dock.h"
#include "symtune/ui/remat_plan_model.h"
#include "symtune/ui/rule_editor.h"
#include "symtune/ui/rule_list_model.h"
#include "symtune/ui/rules_dock.h"
#include "symtune/ui/run_history_model.h"
#include "symtune/ui/runner_launcher.h"
#include "symtune/ui/session_model.h"
#include "write_file.h"

namespace symtune::ui {

namespace {

constexpr int kRecentSessions = 8;

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Symtune"));
  if (const QScreen* shown = screen()) {
    const QSize available = shown->availableGeometry().size();
    resize(std::max(960, available.width() * 9 / 10), std::max(640, available.height() * 9 / 10));
  }
  setDockNestingEnabled(true);

  graphPanel_ = new GraphPanel(this);
  setCentralWidget(graphPanel_);

  charts_ = new LiveCharts(this);
  addDock(tr("Live charts"), "chartsDock", charts_, Qt::BottomDockWidgetArea);
  rules_ = new RulesDock(this);
  addDock(tr("Rules"), "rulesDock", rules_, Qt::RightDockWidgetArea);
  inspector_ = new NodeInspector(this);
  addDock(tr("Node inspector"), "inspectorDock", inspector_, Qt::RightDockWidgetArea);
  bindings_ = new BindingsDock(this);
  tabifyDockWidget(dock("rulesDock"),
                   addDock(tr("Bindings"), "bindingsDock", bindings_, Qt::RightDockWidgetArea));
  remat_ = new RematDock(this);
  tabifyDockWidget(dock("bindingsDock"),
                   addDock(tr("Memory budget"), "rematDock", remat_, Qt::RightDockWidgetArea));
  control_ = new ControlDock(this);
  tabifyDockWidget(dock("rematDock"),
                   addDock(tr("Controller"), "controlDock", control_, Qt::RightDockWidgetArea));
  dock("rulesDock")->raise();

  sessionModel_ = new SessionModel(this);
  auto* sessionPane = new QWidget(this);
  auto* sessionLayout = new QVBoxLayout(sessionPane);
  sessionLayout->setContentsMargins(4, 4, 4, 4);
  runStateLabel_ = new QLabel(tr("No run"), sessionPane);
  runStateLabel_->setObjectName(QStringLiteral("runState"));
  runStateLabel_->setWordWrap(true);
  runStateLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  sessionView_ = new QTreeView(sessionPane);
  sessionView_->setModel(sessionModel_);
  sessionView_->setUniformRowHeights(true);
  sessionView_->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  sessionLayout->addWidget(runStateLabel_);
  sessionLayout->addWidget(sessionView_, 1);
  addDock(tr("Session"), "sessionDock", sessionPane, Qt::LeftDockWidgetArea);

  // Note [The status line and notices]
  // The status bar's left holds the lasting status (the session loaded, the run's step and loss);
  // a notice (a validation result, an answer to a command, a remat note) covers it for a few
  // seconds and then goes, so that the run's next step does not wipe it.
  statusLabel_ = new QLabel(this);
  statusLabel_->setObjectName(QStringLiteral("statusLine"));
  statusLabel_->setContentsMargins(2, 0, 2, 0);
  statusBar()->addWidget(statusLabel_, 1);
  connectionLabel_ = new QLabel(tr("Not attached"), this);
  connectionLabel_->setContentsMargins(8, 0, 8, 0);
  statusBar()->addPermanentWidget(connectionLabel_);
  setStatus(tr("No session"));

  connect(graphPanel_, &GraphPanel::nodeSelected, inspector_, &NodeInspector::showNode);
  connect(graphPanel_, &GraphPanel::statusMessage, this,
          [this](const QString& message) { statusBar()->showMessage(message, 8000); });
  connect(bindings_, &BindingsDock::siteSelected, graphPanel_, &GraphPanel::showForwardNode);
  connect(remat_, &RematDock::unitSelected, graphPanel_, &GraphPanel::showForwardNode);
  connect(remat_, &RematDock::budgetRequested, this, [this](RematDock::Unit unit, double value) {
    sendCommand(unit == RematDock::Unit::Megabytes
                    ? attach::Command::setBudget(value, std::nullopt)
                    : attach::Command::setBudget(std::nullopt, value));
  });
  connect(control_, &ControlDock::pinRequested, this,
          [this](const QString& knob, std::optional<double> value) {
            sendCommand(attach::Command::pin(knob.toStdString(), value));
          });
  connect(rules_, &RulesDock::toggleRequested, this, [this](const QString& name, bool on) {
    sendCommand(attach::Command::toggleRule(name.toStdString(), on));
  });
  connect(rules_, &RulesDock::applyRequested, this, [this](const QString& source) {
    sendCommand(attach::Command::addRule(source.toStdString()));
  });
  connect(rules_, &RulesDock::removeRequested, this, [this](const QString& name) {
    sendCommand(attach::Command::removeRule(name.toStdString()));
  });

  buildMenus();
  QSettings settings;
  restoreGeometry(settings.value("mainWindow/geometry").toByteArray());
  if (!restoreState(settings.value("mainWindow/state").toByteArray())) {
    // The default layout: the graph gets most of the window, the charts a readable strip.
    resizeDocks({dock("chartsDock")}, {300}, Qt::Vertical);
    resizeDocks({dock("sessionDock"), dock("rulesDock")}, {250, 330}, Qt::Horizontal);
  }
  // The rule editor's text as the last window left it, applied, exported or not.
  const QString draft = settings.value("rules/draft").toString();
  if (!draft.isEmpty()) {
    rules_->editor()->setPlainText(draft);
    rules_->editor()->checkNow();
  }
  // Kept a second after each edit too, not only when the window closes: a studio that crashes
  // or is killed loses no rules.
  auto* keepDraft = new QTimer(this);
  keepDraft->setSingleShot(true);
  keepDraft->setInterval(1000);
  connect(rules_->editor(), &QPlainTextEdit::textChanged, keepDraft, qOverload<>(&QTimer::start));
  connect(keepDraft, &QTimer::timeout, this,
          [this] { QSettings().setValue("rules/draft", rules_->editor()->toPlainText()); });
}

MainWindow::~MainWindow() {
  // A graph still being read by a runner is not waited for.
  for (QProcess* p : findChildren<QProcess*>()) {
    p->disconnect(this);
    p->kill();
    p->waitForFinished(1000);
  }
}

QDockWidget* MainWindow::addDock(const QString& title, const QString& objectName, QWidget* content,
                                 Qt::DockWidgetArea area) {
  auto* dock = new QDockWidget(title, this);
  dock->setObjectName(objectName);  // restoreState() finds docks by name
  dock->setWidget(content);
  addDockWidget(area, dock);
  return dock;
}

QDockWidget* MainWindow::dock(const QString& objectName) const {
  return findChild<QDockWidget*>(objectName);
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&New Session…"), QKeySequence::New, this, &MainWindow::chooseNewSession);
  file->addAction(tr("&Open Session…"), QKeySequence::Open, this, &MainWindow::chooseSession);
  recentMenu_ = file->addMenu(tr("Open &Recent"));
  refreshRecentMenu();
  file->addAction(tr("&Save Session As…"), QKeySequence::SaveAs, this,
                  &MainWindow::chooseSaveSession);
  file->addSeparator();
  file->addAction(tr("&Attach to Run…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_A), this,
                  &MainWindow::chooseAttach);
  file->addAction(tr("&Export Graph…"), QKeySequence(Qt::CTRL | Qt::Key_E), this,
                  &MainWindow::chooseExportGraph);
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  view->addAction(tr("&Find in Graph"), QKeySequence::Find, graphPanel_, &GraphPanel::focusSearch);
  view->addAction(tr("Zoom to &Fit"), QKeySequence(Qt::CTRL | Qt::Key_0), graphPanel_,
                  &GraphPanel::zoomToFit);
  QMenu* overlays = view->addMenu(tr("&Overlay"));
  auto* overlayGroup = new QActionGroup(this);
  int key = Qt::Key_1;
  for (graphview::Overlay o : graphview::kOverlays) {
    QAction* a = overlays->addAction(graphview::overlayName(o));
    a->setCheckable(true);
    a->setChecked(o == graphPanel_->overlay());
    a->setShortcut(QKeySequence(Qt::CTRL | static_cast<Qt::Key>(key++)));
    overlayGroup->addAction(a);
    connect(a, &QAction::triggered, this, [this, o] { graphPanel_->setOverlay(o); });
    connect(graphPanel_, &GraphPanel::overlayChanged, a,
            [a, o](graphview::Overlay now) { a->setChecked(now == o); });
  }
  view->addSeparator();
  for (QDockWidget* d : findChildren<QDockWidget*>())
    view->addAction(d->toggleViewAction());

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(tr("&Start Session"), QKeySequence(Qt::Key_F5), this, [this] {
    QString error;
    if (isAttached() && runState_ == "paused")
      resumeRun();
    else if (!startOpenSession(&error))
      QMessageBox::warning(this, tr("Cannot start the session"), error);
  });
  run->addAction(tr("&Pause"), QKeySequence(Qt::Key_F6), this, [this] { pauseRun(); });
  run->addAction(tr("&Resume"), QKeySequence(Qt::SHIFT | Qt::Key_F6), this,
                 [this] { resumeRun(); });
  run->addAction(tr("S&top"), QKeySequence(Qt::SHIFT | Qt::Key_F5), this, [this] { stopRun(); });
  run->addSeparator();
  run->addAction(tr("Node &Statistics…"), this, &MainWindow::chooseSampling);

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Symtune"), this, &MainWindow::showAbout);
}

// ---- sessions -------------------------------------------------------------------------------

bool MainWindow::openSession(const QString& path, QString* error) {
  try {
    const Session session = loadSession(path.toStdString());
    sessionModel_->setSession(session);
    sessionView_->expandAll();
    sessionPath_ = QFileInfo(path).absoluteFilePath();
    setWindowTitle(tr("%1 — Symtune").arg(QString::fromStdString(session.name)));
    setStatus(tr("Session %1 loaded; Run ▸ Start (F5) trains it").arg(path));
    rememberRecent(sessionPath_);
    loadGraphOf(sessionPath_);
    Q_EMIT sessionOpened(path);
    return true;
  } catch (const SessionError& e) {
    const QString message = QString::fromStdString(e.what());
    setStatus(message);
    if (error != nullptr)
      *error = message;
    Q_EMIT sessionFailed(message);
    return false;
  }
}

// The graph of a session that is not running: the runner builds the model and SyMuGen reads it
// (`symtune-runner graph SESSION`), in the background.
void MainWindow::loadGraphOf(const QString& sessionPath) {
  stopGraphPreview();  // an earlier session's, still building its model: not waited for
  auto* process = new QProcess(this);
  graphProcess_ = process;
  connect(process, &QProcess::errorOccurred, this, [this, process](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart)
      return;  // a crash or a kill ends in finished() too
    process->deleteLater();
    setStatus(tr("No graph for this session: cannot start %1: %2")
                  .arg(process->program(), process->errorString()));
  });
  connect(process, &QProcess::finished, this, [this, process, sessionPath](int code) {
    process->deleteLater();
    // Another session, or a live run's graph, came meanwhile. A run that has ended sends no
    // graph: a session opened after it shows its own (until 2026-12-07 it kept the run's).
    const bool live = isAttached() && runState_ != "finished" && runState_ != "stopped";
    if (sessionPath != sessionPath_ || live)
      return;
    // The overlays of a run that has ended are not this session's.
    graphPanel_->clearRunFigures();
    if (code == 0) {
      attach::GraphMessage graph;
      try {
        graph.graph = std::make_shared<const Graph>(
            graphFromJson(process->readAllStandardOutput().toStdString()));
      } catch (const GraphFormatError& e) {
        graph.error = std::string("the graph cannot be read: ") + e.what();
      }
      showGraph(graph);
    } else
      setStatus(tr("No graph for this session: %1")
                    .arg(QString::fromUtf8(process->readAllStandardError()).trimmed()));
  });
  process->start(
      RunnerLauncher::runnerPath(),
      {QStringLiteral("graph"), sessionPath, QStringLiteral("--format"), QStringLiteral("json")});
}

// The session's run sends its own graph: a preview still building the model beside it would hold
// a second copy of the model and its data (on the session's device too) while the run's first
// steps are timed.
void MainWindow::stopGraphPreview() {
  if (graphProcess_ == nullptr)
    return;
  graphProcess_->disconnect(this);
  graphProcess_->kill();
  graphProcess_->deleteLater();
}

// Starting another run while one starts or trains would leave that one without a studio: it
// would train to its end unseen and linger ten minutes after. Stop it first.
QString MainWindow::whyNotStart() const {
  if (launcher_ != nullptr && launcher_->starting())
    return tr("symtune-runner is still starting %1: it is attached as soon as it listens")
        .arg(QFileInfo(sessionPath_).fileName());
  if (isAttached() && (runState_ == "training" || runState_ == "paused"))
    return tr("%1 is %2: stop it first (Run ▸ Stop, Shift+F5)").arg(runName_, runState_);
  return {};
}

bool MainWindow::startSession(const QJsonObject& session, int samplingEvery, QString* error) {
  QString problem = whyNotStart();
  if (!problem.isEmpty()) {
    if (error != nullptr)
      *error = problem;
    return false;
  }
  const QString name = session["name"].toString();
  const QString folder = RunnerLauncher::newRunFolder(name);
  const QString path = folder + QStringLiteral("/session.json");
  if (detail::writeFile(path, QJsonDocument(session).toJson(), &problem)) {
    QString openError;
    if (!openSession(path, &openError))
      problem = openError;
  }
  if (!problem.isEmpty()) {
    if (error != nullptr)
      *error = problem;
    return false;
  }
  samplingOnAttach_ = samplingEvery;  // sent once the launched run is attached
  return startOpenSession(error, folder);
}

bool MainWindow::startOpenSession(QString* error, const QString& runFolder) {
  if (sessionPath_.isEmpty()) {
    if (error != nullptr)
      *error = tr("Open a session first (Ctrl+O), or start a new one (Ctrl+N)");
    samplingOnAttach_ = -1;
    return false;
  }
  if (const QString busy = whyNotStart(); !busy.isEmpty()) {
    if (error != nullptr)
      *error = busy;
    samplingOnAttach_ = -1;
    return false;
  }
  if (launcher_ == nullptr) {
    launcher_ = new RunnerLauncher(this);
    connect(launcher_, &RunnerLauncher::listening, this, [this](const QString& endpoint) {
      attachTo(endpoint);
      Q_EMIT runStarted(endpoint);
    });
    connect(launcher_, &RunnerLauncher::failed, this, [this](const QString& message) {
      samplingOnAttach_ = -1;  // the launch's, for no other run
      setStatus(message);
      setConnection(tr("Not attached"), false);
      if (!isAttached() && !sessionPath_.isEmpty())
        loadGraphOf(sessionPath_);  // the preview stopped at the launch
      Q_EMIT runFailed(message);
    });
  }
  if (samplingOnAttach_ < 0)
    samplingOnAttach_ = QSettings().value("run/samplingEvery", 5).toInt();
  QString problem;
  if (!launcher_->start(sessionPath_, &problem, runFolder)) {
    samplingOnAttach_ = -1;
    setStatus(problem);
    if (error != nullptr)
      *error = problem;
    return false;
  }
  stopGraphPreview();
  setStatus(tr("Starting %1 (symtune-runner; log and report in %2)…")
                .arg(QFileInfo(sessionPath_).fileName(), launcher_->runFolder()));
  return true;
}

qint64 MainWindow::launchedRunnerPid() const {
  return launcher_ != nullptr ? launcher_->pid() : 0;
}

void MainWindow::rememberRecent(const QString& path) {
  QSettings settings;
  QStringList recent = settings.value("recentSessions").toStringList();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kRecentSessions)
    recent.removeLast();
  settings.setValue("recentSessions", recent);
  refreshRecentMenu();
}

QStringList MainWindow::recentSessions() const {
  return QSettings().value("recentSessions").toStringList();
}

void MainWindow::refreshRecentMenu() {
  if (recentMenu_ == nullptr)
    return;
  recentMenu_->clear();
  const QStringList recent = recentSessions();
  for (const QString& path : recent) {
    recentMenu_->addAction(QFileInfo(path).fileName() + "  —  " + QFileInfo(path).path(), this,
                           [this, path] {
                             QString error;
                             if (!openSession(path, &error))
                               QMessageBox::warning(this, tr("Cannot open session"), error);
                           });
  }
  recentMenu_->setEnabled(!recent.isEmpty());
}

// ---- dialogs ----------------------------------------------------------------------------------

void MainWindow::chooseSession() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open Session"), QString(),
                                                    tr("Symtune sessions (*.json)"));
  if (path.isEmpty())
    return;
  QString error;
  if (!openSession(path, &error)) {
    QMessageBox::warning(this, tr("Cannot open session"), error);
  }
}

void MainWindow::chooseNewSession() {
  NewSessionDialog dialog(this);
  dialog.loadRules();
  // A start refused (a run already training) opens the form again as it was filled in.
  while (dialog.exec() == QDialog::Accepted) {
    QString error;
    if (startSession(dialog.session(), dialog.samplingEvery(), &error))
      return;
    QMessageBox::warning(this, tr("Cannot start the session"), error);
  }
}

void MainWindow::chooseAttach() {
  if (launcher_ != nullptr && launcher_->starting()) {
    // The run starting is attached to as soon as it listens, which would leave this one.
    QMessageBox::information(this, tr("Attach to Run"), whyNotStart());
    return;
  }
  bool ok = false;
  const QString endpoint = QInputDialog::getText(
      this, tr("Attach to Run"),
      tr("Endpoint (unix:/path/to.sock or tcp:127.0.0.1:PORT), as the run printed it:"),
      QLineEdit::Normal, QString(), &ok);
  if (!ok || endpoint.trimmed().isEmpty())
    return;
  QString token;
  if (endpoint.trimmed().startsWith("tcp:")) {
    token = QInputDialog::getText(this, tr("Attach to Run"), tr("Token (the run printed it):"),
                                  QLineEdit::Normal, QString(), &ok);
    if (!ok)
      return;
  }
  attachTo(endpoint.trimmed(), token.trimmed());
}

void MainWindow::chooseExportGraph() {
  if (!graphPanel_->graph()) {
    statusBar()->showMessage(tr("There is no graph to export"), 5000);
    return;
  }
  const QString path = QFileDialog::getSaveFileName(this, tr("Export Graph"), "graph.svg",
                                                    tr("SVG (*.svg);;PNG (*.png)"));
  if (path.isEmpty())
    return;
  const QString error = graphPanel_->exportTo(path);
  if (!error.isEmpty())
    QMessageBox::warning(this, tr("Cannot export the graph"), error);
  else
    statusBar()->showMessage(tr("Exported the graph to %1").arg(path), 5000);
}

void MainWindow::chooseSaveSession() {
  if (!isAttached() && sessionPath_.isEmpty()) {
    statusBar()->showMessage(tr("No session to save"), 5000);
    return;
  }
  const QString path = QFileDialog::getSaveFileName(this, tr("Save Session As"), "session.json",
                                                    tr("Symtune sessions (*.json)"));
  if (!path.isEmpty())
    saveSessionTo(path);
}

void MainWindow::saveSessionTo(const QString& path) {
  // The run's session as it stands, rules included, while the session shown is the run's; a
  // session opened since is saved as its file says (until 2026-12-07 it was the run's that was
  // written under the other's name).
  if (isAttached() && sessionPath_ == runSessionPath_) {
    if (const int id = sendCommand(attach::Command::named("snapshot")); id != 0)
      snapshots_.insert(id, {path, runSessionPath_});
    return;
  }
  if (sessionPath_.isEmpty()) {
    statusBar()->showMessage(tr("No session to save"), 5000);
    return;
  }
  QString error;
  try {
    Session session = loadSession(sessionPath_.toStdString());
    session.path = path.toStdString();  // its paths relative to where it is written
    if (detail::writeFile(path, QByteArray::fromStdString(sessionJson(session)), &error))
      statusBar()->showMessage(tr("Saved the session to %1").arg(path), 5000);
  } catch (const SessionError& e) {
    error = QString::fromStdString(e.what());
  }
  if (!error.isEmpty())
    QMessageBox::warning(this, tr("Cannot save the session"), error);
}

// Save Session As requests the run never answered: said, not dropped in silence.
void MainWindow::forgetSnapshots(const QString& why) {
  if (snapshots_.isEmpty())
    return;
  QStringList paths;
  for (const Snapshot& s : snapshots_)
    paths << s.path;
  statusBar()->showMessage(
      tr("The run's session was not saved to %1: %2").arg(paths.join(", "), why), 15000);
  snapshots_.clear();
}

void MainWindow::chooseSampling() {
  bool ok = false;
  QSettings settings;
  const int every = QInputDialog::getInt(
      this, tr("Node Statistics"),
      tr("Per-node latency and memory every N steps (0: off).\nThe graph's overlays show the "
         "latest."),
      settings.value("run/samplingEvery", 5).toInt(), 0, 100000, 1, &ok);
  if (!ok)
    return;
  settings.setValue("run/samplingEvery", every);
  if (isAttached())
    setSampling(every);
}

void MainWindow::showAbout() {
  QMessageBox::about(this, tr("About Symtune"),
                     tr("<b>Symtune %1</b><p>An optimization studio for LibTorch training.</p>")
                         .arg(QString::fromLatin1(kVersion)));
}

void MainWindow::closeEvent(QCloseEvent* event) {
  // Note [Runs outlive the studio]: a run this window started goes on; File ▸ Attach finds it.
  QSettings settings;
  settings.setValue("mainWindow/geometry", saveGeometry());
  settings.setValue("mainWindow/state", saveState());
  settings.setValue("rules/draft", rules_->editor()->toPlainText());  // kept for the next window
  QMainWindow::closeEvent(event);
}

}  // namespace symtune::ui
