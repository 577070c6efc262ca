// The Rules dock, offscreen: the highlighter's formats, the editor's inline errors at the
// checker's LINE:COLUMN, the "Apply to run" button (enabled for good rules with a run attached,
// carrying the editor's text), the run's answers under the editor, and packs exported from the
// editor that load back.

#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextDocument>
#include <QTextLayout>
#include <QTreeView>

#include "symtune/core/rule_pack.h"
#include "symtune/ui/rule_editor.h"
#include "symtune/ui/rule_highlighter.h"
#include "symtune/ui/rule_list_model.h"
#include "symtune/ui/rules_dock.h"
#include "test_main.h"

using symtune::ui::RuleEditor;
using symtune::ui::RuleHighlighter;
using symtune::ui::RuleListModel;
using symtune::ui::RulesDock;
using Kind = RuleHighlighter::Kind;

Q_DECLARE_METATYPE(RuleHighlighter::Kind)

namespace {

// A rewrite whose IR strings span lines; "rule" and "#" inside them are string text.
const char* const kRewrite =
    "rule tanh_gelu {\n"                                  // 0
    "  select nodes \"aten::gelu\"\n"                     // 1
    "  rewrite \"\"\"graph(%x):  # rule\n"                // 2
    "  %none : str = prim::Constant[value=\"none\"]()\n"  // 3
    "  return (%y)\"\"\" => \"\"\"graph(%x):\n"           // 4
    "  return (%x)\"\"\"\n"                               // 5
    "}  # done\n";                                        // 6

const char* const kTwoRules =
    "# Skips a step whose gradients hold a NaN.\n"
    "rule my_nan_guard {\n"
    "  when grad_nan_count > 0\n"
    "  skip step\n"
    "}\n"
    "\n"
    "# Halves the learning rate at step 100.\n"
    "rule my_halve_lr { when step == 100  set lr = lr * 0.5 }\n";

// The format range of `block` that covers `column`, or an empty range.
QTextLayout::FormatRange rangeAt(const QTextDocument& doc, int block, int column) {
  const QTextBlock b = doc.findBlockByNumber(block);
  for (const auto& range : b.layout()->formats()) {
    if (range.start <= column && column < range.start + range.length)
      return range;
  }
  return {};
}

QPalette darkPalette() {
  QPalette p;
  p.setColor(QPalette::Base, QColor("#1e1e1e"));
  p.setColor(QPalette::Window, QColor("#2b2b2b"));
  p.setColor(QPalette::Text, QColor("#e0e0e0"));
  p.setColor(QPalette::Link, QColor("#4aa3ff"));
  p.setColor(QPalette::PlaceholderText, QColor("#8a8a8a"));
  return p;
}

QPalette lightPalette() {
  QPalette p;
  p.setColor(QPalette::Base, QColor("#ffffff"));
  p.setColor(QPalette::Window, QColor("#efefef"));
  p.setColor(QPalette::Text, QColor("#000000"));
  p.setColor(QPalette::Link, QColor("#0050b0"));
  p.setColor(QPalette::PlaceholderText, QColor("#707070"));
  return p;
}

}  // namespace

