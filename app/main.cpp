// symtune: the studio, and the front door of the command line. This process never loads LibTorch
// (DESIGN.md, "Dependency rules"): `--batch` hands over to symtune-runner, which sits next to it.

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "command_line.h"
#include "rules_command.h"
#include "symtune/version.h"

#ifdef SYMTUNE_HAS_STUDIO
#include <QApplication>

#include "symtune/ui/main_window.h"
#endif

namespace {

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
      return handOverToRunner(argv);
    case symtune::app::CommandLine::Mode::Rules:
      // A rewrite's IR needs LibTorch's parser: the runner checks such files.
      if (symtune::app::needsRewriteCheck(cl) && std::filesystem::exists(runnerPath()))
        return handOverToRunner(argv);
      return symtune::app::runRulesCommand(cl);
    case symtune::app::CommandLine::Mode::Studio:
      break;
  }
#ifdef SYMTUNE_HAS_STUDIO
  QApplication app(argc, argv);
  QApplication::setApplicationName("Symtune");
  QApplication::setOrganizationName("Symtune");
  QApplication::setApplicationVersion(symtune::kVersion);
  symtune::ui::MainWindow window;
  window.show();
  if (!cl.session.empty()) {
    window.openSession(QString::fromStdString(cl.session));
  }
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
