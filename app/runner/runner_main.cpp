// symtune-runner: the headless trainer (LibTorch, no Qt). `symtune --batch` hands over to it.

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <torch/version.h>
#include <nlohmann/json.hpp>

#include "batch_run.h"
#include "bindings_command.h"
#include "command_line.h"
#include "rule_plugins.h"
#include "rules_command.h"
#include "run_files.h"
#include "symtune/core/atomic_file.h"
#include "symtune/core/graph.h"
#include "symtune/core/version.h"
#include "symtune/graph/symugen.h"
#include "symtune/rules/rule_registry.h"
#include "symtune/rules/rule_rewrite.h"
#include "symtune/runtime/trainer.h"
#include "tune_run.h"

namespace {

std::atomic<bool> gStop{false};

// The first SIGINT or SIGTERM stops the run at the next step boundary (report, checkpoint and
// model written); a second one, for a step that takes long, ends the process at once, as an
// interrupted program does. Only async-signal-safe calls here.
void onSignal(int signal) {
  if (gStop.exchange(true)) {
    static const char now[] = "\nsymtune: stopped at once: no report, no checkpoint\n";
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, now, sizeof now - 1);
    ::_exit(128 + signal);
  }
  static const char soon[] =
      "\nsymtune: stopping after this step (again to stop at once, without a report)\n";
  [[maybe_unused]] const auto n = ::write(STDERR_FILENO, soon, sizeof soon - 1);
}

int fail(const std::string& message, int code) {
  std::cerr << "symtune: error: " << message << std::endl;
  return code;
}

// The rules a session gets from the built-in pack and plugins (not from a pack library, whose
// packs `rules import` compares itself): origins "pack NAME VERSION (PATH.json)" are a library's.
std::map<std::string, std::string> registeredOutsideLibraries() {
  symtune::app::loadRulePlugins();
  std::map<std::string, std::string> out;
  for (const auto& e : symtune::rules::Registry::global().entries()) {
    const std::string& o = e.origin;
    const bool library =
        o.rfind("pack ", 0) == 0 && o.size() > 6 && o.compare(o.size() - 6, 6, ".json)") == 0;
    if (!library)
      out.emplace(e.name, o);
  }
  return out;
}

// `rules list`: what the studio offers when it starts a session.
int listRules() {
  symtune::app::loadRulePlugins();
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : symtune::rules::Registry::global().entries())
    list.push_back({{"name", e.name}, {"origin", e.origin}, {"description", e.description}});
  std::cout << list.dump(2) << std::endl;
  return 0;
}

int runBatchCommand(const symtune::app::CommandLine& cl) {
  symtune::Session session;
  try {
    session = symtune::loadSession(cl.session);
  } catch (const symtune::SessionError& e) {
    return fail(e.what(), 2);
  }
  if (cl.nvtx)
    session.run.nvtx = true;
  if (cl.noGpuTrace)
    session.run.gpuTrace = false;
  const std::string reportPath = cl.report.value_or(symtune::app::defaultReportPath(cl.session));
  // Where the run's results go, checked before it trains rather than after.
  try {
    symtune::checkWritable(reportPath);
    if (cl.trace)
      symtune::checkWritable(*cl.trace);
    if (!session.run.save.empty())
      symtune::checkWritable(session.run.save);
    if (!session.run.checkpoint.empty())
      symtune::checkWritable(session.run.checkpoint);
  } catch (const std::exception& e) {
    return fail(std::string("cannot write the run's results: ") + e.what(), 2);
  }
  // No file the run writes is another it writes or one it reads: a checkpoint named as the
  // session wrote a zip over it, and a binding table named so wrote a table over it.
  {
    std::vector<symtune::app::NamedFile> written{{"--report", reportPath}};
    if (cl.trace)
      written.push_back({"--trace", *cl.trace});
    if (!session.run.save.empty())
      written.push_back({"run.save", session.run.save});
    if (!session.run.checkpoint.empty())
      written.push_back({"run.checkpoint", session.run.checkpoint});
    if (const auto table = symtune::bindingTablePath(session); !table.empty())
      written.push_back({"binding.table", table});
    if (const auto why =
            symtune::app::sharedFile(written, symtune::app::sessionInputs(session, cl.session)))
      return fail(*why, 2);
  }
  if (!session.rules.empty())
    symtune::app::loadRulePlugins();
  // A session may be written for another machine, so this is said, not refused.
  if (const unsigned cores = std::thread::hardware_concurrency();
      cores > 0 && session.run.threads > static_cast<int>(cores))
    std::cerr << "symtune: warning: run.threads " << session.run.threads
              << " is more than this machine's " << cores
              << " hardware threads: the intra-op threads share them, and each op waits for the "
                 "slowest"
              << std::endl;

  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  symtune::BatchOptions options;
  options.progress = &std::cout;
  options.progressIntervalSeconds = cl.progressInterval;
  options.stop = &gStop;
  if (cl.trace)
    options.trace = *cl.trace;
  options.traceSteps = cl.traceSteps;
  options.listen = cl.listen;
  options.lingerSeconds = cl.linger;
  options.resume = cl.resume;

  symtune::RunReport report;
  try {
    report = symtune::runBatch(session, options);
  } catch (const symtune::SetupError& e) {
    return fail(cl.session + ": " + e.what(), 2);
  } catch (const std::exception& e) {
    return fail(cl.session + ": " + symtune::oneLine(e), 2);
  }
  try {
    symtune::writeReport(report, reportPath);
  } catch (const std::exception& e) {
    return fail(std::string("cannot write the report: ") + e.what(), 1);
  }
  std::cout << "report: " << reportPath << " (" << toString(report.status) << ", "
            << report.stepsCompleted() << "/" << report.stepsPlanned << " steps, "
            << report.wallSeconds << " s)" << std::endl;
  switch (report.status) {
    case symtune::RunReport::Status::Completed:
      return 0;
    case symtune::RunReport::Status::Interrupted:
      return 130;
    case symtune::RunReport::Status::Failed:
      return fail(report.error, 1);
  }
  return 1;
}

