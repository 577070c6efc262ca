// The Rules dock's list model, with no window: the run's `rules` message fills it, a check toggle
// asks the run and shows the row pending without changing the flag, and the run's next message
// settles it — in place when the list is the same, by a reset when it is not.

#include <QAbstractItemModelTester>
#include <QFont>
#include <QSignalSpy>

#include "symtune/ui/rule_list_model.h"
#include "test_main.h"

using symtune::ui::RuleListModel;

namespace {

using Rules = std::vector<symtune::attach::RuleState>;

symtune::attach::RuleState rule(const QString& name, bool enabled,
                                const QString& origin = "pack builtin 1.1.0",
                                const QString& description = {}) {
  return {name.toStdString(), enabled, origin.toStdString(), description.toStdString()};
}

// "nan_guard+ loss_spike_guard-": the names in order, + enabled, - disabled.
Rules rules(const QString& spec) {
  Rules list;
  for (const QString& word : spec.split(' ', Qt::SkipEmptyParts))
    list.push_back(rule(word.chopped(1), word.endsWith('+')));
  return list;
}

QString listed(const RuleListModel& model) {
  QStringList words;
  for (int r = 0; r < model.rowCount(); ++r) {
    const QModelIndex name = model.index(r, RuleListModel::NameColumn);
    words << name.data().toString() +
                 (name.data(Qt::CheckStateRole).value<Qt::CheckState>() == Qt::Checked ? "+" : "-");
  }
  return words.join(' ');
}

}  // namespace

