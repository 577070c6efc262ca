#include "command_line.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <regex>
#include <set>
#include <stdexcept>

namespace symtune::app {

namespace {

bool isHelp(const std::string& a) {
  return a == "-h" || a == "--help";
}

// The value of the option at args[i], moving i onto it. A value that is itself an option is the
// value left out (`--report --nvtx` wrote a report named --nvtx and never turned --nvtx on); a
// file whose name starts with "--" is given as ./--name. --help is the usage wherever it stands,
// a value's place too (each parser answers it before reading values: `--report --help` wrote a
// report named --help).
const std::string& optionValue(const std::vector<std::string>& args, size_t& i) {
  const std::string& option = args[i];
  if (i + 1 >= args.size())
    throw std::invalid_argument(option + " needs a value");
  const std::string& v = args[i + 1];
  if (v.rfind("--", 0) == 0 && v.size() > 2 && !isHelp(v))
    throw std::invalid_argument(option + " needs a value, got the option " + v +
                                " (a file of that name: ./" + v + ")");
  return args[++i];
}

// Refuses an option given a second time: the first value was dropped without a word (`--report
// a.json --report b.json` wrote only b.json).
void once(std::set<std::string>& seen, const std::string& option) {
  if (!seen.insert(option).second)
    throw std::invalid_argument(option + " is given twice");
}

// Whether `v` is written as a plain decimal number: digits, and for a fraction one point and an
// exponent. std::stod and std::stoll take more: " 5", "+5", and std::stod "0x10" as 16.
bool plainDecimal(const std::string& v, bool fraction) {
  static const std::regex whole("[0-9]+");
  static const std::regex real("([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?");
  return std::regex_match(v, fraction ? real : whole);
}

// An option's value as seconds >= 0, or an error naming the option.
double seconds(const std::string& option, const std::string& v) {
  size_t used = 0;
  double result = -1;
  try {
    result = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!plainDecimal(v, true) || used != v.size() || !std::isfinite(result) || result < 0)
    throw std::invalid_argument(option + " expects seconds >= 0, got \"" + v + "\"");
  return result;
}

CommandLine parseRulesCommand(const std::vector<std::string>& args) {
  CommandLine cl;
  cl.mode = CommandLine::Mode::Rules;
  if (std::any_of(args.begin() + 1, args.end(), isHelp)) {
    cl.mode = CommandLine::Mode::Help;
    return cl;
  }
  if (args.size() < 2 ||
      (args[1] != "check" && args[1] != "export" && args[1] != "import" && args[1] != "list")) {
    throw std::invalid_argument("rules needs check, export, import or list (see --help)");
  }
  cl.rulesCommand = args[1];
  if (cl.rulesCommand == "list") {  // the registry, as JSON: only the runner has it
    if (args.size() > 2)
      throw std::invalid_argument("rules list takes no arguments");
    return cl;
  }
  std::set<std::string> seen;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& { return optionValue(args, i); };
    if (a.rfind("--", 0) == 0)
      once(seen, a);
    const bool exporting = cl.rulesCommand == "export";
    if (exporting && a == "--name") {
      cl.packName = value();
    } else if (exporting && a == "--version") {
      cl.packVersion = value();
    } else if (exporting && a == "--description") {
      cl.packDescription = value();
    } else if (exporting && a == "--output") {
      cl.output = value();
    } else if (cl.rulesCommand == "import" && a == "--library") {
      cl.library = value();
    } else if (!a.empty() && a[0] == '-') {
      throw std::invalid_argument("unknown option " + a + " for rules " + cl.rulesCommand +
                                  " (see --help)");
    } else if (cl.rulesFile.empty()) {
      cl.rulesFile = a;
    } else {
      throw std::invalid_argument("unexpected argument \"" + a + "\" (see --help)");
    }
  }
  if (cl.rulesFile.empty())
    throw std::invalid_argument("rules " + cl.rulesCommand + " needs a file");
  if (cl.rulesCommand == "export" && (cl.packName.empty() || cl.packVersion.empty() || !cl.output))
    throw std::invalid_argument("rules export needs --name, --version and --output");
  return cl;
}

// An option's value as an integer in [least, 1e6], or an error naming the option.
int64_t count(const std::string& option, const std::string& v, int64_t least) {
  size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!plainDecimal(v, false) || used != v.size() || n < least || n > 1000000)
    throw std::invalid_argument(option + " expects an integer from " + std::to_string(least) +
                                " to 1000000, got \"" + v + "\"");
  return n;
}

