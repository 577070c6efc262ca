#pragma once
// The studio's main window: docks for the graph, live charts, rules and the session, and the
// File menu. The docks are the shell that later parts fill; their layout is remembered.

#include <QMainWindow>
#include <QString>

class QDockWidget;
class QLabel;
class QTreeView;

namespace symtune::ui {

class SessionModel;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Loads and shows a session. On failure leaves the current session as it was, shows the
  // reason in the status bar and in *error, emits sessionFailed and returns false.
  bool openSession(const QString& path, QString* error = nullptr);

  // Attaches to a running process (symtune-runner --listen, or any attachable program): the
  // status bar follows the run — its steps, its state, and a clear message when it ends.
  void attachTo(const QString& endpoint, const QString& token = {});
  // What the status bar says about the attached run ("" when none was attached).
  const QString& attachStatus() const { return attachStatus_; }

  SessionModel* sessionModel() const { return sessionModel_; }
  QDockWidget* dock(const QString& objectName) const;

 Q_SIGNALS:
  void sessionOpened(const QString& path);
  void sessionFailed(const QString& message);
  void attachEnded(const QString& reason);

 protected:
  void closeEvent(class QCloseEvent* event) override;

 private:
  void chooseSession();
  void showAbout();
  QDockWidget* addPlaceholderDock(const QString& title, const QString& objectName,
                                  const QString& emptyText, Qt::DockWidgetArea area);

  void setAttachStatus(const QString& text);

  class AttachConnection* attach_ = nullptr;
  QString attachStatus_, runName_, runState_;
  SessionModel* sessionModel_ = nullptr;
  QTreeView* sessionView_ = nullptr;
  QLabel* graphPlaceholder_ = nullptr;
};

}  // namespace symtune::ui
