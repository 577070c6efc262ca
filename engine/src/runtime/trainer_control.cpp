// The trainer's configuration space and how a step is configured (docs/control.md).

#include <algorithm>
#include <cmath>
#include <thread>

#include <ATen/Parallel.h>

#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/remat/rematerializer.h"
#include "symtune/runtime/trainer.h"

namespace symtune {

namespace {

// Ops that normalise over the batch while training: micro-batches would each have their own
// statistics.
bool normalisesOverBatch(const Graph& graph) {
  return std::any_of(graph.nodes().begin(), graph.nodes().end(), [](const GraphNode& n) {
    return n.side == GraphSide::Forward && n.kind.find("batch_norm") != std::string::npos;
  });
}

std::vector<double> powersOfTwoUpTo(int64_t most) {
  std::vector<double> values;
  for (int64_t v = 1; v <= most; v *= 2)
    values.push_back(static_cast<double>(v));
  return values;
}

}  // namespace

void Trainer::setUpControl() {
  if (!session_.control.enabled)
    return;
  control::Configuration c = configuration();
  c.microbatches = session_.control.microbatches;
  c.threads = session_.control.threads;
  c.rematBudget = session_.control.rematBudget;
  c.bindingExplore = session_.control.bindingExplore;
  if (c.microbatches > 1 && unsplittable())
    throw SetupError("control.microbatches " + std::to_string(c.microbatches) + ": " +
                     *unsplittable());
  if (c.microbatches > data_->batchSize())
    throw SetupError("control.microbatches " + std::to_string(c.microbatches) +
                     ": more than the batch's " + std::to_string(data_->batchSize()) + " samples");
  try {
    configure(c);
  } catch (const SetupError& e) {
    throw SetupError(std::string("control: ") + e.what());
  }
  if (session_.control.mode == "online") {
    control::ControllerOptions options;
    options.seed = session_.data.seed;
    options.conservative = session_.control.conservative;
    options.warmupSteps = session_.control.warmupSteps;
    if (session_.control.horizon)
      options.horizon = *session_.control.horizon;
    if (session_.control.shiftRun)
      options.shiftRun = *session_.control.shiftRun;
    options.aroundLeader = session_.control.explore == "around_leader";
    controller_ = std::make_unique<control::OnlineController>(configSpace(), options);
  }
}

std::optional<control::Decision> Trainer::decide(const Batch& whole) {
  if (!controller_)
    return std::nullopt;
  moveController();  // a budget a step went back to (Trainer::runRemat)
  // The signals, in the order of ControllerOptions::signalNames.
  const std::vector<double> batchSignals{static_cast<double>(whole.size),
                                         static_cast<double>(whole.sequenceLength())};
  const std::string bucket = binding::inputsBucketKey(whole.inputs);
  // Note [A knob that changes nothing]: binding_explore kept at 1 where the bucket's last step
  // met nothing to measure and no choice waits to be decided again.
  std::map<std::string, double> idle;
  const binding::Binder* b = binder();
  const auto nothing = nothingToExplore_.find(bucket);
  if (b != nullptr && b->exploring() && !b->deferred() && nothing != nothingToExplore_.end() &&
      nothing->second)
    idle.emplace("binding_explore", 1.0);
  control::Decision d = controller_->choose(optimizer_->stepCount(), bucket, batchSignals, idle);
  const control::Configuration before = configuration();
  try {
    configure(d.chosen);
  } catch (const SetupError& e) {
    // A remat budget the predictor says no plan fits (Note [A budget the run refused] in
    // controller.h), or a value the space no longer has: the step runs as the one before it
    // (configure() changed nothing), and the decision says so.
    const bool byBudget = d.chosen.rematBudget && !configSpace().outside(d.chosen);
    configure(before);
    controller_->refused(d, before, e.what(),
                         byBudget ? d.chosen.rematBudget : std::optional<double>());
  }
  return d;
}

const std::optional<std::string>& Trainer::unsplittable() {
  if (unsplittable_)
    return *unsplittable_;
  std::optional<std::string> why;
  if (data_->batchSize() < 2) {
    why = "a batch of one sample cannot be split";
  } else {
    try {
      data_->split(data_->batch(0), 2);
    } catch (const SplitError& e) {
      why = std::string("the batch cannot be split: ") + e.what();
    }
  }
  if (!why) {
    SyMuGen* gen = executor_->symugen();
    if (gen == nullptr)
      why = "the model has no IR, so whether it normalises over the batch cannot be told";
    else if (normalisesOverBatch(gen->staticGraph()))
      why =
          "the model normalises over the batch (batch norm): each micro-batch would have its "
          "own statistics";
  }
  unsplittable_ = why;
  return *unsplittable_;
}

control::ConfigSpace Trainer::configSpace() {
  std::vector<control::Knob> knobs;
  control::Knob parts{"microbatches", {1}, static_cast<double>(microbatches_), ""};
  if (const auto& why = unsplittable()) {
    parts.constraint = *why;
  } else {
    parts.values = powersOfTwoUpTo(std::min<int64_t>(data_->batchSize(), 64));
    parts.constraint = "powers of two up to the batch's " + std::to_string(data_->batchSize()) +
                       " samples (64 at most)";
  }
  // The session's count and the run's (a split it backed off to) are in the space too.
  for (const int own : {session_.control.microbatches, microbatches_}) {
    const auto v = static_cast<double>(own);
    if (own <= data_->batchSize() && (own == 1 || !unsplittable()) &&
        std::find(parts.values.begin(), parts.values.end(), v) == parts.values.end())
      parts.values.push_back(v);
  }
  std::sort(parts.values.begin(), parts.values.end());
  knobs.push_back(std::move(parts));

  // Asked once: glibc reads /sys for it, and configure() makes the space on every step.
  static const auto hardware =
      static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  control::Knob threads{"threads", powersOfTwoUpTo(hardware),
                        static_cast<double>(at::get_num_threads()),
                        "at most the machine's " + std::to_string(hardware) +
                            " hardware threads; LibTorch's intra-op pool is the process's"};
  // The machine's count, the run's now, and the one it began with: the controller may go back.
  for (const double v :
       {static_cast<double>(hardware), threads.current, static_cast<double>(threadsAtStart_)}) {
    if (std::find(threads.values.begin(), threads.values.end(), v) == threads.values.end())
      threads.values.push_back(v);
  }
  std::sort(threads.values.begin(), threads.values.end());
  knobs.push_back(std::move(threads));

  if (remat_ && session_.remat.budgetFraction) {
    const double most = *session_.remat.budgetFraction;
    control::Knob budget{"remat_budget", {}, rematBudget_.value_or(most), ""};
    for (int tenth = 3; tenth / 10.0 < most - 1e-9; ++tenth)
      budget.values.push_back(tenth / 10.0);
    budget.values.push_back(most);
    char text[96];
    std::snprintf(text, sizeof text,
                  "at most the session's budget_fraction %g: the run's memory budget", most);
    budget.constraint = text;
    knobs.push_back(std::move(budget));
  }

  if (const binding::Binder* b = binder();
      b != nullptr && b->options().measure && b->options().budget != 0) {
    knobs.push_back({"binding_explore",
                     {0, 1},
                     b->exploring() ? 1.0 : 0.0,
                     "1: the binder measures a (site, bucket) it meets unbound; 0: it binds by "
                     "its table and cost model only, the ATen op elsewhere, until 1 again"});
  }
  return control::ConfigSpace(std::move(knobs));
}

control::Configuration Trainer::configuration() const {
  control::Configuration c;
  c.microbatches = microbatches_;
  c.threads = threads_;
  c.rematBudget = rematBudget_;
  c.bindingExplore = bindingExplore_;
  return c;
}

void Trainer::configure(const control::Configuration& c) {
  // The space is checked against only for a change (the controller's choice keeps the run as it
  // stands on most steps, and making the space took 7-9 us of its 55-60 us decision); the intra-op
  // threads are set either way: the pool is the process's, and another trainer may have moved it.
  if (c != configuration()) {
    if (auto why = configSpace().outside(c))
      throw SetupError(*why);
  }
  if (c.rematBudget != rematBudget_) {
    // Unset: back to the session's.
    const double fraction = c.rematBudget.value_or(session_.remat.budgetFraction.value_or(0));
    try {
      remat_->setBudget(std::nullopt, fraction);
    } catch (const c10::Error& e) {
      throw SetupError(oneLine(e));
    } catch (const remat::RematInfeasible& e) {
      throw SetupError(e.what());
    }
    rematBudget_ = c.rematBudget;
  }
  const int threads = c.threads > 0 ? c.threads : threadsAtStart_;
  if (threads != at::get_num_threads())
    at::set_num_threads(threads);
  threads_ = c.threads;
  microbatches_ = c.microbatches;
  if (c.bindingExplore != bindingExplore_) {
    binding::Binder* b = binder();  // the space has the knob only with a binder
    if (b != nullptr)
      b->setExploring(c.bindingExplore.value_or(true));
    bindingExplore_ = c.bindingExplore;
  }
}

}  // namespace symtune
