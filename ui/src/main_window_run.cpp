// The studio's attached run (docs/studio.md): attaching and going back, what the run's messages
// change in the window, and the commands sent to it with what their answers say.

#include "symtune/ui/main_window.h"

#include <cmath>
#include <exception>
#include <optional>
#include <string>
#include <variant>

#include <QColor>
#include <QFileInfo>
#include <QLabel>
#include <QPalette>
#include <QStatusBar>
#include <QTreeView>

#include "symtune/core/session.h"
#include "symtune/ui/attach_connection.h"
#include "symtune/ui/binding_table_model.h"
#include "symtune/ui/bindings_dock.h"
#include "symtune/ui/control_dock.h"
#include "symtune/ui/control_log_model.h"
#include "symtune/ui/graph_panel.h"
#include "symtune/ui/live_charts.h"
#include "symtune/ui/node_inspector.h"
#include "symtune/ui/node_inspector_model.h"
#include "symtune/ui/remat_dock.h"
#include "symtune/ui/remat_plan_model.h"
#include "symtune/ui/rule_list_model.h"
#include "symtune/ui/rules_dock.h"
#include "symtune/ui/run_history_model.h"
#include "symtune/ui/runner_launcher.h"
#include "symtune/ui/session_model.h"
#include "write_file.h"

