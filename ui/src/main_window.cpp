#include "symtune/ui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QHeaderView>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QTreeView>

#include "symtune/session.h"
#include "symtune/ui/attach_connection.h"
#include "symtune/ui/session_model.h"
#include "symtune/version.h"

namespace symtune::ui {

void MainWindow::attachTo(const QString& endpoint, const QString& token) {
  if (attach_ == nullptr) {
    attach_ = new AttachConnection(this);
    connect(attach_, &AttachConnection::attached, this, [this](const QJsonObject& hello) {
      const QJsonObject run = hello["run"].toObject();
      runName_ = run["session"].toString();
      runState_.clear();
      setWindowTitle(tr("Symtune — %1").arg(runName_));
      setAttachStatus(tr("Attached to %1 (%2) at %3")
                          .arg(runName_, run["model"].toString(), attach_->endpoint()));
    });
    connect(attach_, &AttachConnection::messageReceived, this, [this](const QJsonObject& m) {
      const QString type = m["type"].toString();
      if (type == "state") {
        runState_ = m["state"].toString();
      } else if (type == "step") {
        setAttachStatus(tr("%1: step %2, loss %3%4")
                            .arg(runName_)
                            .arg(m["step"].toInteger())
                            .arg(m["loss"].toDouble(), 0, 'g', 5)
                            .arg(runState_.isEmpty() || runState_ == "training"
                                     ? QString()
                                     : QStringLiteral(" (%1)").arg(runState_)));
      }
    });
    connect(attach_, &AttachConnection::disconnected, this, [this](const QString& reason) {
      setAttachStatus(tr("The run ended: %1").arg(reason));
      Q_EMIT attachEnded(reason);
    });
  }
  setAttachStatus(tr("Attaching to %1…").arg(endpoint));
  attach_->open(endpoint, token);
}

void MainWindow::setAttachStatus(const QString& text) {
  attachStatus_ = text;
  statusBar()->showMessage(text);
}

namespace {

QLabel* emptyState(const QString& text, QWidget* parent) {
  auto* label = new QLabel(text, parent);
  label->setAlignment(Qt::AlignCenter);
  label->setWordWrap(true);
  label->setEnabled(false);  // drawn in the palette's disabled text colour, light or dark
  label->setMargin(12);
  return label;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Symtune"));
  resize(1280, 800);
  setDockNestingEnabled(true);

  graphPlaceholder_ =
      emptyState(tr("No model graph yet.\nOpen a session (Ctrl+O) to see its model here."), this);
  setCentralWidget(graphPlaceholder_);

  addPlaceholderDock(tr("Live charts"), "chartsDock",
                     tr("Loss, throughput, memory and gradient norms appear here while a run "
                        "is attached."),
                     Qt::BottomDockWidgetArea);
  addPlaceholderDock(tr("Rules"), "rulesDock",
                     tr("No rules in force. Rules of the session and rule packs are listed here."),
                     Qt::RightDockWidgetArea);

  sessionModel_ = new SessionModel(this);
  sessionView_ = new QTreeView(this);
  sessionView_->setModel(sessionModel_);
  sessionView_->setUniformRowHeights(true);
  sessionView_->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  auto* sessionDock = new QDockWidget(tr("Session"), this);
  sessionDock->setObjectName("sessionDock");
  sessionDock->setWidget(sessionView_);
  addDockWidget(Qt::LeftDockWidgetArea, sessionDock);

  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open Session…"), this, &MainWindow::chooseSession);
  open->setShortcut(QKeySequence::Open);
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (QDockWidget* d : findChildren<QDockWidget*>()) {
    view->addAction(d->toggleViewAction());
  }

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Symtune"), this, &MainWindow::showAbout);

  statusBar()->showMessage(tr("No session"));

  QSettings settings;
  restoreGeometry(settings.value("mainWindow/geometry").toByteArray());
  restoreState(settings.value("mainWindow/state").toByteArray());
}

MainWindow::~MainWindow() = default;

QDockWidget* MainWindow::addPlaceholderDock(const QString& title, const QString& objectName,
                                            const QString& emptyText, Qt::DockWidgetArea area) {
  auto* dock = new QDockWidget(title, this);
  dock->setObjectName(objectName);
  dock->setWidget(emptyState(emptyText, dock));
  addDockWidget(area, dock);
  return dock;
}

QDockWidget* MainWindow::dock(const QString& objectName) const {
  return findChild<QDockWidget*>(objectName);
}

bool MainWindow::openSession(const QString& path, QString* error) {
  try {
    const Session session = loadSession(path.toStdString());
    sessionModel_->setSession(session);
    sessionView_->expandAll();
    setWindowTitle(tr("%1 — Symtune").arg(QString::fromStdString(session.name)));
    statusBar()->showMessage(tr("Session %1 loaded").arg(path));
    graphPlaceholder_->setText(tr("Session “%1” is open.\nThis version does not capture model "
                                  "graphs yet; the graph will be drawn here.")
                                   .arg(QString::fromStdString(session.name)));
    Q_EMIT sessionOpened(path);
    return true;
  } catch (const SessionError& e) {
    const QString message = QString::fromStdString(e.what());
    statusBar()->showMessage(message);
    if (error != nullptr)
      *error = message;
    Q_EMIT sessionFailed(message);
    return false;
  }
}

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

void MainWindow::showAbout() {
  QMessageBox::about(this, tr("About Symtune"),
                     tr("<b>Symtune %1</b><p>An optimization studio for LibTorch training.</p>")
                         .arg(QString::fromLatin1(kVersion)));
}

void MainWindow::closeEvent(QCloseEvent* event) {
  QSettings settings;
  settings.setValue("mainWindow/geometry", saveGeometry());
  settings.setValue("mainWindow/state", saveState());
  QMainWindow::closeEvent(event);
}

}  // namespace symtune::ui
