// symtune: the studio, and the front door of the command line. This process never loads LibTorch
// (docs/architecture.md, "Libraries and what they may use"): `--batch` hands over to
// symtune-runner, which sits next to it.

#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "bindings_command.h"
#include "command_line.h"
#include "rules_command.h"
#include "symtune/core/version.h"

#ifdef SYMTUNE_HAS_STUDIO
#include <QApplication>
#include <QIcon>
#include <QPixmap>
#include <QScreen>
#include <QTimer>

#include "symtune/graphview/graph_model.h"
#include "symtune/ui/graph_panel.h"
#include "symtune/ui/main_window.h"
#include "symtune/ui/run_history_model.h"
#endif

namespace {

#ifdef SYMTUNE_HAS_STUDIO
symtune::graphview::Overlay overlayNamed(const std::string& name) {
  using symtune::graphview::Overlay;
  if (name == "latency")
    return Overlay::Latency;
  if (name == "memory")
    return Overlay::Memory;
  if (name == "flops")
    return Overlay::Flops;
  if (name == "gradnorm")
    return Overlay::GradNorm;
  if (name == "gpu-time")
    return Overlay::GpuTime;
  if (name == "kernels")
    return Overlay::Kernels;
  if (name == "binding")
    return Overlay::Binding;
  if (name == "remat")
    return Overlay::Remat;
  return Overlay::None;
}

// --screenshot: once the attached run has done `steps` steps and its per-node figures are
// painted, the window as the X server shows it (under Xvfb in scripts/screenshot.sh) is saved,
// the run is stopped and the studio quits.
void screenshotWhenReady(symtune::ui::MainWindow& window, const QString& path, int64_t steps) {
  auto* poll = new QTimer(&window);
  QObject::connect(poll, &QTimer::timeout, &window, [&window, poll, path, steps] {
    const auto* run = window.currentRun();
    const auto* model = window.graphPanel()->forwardModel();
    if (run == nullptr || run->rowCount() < steps || model->statsStep() < 0)
      return;
    poll->stop();
    // The hottest op selected: the inspector shows it, the backward view marks its nodes.
    symtune::NodeId hottest;
    double most = -1;
    for (const auto& n : model->graph()->nodes()) {
      const auto v = model->value(symtune::graphview::Overlay::Latency, n.id);
      if (v && *v > most) {
        most = *v;
        hottest = n.id;
      }
    }
    if (hottest.valid())
      window.graphPanel()->findNext(QStringLiteral("n%1").arg(hottest.value()));
    QTimer::singleShot(1500, &window, [&window, path] {  // the charts' and overlay's repaint
      const QPixmap shot = window.screen()->grabWindow(window.winId());
      const bool saved = shot.save(path, "PNG");
      std::cerr << (saved ? "symtune: wrote " : "symtune: error: cannot write ")
                << path.toStdString() << std::endl;
      window.stopRun();
      QTimer::singleShot(500, qApp, [saved] { QApplication::exit(saved ? 0 : 1); });
    });
  });
  poll->start(200);
}
#endif

int fail(const std::string& message, int code) {
  std::cerr << "symtune: error: " << message << std::endl;
  return code;
}

std::filesystem::path runnerPath() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : self.parent_path()) / "symtune-runner";
}

// Replaces this process with symtune-runner given the same arguments; returns only on failure.
int handOverToRunner(char** argv) {
  const auto runner = runnerPath();
  argv[0] = const_cast<char*>("symtune-runner");
  ::execv(runner.c_str(), argv);
  return fail("cannot start " + runner.string() + ": " + std::strerror(errno), 2);
}

}  // namespace

int main(int argc, char** argv) {
  symtune::app::CommandLine cl;
  try {
    cl = symtune::app::parseCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::invalid_argument& e) {
    return fail(e.what(), 2);
  }
#ifdef SYMTUNE_HAS_STUDIO
  constexpr bool kStudio = true;
#else
  constexpr bool kStudio = false;
#endif
  switch (cl.mode) {
    case symtune::app::CommandLine::Mode::Help:
      std::cout << symtune::app::usage("symtune", kStudio);
      return 0;
    case symtune::app::CommandLine::Mode::Version:
      std::cout << "symtune " << symtune::kVersion << (kStudio ? " (studio)" : " (no studio)")
                << std::endl;
      return 0;
    case symtune::app::CommandLine::Mode::Batch:
    case symtune::app::CommandLine::Mode::Graph:
    case symtune::app::CommandLine::Mode::Tune:
    case symtune::app::CommandLine::Mode::Check:
      return handOverToRunner(argv);
    case symtune::app::CommandLine::Mode::Rules:
      // A rewrite's IR needs LibTorch's parser: the runner checks such files. It also knows the
      // built-in and plugins' rules an imported pack must not reuse.
      if ((cl.rulesCommand == "list" || cl.rulesCommand == "import" ||
           symtune::app::needsRewriteCheck(cl)) &&
          std::filesystem::exists(runnerPath()))
        return handOverToRunner(argv);
      return symtune::app::runRulesCommand(cl);
    case symtune::app::CommandLine::Mode::Bindings:
      return symtune::app::runBindingsCommand(cl);
    case symtune::app::CommandLine::Mode::Studio:
      break;
  }
#ifdef SYMTUNE_HAS_STUDIO
  QApplication app(argc, argv);
  // QApplication set the C locale from the environment. Graphviz switches LC_NUMERIC to "C" for
  // the whole process while it lays out and back after: under a comma-decimal locale, a race with
  // the attach client's JSON parser on its own thread, which takes its decimal point from the C
  // locale. Numbers the user reads are formatted through QLocale, which this does not change.
  std::setlocale(LC_NUMERIC, "C");
  QApplication::setApplicationName("Symtune");
  QApplication::setOrganizationName("Symtune");
  QApplication::setApplicationVersion(symtune::kVersion);
  QApplication::setDesktopFileName(QStringLiteral("org.symtune.Symtune"));
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/org.symtune.Symtune.svg")));
  symtune::ui::MainWindow window;
  window.show();
  if (cl.overlay)
    window.graphPanel()->setOverlay(overlayNamed(*cl.overlay));
  if (!cl.session.empty()) {
    QString error;
    const bool opened = window.openSession(QString::fromStdString(cl.session), &error);
    if (cl.run && (!opened || !window.startOpenSession(&error)))
      return fail(error.toStdString(), 2);
  }
  if (cl.screenshot)
    screenshotWhenReady(window, QString::fromStdString(*cl.screenshot), cl.screenshotAfterSteps);
  if (cl.attach) {
    window.attachTo(QString::fromStdString(*cl.attach),
                    QString::fromStdString(cl.token.value_or("")));
  }
  return QApplication::exec();
#else
  return fail(
      "this build has no studio (configured with SYMTUNE_BUILD_UI=OFF); use --batch SESSION", 2);
#endif
}