class TestRulesDock : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { qRegisterMetaType<Kind>(); }

  void highlights_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<int>("block");
    QTest::addColumn<int>("column");
    QTest::addColumn<int>("start");
    QTest::addColumn<int>("length");
    QTest::addColumn<int>("kind");  // -1: not highlighted
    const QString nan = "rule nan_guard {\n  when grad_nan_count > 0\n  skip step\n}";
    QTest::addRow("keyword rule") << nan << 0 << 0 << 0 << 4 << int(Kind::Keyword);
    QTest::addRow("rule name") << nan << 0 << 6 << 0 << 0 << -1;
    QTest::addRow("keyword when") << nan << 1 << 3 << 2 << 4 << int(Kind::Keyword);
    QTest::addRow("feature") << nan << 1 << 8 << 7 << 14 << int(Kind::Feature);
    QTest::addRow("number") << nan << 1 << 24 << 24 << 1 << int(Kind::Number);
    QTest::addRow("keyword step") << nan << 2 << 8 << 7 << 4 << int(Kind::Keyword);
    const QString agc =
        "select params \"layer*.weight\"  # a \"quote\" in a comment\n"
        "let limit = 0.01 * max(unit_norm(param), 1e-3)";
    QTest::addRow("selector keyword") << agc << 0 << 8 << 7 << 6 << int(Kind::Keyword);
    QTest::addRow("string") << agc << 0 << 20 << 14 << 15 << int(Kind::String);
    QTest::addRow("comment with quotes") << agc << 0 << 40 << 31 << 24 << int(Kind::Comment);
    QTest::addRow("fraction") << agc << 1 << 12 << 12 << 4 << int(Kind::Number);
    QTest::addRow("function call") << agc << 1 << 19 << 19 << 3 << int(Kind::Function);
    QTest::addRow("nested call") << agc << 1 << 23 << 23 << 9 << int(Kind::Function);
    QTest::addRow("exponent") << agc << 1 << 42 << 41 << 4 << int(Kind::Number);
    QTest::addRow("a let name") << agc << 1 << 5 << 0 << 0 << -1;
    QTest::addRow("escaped quote in a string")
        << "select params \"a\\\"b\" when" << 0 << 17 << 14 << 6 << int(Kind::String);
    QTest::addRow("after an escaped quote")
        << "select params \"a\\\"b\" when" << 0 << 21 << 21 << 4 << int(Kind::Keyword);
    const QString rewrite = kRewrite;
    QTest::addRow("long string opens") << rewrite << 2 << 12 << 10 << 21 << int(Kind::String);
    QTest::addRow("long string's # is text") << rewrite << 2 << 26 << 10 << 21 << int(Kind::String);
    QTest::addRow("long string's middle line")
        << rewrite << 3 << 30 << 0 << 46 << int(Kind::String);
    QTest::addRow("long string closes") << rewrite << 4 << 13 << 0 << 16 << int(Kind::String);
    QTest::addRow("arrow after it") << rewrite << 4 << 17 << 0 << 0 << -1;
    QTest::addRow("second long string") << rewrite << 4 << 22 << 20 << 13 << int(Kind::String);
    QTest::addRow("second one's end") << rewrite << 5 << 2 << 0 << 16 << int(Kind::String);
    QTest::addRow("comment after both") << rewrite << 6 << 4 << 3 << 6 << int(Kind::Comment);
  }
  void highlights() {
    QFETCH(QString, text);
    QFETCH(int, block);
    QFETCH(int, column);
    QFETCH(int, start);
    QFETCH(int, length);
    QFETCH(int, kind);
    QTextDocument doc(text);
    RuleHighlighter highlighter(&doc);
    const auto range = rangeAt(doc, block, column);
    if (kind < 0) {
      QCOMPARE(range.length, 0);
      return;
    }
    QCOMPARE(range.start, start);
    QCOMPARE(range.length, length);
    QVERIFY(range.format == highlighter.format(Kind(kind)));
  }

  void aLongStringFollowsEdits() {
    // In an editor: a document highlights as it changes only once it has a layout.
    RuleEditor editor;
    editor.setPlainText("rewrite \"\"\"graph(%x):\n  rule\n  return (%x)");
    const QTextDocument& doc = *editor.document();
    const RuleHighlighter& highlighter = *editor.highlighter();
    QVERIFY(rangeAt(doc, 1, 2).format == highlighter.format(Kind::String));
    QTextCursor cursor(editor.document());
    cursor.setPosition(8);
    cursor.insertText("\"\" ");  // now `"" """…`: an empty string, then the long one
    QVERIFY(rangeAt(doc, 1, 2).format == highlighter.format(Kind::String));
    cursor.setPosition(8);
    cursor.deleteChar();  // `" """…`: the short string `" "`, then an empty one: no long string
    QVERIFY(rangeAt(doc, 1, 2).format == highlighter.format(Kind::Keyword));
    QVERIFY(rangeAt(doc, 2, 4).format == QTextCharFormat());
  }

  void coloursReadOnTheTheme_data() {
    QTest::addColumn<QPalette>("palette");
    QTest::addRow("light") << lightPalette();
    QTest::addRow("dark") << darkPalette();
  }
  void coloursReadOnTheTheme() {
    QFETCH(QPalette, palette);
    QTextDocument doc;
    RuleHighlighter highlighter(&doc);
    highlighter.setPalette(palette);
    QCOMPARE(highlighter.format(Kind::Keyword).foreground().color(), palette.color(QPalette::Link));
    QCOMPARE(highlighter.format(Kind::Comment).foreground().color(),
             palette.color(QPalette::PlaceholderText));
    const int base = palette.color(QPalette::Base).lightness();
    for (Kind k : {Kind::Number, Kind::String, Kind::Function, Kind::Feature}) {
      const int ink = highlighter.format(k).foreground().color().lightness();
      QVERIFY2(std::abs(ink - base) > 90,
               qPrintable(QString("kind %1: %2 on %3").arg(int(k)).arg(ink).arg(base)));
    }
  }

  void editorUnderlinesTheError_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("message");
    QTest::addColumn<QString>("underlined");
    QTest::addRow("unknown name on line 2")
        << "rule a { select params \"*\"\n  set grad = clamp(gard, -1, 1) }"
        << "2:20: unknown name `gard` (did you mean `grad`?)"
        << "gard";
    QTest::addRow("unknown function") << "rule a { select params \"*\" set grad = clip(grad, 1) }"
                                      << "1:39: unknown function `clip` (did you mean `clamp`?)"
                                      << "clip";
    QTest::addRow("missing closing brace")
        << "rule a {\n  skip step\n"
        << "3:1: expected `}` closing rule `a`, found the end of the text"
        << "p";
    QTest::addRow("missing opening brace") << "rule a\n  skip step\n}"
                                           << "2:3: expected `{`, found `skip`"
                                           << "skip";
    QTest::addRow("type error: when needs a bool") << "rule a {\n  when loss + 1\n  skip step\n}"
                                                   << "2:8: `when` needs a bool, found a scalar"
                                                   << "loss";
    QTest::addRow("type error at an operator")
        << "rule a { when (loss > 1) + 1 > 0 skip step }"
        << "1:26: `+` needs numbers, found a bool and a scalar"
        << "+";
    QTest::addRow("after non-ASCII text on the line")
        << "rule a { select params \"café*\" when los > 1 skip step }"
        << "1:38: unknown name `los` (did you mean `loss`?)"
        << "los";
  }
  void editorUnderlinesTheError() {
    QFETCH(QString, text);
    QFETCH(QString, message);
    QFETCH(QString, underlined);
    RuleEditor editor;
    editor.setPlainText(text);
    QSignalSpy checked(&editor, &RuleEditor::checked);
    QVERIFY(!editor.checkNow());
    QCOMPARE(editor.errorMessage(), message);
    const QStringList at = message.section(':', 0, 1).split(':');
    QCOMPARE(editor.errorLine(), at[0].toInt());
    QCOMPARE(editor.errorColumn(), at[1].toInt());
    QCOMPARE(editor.ruleCount(), 0);
    QCOMPARE(checked.count(), 1);
    QCOMPARE(checked[0][0].toBool(), false);
    QCOMPARE(checked[0][1].toString(), message);

    const auto selections = editor.extraSelections();
    QCOMPARE(selections.size(), 1);
    QCOMPARE(selections[0].format.underlineStyle(), QTextCharFormat::WaveUnderline);
    QCOMPARE(selections[0].format.underlineColor(), QColor(Qt::red));
    QCOMPARE(selections[0].cursor.selectedText(), underlined);
    QCOMPARE(editor.errorRange().selectedText(), underlined);

    // Fixed: the underline goes.
    editor.setPlainText("rule a { when loss > 1 skip step }");
    QVERIFY(editor.checkNow());
    QVERIFY(editor.extraSelections().isEmpty());
    QCOMPARE(editor.errorLine(), 0);
    QCOMPARE(editor.errorColumn(), 0);
    QCOMPARE(editor.errorMessage(), QString());
    QCOMPARE(checked.last()[0].toBool(), true);
  }

  void editorCountsGoodRules_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<int>("rules");
    QTest::addColumn<QString>("message");
    QTest::addRow("empty") << "" << 0 << "No rules";
    QTest::addRow("only comments") << "# nothing yet\n\n" << 0 << "No rules";
    QTest::addRow("one") << "rule a { when loss > 1 skip step }" << 1 << "1 rule OK";
    QTest::addRow("two, commented") << kTwoRules << 2 << "2 rules OK";
    QTest::addRow("a rewrite") << kRewrite << 1 << "1 rule OK";
  }
  void editorCountsGoodRules() {
    QFETCH(QString, text);
    QFETCH(int, rules);
    QFETCH(QString, message);
    RuleEditor editor;
    editor.setPlainText(text);
    QSignalSpy checked(&editor, &RuleEditor::checked);
    QVERIFY(editor.checkNow());
    QCOMPARE(editor.ruleCount(), rules);
    QCOMPARE(checked.count(), 1);
    QCOMPARE(checked[0][1].toString(), message);
  }

  void editorChecksAfterTheEditDelay() {
    RuleEditor editor;
    QVERIFY(editor.font().fixedPitch() || QFontInfo(editor.font()).fixedPitch());
    QSignalSpy checked(&editor, &RuleEditor::checked);
    QElapsedTimer sinceEdit;
    sinceEdit.start();
    editor.setPlainText("rule a { when los > 1 skip step }");
    QCOMPARE(checked.count(), 0);
    QTRY_COMPARE_WITH_TIMEOUT(checked.count(), 1, 5000);
    QVERIFY2(sinceEdit.elapsed() >= RuleEditor::kCheckDelayMs * 9 / 10,
             qPrintable(QString::number(sinceEdit.elapsed())));
    QCOMPARE(editor.errorLine(), 1);
    QCOMPARE(editor.errorColumn(), 15);
    QVERIFY(editor.highlighter() != nullptr);
    QCOMPARE(editor.highlighter()->document(), editor.document());
  }

  void applyIsEnabledForGoodRulesOnARun_data() {
    QTest::addColumn<bool>("attached");
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("enabled");
    QTest::addColumn<QString>("status");
    const QString good = "rule a { when loss > 1 skip step }";
    QTest::addRow("good rule, run attached") << true << good << true << "1 rule OK";
    QTest::addRow("good rule, no run") << false << good << false << "1 rule OK";
    QTest::addRow("bad rule, run attached") << true << "rule a { when los > 1 skip step }" << false
                                            << "1:15: unknown name `los` (did you mean `loss`?)";
    QTest::addRow("no rules, run attached") << true << "# later" << false << "No rules";
  }
  void applyIsEnabledForGoodRulesOnARun() {
    QFETCH(bool, attached);
    QFETCH(QString, text);
    QFETCH(bool, enabled);
    QFETCH(QString, status);
    RulesDock dock;
    QCOMPARE(dock.applyButton()->isEnabled(), false);
    dock.setRunAttached(attached);
    dock.editor()->setPlainText(text);
    dock.editor()->checkNow();
    QCOMPARE(dock.applyButton()->isEnabled(), enabled);
    QCOMPARE(dock.statusText(), status);
    QCOMPARE(dock.findChild<QLabel*>("ruleStatus")->text(), status);
    // Detaching disables it again.
    dock.setRunAttached(false);
    QCOMPARE(dock.applyButton()->isEnabled(), false);
  }

  void applyCarriesTheSource() {
    RulesDock dock;
    dock.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dock));
    dock.activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(&dock));
    QSignalSpy applied(&dock, &RulesDock::applyRequested);
    dock.setRunAttached(true);
    dock.editor()->setPlainText(kTwoRules);
    dock.editor()->checkNow();
    QTest::mouseClick(dock.applyButton(), Qt::LeftButton);
    QCOMPARE(applied.count(), 1);
    QCOMPARE(applied[0][0].toString(), QString(kTwoRules));
    QCOMPARE(dock.statusText(), QString("Applying…"));

    dock.editor()->setFocus();
    QTest::keyClick(dock.editor(), Qt::Key_Return, Qt::ControlModifier);
    QTRY_COMPARE(applied.count(), 2);  // a button's shortcut clicks it after a short animation
    QCOMPARE(dock.editor()->toPlainText(), QString(kTwoRules));  // no line break typed

    // Broken since the last check: apply checks again and refuses.
    dock.editor()->setPlainText("rule a { when los > 1 skip step }");
    dock.apply();
    QCOMPARE(applied.count(), 2);
    QCOMPARE(dock.statusText(), QString("1:15: unknown name `los` (did you mean `loss`?)"));
    QCOMPARE(dock.applyButton()->isEnabled(), false);
  }

  void showsTheRunsAnswer_data() {
    QTest::addColumn<QString>("command");
    QTest::addColumn<bool>("ok");
    QTest::addColumn<QString>("message");
    QTest::addColumn<QString>("status");
    QTest::addRow("applied") << "add_rule" << true << "Applied from step 12"
                             << "Applied from step 12";
    QTest::addRow("refused") << "toggle_rule" << false << "no rule named `nan_gaurd`"
                             << "no rule named `nan_gaurd`";
    QTest::addRow("no message, ok") << "remove_rule" << true << ""
                                    << "remove_rule: done";
    QTest::addRow("no message, failed") << "remove_rule" << false << ""
                                        << "remove_rule failed";
  }
  void showsTheAcksWarnings() {
    RulesDock dock;
    dock.commandFinished("add_rule", true, "Applied from step 4", {},
                         {"rule `c`: params \"enc.*\" selects none of the model's 6 parameters"});
    QCOMPARE(dock.statusText(), QString("Applied from step 4\nWarning: rule `c`: params \"enc.*\" "
                                        "selects none of the model's 6 parameters"));
  }
  void showsTheRunsAnswer() {
    QFETCH(QString, command);
    QFETCH(bool, ok);
    QFETCH(QString, message);
    QFETCH(QString, status);
    RulesDock dock;
    dock.commandFinished(command, ok, message);
    QCOMPARE(dock.statusText(), status);
  }

  void theRunsErrorIsUnderlinedInTheAppliedText() {
    RulesDock dock;
    dock.setRunAttached(true);
    const QString text = "rule nan_guard {\n  when loss > 1\n  skip step\n}";
    dock.editor()->setPlainText(text);
    dock.editor()->checkNow();
    QSignalSpy applied(&dock, &RulesDock::applyRequested);
    dock.apply();
    QCOMPARE(applied.count(), 1);
    dock.commandFinished("add_rule", false, "1:6: rule `nan_guard` is already in force");
    QCOMPARE(dock.statusText(), QString("1:6: rule `nan_guard` is already in force"));
    QCOMPARE(dock.editor()->errorLine(), 1);
    QCOMPARE(dock.editor()->errorColumn(), 6);
    QCOMPARE(dock.editor()->errorRange().selectedText(), QString("nan_guard"));
    QCOMPARE(dock.applyButton()->isEnabled(), false);

    // Once the text changed, a late answer about the old text underlines nothing.
    dock.editor()->setPlainText("rule other {\n  when loss > 1\n  skip step\n}");
    QVERIFY(dock.editor()->checkNow());
    dock.commandFinished("add_rule", false, "1:6: rule `nan_guard` is already in force");
    QCOMPARE(dock.editor()->errorLine(), 0);
    QCOMPARE(dock.statusText(), QString("1:6: rule `nan_guard` is already in force"));
  }

  void listTogglesAndRemovesThroughTheDock() {
    RulesDock dock;
    dock.setRunAttached(true);
    dock.model()->setRules(std::vector<symtune::attach::RuleState>{
        {"nan_guard", true, "pack builtin 1.1.0", ""}, {"mine", false, "studio", ""}});
    QCOMPARE(dock.view()->model(), dock.model());
    QSignalSpy toggled(&dock, &RulesDock::toggleRequested);
    QVERIFY(dock.model()->setData(dock.model()->index(1, 0), Qt::Checked, Qt::CheckStateRole));
    QCOMPARE(toggled.count(), 1);
    QCOMPARE(toggled[0][0].toString(), QString("mine"));
    QCOMPARE(toggled[0][1].toBool(), true);
    QVERIFY(dock.model()->isPending("mine"));
    QVERIFY(dock.model()->setData(dock.model()->index(0, 0), Qt::Unchecked, Qt::CheckStateRole));
    QVERIFY(dock.model()->isPending("nan_guard"));
    // The run refuses it: the row shows what is in force again, not a toggle still waiting; the
    // other toggle still waits for its own answer.
    dock.commandFinished("toggle_rule", false, "no rule named `mine`", "mine");
    QVERIFY(!dock.model()->isPending("mine"));
    QVERIFY(dock.model()->isPending("nan_guard"));
    QCOMPARE(dock.model()->index(1, 0).data(Qt::CheckStateRole).value<Qt::CheckState>(),
             Qt::Unchecked);

    QSignalSpy removed(&dock, &RulesDock::removeRequested);
    QCOMPARE(dock.removeButton()->isEnabled(), false);
    dock.view()->selectionModel()->select(
        dock.model()->index(1, 0), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    QCOMPARE(dock.removeButton()->isEnabled(), true);
    dock.removeButton()->click();
    QCOMPARE(removed.count(), 1);
    QCOMPARE(removed[0][0].toString(), QString("mine"));
    dock.model()->setRules(
        std::vector<symtune::attach::RuleState>{{"nan_guard", true, "pack builtin 1.1.0", ""}});
    QCOMPARE(dock.removeButton()->isEnabled(), false);
  }

  void exportedPackLoadsBack() {
    RulesDock dock;
    dock.editor()->setPlainText(kTwoRules);
    QTemporaryDir dir;
    const QString path = dir.filePath("mine.json");
    QCOMPARE(dock.exportPack(path, "mine", "1.2.0"), QString());
    const auto pack = symtune::rules::loadRulePack(path.toStdString());
    QCOMPARE(pack.name, std::string("mine"));
    QCOMPARE(pack.version, std::string("1.2.0"));
    QCOMPARE(pack.rules.size(), size_t{2});
    QCOMPARE(pack.rules[0].name, std::string("my_nan_guard"));
    QCOMPARE(pack.rules[0].description, std::string("Skips a step whose gradients hold a NaN."));
    QCOMPARE(pack.rules[0].source,
             std::string("rule my_nan_guard {\n  when grad_nan_count > 0\n  skip step\n}"));
    QCOMPARE(pack.rules[1].name, std::string("my_halve_lr"));
    QCOMPARE(pack.rules[1].description, std::string("Halves the learning rate at step 100."));
  }

  void exportPackSaysWhatIsWrong_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("file");  // under the temporary folder
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("version");
    QTest::addColumn<QString>("error");  // %1: the temporary folder
    QTest::addRow("unwritable path") << kTwoRules << "plain_file/mine.json"
                                     << "mine"
                                     << "1.0.0"
                                     << "%1/plain_file/mine.json: cannot write";
    QTest::addRow("a rule that does not check")
        << "rule a { when los > 1 skip step }"
        << "mine.json"
        << "mine"
        << "1.0.0"
        << "1:15: unknown name `los` (did you mean `loss`?)";
    QTest::addRow("no rules") << "# nothing"
                              << "mine.json"
                              << "mine"
                              << "1.0.0"
                              << "no rules to pack";
    QTest::addRow("bad version") << kTwoRules << "mine.json"
                                 << "mine"
                                 << "1.0"
                                 << "version \"1.0\" is not MAJOR.MINOR.PATCH";
  }
  void exportPackSaysWhatIsWrong() {
    QFETCH(QString, text);
    QFETCH(QString, file);
    QFETCH(QString, name);
    QFETCH(QString, version);
    QFETCH(QString, error);
    QTemporaryDir dir;
    QFile plain(dir.filePath("plain_file"));
    QVERIFY(plain.open(QIODevice::WriteOnly));
    plain.close();
    RulesDock dock;
    dock.editor()->setPlainText(text);
    const QString got = dock.exportPack(dir.filePath(file), name, version);
    const QString expected = error.contains("%1") ? error.arg(dir.path()) : error;
    QVERIFY2(got.startsWith(expected), qPrintable(got));
    QVERIFY(!QFile::exists(dir.filePath("mine.json")));
  }
};

SYMTUNE_TEST_MAIN(TestRulesDock)
#include "tst_rules_dock.moc"
