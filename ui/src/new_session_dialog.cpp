#include "symtune/ui/new_session_dialog.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
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
#include <QTemporaryFile>
#include <QTimer>
#include <QVBoxLayout>

#include <filesystem>

#include "symtune/core/session.h"
#include "symtune/core/zoo_catalog.h"
#include "symtune/ui/runner_launcher.h"

namespace symtune::ui {

namespace {

enum Source { Zoo = 0, File = 1 };

// "32, 32", "[32 x 32]", "32": the numbers in a size field.
QJsonArray numbersIn(const QString& text) {
  QJsonArray out;
  for (const QString& part :
       text.split(QRegularExpression(QStringLiteral("[,x×\\s\\[\\]]+")), Qt::SkipEmptyParts))
    out.append(part.toLongLong());
  return out;
}

// A position ("0", "2") or a key ("logits") as the session writes it.
QJsonValue outputRef(const QString& text) {
  bool number = false;
  const int i = text.trimmed().toInt(&number);
  return number ? QJsonValue(i) : QJsonValue(text.trimmed());
}

// A path the user typed, relative to the working folder, made absolute ("" stays "").
QString absolutePath(const QString& text) {
  const QString path = text.trimmed();
  return path.isEmpty() ? path : QDir::current().absoluteFilePath(path);
}

QStringList names(const QString& text) {
  QStringList out;
  for (const QString& part : text.split(QLatin1Char(','), Qt::SkipEmptyParts)) {
    if (!part.trimmed().isEmpty())
      out.append(part.trimmed());
  }
  return out;
}

}  // namespace

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
  classes_->setRange(1, 1000000);
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
  trainingRows_ = new QWidget(this);
  trainingRows_->setLayout(buildTrainingRows());
  form->addRow(QString(), trainingRows_);
  form->addRow(tr("Steps"), steps_);
  form->addRow(tr("Batch size"), batch_);
  auto* optimizerRow = new QHBoxLayout;
  optimizerRow->addWidget(optimizer_);
  optimizerRow->addWidget(new QLabel(tr("learning rate"), this));
  optimizerRow->addWidget(lr_, 1);
  form->addRow(tr("Optimizer"), optimizerRow);
  form->addRow(tr("Node statistics every"), sampling_);
  form->addRow(tr("Rules"), rules_);

