#include "symtune/attach/run_controller.h"

#include <chrono>
#include <ostream>

#include "symtune/binding/binder.h"
#include "symtune/rules/rule_registry.h"

namespace symtune::attach {

StepMessage stepMessage(const StepResult& r) {
  StepMessage m;
  m.step = r.step;
  m.loss = r.loss;
  m.seconds = r.seconds;
  m.features = r.features;
  m.rulesInForce = r.rulesInForce;
  m.rulesFired = r.rulesFired;
  m.skipped = r.skipped;
  if (r.remat) {
    const remat::StepPlan& plan = r.remat->plan;
    StepRemat out;
    if (plan.limitBytes)
      out.budgetBytes = static_cast<double>(*plan.limitBytes);
    out.predictedPeak = plan.predictedPeak;
    out.peakBytes = r.remat->peakBytes;
    out.recomputed.assign(plan.segments.recompute.begin(), plan.segments.recompute.end());
    out.attempts = r.remat->attempts - 1;
    out.cached = plan.cached;
    out.note = r.remat->note;
    m.remat = std::move(out);
  }
  if (r.configuration) {
    const control::Configuration& c = *r.configuration;
    StepControl out;
    out.microbatches = r.microbatches;
    out.configuration = c.text();
    out.knobs.emplace_back("microbatches", c.microbatches);
    if (c.threads > 0)
      out.knobs.emplace_back("threads", c.threads);
    if (c.rematBudget)
      out.knobs.emplace_back("remat_budget", *c.rematBudget);
    if (c.bindingExplore)
      out.knobs.emplace_back("binding_explore", *c.bindingExplore ? 1.0 : 0.0);
    if (r.decision) {
      const control::Decision& d = *r.decision;
      out.decided = true;
      out.predictedSamplesPerSecond = d.predictedSamplesPerSecond;
      out.samplesPerSecond = d.samplesPerSecond;
      out.explored = d.explored;
      for (const auto& [alternative, predicted] : d.alternatives)
        out.alternatives.push_back({alternative.text(), predicted});
      out.batchSignals = d.batchSignals;
      for (const auto& driver : d.drivers)
        out.drivers.emplace_back(driver.what, driver.factor);
      out.violation = d.violation;
      out.heldBack = d.heldBack;
      out.levelMoved = d.levelMoved;
      out.idle = d.idle;
    }
    m.control = std::move(out);
  }
  return m;
}

constexpr size_t kKernelsPerNode = 8;

NodesMessage nodesMessage(const NodeProfile& p, const std::vector<ParameterStats>* gradients) {
  NodesMessage m;
  m.step = p.step;
  m.attributedSeconds = p.attributedSeconds;
  m.unattributedSeconds = p.unattributedSeconds;
  for (const auto& n : p.nodes) {
    NodeFigures f;
    f.node = n.node.value();
    f.calls = n.calls;
    f.backwardCalls = n.backwardCalls;
    f.forwardSeconds = n.forwardSeconds;
    f.backwardSeconds = n.backwardSeconds;
    f.forwardDeviceSeconds = n.forwardDeviceSeconds;
    f.backwardDeviceSeconds = n.backwardDeviceSeconds;
    f.bytesAllocated = n.bytesAllocated;
    f.backwardBytesAllocated = n.backwardBytesAllocated;
    f.liveBytesAfter = n.liveBytesAfter;
    if (n.forwardDeviceSeconds) {  // a CUDA run: its allocations are mostly the GPU's
      f.cudaBytesAllocated = n.cudaBytesAllocated;
      f.backwardCudaBytesAllocated = n.backwardCudaBytesAllocated;
    }
    if (p.gpuTraced) {
      f.kernels = n.kernels;
      f.backwardKernels = n.backwardKernels;
      // The names that cost most; the protocol carries a node's top few, not every launch.
      for (size_t i = 0; i < n.kernelList.size() && i < kKernelsPerNode; ++i) {
        const NodeKernel& k = n.kernelList[i];
        f.kernelList.push_back(
            {k.name, gpuActivityKindName(k.kind), k.backward, k.calls, k.seconds});
      }
    }
    m.nodes.push_back(std::move(f));
  }
  if (gradients != nullptr) {
    for (const auto& s : *gradients) {
      if (s.hasGradient)
        m.parameters.push_back({s.name, s.norm});
    }
  }
  return m;
}

namespace {

ServerOptions listenOn(const std::string& listen) {
  ServerOptions options;
  options.listen = listen;
  return options;
}

}  // namespace

namespace {

class TrainerRun : public ControlledRun {
  std::map<std::string, std::vector<NodeId>> unitNodes_;  // static: found once
  std::optional<StepResult::Remat> lastRemat_;            // the last step's plan, and its index
  int64_t lastStep_ = -1;