CommandLine parseTuneCommand(const std::vector<std::string>& args) {
  CommandLine cl;
  cl.mode = CommandLine::Mode::Tune;
  if (std::any_of(args.begin() + 1, args.end(), isHelp)) {
    cl.mode = CommandLine::Mode::Help;
    return cl;
  }
  std::set<std::string> seen;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& { return optionValue(args, i); };
    if (a.rfind("--", 0) == 0)
      once(seen, a);
    if (a == "--budget-steps") {
      cl.tuneBudgetSteps = count(a, value(), 1);
    } else if (a == "--warmup") {
      cl.tuneWarmup = count(a, value(), 0);
    } else if (a == "--measure") {
      cl.tuneMeasured = count(a, value(), 1);
    } else if (a == "--output") {
      cl.output = value();
    } else if (a == "--json") {
      cl.tuneJson = true;
    } else if (!a.empty() && a[0] == '-') {
      throw std::invalid_argument("unknown option " + a + " for tune (see --help)");
    } else if (cl.session.empty()) {
      cl.session = a;
    } else {
      throw std::invalid_argument("unexpected argument \"" + a + "\" (see --help)");
    }
  }
  if (cl.session.empty())
    throw std::invalid_argument("tune needs a session");
  if (cl.tuneBudgetSteps == 0)
    throw std::invalid_argument("tune needs --budget-steps N: the training steps it may spend");
  return cl;
}

}  // namespace