  checked_ = new QLabel(this);
  checked_->setWordWrap(true);
  checked_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  checkTimer_ = new QTimer(this);
  checkTimer_->setSingleShot(true);
  checkTimer_->setInterval(400);
  connect(checkTimer_, &QTimer::timeout, this, &NewSessionDialog::startRunnerCheck);
  checkFile_ =
      new QTemporaryFile(QDir::temp().filePath(QStringLiteral("symtune-new-XXXXXX.json")), this);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  start_ = buttons->button(QDialogButtonBox::Ok);
  start_->setText(tr("Start"));
  connect(buttons, &QDialogButtonBox::accepted, this, &NewSessionDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &NewSessionDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(problem_);
  layout->addWidget(checked_);
  layout->addWidget(buttons);

  // Checked as the user types.
  for (QLineEdit* edit : findChildren<QLineEdit*>())
    connect(edit, &QLineEdit::textChanged, this, &NewSessionDialog::revalidate);
  for (QComboBox* box : findChildren<QComboBox*>())
    connect(box, qOverload<int>(&QComboBox::currentIndexChanged), this,
            &NewSessionDialog::revalidate);
  for (QSpinBox* box : findChildren<QSpinBox*>())
    connect(box, qOverload<int>(&QSpinBox::valueChanged), this, &NewSessionDialog::revalidate);
  for (QDoubleSpinBox* box : findChildren<QDoubleSpinBox*>())
    connect(box, qOverload<double>(&QDoubleSpinBox::valueChanged), this,
            &NewSessionDialog::revalidate);
  connect(source_, &QButtonGroup::idToggled, this, &NewSessionDialog::revalidate);
  // A rule ticked is checked too: a rewrite changes the model the check runs (until 2026-12-07
  // Start went on a "Checked" that said nothing of it).
  connect(rules_, &QListWidget::itemChanged, this, &NewSessionDialog::revalidate);
  revalidate();
}

QLayout* NewSessionDialog::buildTrainingRows() {
  auto* form = new QFormLayout;
  form->setContentsMargins(0, 0, 0, 0);
  dataFormat_ = new QComboBox(this);
  dataFormat_->addItem(tr("synthetic"), QString());
  for (const char* format : {"npy", "npz", "torch", "csv", "mnist", "cifar10", "images"})
    dataFormat_->addItem(QString::fromLatin1(format), QString::fromLatin1(format));
  dataFile_ = new QLineEdit(this);
  dataFile_->setPlaceholderText(tr("the data file or folder"));
  auto* browse = new QPushButton(tr("Browse…"), this);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString format = dataFormat_->currentData().toString();
    const bool folder = format == "mnist" || format == "images";
    const QString path =
        folder ? QFileDialog::getExistingDirectory(this, tr("Data folder"))
               : QFileDialog::getOpenFileName(this, tr("Data file"), QString(),
                                              tr("Data (*.npz *.npy *.pt *.pth *.csv *.bin);;All "
                                                 "files (*)"));
    if (!path.isEmpty())
      dataFile_->setText(path);
  });
  auto* fileRow = new QHBoxLayout;
  fileRow->addWidget(dataFormat_);
  fileRow->addWidget(dataFile_, 1);
  fileRow->addWidget(browse);
  form->addRow(tr("Data"), fileRow);

  dataInputs_ = new QLineEdit(this);
  dataInputs_->setPlaceholderText(tr("x, lengths"));
  dataInputs_->setToolTip(
      tr("The arrays forward takes, in order (keys, positions, columns or "
         ".npy files)"));
  dataTarget_ = new QLineEdit(this);
  dataTarget_->setPlaceholderText(tr("y"));
  dataLengths_ = new QLineEdit(this);
  dataLengths_->setPlaceholderText(tr("none"));
  dataLengths_->setToolTip(tr("Sequences of different lengths: the array of each one's length"));
  auto* arraysRow = new QHBoxLayout;
  arraysRow->addWidget(dataInputs_, 2);
  arraysRow->addWidget(new QLabel(tr("target"), this));
  arraysRow->addWidget(dataTarget_, 1);
  arraysRow->addWidget(new QLabel(tr("lengths"), this));
  arraysRow->addWidget(dataLengths_, 1);
  form->addRow(tr("Inputs"), arraysRow);

  imageResize_ = new QLineEdit(this);
  imageResize_->setPlaceholderText(tr("as stored"));
  imageCrop_ = new QLineEdit(this);
  imageCrop_->setPlaceholderText(tr("none"));
  validation_ = new QDoubleSpinBox(this);
  validation_->setRange(0, 0.9);
  validation_->setSingleStep(0.05);
  validation_->setSpecialValueText(tr("none"));
  validation_->setToolTip(tr("The share of the samples held out for validation"));
  auto* imageRow = new QHBoxLayout;
  imageRow->addWidget(new QLabel(tr("images: resize"), this));
  imageRow->addWidget(imageResize_, 1);
  imageRow->addWidget(new QLabel(tr("crop"), this));
  imageRow->addWidget(imageCrop_, 1);
  imageRow->addWidget(new QLabel(tr("held out"), this));
  imageRow->addWidget(validation_);
  form->addRow(QString(), imageRow);

  lossKind_ = new QComboBox(this);
  lossKind_->addItems({"cross_entropy", "nll", "mse", "l1", "smooth_l1", "bce_with_logits"});
  lossMethod_ = new QLineEdit(this);
  lossMethod_->setPlaceholderText(tr("the model's own loss method, if any"));
  auto* lossRow = new QHBoxLayout;
  lossRow->addWidget(lossKind_);
  lossRow->addWidget(lossMethod_, 1);
  form->addRow(tr("Loss"), lossRow);

  output_ = new QLineEdit(this);
  output_->setPlaceholderText(tr("the tensor forward returns"));
  output_->setToolTip(
      tr("When forward returns a tuple, list, dict or named tuple: the position "
         "or key of the output the loss reads"));
  auxiliary_ = new QLineEdit(this);
  auxiliary_->setPlaceholderText(tr("aux:0.3"));
  auxiliary_->setToolTip(
      tr("Auxiliary outputs whose losses add to the training loss, as "
         "output:weight, comma-separated"));
  auto* outputRow = new QHBoxLayout;
  outputRow->addWidget(output_, 1);
  outputRow->addWidget(new QLabel(tr("auxiliary"), this));
  outputRow->addWidget(auxiliary_, 1);
  form->addRow(tr("Output"), outputRow);
  return form;
}

QJsonObject NewSessionDialog::dataBlock() const {
  const QString format = dataFormat_->currentData().toString();
  if (format.isEmpty())
    return {};
  QJsonObject data{{"format", format}};
  // npy names a file per array; the other formats name arrays of one file.
  const bool npy = format == "npy";
  const auto path = [npy](const QString& text) { return npy ? absolutePath(text) : text; };
  if (!npy)
    data["file"] = absolutePath(dataFile_->text().trimmed());
  QStringList inputs = names(dataInputs_->text());
  for (QString& input : inputs)
    input = path(input);
  if (!inputs.isEmpty())
    data["inputs"] = QJsonArray::fromStringList(inputs);
  if (!dataTarget_->text().trimmed().isEmpty())
    data["target"] = path(dataTarget_->text().trimmed());
  if (!dataLengths_->text().trimmed().isEmpty())
    data["lengths"] = path(dataLengths_->text().trimmed());
  if (validation_->value() > 0)
    data["validation_fraction"] = validation_->value();
  if (format == "images") {
    QJsonObject image;
    if (const QJsonArray resize = numbersIn(imageResize_->text()); !resize.isEmpty())
      image["resize"] = resize.size() == 1 ? resize.first() : QJsonValue(resize);
    if (const QJsonArray crop = numbersIn(imageCrop_->text()); !crop.isEmpty())
      image["crop"] = crop.size() == 1 ? crop.first() : QJsonValue(crop);
    data["image"] = image;
  }
  return data;
}