 public:
  explicit TrainerRun(Trainer& trainer) : trainer_(trainer) {}
  rules::RuleSet& rules() override { return trainer_.rules(); }
  std::future<void> changeRules(std::function<void(rules::RuleSet&)> change) override {
    return trainer_.changeRules(std::move(change));
  }
  void applyRuleChanges() override { trainer_.applyRuleChanges(); }
  int64_t stepsDone() const override { return trainer_.stepsDone(); }
  std::vector<std::string> parameterNames() override {
    std::vector<std::string> names;
    for (const auto& [name, p] : trainer_.executor().namedParameters())
      names.push_back(name);
    return names;
  }
  std::optional<Session> session() const override { return trainer_.session(); }
  const std::vector<ParameterStats>* gradientStats() const override {
    const GradientMonitor& gradients = trainer_.broker().gradients();
    return gradients.enabled() ? &gradients.stats() : nullptr;
  }
  const BindingTable* bindings() override {
    const binding::Binder* binder = trainer_.binder();
    return binder != nullptr ? &binder->table() : nullptr;
  }
  std::optional<RematMessage> remat(const StepResult* last) override {
    remat::Rematerializer* r = trainer_.rematerializer();
    if (r == nullptr)
      return std::nullopt;
    if (unitNodes_.empty())
      unitNodes_ = trainer_.rematUnitNodes();
    if (last != nullptr && last->remat) {
      lastRemat_ = *last->remat;
      lastStep_ = last->step;
    }
    RematMessage m;
    m.step = lastStep_;
    m.strategy = remat::strategyName(r->options().strategy);
    m.budgetMb = trainer_.session().remat.budgetMb;
    m.budgetFraction = trainer_.session().remat.budgetFraction;
    const StepResult::Remat* step = lastRemat_ ? &*lastRemat_ : nullptr;
    if (step != nullptr && step->plan.limitBytes)
      m.budgetBytes = static_cast<double>(*step->plan.limitBytes);
    const std::vector<remat::RematUnit>* units =
        step != nullptr ? r->unitsOf(step->plan.bucket) : nullptr;
    if (units == nullptr)
      return m;  // no step planned yet: nothing priced, nothing recomputed
    for (const remat::RematUnit& unit : *units) {
      RematUnitState u;
      u.name = unit.name;
      u.parent = unit.parent;
      if (const auto found = unitNodes_.find(unit.name); found != unitNodes_.end()) {
        for (const NodeId id : found->second)
          u.nodes.push_back(id.value());
      }
      u.savedBytes = unit.freedBytes;
      u.recomputed = step->plan.segments.recomputesAny(unit.name);  // on every call or its first
      m.units.push_back(std::move(u));
    }
    return m;
  }
  void setBudget(std::optional<double> megabytes, std::optional<double> fraction) override {
    trainer_.setRematBudget(megabytes, fraction);
  }
  std::optional<ControlMessage> control() override {
    if (!trainer_.session().control.enabled)
      return std::nullopt;
    ControlMessage m;
    m.mode = trainer_.session().control.mode;
    // Under the online controller its space, which pins are checked against; where each knob
    // stands, the trainer's.
    const control::OnlineController* controller = trainer_.controller();
    const control::ConfigSpace space =
        controller != nullptr ? controller->space() : trainer_.configSpace();
    const control::Configuration now = trainer_.configuration();
    for (const control::Knob& k : space.knobs()) {
      KnobState state{k.name, k.values, control::valueOf(now, k), k.constraint, std::nullopt};
      if (controller != nullptr) {
        if (const auto pinned = controller->pins().find(k.name); pinned != controller->pins().end())
          state.pinned = pinned->second;
      }
      m.knobs.push_back(std::move(state));
    }
    if (controller != nullptr) {
      for (const control::Configuration& c : controller->excluded())
        m.excluded.push_back(c.text());
    }
    return m;
  }
  void pin(const std::string& knob, std::optional<double> value) override {
    control::OnlineController* controller = trainer_.controller();
    if (controller == nullptr)
      throw std::runtime_error(
          "this run has no online controller (control.mode is not \"online\"): its "
          "configuration is fixed");
    if (value) {
      controller->pin(knob, *value);  // std::invalid_argument for a knob or value not in the space
    } else {
      if (controller->space().knob(knob) == nullptr)
        throw std::invalid_argument("no knob " + knob + " in this run's configuration space");
      controller->unpin(knob);
    }
  }

