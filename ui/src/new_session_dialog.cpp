#include "symtune/ui/new_session_dialog.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QProcess>
#include <QPushButton>
#include <QRadioButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QVBoxLayout>

#include "symtune/core/session.h"
#include "symtune/core/zoo_catalog.h"
#include "symtune/ui/runner_launcher.h"

namespace symtune::ui {

namespace {
enum Source { Zoo = 0, File = 1 };
}

NewSessionDialog::NewSessionDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("New Session"));
  setMinimumWidth(520);
  name_ = new QLineEdit(tr("studio run"), this);

  source_ = new QButtonGroup(this);
  auto* zooButton = new QRadioButton(tr("Zoo model"), this);
  auto* fileButton = new QRadioButton(tr("TorchScript file"), this);
  source_->addButton(zooButton, Zoo);
  source_->addButton(fileButton, File);
  zooButton->setChecked(true);
  zoo_ = new QComboBox(this);
  for (const auto& entry : zooCatalog()) {
    zoo_->addItem(QString::fromStdString(entry.name), QString::fromStdString(entry.name));
    zoo_->setItemData(zoo_->count() - 1, QString::fromStdString(entry.description),
                      Qt::ToolTipRole);
  }
  preset_ = new QComboBox(this);
  auto fillPresets = [this] {
    preset_->clear();
    if (const ZooEntry* entry = findZooEntry(zoo_->currentData().toString().toStdString())) {
      for (const auto& p : entry->presets)
        preset_->addItem(QString::fromStdString(p));
    }
  };
  fillPresets();
  connect(zoo_, qOverload<int>(&QComboBox::currentIndexChanged), this, fillPresets);
  auto* zooRow = new QHBoxLayout;
  zooRow->addWidget(zoo_, 1);
  zooRow->addWidget(new QLabel(tr("preset"), this));
  zooRow->addWidget(preset_);

  file_ = new QLineEdit(this);
  file_->setPlaceholderText(tr("model.pt (torch.jit.save)"));
  auto* browse = new QPushButton(tr("Browse…"), this);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("TorchScript model"), QString(),
                                                      tr("TorchScript archives (*.pt *.pth)"));
    if (!path.isEmpty()) {
      file_->setText(path);
      source_->button(File)->setChecked(true);
    }
  });
  inputShape_ = new QLineEdit(QStringLiteral("32, 16"), this);
  inputShape_->setToolTip(tr("The first input's shape, batch dimension first"));
  classes_ = new QSpinBox(this);
  classes_->setRange(2, 1000000);
  classes_->setValue(10);
  auto* fileRow = new QHBoxLayout;
  fileRow->addWidget(file_, 1);
  fileRow->addWidget(browse);
  auto* shapeRow = new QHBoxLayout;
  shapeRow->addWidget(new QLabel(tr("input shape"), this));
  shapeRow->addWidget(inputShape_, 1);
  shapeRow->addWidget(new QLabel(tr("classes"), this));
  shapeRow->addWidget(classes_);

  steps_ = new QSpinBox(this);
  steps_->setRange(1, 100000000);
  steps_->setValue(500);
  batch_ = new QSpinBox(this);
  batch_->setRange(0, 1000000);
  batch_->setSpecialValueText(tr("the model's"));
  optimizer_ = new QComboBox(this);
  optimizer_->addItems({"adamw", "adam", "sgd"});
  lr_ = new QDoubleSpinBox(this);
  lr_->setDecimals(6);
  lr_->setRange(1e-6, 10);
  lr_->setSingleStep(1e-4);
  lr_->setValue(1e-3);
  sampling_ = new QSpinBox(this);
  sampling_->setRange(0, 100000);
  sampling_->setValue(5);
  sampling_->setSpecialValueText(tr("off"));
  sampling_->setSuffix(tr(" steps"));
  sampling_->setToolTip(tr("Per-node latency and memory for the graph's overlays, every N steps"));

  rules_ = new QListWidget(this);
  rules_->setMinimumHeight(120);
  problem_ = new QLabel(this);
  problem_->setWordWrap(true);
  problem_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  QPalette warn = problem_->palette();
  warn.setColor(QPalette::WindowText, QColor(200, 40, 40));
  problem_->setPalette(warn);

  auto* form = new QFormLayout;
  form->addRow(tr("Name"), name_);
  form->addRow(zooButton, zooRow);
  form->addRow(fileButton, fileRow);
  form->addRow(QString(), shapeRow);
  form->addRow(tr("Steps"), steps_);
  form->addRow(tr("Batch size"), batch_);
  auto* optimizerRow = new QHBoxLayout;
  optimizerRow->addWidget(optimizer_);
  optimizerRow->addWidget(new QLabel(tr("learning rate"), this));
  optimizerRow->addWidget(lr_, 1);
  form->addRow(tr("Optimizer"), optimizerRow);
  form->addRow(tr("Node statistics every"), sampling_);
  form->addRow(tr("Rules"), rules_);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(tr("Start"));
  connect(buttons, &QDialogButtonBox::accepted, this, &NewSessionDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &NewSessionDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(problem_);
  layout->addWidget(buttons);
}

