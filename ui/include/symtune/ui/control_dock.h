#pragma once
// The Controller dock: how the attached run configures its steps (docs/control.md) — a summary
// line, the online controller's decision log (ControlLogModel), its reward and the micro-batches
// the steps ran as, charted over the steps, and the run's knobs, each of which the user can pin on
// the running job: choosing a value asks for it (pinRequested), "free" lets the knob go, and the
// run answers (commandFinished).

#include <QString>
#include <QWidget>

#include <optional>
#include <string>
#include <vector>

class QComboBox;
class QGridLayout;
class QLabel;
class QTableView;

namespace symtune::ui {

class ControlLogModel;
class Sparkline;

class ControlDock : public QWidget {
  Q_OBJECT

 public:
  explicit ControlDock(QWidget* parent = nullptr);

  ControlLogModel* model() const { return model_; }
  QTableView* view() const { return view_; }
  QString summary() const;
  QString status() const;  // the last command's outcome
  Sparkline* rewardChart() const { return reward_; }
  Sparkline* microbatchesChart() const { return microbatches_; }

  // The pin editor of knob `name` (null when the run has no such knob): "free" or a value.
  QComboBox* pinEditor(const QString& name) const;
  // Pinning is enabled while a run under the online controller is attached.
  void setRunAttached(bool attached);
  void commandFinished(bool ok, const QString& message);

 Q_SIGNALS:
  // value none: let the knob go.
  void pinRequested(const QString& knob, std::optional<double> value);

 private:
  void rebuildEditors();
  void showPins();
  void updateCharts();
  void updateEnabled();

  ControlLogModel* model_;
  QTableView* view_;
  QLabel* summary_;
  QLabel* status_;
  Sparkline* reward_;
  Sparkline* microbatches_;
  QGridLayout* knobs_;
  std::vector<std::pair<QString, QComboBox*>> editors_;
  std::string editorsShape_;  // the knobs and values the editors were built for
  bool attached_ = false;
};

}  // namespace symtune::ui