 private:
  Trainer& trainer_;
};

nlohmann::json trainerDescription(Trainer& trainer) {
  return {{"session", trainer.session().name},   {"session_path", trainer.session().path.string()},
          {"model", trainer.modelDescription()}, {"parameters", trainer.parameterCount()},
          {"batch_size", trainer.batchSize()},   {"device", trainer.device().str()},
          {"steps", trainer.session().run.steps}};
}

nlohmann::json trainerGraph(Trainer& trainer) {
  try {
    return nlohmann::json::parse(toJson(trainer.staticGraph()));
  } catch (const std::exception& e) {
    // A model SyMuGen cannot read still trains and streams; the studio shows no graph.
    return {{"error", oneLine(e)}};
  }
}

}  // namespace

RunController::RunController(Trainer& trainer, const std::string& listen, std::ostream* progress)
    : RunController(std::make_unique<TrainerRun>(trainer), nullptr, trainerDescription(trainer),
                    trainerGraph(trainer), listen, progress) {
}

RunController::RunController(ControlledRun& run, nlohmann::json description, nlohmann::json graph,
                             const std::string& listen, std::ostream* progress)
    : RunController(nullptr, &run, std::move(description), std::move(graph), listen, progress) {
}

RunController::RunController(std::unique_ptr<ControlledRun> owned, ControlledRun* run,
                             nlohmann::json description, nlohmann::json graph,
                             const std::string& listen, std::ostream* progress)
    : owned_(std::move(owned)),
      run_(run != nullptr ? *run : *owned_),
      server_(listenOn(listen), std::move(description)),
      progress_(progress) {
  server_.setCommandHandler(
      [this](const Command& command, Server::Reply reply) { handle(command, std::move(reply)); });
  server_.start();
  try {
    server_.publishGraph(std::move(graph));
    publishRulesIfChanged();
    publishBindingsIfChanged();
    publishRematIfChanged(nullptr);
    publishControlIfChanged();
  } catch (...) {
    // No destructor runs for a constructor that throws, and the members handle() uses are
    // destroyed before server_: its thread stops first.
    server_.stop();
    throw;
  }
  server_.publishState("training");
  if (progress) {
    *progress << "listening on " << server_.endpoint().text() << std::endl;
    if (!server_.token().empty())
      *progress << "token " << server_.token() << std::endl;
  }
}

RunController::~RunController() {
  // A run that ended without serveUntilStopped (stopped, interrupted, failed): what clients asked
  // for at the last step boundary still gets its answer, then the final state; what they ask
  // from here on is refused.
  {
    std::lock_guard<std::mutex> lock(closingMutex_);
    closed_ = true;
  }
  try {
    applyChangesWhileIdle();
  } catch (const std::exception& e) {
    if (progress_ != nullptr)
      *progress_ << "symtune: attach: a change after the run ended: " << e.what() << std::endl;
  }
  if (!stoppedPublished_)
    server_.publishState("stopped");
  server_.stop();
}

nlohmann::json RunController::ruleState() {
  RulesMessage out;
  auto& registry = rules::Registry::global();
  for (const auto& name : run_.rules().names()) {
    RuleState rule{name, run_.rules().enabled(name), "this run", ""};
    if (auto entry = registry.find(name);
        entry && run_.rules().source(name) == (entry->rule ? entry->rule->source : "")) {
      rule.origin = entry->origin;
      rule.description = entry->description;
    }
    out.rules.push_back(std::move(rule));
  }
  return encode(out)["rules"];
}

void RunController::handle(const Command& c, Server::Reply reply) {
  std::lock_guard<std::mutex> closing(closingMutex_);
  if (closed_) {
    reply({{"error", "the run has ended: nothing changes it now"}});
    return;
  }
  // Rule commands run on the training thread at the next step boundary (or while idle). A change
  // returns its warnings (the ack's `warnings`, when there are any).
  auto ruleChange = [&](std::function<std::vector<std::string>(rules::RuleSet&)> change) {
    run_.changeRules([this, change = std::move(change), reply](rules::RuleSet& set) {
      std::vector<std::string> warnings;
      try {
        warnings = change(set);
      } catch (const std::exception& e) {
        reply({{"error", oneLine(e)}});
        return;
      }
      // Runs before step stepsDone() begins: the first step with the change. Caught as the
      // change is: a throw here would end in a future nobody reads, and the reply would be lost.
      try {
        nlohmann::json state = publishRules();
        nlohmann::json result{{"rules", std::move(state)}, {"from_step", run_.stepsDone()}};
        if (!warnings.empty())
          result["warnings"] = warnings;
        reply(result);
      } catch (const std::exception& e) {
        reply({{"error", oneLine(e)}});
      }
    });
    wake_.notify_all();
  };
  if (c.name == "toggle_rule") {
    ruleChange([name = c.rule, on = c.enabled](rules::RuleSet& set) {
      set.setEnabled(name, on);
      return std::vector<std::string>{};
    });
  } else if (c.name == "remove_rule") {
    ruleChange([name = c.rule](rules::RuleSet& set) {
      set.remove(name);
      return std::vector<std::string>{};
    });
  } else if (c.name == "add_rule") {
    // Checked now (the reply says what is wrong); added at the step boundary.
    std::vector<rules::Rule> parsed;
    try {
      parsed = rules::parseRules(c.source);
    } catch (const rules::RuleError& e) {
      reply({{"error", e.what()}});
      return;
    }
    // A `params` selector that selects none of the model's parameters is said, as a session's is
    // when its run begins: the rule is in force and changes nothing.
    ruleChange([this, parsed](rules::RuleSet& set) {
      set.add(parsed);
      rules::RuleSet added;
      added.add(parsed);
      return added.unselected(run_.parameterNames());
    });
  } else if (c.name == "set_sampling") {
    if (!run_.samplesNodes()) {
      reply({{"error", "this run has no per-node statistics (it has no graph of its ops)"}});
      return;
    }
    samplingEvery_ = c.every;
    reply({{"every", c.every}});
  } else if (c.name == "pause" || c.name == "resume") {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (finished_ || stopRequested_) {
        reply({{"error", std::string("the run has ") + (finished_ ? "finished" : "been stopped") +
                             ": nothing to " + c.name}});
        return;
      }
      paused_ = c.name == "pause";
      // Published under the lock (it only posts to the server thread): the training thread's
      // "finished", published under it too, cannot come between and be overtaken.
      server_.publishState(c.name == "pause" ? "paused" : "training");
    }
    wake_.notify_all();
    reply({{"state", c.name == "pause" ? "paused" : "training"}});
  } else if (c.name == "snapshot") {
    // The session as it stands: the enabled rules, registered ones by name and the others by
    // their text. Read on the training thread, like any rule change.
    // The session is read there too: a budget change (set_budget) writes it on that thread.
    run_.changeRules([this, reply](rules::RuleSet& set) {
      const auto session = run_.session();
      if (!session) {
        reply({{"error", "this run has no session to snapshot"}});
        return;
      }
      try {
        Session s = *session;
        s.rules = {};
        auto& registry = rules::Registry::global();
        // Rewrites were applied once, when the trainer was built, and are not in the rule set:
        // the session's stand as they were. Until 2026-12-07 the snapshot left them out, and a
        // run of it trained another model.
        for (const auto& name : session->rules.enable) {
          const auto entry = registry.find(name);
          if (entry && entry->isRewrite())
            s.rules.enable.push_back(name);
        }
        if (!session->rules.source.empty()) {
          for (const auto& rule : rules::parseRules(session->rules.source)) {
            rules::RegistryEntry own;
            own.rule = rule;
            if (own.isRewrite())
              s.rules.source += (s.rules.source.empty() ? "" : "\n") + rule.source + "\n";
          }
        }
        for (const auto& name : set.names()) {
          if (!set.enabled(name))
            continue;
          const auto entry = registry.find(name);
          const std::string& source = set.source(name);
          if (entry && (entry->rule ? entry->rule->source : "") == source)
            s.rules.enable.push_back(name);
          else
            s.rules.source += (s.rules.source.empty() ? "" : "\n") + source + "\n";
        }
        reply({{"session", nlohmann::json::parse(sessionJson(s))}, {"step", run_.stepsDone()}});
      } catch (const std::exception& e) {
        reply({{"error", oneLine(e)}});  // a throw here would end in a future nobody reads
      }
    });
    wake_.notify_all();
  } else if (c.name == "set_budget") {
    // At the step boundary, like a rule change: the next step plans for the new budget.
    run_.changeRules([this, reply, mb = c.budgetMb, fraction = c.budgetFraction](rules::RuleSet&) {
      nlohmann::json result;
      try {
        run_.setBudget(mb, fraction);
        publishedRemat_.clear();  // the budget shows at once, before the next step ran with it
        publishRematIfChanged(nullptr);
        publishControlIfChanged();  // the remat_budget knob's values follow a budget_fraction
        result = {{"from_step", run_.stepsDone()}};
        result[mb ? "budget_mb" : "budget_fraction"] = mb ? *mb : *fraction;
      } catch (const std::exception& e) {
        result = {{"error", e.what()}};
      }
      reply(std::move(result));
    });
    wake_.notify_all();
  } else if (c.name == "pin") {
    // At the step boundary: the next step's decision keeps to it.
    run_.changeRules([this, reply, knob = c.knob, value = c.value](rules::RuleSet&) {
      nlohmann::json result;
      try {
        run_.pin(knob, value);
        publishControlIfChanged();
        nlohmann::json pins = nlohmann::json::object();
        if (const auto control = run_.control()) {
          for (const auto& k : control->knobs) {
            if (k.pinned)
              pins[k.name] = *k.pinned;
          }
        }
        result = {{"pins", pins}, {"from_step", run_.stepsDone()}};
      } catch (const std::exception& e) {
        result = {{"error", e.what()}};
      }
      reply(std::move(result));
    });
    wake_.notify_all();
  } else if (c.name == "stop") {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopRequested_ = true;
    }
    wake_.notify_all();
    reply({{"state", "stopping"}});
  }
}