// `check SESSION`: the trainer built as --batch builds it, no step taken.
int runCheckCommand(const symtune::app::CommandLine& cl) {
  symtune::Session session;
  try {
    session = symtune::loadSession(cl.session);
  } catch (const symtune::SessionError& e) {
    return fail(e.what(), 2);
  }
  if (!session.rules.empty())
    symtune::app::loadRulePlugins();
  try {
    symtune::Trainer trainer(session);
    trainer.checkFirstBatch();
    std::cout << trainer.modelDescription() << ", " << trainer.parameterCount()
              << " parameters, batch " << trainer.batchSize() << ", " << trainer.device().str();
    if (!trainer.dataDescription().empty())
      std::cout << "; " << trainer.dataDescription();
    std::cout << std::endl;
    for (const auto& unselected : trainer.unselectedRules())
      std::cerr << "symtune: warning: " << unselected << ": the rule does nothing to gradients"
                << std::endl;
  } catch (const symtune::SetupError& e) {
    return fail(cl.session + ": " + e.what(), 2);
  } catch (const std::exception& e) {
    return fail(cl.session + ": " + symtune::oneLine(e), 2);
  }
  return 0;
}

int runGraphCommand(const symtune::app::CommandLine& cl) {
  const std::filesystem::path target = cl.graphTarget;
  symtune::Graph graph;
  std::vector<symtune::app::NamedFile> read{{"the model", target}};
  try {
    if (target.extension() == ".json") {
      const symtune::Session session = symtune::loadSession(target);
      read = symtune::app::sessionInputs(session, target.string());
      if (!session.rules.empty())  // a rewrite of a plugin's changes the graph
        symtune::app::loadRulePlugins();
      symtune::Trainer trainer(session);
      graph = cl.graphStep ? trainer.captureStep() : trainer.staticGraph();
    } else {
      if (cl.graphStep) {
        return fail("graph --step needs a session: it names the model's inputs", 2);
      }
      if (!std::filesystem::is_regular_file(target)) {
        return fail(target.string() + ": no such model file", 2);
      }
      symtune::SyMuGen gen(torch::jit::load(target.string()), target.stem().string());
      graph = gen.staticGraph();
    }
  } catch (const symtune::SessionError& e) {
    return fail(e.what(), 2);
  } catch (const symtune::SetupError& e) {
    return fail(target.string() + ": " + e.what(), 2);
  } catch (const std::exception& e) {  // LibTorch's and TorchScript's errors
    return fail(target.string() + ": " + symtune::oneLine(e), 2);
  }
  const std::string text = cl.graphFormat == "dot" ? symtune::toDot(graph) : symtune::toJson(graph);
  if (!cl.output) {
    std::cout << text;
    return 0;
  }
  // Not over what it read: `graph m.pt --output m.pt` replaced the model with its graph.
  if (const auto why = symtune::app::sharedFile({{"--output", *cl.output}}, read))
    return fail(*why, 2);
  try {
    symtune::checkWritable(*cl.output);
  } catch (const std::exception& e) {
    return fail("--output: " + std::string(e.what()), 2);
  }
  try {
    symtune::writeFileAtomically(*cl.output, text);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A closed stdout (`symtune --batch s.json | head`, or Ctrl-C ending a `| tee` too) fails the
  // progress lines' writes instead of ending the process: the run goes on to its report, its
  // checkpoint and its saved model, as docs/session-format.md promises for an interrupted run.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  symtune::app::CommandLine cl;
  try {
    cl = symtune::app::parseCommandLine(args);
  } catch (const std::invalid_argument& e) {
    return fail(e.what(), 2);
  }
  switch (cl.mode) {
    case symtune::app::CommandLine::Mode::Help:
      std::cout << symtune::app::usage("symtune-runner", false);
      return 0;
    case symtune::app::CommandLine::Mode::Version:
      std::cout << "symtune-runner " << symtune::kVersion << " (LibTorch " << TORCH_VERSION
#ifdef SYMTUNE_HAVE_TORCH_CUDA
                << ", CUDA kernels built"
#endif
                << ")" << std::endl;
      return 0;
    case symtune::app::CommandLine::Mode::Batch:
      return runBatchCommand(cl);
    case symtune::app::CommandLine::Mode::Graph:
      return runGraphCommand(cl);
    case symtune::app::CommandLine::Mode::Rules:
      if (cl.rulesCommand == "list")
        return listRules();
      // `symtune rules check` hands files with rewrites over: their IR is checked here.
      return symtune::app::runRulesCommand(cl, &symtune::rules::validateRewrites,
                                           registeredOutsideLibraries);
    case symtune::app::CommandLine::Mode::Bindings:
      return symtune::app::runBindingsCommand(cl);
    case symtune::app::CommandLine::Mode::Tune:
      return symtune::app::runTuneCommand(cl);
    case symtune::app::CommandLine::Mode::Check:
      return runCheckCommand(cl);
    case symtune::app::CommandLine::Mode::Studio:
      break;
  }
  return fail("symtune-runner has no window; use --batch SESSION (see --help)", 2);
}