void NewSessionDialog::setAvailableRules(const QJsonArray& rules) {
  rules_->clear();
  for (const auto& value : rules) {
    const QJsonObject r = value.toObject();
    auto* item = new QListWidgetItem(r["name"].toString(), rules_);
    item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsUserCheckable);
    item->setCheckState(Qt::Unchecked);
    item->setToolTip(r["description"].toString() + "\n" + r["origin"].toString());
  }
}

void NewSessionDialog::loadRules() {
  auto* process = new QProcess(this);
  connect(process, &QProcess::finished, this, [this, process](int code) {
    const QJsonDocument doc = QJsonDocument::fromJson(process->readAllStandardOutput());
    if (code == 0 && doc.isArray())
      setAvailableRules(doc.array());
    else
      problem_->setText(tr("The rules could not be listed: %1")
                            .arg(QString::fromUtf8(process->readAllStandardError()).trimmed()));
    process->deleteLater();
  });
  connect(process, &QProcess::errorOccurred, this, [this, process](QProcess::ProcessError) {
    problem_->setText(tr("The rules could not be listed: %1").arg(process->errorString()));
  });
  process->start(RunnerLauncher::runnerPath(), {QStringLiteral("rules"), QStringLiteral("list")});
}

int NewSessionDialog::samplingEvery() const {
  return sampling_->value();
}

QJsonObject NewSessionDialog::session() const {
  QJsonObject model;
  if (source_->checkedId() == Zoo) {
    model["zoo"] = zoo_->currentData().toString();
    model["preset"] = preset_->currentText();
  } else {
    model["file"] = file_->text();
    QJsonArray shape;
    for (const QString& part : inputShape_->text().split(
             QRegularExpression(QStringLiteral("[,x×\\s\\[\\]]+")), Qt::SkipEmptyParts))
      shape.append(part.toLongLong());
    model["inputs"] = QJsonArray{QJsonObject{{"shape", shape}}};
    model["classes"] = classes_->value();
  }
  QJsonObject session{
      {"format", "symtune-session"},
      {"version", 1},
      {"name", name_->text()},
      {"model", model},
      {"optimizer", QJsonObject{{"name", optimizer_->currentText()}, {"lr", lr_->value()}}},
      {"run", QJsonObject{{"steps", steps_->value()}}}};
  if (batch_->value() > 0)
    session["data"] = QJsonObject{{"batch_size", batch_->value()}};
  QJsonArray enabled;
  for (int i = 0; i < rules_->count(); ++i) {
    if (rules_->item(i)->checkState() == Qt::Checked)
      enabled.append(rules_->item(i)->text());
  }
  if (!enabled.isEmpty())
    session["rules"] = QJsonObject{{"enable", enabled}};
  return session;
}

QString NewSessionDialog::check() const {
  if (source_->checkedId() == File && file_->text().trimmed().isEmpty())
    return tr("model.file: choose a TorchScript file");
  try {
    // The registry's names are the runner's to check; the rest of the session is checked here.
    parseSession(QJsonDocument(session()).toJson().toStdString(), "new session");
  } catch (const SessionError& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

void NewSessionDialog::accept() {
  const QString problem = check();
  problem_->setText(problem);
  if (problem.isEmpty())
    QDialog::accept();
}

void NewSessionDialog::chooseZoo(const QString& model, const QString& preset) {
  source_->button(Zoo)->setChecked(true);
  zoo_->setCurrentIndex(zoo_->findData(model));
  preset_->setCurrentIndex(preset_->findText(preset));
}

void NewSessionDialog::chooseFile(const QString& path, const QString& inputShape, int classes) {
  source_->button(File)->setChecked(true);
  file_->setText(path);
  inputShape_->setText(inputShape);
  classes_->setValue(classes);
}

void NewSessionDialog::setSteps(int steps) {
  steps_->setValue(steps);
}

void NewSessionDialog::setName(const QString& name) {
  name_->setText(name);
}

void NewSessionDialog::enableRules(const QStringList& names) {
  for (int i = 0; i < rules_->count(); ++i) {
    auto* item = rules_->item(i);
    item->setCheckState(names.contains(item->text()) ? Qt::Checked : Qt::Unchecked);
  }
}

}  // namespace symtune::ui