namespace symtune::ui {

namespace {

// Note [A snapshot written elsewhere]
// The run writes its session's paths relative to its own session file's folder (sessionJson):
// written unchanged into another folder, they named files that were not there (Save Session As
// of image_classifier.json to ~/x.json then read ~/data/cnn.pt), until 2026-12-07. The session
// is read as the run's, from its file, and written as the copy's, relative to where it goes; as
// it is where the run's file is unknown.
std::optional<std::string> snapshotText(const nlohmann::json& session, const QString& origin,
                                        const QString& path, QString* error) {
  if (origin.isEmpty())
    return session.dump(2) + "\n";
  try {
    Session s = parseSession(session.dump(), origin.toStdString());
    s.path = path.toStdString();
    return sessionJson(s);
  } catch (const SessionError& e) {
    *error = QObject::tr("No snapshot: %1").arg(QString::fromStdString(e.what()));
    return std::nullopt;
  }
}

}  // namespace

namespace {

constexpr int kOverlaidRuns = 4;  // the charts keep this many runs, the newest last

}  // namespace

// The attached run's session in the Session dock (Run ▸ Start starts it again): the file the run
// names when this machine can read it, else none — never the session open before, which is
// another run's.
void MainWindow::showRunSession(const attach::HelloMessage& hello) {
  QString path;
  if (hello.run.is_object() && hello.run.contains("session_path") &&
      hello.run["session_path"].is_string())
    path = QString::fromStdString(hello.run["session_path"].get<std::string>());
  if (!path.isEmpty() && QFileInfo(path).absoluteFilePath() == sessionPath_)
    return;  // the session this studio started
  if (!path.isEmpty()) {
    try {
      const Session session = loadSession(path.toStdString());
      sessionModel_->setSession(session);
      sessionView_->expandAll();
      sessionPath_ = QFileInfo(path).absoluteFilePath();
      return;
    } catch (const std::exception&) {  // on another machine, gone, or not one this reads
    }
  }
  sessionModel_->clear();
  sessionPath_.clear();
}

bool MainWindow::launchedHere(const QString& endpoint) const {
  return launcher_ != nullptr && !launcher_->endpoint().isEmpty() &&
         launcher_->endpoint() == endpoint;
}

bool MainWindow::isAttached() const {
  return attach_ != nullptr && attach_->isAttached();
}

void MainWindow::attachTo(const QString& endpoint, const QString& token) {
  if (attach_ == nullptr) {
    attach_ = new AttachConnection(this);
    connect(attach_, &AttachConnection::attached, this, [this](const attach::HelloMessage& hello) {
      runName_ = QString::fromStdString(hello.session);
      runState_.clear();
      setWindowTitle(tr("Symtune — %1").arg(runName_));
      setStatus(tr("Attached to %1 (%2) at %3")
                    .arg(runName_, QString::fromStdString(hello.model), attach_->endpoint()));
      setConnection(tr("● Attached: %1").arg(runName_), true);
      // A run of its own in the charts, the earlier ones kept for comparison.
      auto* history = new RunHistoryModel(RunHistoryModel::kDefaultCapacity, this);
      history->setRunName(runName_);
      charts_->addRun(history);
      currentRun_ = history;
      QList<RunHistoryModel*> runs =
          findChildren<RunHistoryModel*>(QString(), Qt::FindDirectChildrenOnly);
      for (int i = 0; i + kOverlaidRuns < runs.size(); ++i)
        delete runs[i];  // the charts forget a destroyed run themselves
      // What the docks showed was the last run's: the new run sends its own rules, table, plan
      // and control block when it has them, and a run without them sends nothing.
      showRunSession(hello);
      runSessionPath_ = sessionPath_;
      rules_->model()->clear();
      rules_->setRunAttached(true);
      bindings_->model()->setTable(nullptr);
      graphPanel_->setBindings(nullptr);
      remat_->model()->setPlan(std::nullopt);
      graphPanel_->setRemat(nullptr);
      remat_->setRunAttached(true);
      control_->model()->clear();  // the new run says whether it has a control block
      control_->setRunAttached(true);
      attachedEndpoint_ = attach_->endpoint();
      if (samplingOnAttach_ >= 0 && launchedHere(attachedEndpoint_)) {
        setSampling(samplingOnAttach_);
        samplingOnAttach_ = -1;
      } else if (samplingOf_.contains(attachedEndpoint_)) {
        // A run samples nothing while no client is attached (docs/protocol.md): attached again
        // (back after a failed attach, or a run left and come back to), it is asked again, as
        // this studio asked it before. Until 2026-12-07 the overlays stayed blank.
        setSampling(samplingOf_.value(attachedEndpoint_));
      }
      Q_EMIT attached();
    });
    connect(attach_, &AttachConnection::messageReceived, this, &MainWindow::onMessage);
    connect(attach_, &AttachConnection::commandAnswered, this, &MainWindow::onCommandAnswered);
    connect(attach_, &AttachConnection::disconnected, this, [this](const QString& reason) {
      // A run this studio launched says why it ended in its log and report.
      const QString where = launchedHere(attach_->endpoint())
                                ? tr(" (its log and report: %1)").arg(launcher_->runFolder())
                                : QString();
      if (attachedEndpoint_ != attach_->endpoint()) {
        // Never attached. Opening it closed the run attached before, if one was: back to that.
        const QString failure =
            tr("Cannot attach to %1: %2%3").arg(attach_->endpoint(), reason, where);
        setConnection(tr("Not attached"), false);
        runStateLabel_->setText(tr("Not attached"));
        if (!backEndpoint_.isEmpty()) {
          const QString back = backEndpoint_, backToken = backToken_;
          attachTo(back, backToken);  // forgets where to go back to: one try
          setStatus(tr("%1; attaching to %2 again").arg(failure, back));
          statusBar()->showMessage(failure, 10000);
        } else {
          setStatus(failure);
        }
      } else {
        setStatus(tr("The run ended: %1%2").arg(reason, where));
        setConnection(tr("Run ended"), false);
        runStateLabel_->setText(tr("%1 — ended: %2").arg(runName_, reason));
      }
      rules_->setRunAttached(false);
      remat_->setRunAttached(false);
      control_->setRunAttached(false);
      forgetCommands(tr("the run ended first"));
      Q_EMIT attachEnded(reason);
    });
  }
  setStatus(tr("Attaching to %1…").arg(endpoint));
  setConnection(tr("Attaching…"), false);
  // The run attached now, to go back to should this one not answer.
  const bool leaving = isAttached() && attachedEndpoint_ != endpoint;
  backEndpoint_ = leaving ? attachedEndpoint_ : QString();
  backToken_ = leaving ? tokenNow_ : QString();
  tokenNow_ = token;
  attachedEndpoint_.clear();
  // Until the new run has said hello, the docks show the run before: nothing in them may be sent
  // (a budget or a pin meant for the one went to the other), and what they asked it is answered.
  rules_->setRunAttached(false);
  remat_->setRunAttached(false);
  control_->setRunAttached(false);
  forgetCommands(tr("another run was attached first"));
  attach_->open(endpoint, token);
}

void MainWindow::onMessage(const attach::ServerMessage& message) {
  if (const auto* step = std::get_if<attach::StepMessage>(&message)) {
    if (currentRun_ != nullptr)
      currentRun_->appendStep(*step);
    remat_->model()->addStep(*step);
    control_->model()->addStep(*step);
    if (step->remat && !step->remat->note.empty())
      statusBar()->showMessage(QString::fromStdString(step->remat->note), 8000);
    const double peak = step->features[Feature::PeakMemory];
    if (std::isfinite(peak))
      graphPanel_->setPeakMemory(peak);
    const QString state = runState_.isEmpty() || runState_ == "training"
                              ? QString()
                              : QStringLiteral(" (%1)").arg(runState_);
    setStatus(tr("%1: step %2, loss %3%4")
                  .arg(runName_)
                  .arg(step->step)
                  .arg(step->loss, 0, 'g', 5)
                  .arg(state));
  } else if (const auto* nodes = std::get_if<attach::NodesMessage>(&message)) {
    graphPanel_->addNodeStats(*nodes);
    inspector_->model()->addNodeStats(*nodes);
  } else if (const auto* graph = std::get_if<attach::GraphMessage>(&message)) {
    showGraph(*graph);
  } else if (const auto* rules = std::get_if<attach::RulesMessage>(&message)) {
    rules_->model()->setRules(rules->rules);
  } else if (const auto* bindings = std::get_if<attach::BindingsMessage>(&message)) {
    if (!bindings->error.empty())
      statusBar()->showMessage(QString::fromStdString(bindings->error), 8000);
    bindings_->model()->setTable(bindings->table);
    graphPanel_->setBindings(bindings->table.get());
  } else if (const auto* remat = std::get_if<attach::RematMessage>(&message)) {
    remat_->model()->setPlan(*remat);
    graphPanel_->setRemat(&*remat_->model()->plan());
  } else if (const auto* control = std::get_if<attach::ControlMessage>(&message)) {
    control_->model()->setControl(*control);
  } else if (const auto* state = std::get_if<attach::StateMessage>(&message)) {
    runState_ = QString::fromStdString(state->state);
    runStateLabel_->setText(tr("%1 — %2").arg(runName_, runState_));
  } else if (const auto* validation = std::get_if<attach::ValidationMessage>(&message)) {
    if (currentRun_ != nullptr)
      currentRun_->addValidation(*validation);
    QString text = tr("%1: validation after step %2: loss %3")
                       .arg(runName_)
                       .arg(validation->step)
                       .arg(validation->loss, 0, 'g', 5);
    if (validation->top1)
      text += tr(", top-1 %1%").arg(100 * *validation->top1, 0, 'f', 1);
    if (validation->top5)
      text += tr(", top-5 %1%").arg(100 * *validation->top5, 0, 'f', 1);
    statusBar()->showMessage(text + tr(" (%1 samples)").arg(validation->samples), 15000);
  } else if (const auto* dropped = std::get_if<attach::DroppedMessage>(&message)) {
    statusBar()->showMessage(
        tr("%1 per-node updates were dropped: the studio fell behind").arg(dropped->nodes), 5000);
  } else if (const auto* reply = std::get_if<attach::ReplyMessage>(&message)) {
    if (!reply->ok)  // an error that answers no command
      statusBar()->showMessage(tr("The run says: %1").arg(QString::fromStdString(reply->reason)),
                               8000);
  }
}

void MainWindow::showGraph(const attach::GraphMessage& graph) {
  if (!graph.graph) {  // not the graph shown before: that one is another model's, or none
    inspector_->model()->setGraph(nullptr);
    graphPanel_->setGraph(nullptr);
    setStatus(tr("No graph: %1").arg(QString::fromStdString(graph.error)));
    return;
  }
  inspector_->model()->setGraph(graph.graph);
  graphPanel_->setGraph(graph.graph);
  Q_EMIT graphShown();
}

void MainWindow::forgetCommands(const QString& why) {
  for (auto it = pending_.cbegin(); it != pending_.cend(); ++it) {
    const QString& name = it.value().name;
    if (name == "set_budget")
      remat_->commandFinished(false, why);
    else if (name == "pin")
      control_->commandFinished(false, why);
    else if (name == "toggle_rule" || name == "add_rule" || name == "remove_rule")
      rules_->commandFinished(name, false, why, it.value().rule);
  }
  pending_.clear();  // the commands sent to the run before, unanswered, are not the next run's
  forgetSnapshots(why);
}

int MainWindow::sendCommand(const attach::Command& command) {
  const QString name = QString::fromStdString(command.name);
  const QString rule = QString::fromStdString(command.rule);
  const int id = attach_ != nullptr ? attach_->sendCommand(command) : 0;
  if (id == 0) {
    if (name == "set_budget")
      remat_->commandFinished(false, tr("No run is attached"));
    else if (name == "pin")
      control_->commandFinished(false, tr("No run is attached"));
    else
      rules_->commandFinished(name, false, tr("No run is attached"), rule);
    statusBar()->showMessage(tr("%1: no run is attached").arg(name), 5000);
    return 0;
  }
  pending_.insert(id, {name, rule});
  return id;
}

void MainWindow::onCommandAnswered(int id, const attach::ReplyMessage& reply) {
  const Pending sent = pending_.take(id);
  const QString& name = sent.name;
  const nlohmann::json& result = reply.result;
  QString message = QString::fromStdString(reply.reason);
  if (reply.ok && result.contains("from_step") && result["from_step"].is_number_integer())
    message = tr("Applied from step %1").arg(result["from_step"].get<int64_t>());
  else if (reply.ok && result.contains("state") && result["state"].is_string())
    message = tr("The run is %1").arg(QString::fromStdString(result["state"].get<std::string>()));
  else if (reply.ok && name == "set_sampling" && result.contains("every") &&
           result["every"].is_number_integer()) {
    message = tr("Node statistics every %1 steps").arg(result["every"].get<int64_t>());
    samplingOf_.insert(attachedEndpoint_, static_cast<int>(result["every"].get<int64_t>()));
  }
  if (name == "toggle_rule" || name == "add_rule" || name == "remove_rule") {
    QStringList warnings;
    if (reply.ok && result.contains("warnings") && result["warnings"].is_array()) {
      for (const auto& w : result["warnings"]) {
        if (w.is_string())
          warnings << QString::fromStdString(w.get<std::string>());
      }
    }
    rules_->commandFinished(name, reply.ok, message, sent.rule, warnings);
  }
  if (name == "set_budget")
    remat_->commandFinished(reply.ok, message);
  if (name == "pin")
    control_->commandFinished(reply.ok, message);
  if (snapshots_.contains(id)) {
    const Snapshot snapshot = snapshots_.take(id);
    const QString& path = snapshot.path;
    QString error;
    if (!reply.ok)
      message = tr("No snapshot: %1").arg(message);
    else if (!result.contains("session") || !result["session"].is_object())
      message = tr("No snapshot: the run's answer holds no session");
    else if (!result.contains("step") || !result["step"].is_number_integer())
      message = tr("No snapshot: the run's answer holds no step");
    else if (const auto text = snapshotText(result["session"], snapshot.origin, path, &error);
             text && detail::writeFile(path, QByteArray::fromStdString(*text), &error))
      message = tr("Saved the run's session (step %1) to %2")
                    .arg(result["step"].get<int64_t>())
                    .arg(path);
    else
      message = error;
  }
  if (!message.isEmpty())
    statusBar()->showMessage(message, 8000);
  Q_EMIT commandAnswered(id, reply);
}

void MainWindow::setStatus(const QString& text) {
  status_ = text;
  statusLabel_->setText(text);
}

void MainWindow::setConnection(const QString& text, bool attachedNow) {
  connectionLabel_->setText(text);
  connectionLabel_->setToolTip(attach_ != nullptr ? attach_->endpoint() : QString());
  QPalette palette = connectionLabel_->palette();
  palette.setColor(QPalette::WindowText,
                   attachedNow ? QColor(30, 150, 60) : this->palette().color(QPalette::WindowText));
  connectionLabel_->setPalette(palette);
}

}  // namespace symtune::ui
