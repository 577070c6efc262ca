#include "symtune/ui/rules_dock.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeySequence>
#include <QLabel>
#include <QPushButton>
#include <QRegularExpression>
#include <QSplitter>
#include <QTreeView>
#include <QVBoxLayout>

#include "symtune/core/rule_pack.h"
#include "symtune/ui/rule_editor.h"
#include "symtune/ui/rule_list_model.h"

namespace symtune::ui {

RulesDock::RulesDock(QWidget* parent)
    : QWidget(parent),
      model_(new RuleListModel(this)),
      view_(new QTreeView),
      removeButton_(new QPushButton(tr("Remove"))),
      editor_(new RuleEditor),
      status_(new QLabel),
      applyButton_(new QPushButton(tr("Apply to run"))),
      exportButton_(new QPushButton(tr("Export pack…"))) {
  view_->setObjectName("ruleList");
  view_->setModel(model_);
  view_->setRootIsDecorated(false);
  view_->setUniformRowHeights(true);
  view_->setAllColumnsShowFocus(true);
  view_->setSelectionMode(QAbstractItemView::SingleSelection);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->header()->setSectionResizeMode(RuleListModel::NameColumn, QHeaderView::ResizeToContents);
  view_->header()->setStretchLastSection(true);

  removeButton_->setObjectName("removeRule");
  removeButton_->setToolTip(tr("Remove the selected rule from the run"));
  editor_->setObjectName("ruleEditor");
  status_->setObjectName("ruleStatus");
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  applyButton_->setObjectName("applyRules");
  applyButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  applyButton_->setToolTip(tr("Add the editor's rules to the running job (%1)")
                               .arg(applyButton_->shortcut().toString(QKeySequence::NativeText)));
  exportButton_->setObjectName("exportPack");
  exportButton_->setToolTip(tr("Save the editor's rules as a rule pack"));

  auto* listPart = new QWidget;
  auto* listLayout = new QVBoxLayout(listPart);
  listLayout->setContentsMargins(0, 0, 0, 0);
  listLayout->addWidget(view_);
  auto* listButtons = new QHBoxLayout;
  listButtons->addStretch();
  listButtons->addWidget(removeButton_);
  listLayout->addLayout(listButtons);

  auto* editorPart = new QWidget;
  auto* editorLayout = new QVBoxLayout(editorPart);
  editorLayout->setContentsMargins(0, 0, 0, 0);
  editorLayout->addWidget(editor_);
  editorLayout->addWidget(status_);
  auto* editorButtons = new QHBoxLayout;
  editorButtons->addWidget(applyButton_);
  editorButtons->addStretch();
  editorButtons->addWidget(exportButton_);
  editorLayout->addLayout(editorButtons);

  auto* splitter = new QSplitter(Qt::Vertical);
  splitter->addWidget(listPart);
  splitter->addWidget(editorPart);
  splitter->setChildrenCollapsible(false);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(splitter);

  connect(model_, &RuleListModel::toggleRequested, this, &RulesDock::toggleRequested);
  connect(removeButton_, &QPushButton::clicked, this, &RulesDock::removeSelected);
  connect(applyButton_, &QPushButton::clicked, this, &RulesDock::apply);
  connect(exportButton_, &QPushButton::clicked, this, &RulesDock::exportWithDialog);
  connect(editor_, &RuleEditor::checked, this, [this](bool ok, const QString& message) {
    showStatus(message, !ok);
    updateButtons();
  });
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &RulesDock::updateButtons);
  connect(model_, &QAbstractItemModel::modelReset, this, &RulesDock::updateButtons);

  editor_->checkNow();
  setRunAttached(false);
}

QString RulesDock::statusText() const {
  return status_->text();
}

void RulesDock::setRunAttached(bool attached) {
  runAttached_ = attached;
  view_->setEnabled(attached);  // no toggles without a run to ask
  if (!attached)
    model_->clearPending();  // no run left to apply them
  updateButtons();
}

void RulesDock::updateButtons() {
  const bool rulesOk = editor_->isOk() && editor_->ruleCount() > 0;
  applyButton_->setEnabled(runAttached_ && rulesOk);
  exportButton_->setEnabled(rulesOk);
  removeButton_->setEnabled(runAttached_ && view_->selectionModel()->hasSelection());
}

void RulesDock::showStatus(const QString& text, bool error) {
  status_->setText(text);
  QPalette p = palette();
  if (error) {
    const bool dark = p.color(QPalette::Window).lightness() < 128;
    p.setColor(QPalette::WindowText, dark ? QColor("#ff6b6b") : QColor("#c00000"));
  }
  status_->setPalette(p);
}

void RulesDock::apply() {
  if (!runAttached_ || !editor_->checkNow() || editor_->ruleCount() == 0)
    return;
  appliedSource_ = editor_->toPlainText();
  showStatus(tr("Applying…"), false);
  Q_EMIT applyRequested(appliedSource_);
}

void RulesDock::removeSelected() {
  const QModelIndexList rows = view_->selectionModel()->selectedRows();
  if (!runAttached_ || rows.isEmpty())
    return;
  Q_EMIT removeRequested(model_->nameAt(rows.first().row()));
}

void RulesDock::commandFinished(const QString& command, bool ok, const QString& message,
                                const QString& rule, const QStringList& warnings) {
  if (!ok && command == "add_rule" && editor_->toPlainText() == appliedSource_) {
    // The run checked the same text: put its error where the checker's would be.
    static const QRegularExpression at(R"(^(\d+):(\d+): (.*)$)",
                                       QRegularExpression::DotMatchesEverythingOption);
    const auto match = at.match(message);
    if (match.hasMatch())
      editor_->showError(match.captured(1).toInt(), match.captured(2).toInt(), match.captured(3));
  }
  if (!ok && command == "toggle_rule" && rule.isEmpty())
    model_->clearPending();
  else if (!ok && command == "toggle_rule")
    model_->clearPending(rule);
  QString text = message;
  if (text.isEmpty())
    text = ok ? tr("%1: done").arg(command) : tr("%1 failed").arg(command);
  for (const QString& warning : warnings)
    text += "\n" + tr("Warning: %1").arg(warning);
  showStatus(text, !ok || !warnings.isEmpty());
  updateButtons();
}

QString RulesDock::exportPack(const QString& path, const QString& name, const QString& version) {
  try {
    const auto pack = rules::packFromText(editor_->toPlainText().toStdString(), name.toStdString(),
                                          version.toStdString(), "");
    rules::saveRulePack(path.toStdString(), pack);
    return {};
  } catch (const std::exception& e) {  // RuleError, RulePackError, filesystem errors
    return QString::fromStdString(e.what());
  }
}

void RulesDock::exportWithDialog() {
  if (!editor_->checkNow())
    return;
  const QString path = QFileDialog::getSaveFileName(this, tr("Export rule pack"), "rules.json",
                                                    tr("Rule packs (*.json)"));
  if (path.isEmpty())
    return;
  const QString name = QFileInfo(path).completeBaseName();
  const QString error = exportPack(path, name, "1.0.0");
  if (error.isEmpty())
    showStatus(tr("Exported pack %1 1.0.0 to %2").arg(name, QDir::toNativeSeparators(path)), false);
  else
    showStatus(error, true);
}

}  // namespace symtune::ui