CommandLine parseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  auto value = [&](size_t& i) -> const std::string& { return optionValue(args, i); };
  size_t first = 0;
  if (!args.empty() && args[0] == "graph") {
    cl.mode = CommandLine::Mode::Graph;
    first = 1;
  }
  if (!args.empty() && args[0] == "rules")
    return parseRulesCommand(args);
  if (!args.empty() && args[0] == "tune")
    return parseTuneCommand(args);
  if (!args.empty() && args[0] == "check") {
    if (std::any_of(args.begin() + 1, args.end(), isHelp)) {
      cl.mode = CommandLine::Mode::Help;
      return cl;
    }
    if (args.size() != 2 || args[1].empty() || args[1][0] == '-')
      throw std::invalid_argument("check needs one session (symtune check SESSION)");
    cl.mode = CommandLine::Mode::Check;
    cl.session = args[1];
    return cl;
  }
  if (!args.empty() && args[0] == "bindings") {
    cl.mode = CommandLine::Mode::Bindings;
    if (std::any_of(args.begin() + 1, args.end(), isHelp)) {
      cl.mode = CommandLine::Mode::Help;
      return cl;
    }
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--json")
        cl.bindingsJson = true;
      else if (!args[i].empty() && args[i][0] == '-')
        throw std::invalid_argument("unknown option " + args[i] + " for bindings (see --help)");
      else if (cl.bindingsFile.empty())
        cl.bindingsFile = args[i];
      else
        throw std::invalid_argument("unexpected argument \"" + args[i] + "\" (see --help)");
    }
    if (cl.bindingsFile.empty())
      throw std::invalid_argument("bindings needs a session, a report or a binding table");
    return cl;
  }
  if (std::any_of(args.begin() + static_cast<std::ptrdiff_t>(first), args.end(), isHelp)) {
    cl.mode = CommandLine::Mode::Help;
    return cl;
  }
  bool traceStepsGiven = false, screenshotAfterGiven = false, progressIntervalGiven = false;
  std::set<std::string> seen;
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--version") {
      cl.mode = CommandLine::Mode::Version;
      return cl;
    }
    if (a.rfind("--", 0) == 0 && a != "--batch")  // a second --batch says more below
      once(seen, a);
    if (cl.mode == CommandLine::Mode::Graph && a == "--format") {
      cl.graphFormat = value(i);
      if (cl.graphFormat != "json" && cl.graphFormat != "dot") {
        throw std::invalid_argument("--format expects json or dot, got \"" + cl.graphFormat + "\"");
      }
    } else if (cl.mode == CommandLine::Mode::Graph && a == "--step") {
      cl.graphStep = true;
    } else if (cl.mode == CommandLine::Mode::Graph && a == "--output") {
      cl.output = value(i);
    } else if (a == "--batch") {
      if (cl.mode == CommandLine::Mode::Graph)
        throw std::invalid_argument("--batch trains a session: it does not go with graph");
      if (cl.mode == CommandLine::Mode::Batch)
        throw std::invalid_argument("--batch is given twice: one session a run");
      if (!cl.session.empty())  // `symtune a.json --batch b.json` trained b and left a unsaid
        throw std::invalid_argument("unexpected argument \"" + cl.session +
                                    "\": --batch names the session (see --help)");
      cl.mode = CommandLine::Mode::Batch;
      cl.session = value(i);
    } else if (a == "--trace") {
      cl.trace = value(i);
    } else if (a == "--trace-steps") {
      // Bounded: a step bound near INT64_MAX overflowed the traced range into an empty trace.
      cl.traceSteps = count(a, value(i), 1);
      traceStepsGiven = true;
    } else if (a == "--nvtx") {
      cl.nvtx = true;
    } else if (a == "--no-gpu-trace") {
      cl.noGpuTrace = true;
    } else if (a == "--resume") {
      cl.resume = true;
    } else if (a == "--report") {
      cl.report = value(i);
    } else if (a == "--listen") {
      cl.listen = value(i);
    } else if (a == "--attach") {
      cl.attach = value(i);
    } else if (a == "--token") {
      cl.token = value(i);
    } else if (a == "--run") {
      cl.run = true;
    } else if (a == "--overlay") {
      cl.overlay = value(i);
      static const char* const kOverlays[] = {"none",     "latency", "memory",  "flops", "gradnorm",
                                              "gpu-time", "kernels", "binding", "remat"};
      if (std::find(std::begin(kOverlays), std::end(kOverlays), *cl.overlay) == std::end(kOverlays))
        throw std::invalid_argument(
            "--overlay expects none, latency, memory, flops, gradnorm, gpu-time, kernels, "
            "binding or remat, got \"" +
            *cl.overlay + "\"");
    } else if (a == "--screenshot") {
      cl.screenshot = value(i);
    } else if (a == "--screenshot-after") {
      const std::string& v = value(i);
      size_t used = 0;
      try {
        cl.screenshotAfterSteps = std::stoll(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (!plainDecimal(v, false) || used != v.size() || cl.screenshotAfterSteps < 1)
        throw std::invalid_argument(
            "--screenshot-after expects a positive number of steps, "
            "got \"" +
            v + "\"");
      screenshotAfterGiven = true;
    } else if (a == "--progress-interval") {
      cl.progressInterval = seconds(a, value(i));
      progressIntervalGiven = true;
    } else if (a == "--linger") {
      cl.linger = seconds(a, value(i));
    } else if (!a.empty() && a[0] == '-') {
      throw std::invalid_argument("unknown option " + a + " (see --help)");
    } else if (cl.mode == CommandLine::Mode::Graph && cl.graphTarget.empty()) {
      cl.graphTarget = a;
    } else if (cl.mode != CommandLine::Mode::Graph && cl.session.empty()) {
      cl.session = a;
    } else {
      throw std::invalid_argument("unexpected argument \"" + a + "\" (see --help)");
    }
  }
  if (cl.mode == CommandLine::Mode::Graph && cl.graphTarget.empty()) {
    throw std::invalid_argument("graph needs a session (.json) or a TorchScript archive (.pt)");
  }
  // `symtune-runner SESSION --listen ADDR` trains SESSION like --batch, attachable.
  if (cl.listen && cl.mode == CommandLine::Mode::Studio && !cl.session.empty())
    cl.mode = CommandLine::Mode::Batch;
  if (cl.listen && cl.mode != CommandLine::Mode::Batch)
    throw std::invalid_argument("--listen needs a session to train (SESSION --listen ADDR)");
  if (cl.linger && !cl.listen)
    throw std::invalid_argument("--linger goes with --listen ADDR");
  if ((cl.attach || cl.token) && cl.mode != CommandLine::Mode::Studio)
    throw std::invalid_argument("--attach opens the studio: it does not go with --batch or graph");
  if (cl.token && !cl.attach)
    throw std::invalid_argument("--token goes with --attach ADDR");
  if ((cl.run || cl.overlay || cl.screenshot) && cl.mode != CommandLine::Mode::Studio)
    throw std::invalid_argument("--run, --overlay and --screenshot are the studio's");
  if (cl.run && cl.session.empty())
    throw std::invalid_argument("--run needs a session (symtune --run SESSION)");
  // Taken once a run shows: with neither, the studio waited for one without end.
  if (cl.screenshot && !cl.run && !cl.attach)
    throw std::invalid_argument("--screenshot needs a run to show: --run SESSION or --attach ADDR");
  if (screenshotAfterGiven && !cl.screenshot)
    throw std::invalid_argument("--screenshot-after goes with --screenshot PNG");
  if (progressIntervalGiven && cl.mode != CommandLine::Mode::Batch)
    throw std::invalid_argument("--progress-interval only applies with --batch");
  if (cl.mode != CommandLine::Mode::Batch && (cl.report || cl.trace)) {
    throw std::invalid_argument(std::string(cl.report ? "--report" : "--trace") +
                                " only applies with --batch");
  }
  if (traceStepsGiven && !cl.trace)
    throw std::invalid_argument("--trace-steps goes with --trace FILE");
  if (cl.mode != CommandLine::Mode::Batch && (cl.nvtx || cl.noGpuTrace || cl.resume)) {
    throw std::invalid_argument(std::string(cl.nvtx         ? "--nvtx"
                                            : cl.noGpuTrace ? "--no-gpu-trace"
                                                            : "--resume") +
                                " only applies with --batch");
  }
  return cl;
}

