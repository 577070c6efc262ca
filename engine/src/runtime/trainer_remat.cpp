// The trainer's steps under a memory budget: the session's `remat` block (docs/remat.md).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

#include <ATen/Context.h>

#include "symtune/binding/binder.h"
#include "symtune/compat/torch_compat.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/remat/memory_budget.h"
#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/memory_tracker.h"

namespace symtune {

namespace {

// The live bytes on `device` now, resetting its peak to them (what a step's peak is measured
// above), and the peak since. `highest` keeps the peak it resets (Note [A step's peak across
// resets] in trainer.h).
int64_t resetPeak(const torch::Device& device, int64_t& highest) {
  highest = std::max(highest, device.is_cuda()
                                  ? compat::cudaPeakAllocatedBytes(device.index()).value_or(0)
                                  : CpuAllocationCounter::counters().peak);
  if (device.is_cuda()) {
    compat::cudaResetPeakStats(device.index());
    return compat::cudaPeakAllocatedBytes(device.index()).value_or(0);
  }
  CpuAllocationCounter::resetPeak();
  return CpuAllocationCounter::counters().current;
}

int64_t peakSinceReset(const torch::Device& device, int64_t live) {
  const int64_t peak = device.is_cuda()
                           ? compat::cudaPeakAllocatedBytes(device.index()).value_or(live)
                           : CpuAllocationCounter::counters().peak;
  return std::max<int64_t>(peak - live, 0);
}

// A backward that failed midway leaves the gradients it had not yet passed on in this thread's
// ready queue of the autograd engine (on the CPU the backward runs on the calling thread), alive
// until the engine next runs here and drops them. A backward of nothing much runs it now, so the
// retry starts from what was live before the failed attempt.
void releaseFailedBackward() {
  const torch::Tensor one = torch::ones({1}, torch::requires_grad());
  (one * 2).sum().backward();
}

// Whether a session's budget of `megabytes` or `fraction` holds more than one of `beforeMb` or
// `beforeFraction` (Note [A new memory budget] in controller.h), the plain peak the fractions
// are of being `plain` (0: not known yet); where that cannot be told, taken to.
bool budgetGrew(std::optional<double> beforeMb, std::optional<double> beforeFraction,
                std::optional<double> megabytes, std::optional<double> fraction, double plain) {
  if (beforeFraction && fraction)
    return *fraction > *beforeFraction;
  const auto bytes = [&](std::optional<double> mb, std::optional<double> share) {
    return mb                   ? std::optional<double>(*mb * 1e6)
           : share && plain > 0 ? std::optional<double>(*share * plain)
                                : std::nullopt;
  };
  const auto before = bytes(beforeMb, beforeFraction), after = bytes(megabytes, fraction);
  return !before || !after || *after > *before;
}

}  // namespace

void Trainer::setUpRemat() {
  const RematSpec& spec = session_.remat;
  if (!spec.enabled)
    return;
  torch::jit::Module* module = executor_->scriptModule();
  if (module == nullptr)
    throw SetupError(description_ +
                     ": remat needs a TorchScript model (it recomputes the units "
                     "of the model's graph)");
  if (dynamic_cast<SegmentExecutor*>(executor_.get()) == nullptr) {
    auto segments = std::make_unique<SegmentExecutor>(*module, session_.name);
    if (const auto node = segments->symugen()->unrunnable())
      throw SetupError(description_ + ": remat runs the model through SyMuGen's evaluator, " +
                       "which does not run its " + *node);
    segments->setOutput(session_.model.output);
    segments->to(device_);
    executor_ = std::move(segments);
  }
  remat::RematOptions options;
  if (spec.budgetMb)
    options.budgetBytes = static_cast<int64_t>(std::llround(*spec.budgetMb * 1e6));
  options.budgetFraction = spec.budgetFraction;
  options.calibrationSteps = spec.calibrationSteps;
  if (spec.plainPeakMb)
    options.plainPeakBytes = static_cast<int64_t>(std::llround(*spec.plainPeakMb * 1e6));
  options.strategy = spec.strategy == "checkpoint"  ? remat::Strategy::Checkpoint
                     : spec.strategy == "selective" ? remat::Strategy::Selective
                                                    : remat::Strategy::Plan;
  std::vector<at::Tensor> buffers;
  for (const auto& b : executor_->scriptModule()->buffers())  // `module` went with the old one
    buffers.push_back(b);
  try {
    remat_ = std::make_unique<remat::Rematerializer>(options, std::move(buffers));
  } catch (const c10::Error& e) {
    throw SetupError(oneLine(e));
  }
}

void Trainer::setRematBudget(std::optional<double> megabytes, std::optional<double> fraction) {
  if (!remat_)
    throw SetupError("this run holds no memory budget: its session has no remat block");
  // As a session's remat.budget_mb; beyond it llround would overflow into a negative budget.
  if (megabytes && !(*megabytes > 0 && *megabytes <= 1e9))
    throw SetupError("a memory budget of " + std::to_string(*megabytes) +
                     " MB: it must be in (0, 1e9]");
  moveController();  // to the space of a budget a step went back to, if one did
  const SetBudget before{session_.remat.budgetMb, session_.remat.budgetFraction};
  try {
    controllerBudgetGrew_ = holdSessionTo({megabytes, fraction}, /*check=*/true);
  } catch (const c10::Error& e) {
    throw SetupError(oneLine(e));
  } catch (const remat::RematInfeasible& e) {
    throw SetupError(e.what());
  }
  rematBefore_ = before;
  moveController();  // between steps: at once
}

bool Trainer::holdSessionTo(const SetBudget& next, bool check) {
  std::optional<int64_t> bytes;
  if (next.megabytes)
    bytes = static_cast<int64_t>(std::llround(*next.megabytes * 1e6));
  remat_->setBudget(bytes, next.fraction, check);
  const SetBudget before{session_.remat.budgetMb, session_.remat.budgetFraction};
  session_.remat.budgetMb = next.megabytes;
  session_.remat.budgetFraction = next.fraction;
  rematBudget_.reset();  // the new budget is the session's
  const double plain = std::max(remat_->measurements().plainPeak,
                                static_cast<double>(remat_->options().plainPeakBytes.value_or(0)));
  return budgetGrew(before.megabytes, before.fraction, next.megabytes, next.fraction, plain);
}

std::string Trainer::backToBudgetBefore(const std::string& why) {
  const SetBudget before = *rematBefore_;
  rematBefore_.reset();
  // The controller moves once the step is over: its decision is of the space it was made in.
  const bool grew = holdSessionTo(before, /*check=*/false);
  controllerBudgetGrew_ = controllerBudgetGrew_.value_or(false) || grew;
  char budget[64];
  if (before.megabytes)
    std::snprintf(budget, sizeof budget, "budget_mb %g", *before.megabytes);
  else
    std::snprintf(budget, sizeof budget, "budget_fraction %g", before.fraction.value_or(0));
  return why + "; back to " + budget;
}

void Trainer::moveController() {
  // Note [A new memory budget] in controller.h.
  if (controller_ && controllerBudgetGrew_)
    controller_->newBudget(configSpace(), *controllerBudgetGrew_);
  controllerBudgetGrew_.reset();
}

int64_t Trainer::liveNow() {
  return resetPeak(device_, stepHighest_);
}

std::map<std::string, std::vector<NodeId>> Trainer::rematUnitNodes() {
  auto* segments = dynamic_cast<SegmentExecutor*>(executor_.get());
  if (!remat_ || segments == nullptr)
    return {};
  return segments->symugen()->unitNodes();
}

torch::Tensor Trainer::runRemat(const std::vector<c10::IValue>& inputs,
                                const std::function<torch::Tensor()>& pass,
                                std::optional<StepResult::Remat>& out) {
  try {
    return runPlanned(inputs, pass, out);
  } catch (const remat::RematInfeasible& e) {
    // A budget set on the running job that no plan fits in fact (the prediction that let it in
    // was wrong, or the batch is of a bucket not met before): a step the trainer may split runs
    // in more micro-batches under it, as under any budget (Note [Splitting further] in
    // trainer.h); one it may not, put back as it began, runs under the budget that held before.
    if (!rematBefore_ || splitting_)
      throw;
    const bool laterPart = partIndex_ > 0;
    const std::string note = backToBudgetBefore(e.what());
    if (laterPart) {
      // The micro-batches before it added to the gradients: the whole step again, under the
      // budget that held before (Note [Micro-batches]), and it says why.
      startOverNote_ = note;
      throw StartOver{};
    }
    torch::Tensor loss = runPlanned(inputs, pass, out);
    out->note = note;
    return loss;
  }
}

torch::Tensor Trainer::runPlanned(const std::vector<c10::IValue>& inputs,
                                  const std::function<torch::Tensor()>& pass,
                                  std::optional<StepResult::Remat>& out) {
  auto* segments = dynamic_cast<SegmentExecutor*>(executor_.get());
  TORCH_CHECK(segments != nullptr, "remat runs the model through a SegmentExecutor, not the ",
              executor_->name(), " executor");
  SyMuGen& gen = *segments->symugen();
  // A bound run's plans keep to blocks and loops (Note [Bound plans keep to blocks and loops] in
  // rematerializer.h); a loop the binder's sites refuse runs the step unbound, as it always has.
  std::set<std::string> runsRefused;
  if (segments->binder() != nullptr) {
    const std::vector<std::string>& runs = gen.opRuns();
    runsRefused.insert(runs.begin(), runs.end());
  }
  remat_->setRefusedUnits(std::move(runsRefused));
  remat_->setWrittenFirst(segments->binder() != nullptr &&
                          segments->binder()->options().memorySlack > 0);
  // A micro-batch after the first begins with the gradients of those before it held: the
  // step's budget holds them too (Note [Micro-batches]).
  const int64_t carried =
      stepLive_ ? std::max<int64_t>(resetPeak(device_, stepHighest_) - *stepLive_, 0) : int64_t{0};
  remat::StepPlan plan;
  const auto preparing = std::chrono::steady_clock::now();
  try {
    plan = remat_->prepare(gen, inputs, carried);
    // Note [A new bucket's step, learnt from] in trainer.cpp.
    preparing_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - preparing).count();
  } catch (const remat::RematInfeasible&) {
    // What the micro-batches before it held may include what the binder noted as it met their
    // buckets, released when it measures them (Note [Steps the binder settles in]): the step
    // again, those buckets settled, before it splits further.
    if (partIndex_ > 0 && binder() != nullptr && binder()->settling() > settlingBefore_)
      throw StartOver{};
    throw;
  }
  // A step that overruns runs again from the same random state, so it draws what it would have,
  // and from the same buffers (batch norm's running statistics, updated by every forward).
  auto generator = at::globalContext().defaultGenerator(device_);
  const at::Tensor state = generator.get_state();
  std::vector<at::Tensor> buffers, kept;
  {
    torch::NoGradGuard noGrad;
    for (const auto& b : executor_->scriptModule()->buffers()) {
      buffers.push_back(b);
      kept.push_back(b.clone());
    }
  }
  const auto startOver = [&] {
    optimizer_->inner().zero_grad();
    generator.set_state(state);
    torch::NoGradGuard noGrad;
    for (size_t i = 0; i < buffers.size(); ++i)
      buffers[i].copy_(kept[i]);
  };
  const SegmentPlan before = segments->plan();
  StepResult::Remat step;
  // Every attempt is held to, and measured above, what was live when the first began (a failed
  // one may leave a little behind).
  const int64_t live = resetPeak(device_, stepHighest_);
  std::vector<SegmentPlan> tried;
  const binding::Binder* binder = this->binder();
  const remat::StepPlan first = plan;
  // To name the budget that would do: the step run again under each of `plans`, without the
  // budget, its gradients thrown away; the least peak (0: none ran). On CUDA, where the budget
  // is the device's own memory, a plan that does not fit fails again and names nothing.
  const auto neededWithout = [&](const std::vector<SegmentPlan>& plans) {
    double needed = 0;
    for (const SegmentPlan& p : plans) {
      segments->setPlan(p);
      resetPeak(device_, stepHighest_);
      try {
        pass();
        const auto peak = static_cast<double>(peakSinceReset(device_, live));
        needed = needed > 0 ? std::min(needed, peak) : peak;
      } catch (const c10::OutOfMemoryError&) {
        releaseFailedBackward();
      }
      startOver();
    }
    return needed;
  };
  // What the step needed bound, where the binder was let go (a budget that fits the bound step
  // may fit no unbound plan: early exit bound with a memory slack holds 9.8 MB, unbound 16.4).
  double boundNeeded = 0;
  std::string bound;
  for (;;) {
    tried.push_back(plan.segments);
    segments->setPlan(plan.segments);
    const int64_t settling = binder != nullptr ? binder->settling() : 0;
    resetPeak(device_, stepHighest_);
    std::optional<remat::ScopedCpuBudget> budget;
    if (plan.limitBytes && !device_.is_cuda())
      budget.emplace(*plan.limitBytes, live);
    const int64_t refused = CpuAllocationCounter::refusals();
    try {
      torch::Tensor loss = pass();
      budget.reset();
      const auto peak = static_cast<double>(peakSinceReset(device_, live));
      remat_->observe(plan, peak, static_cast<double>(carried),
                      binder == nullptr || binder->settling() == settling);
      // Reported above what was live when the step began, as its budget is.
      step.peakBytes = peak + static_cast<double>(carried);
      step.plan = plan;
      step.note = std::move(startOverNote_);  // a budget put back by a step that started over
      startOverNote_.clear();
      if (step.plan.limitBytes)
        *step.plan.limitBytes += carried;
      if (step.plan.predictedPeak)
        *step.plan.predictedPeak += static_cast<double>(carried);  // as the peak is reported
      out = step;
      return loss;
    } catch (const std::exception& failure) {
      // Out of memory, or the budget refused an allocation and something on the way (TorchScript's
      // interpreter) raised another error for it (Note [Enforced CPU budget]).
      if (dynamic_cast<const c10::OutOfMemoryError*>(&failure) == nullptr &&
          CpuAllocationCounter::refusals() == refused)
        throw;
      budget.reset();
      releaseFailedBackward();
      // A micro-batch after the first may have added to the gradients of those before it: the
      // step starts over from its first (Note [Micro-batches]), this bucket planned anew there.
      const bool laterPart = partIndex_ > 0;
      if (laterPart)
        segments->setPlan(before);
      else
        startOver();
      ++step.attempts;
      // The binder settled in sites of a new bucket in the attempt (Note [Steps the binder
      // settles in] in rematerializer.h): it measured them outside the budget, but what it
      // notes for them on the way (a loop's trips' inputs) is the step's. Those sites are bound,
      // or measured at their next execution, now: the same plan again, until an attempt settles
      // nothing new.
      if (binder != nullptr && binder->settling() > settling) {
        if (laterPart)
          throw StartOver{};
        continue;
      }
      try {
        plan = remat_->backOff(plan, tried);
        if (laterPart)
          throw StartOver{};  // the back-off widened the bucket's margin for the next plan
      } catch (const remat::RematInfeasible& e) {
        // No plan fitted. A step the trainer may split further splits, as it did before binders
        // weighed memory (below). Otherwise a binder that trades time for memory trades more
        // (Note [A budget widens the slack] in binder.h); one without a slack never looked for
        // the regions that only save memory, so one that does takes its place, with the first
        // slack and what the other measured (its table: only those regions are measured, when
        // next met). Either way the predictor, which learnt what steps of the former choices
        // keep, starts over and the step is planned anew.
        const auto slackText = [](const binding::Binder& b) {
          char text[32];
          std::snprintf(text, sizeof text, "%g", b.options().memorySlack);
          return std::string(text);
        };
        std::string rebound;
        binding::Binder* current = splitting_ ? nullptr : segments->binder();
        if (current != nullptr && current->widenMemorySlack()) {
          rebound = "memory slack widened to " + slackText(*current) + " at step ";
        } else if (current != nullptr && current->options().memorySlack <= 0) {
          binding::BinderOptions options = current->options();
          options.memorySlack = binding::Binder::kFirstMemorySlack;
          auto weighing = std::make_shared<binding::Binder>(gen.staticGraph(),
                                                            current->table().machine, options);
          BindingTable measured = current->table();
          measured.memorySlack = options.memorySlack;
          if (auto why = weighing->adopt(std::move(measured)))
            throw std::logic_error("the binder's own table refused: " + *why);
          weighing->setExploring(current->exploring());
          segments->setBinder(weighing);
          binder = current = weighing.get();
          rebound = "a memory slack of " + slackText(*current) + " from step ";
        }
        if (!rebound.empty()) {
          bindingNote_ = rebound + std::to_string(optimizer_->stepCount()) +
                         ": bound, no plan fitted the remat budget (" + e.what() + ")";
          remat_->setWrittenFirst(true);
          remat_->forgetPeaks();
          if (laterPart)
            throw StartOver{};
          plan = remat_->prepare(gen, inputs, carried);
          tried.clear();
          continue;
        }
        // Bound, a step the trainer may split further splits and stays bound
        // (Note [A bound step no plan fits] in trainer.h); one it may not goes on unbound, as a
        // session without binding: what the binder holds while it first meets a shape bucket
        // (the inputs it notes for its measurements) may be what took it past the budget. The
        // binder goes with what it held and the step starts over from its first plan.
        if (binder != nullptr && !splitting_) {
          if (!laterPart) {
            boundNeeded = neededWithout(tried);
            char slack[64];
            std::snprintf(slack, sizeof slack, " with a memory slack of %g",
                          binder->options().memorySlack);
            bound = std::string("bound") + (binder->options().memorySlack > 0 ? slack : "");
          }
          segments->setBinder(nullptr);
          binder = nullptr;
          bindingNote_ = "binding off from step " + std::to_string(optimizer_->stepCount()) +
                         ": bound, no plan fitted the remat budget (" + e.what() + ")";
          if (laterPart)
            throw StartOver{};
          plan = first;
          tried.clear();
          continue;
        }
        // Nothing left to try. When the trainer splits the batch next (Note [Micro-batches]),
        // the split names nothing: it runs.
        if (splitting_) {
          segments->setPlan(before);
          throw;
        }
        double needed = neededWithout(tried);
        segments->setPlan(before);
        // The budget it needs is the step's: with what the micro-batches before it hold.
        if (needed > 0)
          needed += static_cast<double>(carried);
        if (boundNeeded > 0) {
          boundNeeded += static_cast<double>(carried);
          if (needed <= 0 || boundNeeded < needed) {
            const std::string unbound =
                needed > 0 ? "unbound " + remat::formatBytes(needed) : "no unbound plan ran";
            throw remat::RematInfeasible(std::string(e.what()) + "; it needs " +
                                             remat::formatBytes(boundNeeded) + " " + bound + " (" +
                                             unbound +
                                             "; measured without the budget): the smallest "
                                             "feasible budget",
                                         boundNeeded);
          }
        }
        throw remat::RematInfeasible(std::string(e.what()) + "; it needs " +
                                         remat::formatBytes(needed) +
                                         " (measured without the budget): the smallest feasible "
                                         "budget",
                                     needed);
      }
    }
  }
}

}  // namespace symtune
