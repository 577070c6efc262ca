#pragma once
// Runs a session to the end without a window (`symtune --batch`): progress lines at a steady rate
// and a RunReport that is complete even when the run fails or is interrupted.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>

#include "symtune/core/report.h"
#include "symtune/core/session.h"

namespace symtune {

struct BatchOptions {
  // Seconds between progress lines (the first and last step always print). Default: 1.
  double progressIntervalSeconds = 1.0;
  std::ostream* progress = nullptr;         // where progress lines go; nullptr: nowhere
  const std::atomic<bool>* stop = nullptr;  // set (e.g. by SIGINT) to stop at the next step
  // Write a Chrome trace (every op of steps 1..traceSteps, memory counters per step) here.
  std::optional<std::filesystem::path> trace;
  int64_t traceSteps = 5;
  // Serve an attach endpoint ("unix:/path", "tcp:127.0.0.1:PORT", "" for the default socket;
  // docs/protocol.md) while training; "listening on ENDPOINT" goes to `progress` first.
  std::optional<std::string> listen;
  // With `listen`: after the last step keep serving (state "finished") until a client sends stop
  // or `stop` is set — or, with `lingerSeconds`, until no client has been attached for that long
  // (a run the studio started ends some time after the studio closed).
  bool serveAfterLastStep = true;
  // Continue from the session's run.checkpoint (Trainer::resume): the report goes on from the
  // checkpoint's, holding every step once. Without run.checkpoint it is a SetupError.
  bool resume = false;
  std::optional<double> lingerSeconds;
};

// Builds the trainer and runs session.run.steps steps. With run.checkpoint, a checkpoint is
// written every run.checkpoint_every steps, when the run stops early (`stop`: SIGTERM, SIGINT)
// and after the last step. Setup errors (bad model file, no CUDA)
// throw SetupError; a failure during training is caught and returned as a report with status
// Failed and its error, so the steps done so far are not lost.
//   RunReport r = runBatch(loadSession("demo.json"), {.progress = &std::cout});
RunReport runBatch(const Session& session, const BatchOptions& options);

}  // namespace symtune
