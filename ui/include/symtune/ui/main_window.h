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

  SessionModel* sessionModel() const { return sessionModel_; }
  QDockWidget* dock(const QString& objectName) const;

 Q_SIGNALS:
  void sessionOpened(const QString& path);
  void sessionFailed(const QString& message);

 protected:
  void closeEvent(class QCloseEvent* event) override;

 private:
  void chooseSession();
  void showAbout();
  QDockWidget* addPlaceholderDock(const QString& title, const QString& objectName,
                                  const QString& emptyText, Qt::DockWidgetArea area);

  SessionModel* sessionModel_ = nullptr;
  QTreeView* sessionView_ = nullptr;
  QLabel* graphPlaceholder_ = nullptr;
};

}  // namespace symtune::ui
