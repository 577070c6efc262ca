// File ▸ New Session as data: the session JSON the dialog builds, checked by the session parser
// before the dialog closes, and the rules offered from the runner's registry.

#include <QJsonArray>
#include <QJsonObject>

#include "symtune/ui/new_session_dialog.h"
#include "test_main.h"

using symtune::ui::NewSessionDialog;

class TestNewSessionDialog : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void zooSessionWithRules() {
    NewSessionDialog dialog;
    dialog.setName("txl");
    dialog.chooseZoo("transformer_xl", "cpu");
    dialog.setSteps(50);
    dialog.setAvailableRules(QJsonArray{
        QJsonObject{{"name", "nan_guard"}, {"origin", "pack builtin"}, {"description", "d"}},
        QJsonObject{{"name", "tanh_gelu"}, {"origin", "pack builtin"}, {"description", "d"}}});
    dialog.enableRules({"tanh_gelu"});
    const QJsonObject s = dialog.session();
    QCOMPARE(s["format"].toString(), QString("symtune-session"));
    QCOMPARE(s["name"].toString(), QString("txl"));
    QCOMPARE(s["model"].toObject()["zoo"].toString(), QString("transformer_xl"));
    QCOMPARE(s["model"].toObject()["preset"].toString(), QString("cpu"));
    QCOMPARE(s["run"].toObject()["steps"].toInt(), 50);
    QCOMPARE(s["rules"].toObject()["enable"].toArray(), QJsonArray{"tanh_gelu"});
    QVERIFY(!s.contains("data"));  // the model's own batch size
    QCOMPARE(dialog.check(), QString());
  }

  void torchScriptFileSession() {
    NewSessionDialog dialog;
    dialog.chooseFile("/models/mlp.pt", "[32, 3, 28, 28]", 10);
    const QJsonObject model = dialog.session()["model"].toObject();
    QCOMPARE(model["file"].toString(), QString("/models/mlp.pt"));
    QCOMPARE(model["inputs"].toArray().first().toObject()["shape"].toArray(),
             (QJsonArray{32, 3, 28, 28}));
    QCOMPARE(model["classes"].toInt(), 10);
    QVERIFY(!dialog.session().contains("rules"));
  }

  void problemsAreSaidBeforeStarting_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("shape");
    QTest::addColumn<QString>("problem");
    QTest::addRow("no file") << ""
                             << "32, 4"
                             << "model.file: choose a TorchScript file";
    QTest::addRow("empty shape") << "/m.pt"
                                 << ""
                                 << "model.inputs";
    QTest::addRow("zero batch") << "/m.pt"
                                << "0, 4"
                                << "model.inputs";
  }
  void problemsAreSaidBeforeStarting() {
    QFETCH(QString, file);
    QFETCH(QString, shape);
    QFETCH(QString, problem);
    NewSessionDialog dialog;
    dialog.chooseFile(file, shape, 3);
    const QString said = dialog.check();
    QVERIFY2(said.contains(problem), qPrintable(said));
    dialog.accept();
    QCOMPARE(dialog.result(), int(QDialog::Rejected));  // not accepted: still open
  }
};

SYMTUNE_TEST_MAIN(TestNewSessionDialog)
#include "tst_new_session_dialog.moc"