QJsonObject NewSessionDialog::lossBlock() const {
  QJsonObject loss{{"kind", lossKind_->currentText()}};
  if (!lossMethod_->text().trimmed().isEmpty())
    loss["method"] = lossMethod_->text().trimmed();
  return loss;
}

void NewSessionDialog::chooseData(const QString& format, const QString& file, const QString& inputs,
                                  const QString& target, double validationFraction) {
  const int at = dataFormat_->findData(format == "synthetic" ? QString() : format);
  dataFormat_->setCurrentIndex(at < 0 ? 0 : at);
  dataFile_->setText(file);
  dataInputs_->setText(inputs);
  dataTarget_->setText(target);
  validation_->setValue(validationFraction);
}

void NewSessionDialog::chooseImage(const QString& resize, const QString& crop) {
  imageResize_->setText(resize);
  imageCrop_->setText(crop);
}

void NewSessionDialog::chooseLoss(const QString& kind, const QString& method) {
  lossKind_->setCurrentText(kind);
  lossMethod_->setText(method);
}

void NewSessionDialog::chooseOutputs(const QString& output, const QString& auxiliary) {
  output_->setText(output);
  auxiliary_->setText(auxiliary);
}

void NewSessionDialog::setBatchSize(int batch) {
  batch_->setValue(batch);
}

NewSessionDialog::~NewSessionDialog() {
  // ~QWidget deletes the labels before the processes made after them, and ~QProcess waits for a
  // running one and reports its end: to lambdas that would write to the labels deleted.
  for (QProcess* process : findChildren<QProcess*>()) {
    process->disconnect(this);
    process->kill();
  }
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
    model["file"] = absolutePath(file_->text());
    const QJsonArray shape = numbersIn(inputShape_->text());
    // With data files the data gives the inputs: a shape given anyway is checked against it.
    if (!shape.isEmpty() || dataFormat_->currentIndex() == 0)
      model["inputs"] = QJsonArray{QJsonObject{{"shape", shape}}};
    model["classes"] = classes_->value();
    if (!output_->text().trimmed().isEmpty())
      model["output"] = outputRef(output_->text());
    QJsonArray auxiliary;
    for (const QString& item : names(auxiliary_->text())) {
      const int colon = item.lastIndexOf(QLatin1Char(':'));
      QJsonObject aux{{"output", outputRef(colon < 0 ? item : item.left(colon))}};
      if (colon >= 0)
        aux["weight"] = item.mid(colon + 1).trimmed().toDouble();
      auxiliary.append(aux);
    }
    if (!auxiliary.isEmpty())
      model["auxiliary_outputs"] = auxiliary;
  }
  QJsonObject session{
      {"format", "symtune-session"},
      {"version", 1},
      {"name", name_->text()},
      {"model", model},
      {"optimizer", QJsonObject{{"name", optimizer_->currentText()}, {"lr", lr_->value()}}},
      {"run", QJsonObject{{"steps", steps_->value()}}}};
  QJsonObject data = source_->checkedId() == File ? dataBlock() : QJsonObject{};
  if (batch_->value() > 0)
    data["batch_size"] = batch_->value();
  if (!data.isEmpty())
    session["data"] = data;
  if (source_->checkedId() == File)
    session["loss"] = lossBlock();
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
  Session parsed;
  try {
    // The registry's names are the runner's to check; the rest of the session is checked here.
    parsed = parseSession(QJsonDocument(session()).toJson().toStdString(), "new session");
  } catch (const SessionError& e) {
    return QString::fromStdString(e.what());
  }
  // What the loader finds first (the files' contents it reads when the run starts).
  if (!parsed.model.isZoo() && !std::filesystem::is_regular_file(parsed.model.file))
    return QString::fromStdString(parsed.model.file.string() + ": no such model file");
  const DataFilesSpec& files = parsed.data.files;
  if (files.enabled()) {
    std::vector<std::filesystem::path> named;
    if (files.format == "npy") {
      for (const auto& group : files.inputs)
        named.emplace_back(group.front());
      named.emplace_back(files.target);
    } else {
      named.push_back(files.file);
    }
    for (const auto& path : named) {
      if (!std::filesystem::exists(path))
        return QString::fromStdString(path.string() + ": no such file or folder");
    }
  }
  return {};
}

