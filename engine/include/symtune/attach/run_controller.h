#pragma once
// A run made attachable — a Trainer (`symtune-runner SESSION --listen ADDR`) or a user's own
// loop (AttachedLoop): the attach server publishes the run's graph, rules and steps, and the
// clients' commands act on it — rule changes at the next step boundary, pause, resume, sampling
// and stop between steps. Private to the engine; runBatch and AttachedLoop drive it.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "symtune/attach/attach_server.h"
#include "symtune/core/attach_messages.h"
#include "symtune/runtime/trainer.h"

namespace symtune::attach {

// What a controller needs of the run it serves.
class ControlledRun {
 public:
  virtual ~ControlledRun() = default;
  virtual rules::RuleSet& rules() = 0;  // on the training thread only
  // Queues a change for the next step boundary (any thread).
  virtual std::future<void> changeRules(std::function<void(rules::RuleSet&)> change) = 0;
  virtual void applyRuleChanges() = 0;  // on the training thread, while no step runs
  virtual int64_t stepsDone() const = 0;
  // The model's parameter names, for what a rule's `params` selector may select (on the training
  // thread).
  virtual std::vector<std::string> parameterNames() = 0;
  // The session to snapshot; none for a run that has no session (a user's own loop).
  virtual std::optional<Session> session() const = 0;
  // The last step's per-parameter gradient statistics (for the `nodes` message); none when the
  // run does not measure them.
  virtual const std::vector<ParameterStats>* gradientStats() const { return nullptr; }
  // Whether the run gathers per-node statistics when asked (set_sampling): a run without a graph
  // of its ops (a user's own loop) cannot.
  virtual bool samplesNodes() const { return true; }
  // DynaCompiler's binding table as it stands (on the training thread); none when the run binds
  // no op sites.
  virtual const BindingTable* bindings() { return nullptr; }
  // The memory budget (a Trainer's `remat` block, docs/remat.md), on the training thread: the
  // plan in force as the `remat` message — after `last`, the step it ran on, or before any —
  // none when the run holds no budget; and the set_budget command, which throws (with the
  // reason to send back) when the run refuses it.
  virtual std::optional<RematMessage> remat(const StepResult* /*last*/) { return std::nullopt; }
  virtual void setBudget(std::optional<double> /*megabytes*/, std::optional<double> /*fraction*/) {
    throw std::runtime_error("this run holds no memory budget");
  }
  // How the run's steps are configured (a Trainer's `control` block, docs/control.md), on the
  // training thread: the space and its pins as the `control` message, none without a control
  // block; and the pin command (value none: unpin), which throws with the reason to send back.
  virtual std::optional<ControlMessage> control() { return std::nullopt; }
  virtual void pin(const std::string& /*knob*/, std::optional<double> /*value*/) {
    throw std::runtime_error("this run has no online controller");
  }
};

class RunController {
 public:
  // Starts the server on `listen` with `description` in its handshake and `graph` as the graph,
  // and prints "listening on ENDPOINT" (and "token TOKEN" for TCP) to `progress`. Throws like
  // Server::start(). Call on the training thread.
  RunController(ControlledRun& run, nlohmann::json description, nlohmann::json graph,
                const std::string& listen, std::ostream* progress);
  // A Trainer's run: its session, model and SyMuGen graph.
  RunController(Trainer& trainer, const std::string& listen, std::ostream* progress);
  ~RunController();

  // Before each step: waits while paused (rule changes still apply); false when a client asked
  // to stop or `stop` is set, or — given `idleSeconds` — when paused with no client attached for
  // that long. Per-node sampling (set_sampling) ends once no client is attached.
  bool beforeStep(const std::atomic<bool>* stop, std::optional<double> idleSeconds = std::nullopt);
  // Whether step `step` gathers per-node statistics (set_sampling).
  bool sampleStep(int64_t step) const;
  void afterStep(const StepResult& result);
  // A validation on the held-out samples (Trainer::validate), for the clients.
  void afterValidation(const Validation& validation);
  // A new graph for the clients (a captured step's, with its autograd nodes).
  void publishGraph(const Graph& graph);
  // After the last step: says "finished", then keeps serving (rule changes, snapshots) until a
  // client sends stop or `stop` is set, or — given `idleSeconds` — no client has been attached
  // for that long.
  void serveUntilStopped(const std::atomic<bool>* stop,
                         std::optional<double> idleSeconds = std::nullopt);
  bool stopRequested();  // a client sent stop
  Endpoint endpoint() const { return server_.endpoint(); }
  const std::string& token() const { return server_.token(); }

 private:
  RunController(std::unique_ptr<ControlledRun> owned, ControlledRun* run,
                nlohmann::json description, nlohmann::json graph, const std::string& listen,
                std::ostream* progress);
  void handle(const Command& command, Server::Reply reply);
  nlohmann::json ruleState();
  nlohmann::json publishRules();    // the rule state, published and returned
  void publishRulesIfChanged();     // after rules changed on the training thread itself
  void publishBindingsIfChanged();  // after a step measured or predicted new bindings
  // The remat plan, when it or the budget changed (the first time: whatever it is).
  void publishRematIfChanged(const StepResult* last);
  // The configuration space and its pins, when they changed (the first time: whatever they are).
  void publishControlIfChanged();
  void applyChangesWhileIdle();

  std::unique_ptr<ControlledRun> owned_;  // the Trainer adapter
  ControlledRun& run_;
  Server server_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool paused_ = false, stopRequested_ = false, finished_ = false;  // under mutex_
  bool stoppedPublished_ = false;  // the final state (training thread)
  // Set as the controller goes: a command handled after it is answered at once, not queued for a
  // step boundary that never comes. Held by handle() throughout, so that a change it queues is
  // either applied by the destructor or refused.
  std::mutex closingMutex_;
  bool closed_ = false;  // under closingMutex_
  std::ostream* progress_ = nullptr;
  std::atomic<int64_t> samplingEvery_{0};
  std::string publishedSignature_;  // of the rule state last published (training thread)
  size_t publishedBindings_ = 0;    // entries of the binding table last published, + 1
  std::string publishedRemat_;      // the remat plan last published: budget and recomputed units
  std::string publishedControl_;    // the control message last published, less the knobs' values
};

// A step as the protocol's message (docs/protocol.md, "step"), with its remat figures when it
// ran under a budget and its configuration (and the controller's decision) under a control block.
StepMessage stepMessage(const StepResult& result);
// A step's per-node statistics (docs/protocol.md, "nodes"), with each parameter's gradient norm
// when `gradients` is given.
NodesMessage nodesMessage(const NodeProfile& profile,
                          const std::vector<ParameterStats>* gradients = nullptr);

}  // namespace symtune::attach