std::string defaultReportPath(const std::string& session) {
  return std::filesystem::path(session).stem().string() + ".report.json";
}

std::string usage(const std::string& program, bool studio) {
  return "Usage:\n" +
         (studio
              ? "  " + program +
                    " [SESSION]                 open the studio (optionally on a session)\n"
                    "  " +
                    program + " --attach ADDR [--token T] open the studio on a running process\n" +
                    "  " + program +
                    " --run SESSION             start SESSION in the studio (runner + attach)\n"
                    "      [--overlay "
                    "none|latency|memory|flops|gradnorm|gpu-time|kernels|binding|remat]\n"
                    "      [--screenshot PNG\n"
                    "       [--screenshot-after STEPS]]\n"
              : std::string()) +
         "  " + program +
         " --batch SESSION [options] train a session without a window\n"
         "  " +
         program +
         " SESSION --listen ADDR     train it, attachable (ADDR: unix:/path, tcp:127.0.0.1:PORT,\n"
         "                             or \"\" for a socket in $XDG_RUNTIME_DIR/symtune); after "
         "the\n"
         "      [--linger SECONDS]     last step it serves until stopped, or until no client has\n"
         "                             been attached for SECONDS\n"
         "  " +
         program +
         " check SESSION             set the session up as a run would (the model loaded, the\n"
         "                             data read, the model run once on the first batch) and\n"
         "                             say what it would train, or the problem in one line\n"
         "  " +
         program +
         " graph MODEL.pt|SESSION [--format json|dot] [--step] [--output FILE]\n"
         "                             the model as one graph (docs/graph-format.md): its\n"
         "                             TorchScript IR, or with --step one captured training step\n"
         "                             with its autograd nodes; JSON or DOT, on stdout or to FILE\n"
         "  " +
         program +
         " rules check FILE          check a rule pack (.json) or a rules file\n"
         "  " +
         program +
         " rules export RULES --name N --version X.Y.Z [--description D] --output PACK.json\n"
         "                             pack a rules file (docs/rules.md)\n"
         "  " +
         program +
         " rules import PACK [--library DIR]\n"
         "                             install a pack (default library: ~/.local/share/symtune/"
         "rulepacks)\n"
         "  " +
         program +
         " rules list                every rule a session can enable, as JSON (name, origin,\n"
         "                             description): built-in, installed packs, plugins\n"
         "  " +
         program +
         " bindings SESSION|REPORT|TABLE [--json]\n"
         "                             the op sites DynaCompiler bound, per shape bucket, with\n"
         "                             each candidate's times (docs/binding.md)\n"
         "  " +
         program +
         " tune SESSION --budget-steps N [--warmup W] [--measure M] [--output FILE] [--json]\n"
         "                             search the session's configurations (micro-batches,\n"
         "                             threads, remat budget) with auto_tune, spending at most N\n"
         "                             training steps (W + M per configuration, default 2 + 3),\n"
         "                             and write the fastest into the session (or FILE) as its\n"
         "                             control block (docs/control.md)\n"
         "  " +
         program +
         " --version | --help\n"
         "\n"
         "Batch options:\n"
         "  --report FILE              where to write the JSON report\n"
         "                             (default: ./<session file's stem>.report.json)\n"
         "  --progress-interval SECS   seconds between progress lines (default 1)\n"
         "  --trace FILE               write a Chrome trace (Perfetto, chrome://tracing) of\n"
         "                             steps 1..N (a resumed run: its first N): every op,\n"
         "                             memory per step\n"
         "  --trace-steps N            how many steps to trace (default 5)\n"
         "  --nvtx                     NVTX ranges named after steps and graph nodes, for\n"
         "                             Nsight Systems (the session's run.nvtx)\n"
         "  --no-gpu-trace             on CUDA, time nodes with CUDA events, not CUPTI's GPU\n"
         "                             activity (the session's run.gpu_trace)\n"
         "  --listen ADDR              serve the attach protocol (docs/protocol.md) while\n"
         "                             training and after, until a client sends stop\n"
         "  --resume                   continue from the session's run.checkpoint (written\n"
         "                             every run.checkpoint_every steps, on SIGTERM and SIGINT,\n"
         "                             and at the end); the report holds every step once\n"
         "\n"
         "Exit status: 0 done, 1 the run failed (the report says why), 2 bad input,\n"
         "130 interrupted (the report holds the steps done).\n";
}

}  // namespace symtune::app