void RunController::applyChangesWhileIdle() {
  run_.applyRuleChanges();
}

bool RunController::beforeStep(const std::atomic<bool>* stop, std::optional<double> idleSeconds) {
  // Per-node statistics are for whoever asked: with no client left, nobody reads them.
  if (samplingEvery_.load() > 0 && server_.clientCount() == 0)
    samplingEvery_ = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  auto attended = std::chrono::steady_clock::now();  // when a client was last seen attached
  while (paused_ && !stopRequested_ && !(stop && stop->load())) {
    const auto now = std::chrono::steady_clock::now();
    if (server_.clientCount() > 0) {
      attended = now;
    } else if (idleSeconds &&
               std::chrono::duration<double>(now - attended).count() >= *idleSeconds) {
      // Paused and left: nobody is coming back to resume it (the studio starts its runs with a
      // linger), so it ends as a stopped run does instead of holding its memory for good.
      stopRequested_ = true;
      if (progress_ != nullptr)
        *progress_ << "paused with no client attached for " << *idleSeconds << " s: stopping"
                   << std::endl;
      break;
    }
    lock.unlock();
    applyChangesWhileIdle();
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(50));
  }
  return !stopRequested_ && !(stop && stop->load());
}

bool RunController::sampleStep(int64_t step) const {
  const int64_t every = samplingEvery_.load();
  return every > 0 && step % every == 0;
}

