// The studio's shell, offscreen: the window opens with its docks, opens a session into the
// Session dock's model, and refuses a bad one with the reason as data.

#include <QAbstractItemModelTester>
#include <QDockWidget>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>

#include "symtune/ui/main_window.h"
#include "symtune/ui/session_model.h"
#include "test_main.h"

using symtune::ui::MainWindow;

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
