#include "symtune/ui/control_dock.h"

#include <cmath>

#include <QComboBox>
#include <QGridLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QTableView>
#include <QVBoxLayout>

#include "read_only_table.h"
#include "symtune/ui/control_log_model.h"
#include "symtune/ui/sparkline.h"

namespace symtune::ui {

namespace {

QString noControl() {
  return QObject::tr("No controller: the run's session has no control block");
}

}  // namespace

ControlDock::ControlDock(QWidget* parent)
    : QWidget(parent),
      model_(new ControlLogModel(this)),
      view_(new QTableView(this)),
      summary_(new QLabel(noControl(), this)),
      status_(new QLabel(this)),
      reward_(new Sparkline(this)),
      microbatches_(new Sparkline(this)),
      knobs_(new QGridLayout) {
  view_->setModel(model_);
  view_->setObjectName("controlView");
  setUpReadOnlyTable(view_);
  summary_->setWordWrap(true);
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  reward_->setUnit(tr(" samples/s"));
  reward_->setPlaceholderText(tr("No step measured under the controller yet"));
  reward_->setToolTip(tr("Samples per second of the steps the online controller learnt from"));
  microbatches_->setPlaceholderText(tr("No step yet"));
  microbatches_->setToolTip(tr("The micro-batches each step ran as"));

  auto* charts = new QGridLayout;
  charts->addWidget(new QLabel(tr("Reward"), this), 0, 0);
  charts->addWidget(reward_, 0, 1);
  charts->addWidget(new QLabel(tr("Micro-batches"), this), 1, 0);
  charts->addWidget(microbatches_, 1, 1);
  charts->setColumnStretch(1, 1);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(summary_);
  layout->addLayout(knobs_);
  layout->addWidget(status_);
  layout->addLayout(charts);
  layout->addWidget(view_, 1);

  connect(model_, &ControlLogModel::summaryChanged, this, [this](const QString& text) {
    summary_->setText(text.isEmpty() ? noControl() : text);
    updateCharts();
  });
  // The editors follow the run's space and pins, not each step (the user may be choosing).
  connect(model_, &ControlLogModel::controlChanged, this, &ControlDock::rebuildEditors);
  updateEnabled();
}

QString ControlDock::summary() const {
  return summary_->text();
}

QString ControlDock::status() const {
  return status_->text();
}

QComboBox* ControlDock::pinEditor(const QString& name) const {
  for (const auto& [knob, editor] : editors_) {
    if (knob == name)
      return editor;
  }
  return nullptr;
}

void ControlDock::rebuildEditors() {
  const auto& control = model_->control();
  std::string shape;
  if (control) {
    for (const auto& k : control->knobs) {
      shape += k.name + ":";
      for (double v : k.values)
        shape += std::to_string(v) + ",";
      shape += "\n";
    }
  }
  if (shape != editorsShape_) {
    editorsShape_ = shape;
    for (auto& [knob, editor] : editors_)
      delete editor;
    editors_.clear();
    while (QLayoutItem* item = knobs_->takeAt(0)) {
      delete item->widget();
      delete item;
    }
    if (control) {
      int row = 0;
      for (const auto& k : control->knobs) {
        const QString name = QString::fromStdString(k.name);
        auto* label = new QLabel(name, this);
        label->setToolTip(QString::fromStdString(k.constraint));
        auto* editor = new QComboBox(this);
        editor->setObjectName(QStringLiteral("pin_") + name);
        editor->addItem(tr("free"));
        for (double v : k.values)
          editor->addItem(QString::number(v, 'g', 4), v);
        connect(editor, qOverload<int>(&QComboBox::activated), this, [this, name, editor](int i) {
          status_->setText(tr("Asking the run…"));
          const QVariant data = editor->itemData(i);
          Q_EMIT pinRequested(
              name, data.isValid() ? std::optional<double>(data.toDouble()) : std::nullopt);
        });
        knobs_->addWidget(label, row, 0);
        knobs_->addWidget(editor, row, 1);
        editors_.emplace_back(name, editor);
        ++row;
      }
      knobs_->setColumnStretch(1, 1);
    }
  }
  showPins();
  updateEnabled();
}

void ControlDock::showPins() {
  // Each editor shows the knob's pin as the run has it.
  const auto& control = model_->control();
  if (control) {
    for (const auto& k : control->knobs) {
      QComboBox* editor = pinEditor(QString::fromStdString(k.name));
      if (editor == nullptr)
        continue;
      const QSignalBlocker block(editor);
      int index = 0;
      if (k.pinned) {
        for (int i = 1; i < editor->count(); ++i) {
          if (std::abs(editor->itemData(i).toDouble() - *k.pinned) <= 1e-9)
            index = i;
        }
      }
      editor->setCurrentIndex(index);
    }
  }
}

void ControlDock::updateCharts() {
  reward_->setPoints(model_->series(ControlLogModel::MeasuredColumn));
  microbatches_->setPoints(model_->series(ControlLogModel::MicrobatchesColumn));
}

void ControlDock::setRunAttached(bool attached) {
  attached_ = attached;
  updateEnabled();
}

void ControlDock::updateEnabled() {
  const auto& control = model_->control();
  const bool online = attached_ && control && control->mode == "online";
  for (auto& [knob, editor] : editors_) {
    editor->setEnabled(online);
    editor->setToolTip(online ? tr("Pin the online controller's %1 on the running job").arg(knob)
                              : tr("Pinning needs a run under the online controller "
                                   "(control.mode \"online\")"));
  }
}

void ControlDock::commandFinished(bool ok, const QString& message) {
  status_->setText(ok ? message : tr("Refused: %1").arg(message));
  if (!ok)
    showPins();  // back to the run's pins
}

}  // namespace symtune::ui
