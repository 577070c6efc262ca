// The command line both executables parse: every subcommand answers -h and --help wherever they
// stand, options take their values, and a wrong command line fails with a one-line reason that
// names what is wrong (the executables print it and exit 2; app.batch runs them).

#include "doctest_text.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "command_line.h"

namespace {

using symtune::app::CommandLine;
using symtune::app::parseCommandLine;
using Mode = CommandLine::Mode;

// The reason parseCommandLine gives for `args`, or "" when it parses.
std::string refusal(const std::vector<std::string>& args) {
  try {
    parseCommandLine(args);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every subcommand answers -h and --help wherever they stand") {
  const std::vector<std::vector<std::string>> lines = {
      {"--help"},
      {"-h"},
      {"s.json", "--help"},
      {"--batch", "--help"},
      {"--batch", "-h"},
      {"--batch", "s.json", "--report", "r.json", "--help"},
      {"check", "--help"},
      {"check", "s.json", "--help"},
      {"bindings", "--help"},
      {"bindings", "s.json", "--json", "-h"},
      {"tune", "--help"},
      {"tune", "s.json", "--budget-steps", "10", "--help"},
      {"rules", "--help"},
      {"rules", "list", "--help"},
      {"rules", "check", "-h"},
      {"rules", "export", "r.rules", "--name", "n", "--help"},
      {"graph", "s.json", "--help"},
      // Where a value goes: `--report --help` wrote a report named --help.
      {"--batch", "s.json", "--report", "--help"},
      {"--batch", "s.json", "--report", "-h"},
      {"graph", "m.pt", "--output", "-h"},
      {"tune", "s.json", "--output", "-h"},
  };
  for (const auto& line : lines) {
    std::string joined;
    for (const auto& a : line)
      joined += a + " ";
    CAPTURE(joined);
    CHECK(parseCommandLine(line).mode == Mode::Help);
  }
}

TEST_CASE("options take their values") {
  const CommandLine batch =
      parseCommandLine({"--batch", "s.json", "--report", "r.json", "--trace", "t.json",
                        "--trace-steps", "3", "--progress-interval", "0.5", "--resume"});
  CHECK(batch.mode == Mode::Batch);
  CHECK(batch.session == "s.json");
  CHECK(batch.report == "r.json");
  CHECK(batch.trace == "t.json");
  CHECK(batch.traceSteps == 3);
  CHECK(batch.progressInterval == 0.5);
  CHECK(batch.resume);

  // A session with --listen trains like --batch, attachable.
  const CommandLine listening =
      parseCommandLine({"s.json", "--listen", "unix:/tmp/x", "--linger", "2"});
  CHECK(listening.mode == Mode::Batch);
  CHECK(listening.listen == "unix:/tmp/x");
  CHECK(listening.linger == 2.0);

  const CommandLine bindings = parseCommandLine({"bindings", "r.json", "--json"});
  CHECK(bindings.mode == Mode::Bindings);
  CHECK(bindings.bindingsFile == "r.json");
  CHECK(bindings.bindingsJson);

  const CommandLine tune =
      parseCommandLine({"tune", "s.json", "--budget-steps", "40", "--warmup", "0"});
  CHECK(tune.mode == Mode::Tune);
  CHECK(tune.tuneBudgetSteps == 40);
  CHECK(tune.tuneWarmup == 0);
  CHECK(tune.tuneMeasured == 3);

  const CommandLine pack = parseCommandLine(
      {"rules", "export", "r.rules", "--name", "clip", "--version", "1.0.0", "--output", "p.json"});
  CHECK(pack.mode == Mode::Rules);
  CHECK(pack.rulesCommand == "export");
  CHECK(pack.packName == "clip");
  CHECK(pack.output == "p.json");

  const CommandLine studio = parseCommandLine({"--run", "s.json", "--overlay", "binding"});
  CHECK(studio.mode == Mode::Studio);
  CHECK(studio.run);
  CHECK(studio.overlay == "binding");

  CHECK(parseCommandLine({"--version"}).mode == Mode::Version);
  CHECK(symtune::app::defaultReportPath("dir/demo.json") == "demo.report.json");
}

TEST_CASE("a wrong command line is refused with a reason that names what is wrong") {
  CHECK(refusal({"--batch"}) == "--batch needs a value");
  CHECK(refusal({"--fast"}) == "unknown option --fast (see --help)");
  CHECK(refusal({"a.json", "b.json"}) == "unexpected argument \"b.json\" (see --help)");
  CHECK(refusal({"--batch", "s.json", "--trace-steps", "0"}) ==
        "--trace-steps expects an integer from 1 to 1000000, got \"0\"");
  CHECK(refusal({"--batch", "s.json", "--progress-interval", "-1"}) ==
        "--progress-interval expects seconds >= 0, got \"-1\"");
  // What std::stod and std::stoll would take: hexadecimal, a sign, a leading space.
  CHECK(refusal({"--batch", "s.json", "--progress-interval", "0x10"}) ==
        "--progress-interval expects seconds >= 0, got \"0x10\"");
  CHECK(refusal({"--batch", "s.json", "--trace-steps", "+3"}) ==
        "--trace-steps expects an integer from 1 to 1000000, got \"+3\"");
  CHECK(refusal({"tune", "s.json", "--budget-steps", " 5"}) ==
        "--budget-steps expects an integer from 1 to 1000000, got \" 5\"");
  CHECK(parseCommandLine({"--batch", "s.json", "--progress-interval", "2.5"}).progressInterval ==
        2.5);
  CHECK(parseCommandLine({"--batch", "s.json", "--progress-interval", "1e1"}).progressInterval ==
        10);
  CHECK(refusal({"--overlay", "heat"}).find("--overlay expects none, latency") == 0);
  CHECK(refusal({"--listen", "unix:/tmp/x"}) ==
        "--listen needs a session to train (SESSION --listen ADDR)");
  CHECK(refusal({"--batch", "s.json", "--linger", "1"}) == "--linger goes with --listen ADDR");
  CHECK(refusal({"--report", "r.json"}) == "--report only applies with --batch");
  CHECK(refusal({"--batch", "s.json", "--run"}) ==
        "--run, --overlay and --screenshot are the studio's");
  CHECK(refusal({"--screenshot", "x.png"}) ==
        "--screenshot needs a run to show: --run SESSION or --attach ADDR");
  CHECK(refusal({"--run", "s.json", "--screenshot-after", "3"}) ==
        "--screenshot-after goes with --screenshot PNG");
  CHECK(refusal({"s.json", "--progress-interval", "2"}) ==
        "--progress-interval only applies with --batch");
  CHECK(refusal({"check"}) == "check needs one session (symtune check SESSION)");
  CHECK(refusal({"check", "a.json", "b.json"}) ==
        "check needs one session (symtune check SESSION)");
  CHECK(refusal({"bindings"}) == "bindings needs a session, a report or a binding table");
  CHECK(refusal({"bindings", "r.json", "--csv"}) ==
        "unknown option --csv for bindings (see --help)");
  CHECK(refusal({"tune", "s.json"}) ==
        "tune needs --budget-steps N: the training steps it may spend");
  CHECK(refusal({"tune", "s.json", "--budget-steps", "0"}) ==
        "--budget-steps expects an integer from 1 to 1000000, got \"0\"");
  CHECK(refusal({"rules"}) == "rules needs check, export, import or list (see --help)");
  CHECK(refusal({"rules", "list", "x"}) == "rules list takes no arguments");
  CHECK(refusal({"rules", "export", "r.rules", "--name", "n"}) ==
        "rules export needs --name, --version and --output");
  CHECK(refusal({"graph"}) == "graph needs a session (.json) or a TorchScript archive (.pt)");
  // graph with --batch trained the session and printed no graph.
  CHECK(refusal({"graph", "x.pt", "--batch", "s.json"}) ==
        "--batch trains a session: it does not go with graph");
  CHECK(refusal({"--batch", "a.json", "--batch", "b.json"}) ==
        "--batch is given twice: one session a run");
  CHECK(refusal({"--batch", "s.json", "--trace-steps", "3"}) ==
        "--trace-steps goes with --trace FILE");
  // A step bound near INT64_MAX overflowed the traced range into an empty trace.
  CHECK(
      refusal({"--batch", "s.json", "--trace", "t.json", "--trace-steps", "9223372036854775807"}) ==
      "--trace-steps expects an integer from 1 to 1000000, got \"9223372036854775807\"");
  // A second value dropped the first without a word.
  CHECK(refusal({"--batch", "s.json", "--report", "a.json", "--report", "b.json"}) ==
        "--report is given twice");
  CHECK(refusal({"graph", "m.pt", "--format", "dot", "--format", "json"}) ==
        "--format is given twice");
  CHECK(refusal({"tune", "s.json", "--budget-steps", "4", "--budget-steps", "8"}) ==
        "--budget-steps is given twice");
  CHECK(refusal({"rules", "export", "r.rules", "--output", "a.json", "--output", "b.json"}) ==
        "--output is given twice");
  // An option where a value goes: the value was left out (this wrote a report named --nvtx and
  // never turned --nvtx on).
  CHECK(refusal({"--batch", "s.json", "--report", "--nvtx"}) ==
        "--report needs a value, got the option --nvtx (a file of that name: ./--nvtx)");
  CHECK(refusal({"graph", "m.pt", "--output", "--format"}) ==
        "--output needs a value, got the option --format (a file of that name: ./--format)");
  CHECK(refusal({"tune", "s.json", "--budget-steps", "4", "--output", "--json"}) ==
        "--output needs a value, got the option --json (a file of that name: ./--json)");
  CHECK(refusal({"--batch", "s.json", "--report", "./--nvtx"}).empty());
  CHECK(refusal({"--batch", "s.json", "--listen", ""}).empty());
  // A session before --batch was dropped for --batch's.
  CHECK(refusal({"a.json", "--batch", "b.json"}) ==
        "unexpected argument \"a.json\": --batch names the session (see --help)");
}
