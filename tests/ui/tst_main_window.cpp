// The studio's shell, offscreen: the window opens with its docks, opens a session into the
// Session dock's model, refuses a bad one with the reason as data, and follows a run it attached
// to (a real symtune-runner) until the run dies.

#include <QAbstractItemModelTester>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QProcess>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>

#include "symtune/ui/main_window.h"
#include "symtune/ui/session_model.h"
#include "test_main.h"

using symtune::ui::MainWindow;

namespace {

const QByteArray kLongSession =
    "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"studio attach\",\n"
    " \"model\": {\"zoo\": \"dynamic_resnet\", \"preset\": \"ci\"},\n"
    " \"run\": {\"steps\": 1000000, \"threads\": 1}}\n";

}  // namespace

class TestMainWindow : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);  // QSettings in a test location
  }

  void opensWithItsDocks() {
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    for (const char* name : {"chartsDock", "rulesDock", "sessionDock"}) {
      QDockWidget* d = w.dock(name);
      QVERIFY2(d != nullptr, name);
      QVERIFY2(d->isVisible(), name);
    }
    QCOMPARE(w.sessionModel()->rowCount(), 0);
  }

  void opensTheBundledSession() {
    MainWindow w;
    new QAbstractItemModelTester(w.sessionModel(),
                                 QAbstractItemModelTester::FailureReportingMode::QtTest, &w);
    QSignalSpy opened(&w, &MainWindow::sessionOpened);
    const QString path = SYMTUNE_SOURCE_DIR "/resources/sessions/demo.json";
    QVERIFY(w.openSession(path));
    QCOMPARE(opened.count(), 1);
    QVERIFY(w.windowTitle().startsWith("dynamic-resnet demo"));
    auto* m = w.sessionModel();
    QStringList groups;
    for (int r = 0; r < m->rowCount(); ++r)
      groups << m->index(r, 0).data().toString();
    QCOMPARE(groups, (QStringList{"name", "file", "model", "data", "optimizer", "run"}));
    const QModelIndex model = m->index(2, 0);
    QCOMPARE(m->index(2, 1).data().toString(), QString("dynamic_resnet (ci)"));
    QCOMPARE(m->rowCount(model), 2);
    QCOMPARE(m->index(1, 1, model).data().toString(), QString("ci"));
  }

  void followsAnAttachedRunUntilItDies() {
    QTemporaryDir dir;
    QFile session(dir.filePath("s.json"));
    QVERIFY(session.open(QIODevice::WriteOnly));
    session.write(kLongSession);
    session.close();
    QProcess runner;
    runner.start(QStringLiteral(SYMTUNE_BIN_DIR "/symtune-runner"),
                 {session.fileName(), "--listen", "unix:" + dir.filePath("ui.sock")});
    QByteArray out;
    QTRY_VERIFY_WITH_TIMEOUT((out += runner.readAllStandardOutput()).contains("listening on"),
                             120000);

    MainWindow w;
    w.show();
    QSignalSpy ended(&w, &MainWindow::attachEnded);
    w.attachTo("unix:" + dir.filePath("ui.sock"));
    QTRY_VERIFY_WITH_TIMEOUT(w.attachStatus().startsWith("studio attach: step "), 60000);
    QCOMPARE(w.windowTitle(), QString("Symtune — studio attach"));
    QCOMPARE(w.statusBar()->currentMessage(), w.attachStatus());

    runner.kill();
    QElapsedTimer sinceKill;
    sinceKill.start();
    QTRY_VERIFY_WITH_TIMEOUT(ended.count() == 1, 5000);
    QVERIFY2(sinceKill.elapsed() < 1000, qPrintable(QString::number(sinceKill.elapsed())));
    QCOMPARE(w.attachStatus(), QString("The run ended: the server closed the connection"));
    runner.waitForFinished();
  }

  void refusesABadSessionAndKeepsTheCurrentOne() {
    MainWindow w;
    QVERIFY(w.openSession(SYMTUNE_SOURCE_DIR "/resources/sessions/demo.json"));
    const int rows = w.sessionModel()->rowCount();
    QTemporaryDir dir;
    QFile f(dir.filePath("bad.json"));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(R"({"format": "symtune-session", "version": 1, "model": {"zoo": "nope"}})");
    f.close();
    QSignalSpy failed(&w, &MainWindow::sessionFailed);
    QString error;
    QVERIFY(!w.openSession(f.fileName(), &error));
    QCOMPARE(failed.count(), 1);
    QVERIFY2(error.contains("model.zoo: unknown zoo model \"nope\""), qPrintable(error));
    QCOMPARE(w.statusBar()->currentMessage(), error);
    QCOMPARE(w.sessionModel()->rowCount(), rows);
  }
};

SYMTUNE_TEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
