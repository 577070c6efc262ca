#include "symtune/attach/attached_loop.h"

#include <atomic>
#include <chrono>
#include <limits>
#include <optional>
#include <stdexcept>

#include "symtune/attach/run_controller.h"
#include "symtune/telemetry/meta_info_broker.h"

namespace symtune::attach {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

struct AttachedLoop::Impl : ControlledRun {
  Impl(MetaOptimizer& optimizer, std::vector<std::pair<std::string, torch::Tensor>> parameters)
      : optimizer(optimizer), parameters(std::move(parameters)), broker(this->parameters) {}

  MetaOptimizer& optimizer;
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  MetaInfoBroker broker;
  rules::RuleSet ruleSet;
  rules::RuleChanges changes;
  rules::RuleOutcome last;  // of the step being run
  std::unique_ptr<RunController> controller;
  std::atomic<bool> stop{false};                 // requestStop()
  std::optional<double> pausedWithoutClientFor;  // AttachedLoopOptions::pausedLinger

  rules::RuleSet& rules() override { return ruleSet; }
  std::future<void> changeRules(std::function<void(rules::RuleSet&)> change) override {
    return changes.push(std::move(change));
  }
  void applyRuleChanges() override { changes.applyTo(ruleSet); }
  int64_t stepsDone() const override { return optimizer.stepCount(); }
  std::vector<std::string> parameterNames() override {
    std::vector<std::string> names;
    for (const auto& [name, p] : parameters)
      names.push_back(name);
    return names;
  }
  std::optional<Session> session() const override { return std::nullopt; }
  bool samplesNodes() const override { return false; }
  const std::vector<ParameterStats>* gradientStats() const override {
    return broker.gradients().enabled() ? &broker.gradients().stats() : nullptr;
  }

  double lr() { return optimizer.inner().param_groups().front().options().get_lr(); }

  // The update gate: the rules, between backward and the update (as in a Trainer).
  bool gate(const torch::Tensor& loss) {
    last = rules::RuleOutcome{};
    if (ruleSet.empty())
      return true;
    last = ruleSet.apply(parameters, broker.featuresSoFar(loss.item<double>(), lr()), lr());
    if (last.lr) {
      for (auto& group : optimizer.inner().param_groups())
        group.options().set_lr(*last.lr);
    }
    return !last.skipStep;
  }
};

AttachedLoop::AttachedLoop(MetaOptimizer& optimizer,
                           std::vector<std::pair<std::string, torch::Tensor>> parameters,
                           AttachedLoopOptions options)
    : impl_(std::make_unique<Impl>(optimizer, std::move(parameters))) {
  if (options.pausedLinger && !(*options.pausedLinger >= 0))
    throw std::invalid_argument("AttachedLoopOptions::pausedLinger must be seconds >= 0");
  impl_->pausedWithoutClientFor = options.pausedLinger;
  int64_t count = 0;
  for (const auto& [name, p] : impl_->parameters)
    count += p.numel();
  nlohmann::json description = {{"session", options.name},
                                {"model", options.model},
                                {"parameters", count},
                                {"embedded", true}};
  impl_->controller = std::make_unique<RunController>(
      *impl_, std::move(description), nlohmann::json{{"error", "an attached loop has no graph"}},
      options.listen, options.progress);
  optimizer.setUpdateGate(
      [impl = impl_.get()](const torch::Tensor& loss) { return impl->gate(loss); });
}

AttachedLoop::~AttachedLoop() {
  impl_->optimizer.setUpdateGate(nullptr);
}

StepResult AttachedLoop::step(const std::function<torch::Tensor()>& closure, int64_t batchSize) {
  auto& impl = *impl_;
  if (!impl.controller->beforeStep(&impl.stop, impl.pausedWithoutClientFor)) {
    // Stopped (while paused, say): the step is not run; stopRequested() tells the loop to end.
    StepResult r;
    r.step = impl.optimizer.stepCount();
    r.skipped = true;
    r.loss = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  impl.applyRuleChanges();
  auto active = impl.broker.beginStep();
  const auto t0 = Clock::now();
  StepTimings timings;
  const bool updateRatio = impl.broker.wantsUpdateRatio();
  const MetaStepStats stats = impl.optimizer.step([&] {
    const auto tf = Clock::now();
    torch::Tensor loss = closure();
    timings.forward = secondsSince(tf);  // forward and backward: the closure does both
    impl.broker.afterBackward();
    if (updateRatio)
      impl.broker.beforeUpdate();
    return loss;
  });
  if (updateRatio)
    impl.broker.afterUpdate();
  StepResult r;
  r.step = stats.step;
  r.skipped = stats.skipped;
  r.rulesInForce = std::move(impl.last.inForce);
  r.rulesFired = std::move(impl.last.fired);
  r.loss = stats.loss.item<double>();
  r.seconds = secondsSince(t0);
  r.closureSeconds = stats.closureSeconds;
  r.updateSeconds = stats.updateSeconds;
  timings.optimizer = stats.updateSeconds;
  timings.total = r.seconds;
  r.features =
      impl.broker.endStep(timings, r.loss, impl.lr(), batchSize, 0, std::nullopt, r.skipped);
  impl.controller->afterStep(r);
  return r;
}

bool AttachedLoop::stopRequested() const {
  return impl_->stop.load() || impl_->controller->stopRequested();
}

void AttachedLoop::requestStop() {
  impl_->stop.store(true);
}

rules::RuleSet& AttachedLoop::rules() {
  return impl_->ruleSet;
}

Endpoint AttachedLoop::endpoint() const {
  return impl_->controller->endpoint();
}

const std::string& AttachedLoop::token() const {
  return impl_->controller->token();
}

}  // namespace symtune::attach