bool RunController::stopRequested() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopRequested_;
}

namespace {

// The rule set's shape — names, enabled flags, source sizes: cheap enough to compare every step.
std::string ruleSignature(rules::RuleSet& set) {
  std::string signature;
  for (const auto& name : set.names()) {
    signature += name;
    signature += set.enabled(name) ? ":1:" : ":0:";
    signature += std::to_string(set.source(name).size());
    signature += '\n';
  }
  return signature;
}

}  // namespace

nlohmann::json RunController::publishRules() {
  publishedSignature_ = ruleSignature(run_.rules());
  nlohmann::json state = ruleState();
  server_.publishRules(state);
  return state;
}

void RunController::publishRulesIfChanged() {
  if (ruleSignature(run_.rules()) != publishedSignature_)
    publishRules();
}

void RunController::publishBindingsIfChanged() {
  // Bindings are only ever added (a (site, bucket) is measured once): a new size is a new table.
  const BindingTable* table = run_.bindings();
  if (table == nullptr || table->bindings.size() + 1 == publishedBindings_)
    return;
  publishedBindings_ = table->bindings.size() + 1;
  server_.publishBindings(encode(*table)["bindings"]);
}

void RunController::publishRematIfChanged(const StepResult* last) {
  const std::optional<RematMessage> plan = run_.remat(last);
  if (!plan)
    return;
  // What the studio shows of it: the budget as set and each unit's state (not the step).
  // (A fraction's bytes follow each batch's predicted plain peak: they travel with the steps.)
  std::string signature = plan->strategy + ":" + std::to_string(plan->budgetMb.value_or(0)) + ":" +
                          std::to_string(plan->budgetFraction.value_or(0));
  for (const auto& u : plan->units)
    signature += (u.recomputed ? "+" : "-") + u.name + "\n";
  if (signature == publishedRemat_)
    return;
  publishedRemat_ = std::move(signature);
  server_.publishRemat(encode(*plan)["remat"]);
}