QString NewSessionDialog::shownProblem() const {
  return problem_->text();
}

void NewSessionDialog::revalidate() {
  const QString problem = check();
  problem_->setText(problem);
  start_->setEnabled(problem.isEmpty());
  trainingRows_->setEnabled(source_->checkedId() == File);
  // The runner's check of the session as it now stands, a moment after the last edit.
  if (runnerCheck_ != nullptr) {
    runnerCheck_->disconnect(this);
    runnerCheck_->kill();
    runnerCheck_->deleteLater();
    runnerCheck_ = nullptr;
  }
  startWhenChecked_ = false;  // Start again for the session as it now stands
  checked_->clear();
  if (problem.isEmpty())
    checkTimer_->start();
  else
    checkTimer_->stop();
}

void NewSessionDialog::startRunnerCheck() {
  Session s;
  try {
    s = parseSession(QJsonDocument(session()).toJson().toStdString(), "new session");
  } catch (const SessionError&) {
    return;  // revalidate() said so
  }
  // The runner reads it from a temporary file: paths the user gave relative to the working
  // folder become absolute.
  const auto absolute = [](std::filesystem::path& p) {
    if (!p.empty())
      p = std::filesystem::absolute(p);
  };
  absolute(s.model.file);
  absolute(s.data.files.file);
  if (s.data.files.format == "npy") {
    for (auto& group : s.data.files.inputs)
      group.front() = std::filesystem::absolute(group.front()).string();
    s.data.files.target = std::filesystem::absolute(s.data.files.target).string();
    if (!s.data.files.lengths.empty())
      s.data.files.lengths = std::filesystem::absolute(s.data.files.lengths).string();
  }
  s.binding.useTable = false;  // nothing read or written beside the temporary file
  if (!checkFile_->open()) {
    if (startWhenChecked_)
      accept();  // no check to wait for
    return;
  }
  checkFile_->resize(0);
  checkFile_->write(QByteArray::fromStdString(sessionJson(s)));
  checkFile_->close();
  runnerCheck_ = new QProcess(this);
  connect(runnerCheck_, &QProcess::finished, this,
          [this](int code, QProcess::ExitStatus) { runnerChecked(code); });
  connect(runnerCheck_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart && runnerCheck_ != nullptr) {  // no runner: parser only
      runnerCheck_->deleteLater();
      runnerCheck_ = nullptr;
      checked_->clear();
      if (startWhenChecked_)
        accept();
    }
  });
  checked_->setText(tr("Checking the model and data…"));
  runnerCheck_->start(RunnerLauncher::runnerPath(),
                      {QStringLiteral("check"), checkFile_->fileName()});
}

void NewSessionDialog::runnerChecked(int exitCode) {
  QProcess* process = runnerCheck_;
  if (process == nullptr)
    return;
  runnerCheck_ = nullptr;
  process->deleteLater();
  if (exitCode == 0) {
    checked_->setText(
        tr("Checked: %1").arg(QString::fromUtf8(process->readAllStandardOutput()).trimmed()));
    if (startWhenChecked_)
      accept();
    return;
  }
  startWhenChecked_ = false;
  // "symtune: error: /tmp/symtune-new-….json: mlp.pt: …": the problem without the runner's and
  // the temporary file's names.
  QString why = QString::fromUtf8(process->readAllStandardError()).trimmed();
  for (const QString& prefix :
       {QStringLiteral("symtune: error: "), checkFile_->fileName() + QStringLiteral(": ")}) {
    if (why.startsWith(prefix))
      why = why.mid(prefix.size());
  }
  checked_->clear();
  problem_->setText(why.isEmpty() ? tr("The runner's check failed (exit status %1)").arg(exitCode)
                                  : why);
  start_->setEnabled(false);
}

QString NewSessionDialog::checkedText() const {
  return checked_->text().startsWith(tr("Checked: ")) ? checked_->text().mid(tr("Checked: ").size())
                                                      : QString();
}

bool NewSessionDialog::checking() const {
  return checkTimer_->isActive() || runnerCheck_ != nullptr;
}

void NewSessionDialog::setCheckDelay(int ms) {
  checkTimer_->setInterval(ms);
}

void NewSessionDialog::accept() {
  if (!start_->isEnabled() && !problem_->text().isEmpty())
    return;  // the runner's check found a problem: shown
  const QString problem = check();
  problem_->setText(problem);
  if (!problem.isEmpty())
    return;
  if (checking()) {
    // docs/studio.md: Start waits for the runner's check; it starts once the check passes.
    startWhenChecked_ = true;
    checked_->setText(tr("Checking the model and data… the run starts when the check passes"));
    return;
  }
  startWhenChecked_ = false;
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
