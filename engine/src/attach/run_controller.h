#pragma once
// A trainer made attachable (`symtune-runner SESSION --listen ADDR`): the attach server publishes
// the trainer's graph, rules and steps, and the clients' commands act on the run — rule changes
// at the next step boundary (Trainer::changeRules), pause, resume, sampling and stop between
// steps. Private to the engine; runBatch drives it.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>

#include "symtune/attach_server.h"
#include "symtune/trainer.h"

namespace symtune::attach {

class RunController {
 public:
  // Starts the server on `listen` and prints "listening on ENDPOINT" (and "token TOKEN" for TCP)
  // to `progress`. Throws like Server::start().
  RunController(Trainer& trainer, const std::string& listen, std::ostream* progress);
  ~RunController();

  // Before each step: waits while paused (rule changes still apply); false when a client asked
  // to stop or `stop` is set.
  bool beforeStep(const std::atomic<bool>* stop);
  // Whether step `step` gathers per-node statistics (set_sampling).
  bool sampleStep(int64_t step) const;
  void afterStep(const StepResult& result);
  // After the last step: says "finished", then keeps serving (rule changes, snapshots) until a
  // client sends stop or `stop` is set.
  void serveUntilStopped(const std::atomic<bool>* stop);

 private:
  void handle(const Command& command, Server::Reply reply);
  nlohmann::json ruleState();
  void applyChangesWhileIdle();

  Trainer& trainer_;
  Server server_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool paused_ = false, stopRequested_ = false;
  std::atomic<int64_t> samplingEvery_{0};
};

// The JSON of a step (docs/protocol.md, "step").
nlohmann::json stepJson(const StepResult& result);
// The JSON of a step's per-node statistics (docs/protocol.md, "nodes").
nlohmann::json nodesJson(const NodeProfile& profile);

}  // namespace symtune::attach