void RunController::publishControlIfChanged() {
  const std::optional<ControlMessage> control = run_.control();
  if (!control)
    return;
  // What changes it: the mode, the knobs' values and pins, the exclusions (not where the knobs
  // stand, which each step's configuration carries).
  ControlMessage shape = *control;
  for (auto& k : shape.knobs)
    k.current = 0;
  std::string signature = encode(shape).dump();
  if (signature == publishedControl_)
    return;
  publishedControl_ = std::move(signature);
  server_.publishControl(encode(*control)["control"]);
}

void RunController::publishGraph(const Graph& graph) {
  server_.publishGraph(nlohmann::json::parse(toJson(graph)));
}

void RunController::afterValidation(const Validation& v) {
  server_.publishValidation(
      encode(ValidationMessage{v.step, v.samples, v.loss, v.top1, v.top5})["validation"]);
}

void RunController::afterStep(const StepResult& result) {
  publishRulesIfChanged();
  publishBindingsIfChanged();
  publishRematIfChanged(&result);
  publishControlIfChanged();
  server_.publishStep(encode(stepMessage(result)));
  if (result.nodes)
    server_.publishNodes(encode(nodesMessage(*result.nodes, run_.gradientStats()))["nodes"]);
}

void RunController::serveUntilStopped(const std::atomic<bool>* stop,
                                      std::optional<double> idleSeconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_ = true;
  paused_ = false;
  server_.publishState("finished");
  auto attended = std::chrono::steady_clock::now();  // when a client was last seen attached
  while (!stopRequested_ && !(stop && stop->load())) {
    const auto now = std::chrono::steady_clock::now();
    if (server_.clientCount() > 0)
      attended = now;
    else if (idleSeconds && std::chrono::duration<double>(now - attended).count() >= *idleSeconds)
      break;
    lock.unlock();
    applyChangesWhileIdle();
    lock.lock();
    wake_.wait_for(lock, std::chrono::milliseconds(50));
  }
  lock.unlock();  // handle() takes closingMutex_ before mutex_
  // As the destructor does: what clients asked for since the last turn above (a toggle sent with
  // the stop) is answered before the final state, as docs/protocol.md says; until 2026-12-07 its
  // ack came after "stopped", from the destructor. From here on a command is refused.
  {
    std::lock_guard<std::mutex> closing(closingMutex_);
    closed_ = true;
  }
  applyChangesWhileIdle();
  server_.publishState("stopped");
  stoppedPublished_ = true;
}

}  // namespace symtune::attach
