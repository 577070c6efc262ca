#pragma once
// Makes a user's own LibTorch training loop attachable, like symtune-runner (docs/protocol.md,
// "Embedding"): wrap the optimizer in MetaOptimizer, run each step through AttachedLoop::step,
// and the studio (or any attach client) sees the step features and the rules, and can toggle and
// add rules, pause, resume and stop the loop. examples/attachable_mlp/ is a complete program.
//
//   symtune::MetaOptimizer optimizer(std::make_unique<torch::optim::Adam>(model->parameters()));
//   symtune::attach::AttachedLoopOptions options;
//   options.name = "my run";
//   symtune::attach::AttachedLoop loop(optimizer, model->named_parameters().pairs(), options);
//   for (int64_t i = 0; i < steps && !loop.stopRequested(); ++i)
//     loop.step([&] { auto loss = criterion(model->forward(x), y); loss.backward(); return loss; },
//               x.size(0));
//
// The loop sets the optimizer's update gate and clears it when destroyed: declare the optimizer
// first (so it outlives the loop), and attach one loop to an optimizer at a time.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "symtune/core/attach_protocol.h"
#include "symtune/rules/rule_engine.h"
#include "symtune/runtime/meta_optimizer.h"
#include "symtune/runtime/trainer.h"

namespace symtune::attach {

struct AttachedLoopOptions {
  std::string listen;                  // as ServerOptions::listen ("" is the default Unix socket)
  std::string name = "attached loop";  // the run's name in the handshake
  std::string model;                   // a description of the model, for the handshake
  std::ostream* progress = nullptr;    // "listening on ENDPOINT" (and "token TOKEN") go here
  // Paused by a client that then left: after this many seconds with no client attached the loop
  // stops (stopRequested()), as the runner's --linger has it. Unset: it waits for a client to
  // resume or stop it, however long.
  std::optional<double> pausedLinger;
};

class AttachedLoop {
 public:
  // Serves at once. `parameters` are the model's named parameters (what rules select by name).
  // The loop owns the optimizer's update gate (rules decide whether a step updates).
  AttachedLoop(MetaOptimizer& optimizer,
               std::vector<std::pair<std::string, torch::Tensor>> parameters,
               AttachedLoopOptions options = {});
  ~AttachedLoop();
  AttachedLoop(const AttachedLoop&) = delete;
  AttachedLoop& operator=(const AttachedLoop&) = delete;

  // One step: waits while a client has paused the loop, applies rule changes, runs `closure`
  // (forward, loss, backward; returns the loss) through the optimizer with the rules between
  // backward and the update, measures the step's features and publishes them. Once a client has
  // sent stop it runs nothing: the result is skipped, its loss NaN (end the loop on
  // stopRequested()).
  StepResult step(const std::function<torch::Tensor()>& closure, int64_t batchSize);
  bool stopRequested() const;  // a client sent stop, or requestStop() was called
  // Stops the loop from any thread, a signal handler included (it sets an atomic flag): a step
  // waiting while paused returns skipped, and later steps run nothing.
  void requestStop();
  // The rules, on the training thread; clients change them at step boundaries.
  rules::RuleSet& rules();
  Endpoint endpoint() const;
  const std::string& token() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace symtune::attach
