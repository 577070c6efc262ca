// What the engine.attach test cases share: the runner binaries, a long session, a runner
// process started up to its "listening on" line, and the suite's one shared runner.

#pragma once

#include "doctest_text.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "child_process.h"
#include "symtune/core/attach_client.h"
#include "test_files.h"

namespace symtune::test::attach {

using symtune::attach::Client;
using symtune::attach::Disconnected;
using symtune::test::ChildProcess;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline const std::string kRunner = SYMTUNE_BIN_DIR "/symtune-runner";
inline const std::string kProbe = SYMTUNE_BIN_DIR "/symtune-attach-probe";
inline const std::string kExample = SYMTUNE_BIN_DIR "/symtune-example-attachable";

// A session that trains for longer than any test runs, with two rules to toggle.
inline const std::string kSession =
    "{\"format\": \"symtune-session\", \"version\": 1, \"name\": \"attach test\",\n"
    " \"model\": {\"zoo\": \"dynamic_resnet\", \"preset\": \"ci\"},\n"
    " \"run\": {\"steps\": 1000000, \"threads\": 1},\n"
    " \"rules\": {\"enable\": [\"nan_guard\", \"loss_spike_guard\"]}}\n";

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The rest of the line after `prefix` in `text`, once the whole line has arrived.
inline std::optional<std::string> lineAfter(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos)
    return std::nullopt;
  const size_t from = at + prefix.size(), end = text.find('\n', from);
  if (end == std::string::npos)
    return std::nullopt;
  return text.substr(from, end - from);
}

// symtune-runner SESSION --listen ADDR, up to its "listening on" line.
struct Runner {
  ChildProcess process;
  std::string endpoint, token;

  bool start(const std::string& session, const std::string& listen,
             const std::vector<std::string>& more = {}) {
    std::vector<std::string> arguments{session, "--listen", listen, "--progress-interval", "1000"};
    arguments.insert(arguments.end(), more.begin(), more.end());
    return startProgram(kRunner, arguments);
  }

  // Any attachable program that prints "listening on ENDPOINT" (and "token TOKEN" for TCP).
  // Throws when the program cannot be started at all.
  bool startProgram(const std::string& program, const std::vector<std::string>& arguments) {
    process.start(program, arguments);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline) {
      if (!process.waitForOutput(1s) && !process.running())
        break;
      const std::string& out = process.standardOutput();
      const auto listening = lineAfter(out, "listening on ");
      if (!listening)
        continue;
      endpoint = *listening;
      if (endpoint.rfind("tcp:", 0) != 0)
        return true;
      if (const auto tcpToken = lineAfter(out, "token ")) {
        token = *tcpToken;
        return true;
      }
    }
    MESSAGE("runner did not start: ", process.standardOutput(), " / ", process.standardError());
    return false;
  }

  // Killed rather than terminated: its run is of no interest once the test case is done.
  ~Runner() {
    if (process.running()) {
      process.kill();
      process.waitForFinished(5s);
    }
  }
};

// Messages until one of `type` arrives (returned), or nothing after `seconds`.
inline std::optional<Json> until(Client& client, const std::string& type, double seconds = 30) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    auto m = client.next(0.5);
    if (m && (*m)["type"] == type)
      return m;
  }
  return std::nullopt;
}

inline std::string writeSession(const symtune::test::TempDir& dir) {
  const std::string path = dir.filePath("session.json");
  symtune::test::writeFile(path, kSession);
  return path;
}

// What the test cases share, made by the first that asks: a folder holding the session, and a
// runner serving it on a unix socket in that folder. Killed and removed when the suite exits.
struct Suite {
  symtune::test::TempDir dir;
  std::string session = writeSession(dir);
  std::string socket = dir.filePath("runner.sock");
  Runner runner;
  bool runnerTried = false, runnerStarted = false;
};

inline Suite& suite() {
  static Suite shared;
  return shared;
}

// The shared runner, started on first use: a runner that cannot start fails the test case that
// started it with the reason, and each later one at once.
inline Runner& suiteRunner() {
  Suite& s = suite();
  if (!s.runnerTried) {
    s.runnerTried = true;
    s.runnerStarted = s.runner.start(s.session, "unix:" + s.socket);
  }
  REQUIRE_MESSAGE(s.runnerStarted, "the suite's runner did not start");
  REQUIRE(s.runner.endpoint == "unix:" + s.socket);
  return s.runner;
}

}  // namespace symtune::test::attach