class TestRuleListModel : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void showsTheRunsRules() {
    RuleListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setRules(Rules{
        rule("nan_guard", true, "pack builtin 1.1.0", "Skips a step whose gradients hold NaN"),
        rule("my_rule", false, "studio", "")});
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.columnCount(), 3);
    QCOMPARE(model.headerData(0, Qt::Horizontal).toString(), QString("Name"));
    QCOMPARE(model.headerData(1, Qt::Horizontal).toString(), QString("Origin"));
    QCOMPARE(model.headerData(2, Qt::Horizontal).toString(), QString("Description"));
    QCOMPARE(model.index(0, 0).data().toString(), QString("nan_guard"));
    QCOMPARE(model.index(0, 1).data().toString(), QString("pack builtin 1.1.0"));
    QCOMPARE(model.index(0, 2).data().toString(), QString("Skips a step whose gradients hold NaN"));
    QCOMPARE(model.index(0, 0).data(Qt::CheckStateRole).value<Qt::CheckState>(), Qt::Checked);
    QCOMPARE(model.index(1, 0).data(Qt::CheckStateRole).value<Qt::CheckState>(), Qt::Unchecked);
    QVERIFY(!model.index(0, 1).data(Qt::CheckStateRole).isValid());
    QVERIFY(model.flags(model.index(0, 0)) & Qt::ItemIsUserCheckable);
    QVERIFY(!(model.flags(model.index(0, 1)) & Qt::ItemIsUserCheckable));
    QCOMPARE(model.index(1, 2).data(RuleListModel::NameRole).toString(), QString("my_rule"));
    QCOMPARE(model.index(1, 0).data(RuleListModel::OriginRole).toString(), QString("studio"));
    QCOMPARE(model.index(0, 0).data(RuleListModel::EnabledRole).toBool(), true);
    QCOMPARE(model.index(0, 0).data(RuleListModel::PendingRole).toBool(), false);
    QCOMPARE(model.nameAt(1), QString("my_rule"));
    QCOMPARE(model.nameAt(2), QString());
    QCOMPARE(model.rowOf("my_rule"), 1);
    QCOMPARE(model.rowOf("gard"), -1);
    model.clear();
    QCOMPARE(model.rowCount(), 0);
  }

  void toggleWaitsForTheRun_data() {
    QTest::addColumn<bool>("enabled");
    QTest::addRow("enable a disabled rule") << false;
    QTest::addRow("disable an enabled rule") << true;
  }
  void toggleWaitsForTheRun() {
    QFETCH(bool, enabled);
    RuleListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setRules(Rules{rule("nan_guard", true), rule("my_rule", enabled)});
    QSignalSpy toggled(&model, &RuleListModel::toggleRequested);
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    const QModelIndex name = model.index(1, RuleListModel::NameColumn);

    QVERIFY(model.setData(name, enabled ? Qt::Unchecked : Qt::Checked, Qt::CheckStateRole));
    QCOMPARE(toggled.count(), 1);
    QCOMPARE(toggled[0][0].toString(), QString("my_rule"));
    QCOMPARE(toggled[0][1].toBool(), !enabled);
    QCOMPARE(changed.count(), 1);
    // The flag is the run's: unchanged until the run says otherwise.
    QCOMPARE(name.data(RuleListModel::EnabledRole).toBool(), enabled);
    QCOMPARE(name.data(Qt::CheckStateRole).value<Qt::CheckState>(),
             enabled ? Qt::Checked : Qt::Unchecked);
    QCOMPARE(name.data(RuleListModel::PendingRole).toBool(), true);
    QVERIFY(model.isPending("my_rule"));
    QVERIFY(name.data(Qt::FontRole).value<QFont>().italic());
    QCOMPARE(model.index(1, 2).data(Qt::ToolTipRole).toString(),
             QString("Waiting for the run to apply this"));
    QVERIFY(!model.index(0, 0).data(RuleListModel::PendingRole).toBool());
    QVERIFY(!model.index(0, 0).data(Qt::FontRole).isValid());

    // The run applied it: the same names, in place.
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    changed.clear();
    model.setRules(Rules{rule("nan_guard", true), rule("my_rule", !enabled)});
    QCOMPARE(reset.count(), 0);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(changed[0][0].toModelIndex().row(), 1);
    QCOMPARE(name.data(RuleListModel::EnabledRole).toBool(), !enabled);
    QCOMPARE(name.data(RuleListModel::PendingRole).toBool(), false);
    QVERIFY(!name.data(Qt::FontRole).isValid());
    QVERIFY(!model.isPending("my_rule"));
  }

  void aRefusedToggleIsClearedToo() {
    RuleListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setRules(rules("nan_guard+"));
    QVERIFY(model.setData(model.index(0, 0), Qt::Unchecked, Qt::CheckStateRole));
    QVERIFY(model.isPending("nan_guard"));
    model.setRules(rules("nan_guard+"));  // the run kept it enabled
    QVERIFY(!model.isPending("nan_guard"));
    QCOMPARE(listed(model), QString("nan_guard+"));
  }

  void setDataIgnoresWhatIsNotAToggle_data() {
    QTest::addColumn<int>("column");
    QTest::addColumn<int>("role");
    QTest::addColumn<int>("state");
    QTest::addRow("the current state") << 0 << int(Qt::CheckStateRole) << int(Qt::Checked);
    QTest::addRow("the origin column") << 1 << int(Qt::CheckStateRole) << int(Qt::Unchecked);
    QTest::addRow("an edit of the name") << 0 << int(Qt::EditRole) << int(Qt::Unchecked);
  }
  void setDataIgnoresWhatIsNotAToggle() {
    QFETCH(int, column);
    QFETCH(int, role);
    QFETCH(int, state);
    RuleListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setRules(rules("nan_guard+"));
    QSignalSpy toggled(&model, &RuleListModel::toggleRequested);
    QVERIFY(!model.setData(model.index(0, column), state, role));
    QCOMPARE(toggled.count(), 0);
    QVERIFY(!model.isPending("nan_guard"));
  }

  void updatesInPlaceOrResets_data() {
    QTest::addColumn<QString>("before");
    QTest::addColumn<QString>("after");
    QTest::addColumn<bool>("resets");
    QTest::addRow("same list, one flag") << "a+ b- c+"
                                         << "a+ b+ c+" << false;
    QTest::addRow("same list, unchanged") << "a+ b- c+"
                                          << "a+ b- c+" << false;
    QTest::addRow("reordered") << "a+ b- c+"
                               << "c+ a+ b-" << true;
    QTest::addRow("a rule added") << "a+ b-"
                                  << "a+ b- c+" << true;
    QTest::addRow("a rule removed") << "a+ b- c+"
                                    << "a+ c+" << true;
    QTest::addRow("emptied") << "a+ b-"
                             << "" << true;
    QTest::addRow("from empty") << ""
                                << "a+" << true;
  }
  void updatesInPlaceOrResets() {
    QFETCH(QString, before);
    QFETCH(QString, after);
    QFETCH(bool, resets);
    RuleListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setRules(rules(before));
    QCOMPARE(listed(model), before);
    QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
    model.setRules(rules(after));
    QCOMPARE(reset.count(), resets ? 1 : 0);
    QCOMPARE(listed(model), after);
  }
};

SYMTUNE_TEST_MAIN(TestRuleListModel)
#include "tst_rule_list_model.moc"
