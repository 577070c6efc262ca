#pragma once
// The command line shared by `symtune` and `symtune-runner` (no LibTorch, no Qt).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace symtune::app {

struct CommandLine {
  enum class Mode { Studio, Batch, Graph, Rules, Bindings, Tune, Check, Help, Version };
  Mode mode = Mode::Studio;
  std::string session;                    // --batch SESSION, or the studio's optional SESSION
  std::optional<std::string> report;      // --report FILE
  double progressInterval = 1.0;          // --progress-interval SECONDS
  std::optional<std::string> trace;       // --trace FILE
  int64_t traceSteps = 5;                 // --trace-steps N
  bool nvtx = false;                      // --nvtx: the session's run.nvtx, turned on
  bool noGpuTrace = false;                // --no-gpu-trace: the session's run.gpu_trace, off
  bool resume = false;                    // --resume: from the session's run.checkpoint
  std::optional<std::string> listen;      // --listen ADDR: serve the attach protocol while training
  std::optional<double> linger;           // --linger SECONDS: after the last step, serve until
                                          // no client has been attached for this long
  std::optional<std::string> attach;      // --attach ADDR: the studio on a running process
  std::optional<std::string> token;       // --token TOKEN: for a TCP endpoint
  bool run = false;                       // --run: the studio starts SESSION and attaches to it
  std::optional<std::string> overlay;     // --overlay NAME: the graph's overlay at start
  std::optional<std::string> screenshot;  // --screenshot PNG: the screen, once the run shows
  int64_t screenshotAfterSteps = 20;      // --screenshot-after STEPS
  // graph TARGET [--format json|dot] [--step] [--output FILE]
  std::string graphTarget;  // a session (.json) or a TorchScript archive (.pt)
  std::string graphFormat = "json";
  bool graphStep = false;
  std::optional<std::string> output;
  // rules check FILE | rules export RULES --name N --version V [--description D] --output PACK
  // | rules import PACK [--library DIR]
  std::string rulesCommand;  // "check", "export" or "import"
  std::string rulesFile;
  std::string packName, packVersion, packDescription;
  std::optional<std::string> library;
  // bindings SESSION|REPORT|TABLE [--json]
  std::string bindingsFile;
  bool bindingsJson = false;
  // tune SESSION --budget-steps N [--warmup N] [--measure N] [--output FILE] [--json]
  int64_t tuneBudgetSteps = 0;
  int64_t tuneWarmup = 2, tuneMeasured = 3;
  bool tuneJson = false;
};

// Parses argv (without argv[0]). Throws std::invalid_argument with a one-line reason.
CommandLine parseCommandLine(const std::vector<std::string>& args);

// The report path when --report is not given: ./<session file stem>.report.json
std::string defaultReportPath(const std::string& session);

// The --help text; `studio`: whether this program can open the studio window.
std::string usage(const std::string& program, bool studio);

}  // namespace symtune::app
