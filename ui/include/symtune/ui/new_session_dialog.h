#pragma once
// File ▸ New Session: a zoo model and preset, or a TorchScript file with its input shape, the
// data it trains on (synthetic, or files in one of the data formats), its loss (a kind, or the
// model's own method) and which of its outputs the loss reads (and auxiliary outputs with their
// weights); the steps and optimizer; the rules to enable (every rule the runner's registry holds,
// read with `symtune-runner rules list`). The dialog builds the session JSON
// (docs/session-format.md) and checks it as the user types, with the session parser and for the
// files it names, then (a moment after the last edit) with `symtune-runner check`, which sets the
// run up as --batch would — the model loaded, the data read, the model run on the first batch —
// showing the problem in the loader's words, or what it would train; Start waits for a session
// that passes. The studio then starts it.

#include <QDialog>
#include <QJsonObject>
#include <QString>
#include <QStringList>

class QButtonGroup;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLayout;
class QLineEdit;
class QProcess;
class QPushButton;
class QTemporaryFile;
class QTimer;
class QListWidget;
class QSpinBox;

namespace symtune::ui {

class NewSessionDialog : public QDialog {
  Q_OBJECT

 public:
  explicit NewSessionDialog(QWidget* parent = nullptr);
  // Stops its processes first: one still running would report to a dialog half destroyed.
  ~NewSessionDialog() override;

  // The session as chosen (no check), its model and data paths absolute (relative ones are taken
  // from the working folder, as the check takes them; the run reads them from its own folder).
  QJsonObject session() const;
  // Checks session() with the session parser, then that the model and data files exist: "" or
  // the problem, one line as the loader words it ("model.inputs: …", "/data/x.npz: no such
  // file").
  QString check() const;
  // The problem shown under the form: check()'s, kept current as the user types, or the runner's
  // check's once it has answered.
  QString shownProblem() const;
  // What the runner's check said the session would train ("" until it answered, or when it
  // found a problem); whether it is still to answer.
  QString checkedText() const;
  bool checking() const;
  // How long after the last edit the runner's check starts (ms; tests make it 0).
  void setCheckDelay(int ms);

  // The rules offered, from `symtune-runner rules list` (loadRules runs it) or given directly.
  void setAvailableRules(const QJsonArray& rules);
  void loadRules();
  // Per-node statistics every N steps once attached (0: off).
  int samplingEvery() const;

  // For tests and scripts: choose without clicking.
  void chooseZoo(const QString& model, const QString& preset);
  void chooseFile(const QString& path, const QString& inputShape, int classes);
  // Data files (format "" or "synthetic": synthetic data); `inputs` comma-separated.
  void chooseData(const QString& format, const QString& file, const QString& inputs,
                  const QString& target, double validationFraction = 0);
  void chooseImage(const QString& resize, const QString& crop);
  void chooseLoss(const QString& kind, const QString& method = {});
  // The output the loss reads (a position or a key; "" for a tensor) and auxiliary outputs as
  // "aux:0.3, 2:0.5" (output:weight, the weight 1 when left out).
  void chooseOutputs(const QString& output, const QString& auxiliary = {});
  void setBatchSize(int batch);
  void setSteps(int steps);
  void setName(const QString& name);
  void enableRules(const QStringList& names);

  // Only when check() passes (the problem is shown otherwise) and, while the runner's check is
  // under way, once it has passed.
  void accept() override;

 private:
  QLayout* buildTrainingRows();  // the data, loss and outputs of a file model
  void revalidate();             // check() into the problem line and the Start button
  void startRunnerCheck();       // symtune-runner check on the session as it stands
  void runnerChecked(int exitCode);
  QJsonObject dataBlock() const;
  QJsonObject lossBlock() const;

  QLineEdit* name_;
  QButtonGroup* source_;
  QComboBox *zoo_, *preset_, *optimizer_;
  QLineEdit *file_, *inputShape_;
  QSpinBox *classes_, *steps_, *batch_, *sampling_;
  QDoubleSpinBox* lr_;
  QListWidget* rules_;
  QLabel* problem_;
  QComboBox *dataFormat_, *lossKind_;
  QLineEdit *dataFile_, *dataInputs_, *dataTarget_, *dataLengths_, *imageResize_, *imageCrop_;
  QLineEdit *lossMethod_, *output_, *auxiliary_;
  QDoubleSpinBox* validation_;
  QWidget* trainingRows_;
  QPushButton* start_;
  QLabel* checked_;
  QTimer* checkTimer_;
  QProcess* runnerCheck_ = nullptr;  // the check under way, if any
  bool startWhenChecked_ = false;    // Start was pressed while it ran
  QTemporaryFile* checkFile_;        // the session it checks
};

}  // namespace symtune::ui
