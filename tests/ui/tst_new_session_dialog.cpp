// File ▸ New Session as data: the session JSON the dialog builds, checked by the session parser
// before the dialog closes, and the rules offered from the runner's registry.

#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonObject>
#include <QListWidget>
#include <QProcess>

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

  // A file model on data files, its loss and outputs: the session the dialog writes, checked
  // as the user types with the loader's words.
  void fileModelOnDataFiles() {
    const QString data = QStringLiteral(SYMTUNE_SOURCE_DIR "/tests/data/");
    NewSessionDialog dialog;
    dialog.chooseFile(data + "mlp.pt", "", 3);
    dialog.chooseData("npz", data + "blobs.npz", "x", "y", 0.2);
    QVERIFY2(dialog.shownProblem().contains(
                 "data.batch_size: missing: with data files and no model.inputs it is required"),
             qPrintable(dialog.shownProblem()));
    dialog.setBatchSize(16);
    QCOMPARE(dialog.shownProblem(), QString());
    QCOMPARE(dialog.check(), QString());
    const QJsonObject s = dialog.session();
    QVERIFY(!s["model"].toObject().contains("inputs"));  // the data gives them
    const QJsonObject d = s["data"].toObject();
    QCOMPARE(d["format"].toString(), QString("npz"));
    QCOMPARE(d["inputs"].toArray(), QJsonArray{"x"});
    QCOMPARE(d["target"].toString(), QString("y"));
    QCOMPARE(d["batch_size"].toInt(), 16);
    QCOMPARE(d["validation_fraction"].toDouble(), 0.2);
    QCOMPARE(s["loss"].toObject()["kind"].toString(), QString("cross_entropy"));

    dialog.chooseData("npz", data + "missing.npz", "x", "y");
    QCOMPARE(dialog.shownProblem(), data + "missing.npz: no such file or folder");
    dialog.chooseData("npz", data + "blobs.npz", "", "y");
    QVERIFY(dialog.shownProblem().contains("data.inputs: missing"));
    dialog.chooseData("npz", data + "blobs.npz", "x", "y");
    dialog.chooseFile(data + "none.pt", "", 3);
    QCOMPARE(dialog.shownProblem(), data + "none.pt: no such model file");
    dialog.accept();
    QCOMPARE(dialog.result(), int(QDialog::Rejected));
  }

  // Once the session parses, symtune-runner check sets the run up as --batch would: what the
  // parser cannot see (an array the file lacks) is said in the loader's words.
  void runnerCheckSaysWhatTheLoaderSays() {
    const QString data = QStringLiteral(SYMTUNE_SOURCE_DIR "/tests/data/");
    NewSessionDialog dialog;
    dialog.setCheckDelay(0);
    dialog.chooseFile(data + "mlp.pt", "", 3);
    dialog.setBatchSize(16);
    dialog.chooseData("npz", data + "blobs.npz", "x", "label");
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.checking(), 120000);
    QCOMPARE(dialog.shownProblem(), data + "blobs.npz: no array \"label\" (it holds: x, y)");
    dialog.accept();
    QCOMPARE(dialog.result(), int(QDialog::Rejected));
    dialog.chooseData("npz", data + "blobs.npz", "x", "y", 0.2);
    // Start while the check runs waits for it (docs/studio.md), then starts.
    QVERIFY(dialog.checking());
    dialog.accept();
    QCOMPARE(dialog.result(), int(QDialog::Rejected));
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.checking(), 120000);
    QCOMPARE(dialog.result(), int(QDialog::Accepted));
    dialog.setResult(QDialog::Rejected);
    QCOMPARE(dialog.shownProblem(), QString());
    QVERIFY2(dialog.checkedText().startsWith("mlp.pt, 131 parameters, batch 16, cpu; "),
             qPrintable(dialog.checkedText()));
    // A model whose output does not fit the classes: the loader's shape check.
    dialog.chooseFile(data + "mlp.pt", "", 5);
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.checking(), 120000);
    QVERIFY2(dialog.shownProblem().startsWith("mlp.pt: forward returned shape [16, 3], expected "
                                              "[16, 5]"),
             qPrintable(dialog.shownProblem()));
    // A rule ticked is checked too: a rewrite changes the model the check runs.
    dialog.chooseFile(data + "mlp.pt", "", 3);
    dialog.setAvailableRules(
        QJsonArray{QJsonObject{{"name", "nan_guard"}, {"description", ""}, {"origin", ""}}});
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.checking(), 120000);
    dialog.findChild<QListWidget*>()->item(0)->setCheckState(Qt::Checked);
    QVERIFY(dialog.checking());
    QTRY_VERIFY_WITH_TIMEOUT(!dialog.checking(), 120000);
    QCOMPARE(dialog.shownProblem(), QString());
  }

  // Paths typed relative to the working folder are the session's absolute: the run reads its
  // session in a folder of its own.
  void relativePathsBecomeAbsolute() {
    const QString data = QStringLiteral(SYMTUNE_SOURCE_DIR "/tests/data/");
    const QString before = QDir::currentPath();
    QVERIFY(QDir::setCurrent(data));
    NewSessionDialog dialog;
    dialog.chooseFile("mlp.pt", "", 3);
    dialog.chooseData("npz", "blobs.npz", "x", "y");
    dialog.setBatchSize(16);
    const QJsonObject s = dialog.session();
    QVERIFY(QDir::setCurrent(before));
    QCOMPARE(QFileInfo(s["model"].toObject()["file"].toString()).canonicalFilePath(),
             QFileInfo(data + "mlp.pt").canonicalFilePath());
    QVERIFY(QDir::isAbsolutePath(s["model"].toObject()["file"].toString()));
    QCOMPARE(QFileInfo(s["data"].toObject()["file"].toString()).canonicalFilePath(),
             QFileInfo(data + "blobs.npz").canonicalFilePath());
    QCOMPARE(s["data"].toObject()["inputs"].toArray(), QJsonArray{"x"});  // an array's name
    QCOMPARE(dialog.shownProblem(), QString());  // checked where the run will read them
  }

  // Closed while its processes run (the rules still listing, a check under way): nothing they
  // report reaches the dialog's deleted widgets.
  void closedWhileItsProcessesRun() {
    const QString data = QStringLiteral(SYMTUNE_SOURCE_DIR "/tests/data/");
    for (int i = 0; i < 3; ++i) {
      auto* dialog = new NewSessionDialog;
      dialog->setCheckDelay(0);
      dialog->loadRules();
      dialog->chooseFile(data + "mlp.pt", "", 3);
      dialog->chooseData("npz", data + "blobs.npz", "x", "y");
      dialog->setBatchSize(16);
      QTRY_VERIFY(dialog->checking() && !dialog->findChildren<QProcess*>().isEmpty());
      delete dialog;
    }
  }

  void lossAndOutputs() {
    const QString data = QStringLiteral(SYMTUNE_SOURCE_DIR "/tests/data/");
    NewSessionDialog dialog;
    dialog.chooseFile(data + "aux_mlp.pt", "", 3);
    dialog.chooseData("npz", data + "blobs.npz", "x", "y");
    dialog.setBatchSize(8);
    dialog.chooseOutputs("logits", "aux:0.3, 2");
    dialog.chooseLoss("cross_entropy", "criterion");
    QCOMPARE(dialog.shownProblem(), QString());
    const QJsonObject s = dialog.session();
    const QJsonObject model = s["model"].toObject();
    QCOMPARE(model["output"].toString(), QString("logits"));
    QCOMPARE(
        model["auxiliary_outputs"].toArray(),
        (QJsonArray{QJsonObject{{"output", "aux"}, {"weight", 0.3}}, QJsonObject{{"output", 2}}}));
    QCOMPARE(s["loss"].toObject()["method"].toString(), QString("criterion"));
    dialog.chooseOutputs("", "aux:0.3");
    QVERIFY(dialog.shownProblem().contains("model.auxiliary_outputs: needs model.output"));
    dialog.chooseOutputs("logits");
    dialog.chooseLoss("mse");
    QCOMPARE(dialog.shownProblem(), QString());
    dialog.chooseLoss("nll", "forward");
    QVERIFY(dialog.shownProblem().contains("loss.method: expected the name of the model's loss"));
  }

  void imageFolder() {
    const QString data = QStringLiteral(SYMTUNE_SOURCE_DIR "/tests/data/");
    NewSessionDialog dialog;
    dialog.chooseFile(data + "mlp.pt", "", 3);
    dialog.chooseData("images", data + "images", "", "");
    dialog.chooseImage("16, 16", "12");
    dialog.setBatchSize(8);
    QCOMPARE(dialog.shownProblem(), QString());
    const QJsonObject image = dialog.session()["data"].toObject()["image"].toObject();
    QCOMPARE(image["resize"].toArray(), (QJsonArray{16, 16}));
    QCOMPARE(image["crop"].toInt(), 12);
    dialog.chooseImage("16, 16", "20");
    QVERIFY(dialog.shownProblem().contains("data.image.crop: is larger than the resized image"));
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
