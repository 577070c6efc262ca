// Modes named by their configuration ("remat:0.5", "bind+remat:0.5", "bind+lean:0.25",
// "remat_mb:12.5+micro:2+threads:1") and the exhaustive grid over a model's configuration space
// under a memory budget (docs/benchmarks.md, "The configuration grid"; docs/control.md).

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <sstream>

#include <ATen/Parallel.h>

#include "bench_common.h"
#include "harness.h"
#include "symtune/binding/binder.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/runtime/tuning.h"

namespace symtune::bench {

namespace {

using json = nlohmann::ordered_json;

std::vector<std::string> parts(const std::string& name, char separator) {
  std::vector<std::string> out;
  std::stringstream in(name);
  for (std::string item; std::getline(in, item, separator);)
    out.push_back(item);
  return out;
}

std::optional<double> number(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size())
    return std::nullopt;
  return value;
}

// What a configured mode's name asks for.
struct Components {
  std::optional<double> fraction;      // remat:F
  std::optional<double> megabytes;     // remat_mb:X
  int microbatches = 1;                // micro:K
  int threads = 0;                     // threads:T
  bool bind = false;                   // bind
  std::optional<double> lean;          // lean:S (the binder's memory slack; with bind)
  std::optional<bool> explore;         // explore:0|1 (the binding_explore knob; with bind)
  bool split = false;                  // split (split_on_overrun)
  bool online = false;                 // online (the online controller)
  std::optional<double> conservative;  // conservative:C (the controller's; with online)
  bool outward = false;                // outward (the controller's; with online)
  std::optional<double> horizon;       // horizon:H (the controller's; with online)
  std::optional<int> shiftRun;         // shifts:R (the controller's; with online)
};

std::optional<Components> parse(const std::string& name) {
  Components c;
  bool any = false;
  for (const std::string& part : parts(name, '+')) {
    const auto colon = part.find(':');
    const std::string key = part.substr(0, colon);
    const std::optional<double> value =
        colon == std::string::npos ? std::nullopt : number(part.substr(colon + 1));
    if (key == "bind" && colon == std::string::npos) {
      c.bind = true;
    } else if (key == "split" && colon == std::string::npos) {
      c.split = true;
    } else if (key == "online" && colon == std::string::npos) {
      c.online = true;
    } else if (key == "outward" && colon == std::string::npos) {
      c.outward = true;
    } else if (key == "conservative" && value && *value >= 0 && *value < 1) {
      c.conservative = value;
    } else if (key == "horizon" && value && (*value == 0 || *value >= 2)) {
      c.horizon = value;
    } else if (key == "shifts" && value && (*value == 0 || (*value >= 2 && *value <= 16)) &&
               *value == static_cast<int>(*value)) {
      c.shiftRun = static_cast<int>(*value);
    } else if (key == "lean" && value && *value > 0 && *value < 1) {
      c.lean = value;
    } else if (key == "explore" && value && (*value == 0 || *value == 1)) {
      c.explore = *value == 1;
    } else if (key == "remat" && value && *value > 0 && *value <= 1 && !c.megabytes) {
      c.fraction = value;
    } else if (key == "remat_mb" && value && *value > 0 && !c.fraction) {
      c.megabytes = value;
    } else if (key == "micro" && value && *value >= 1 && *value <= 1024 &&
               *value == static_cast<int>(*value)) {
      c.microbatches = static_cast<int>(*value);
    } else if (key == "threads" && value && *value >= 1 && *value <= 1024 &&
               *value == static_cast<int>(*value)) {
      c.threads = static_cast<int>(*value);
    } else {
      return std::nullopt;
    }
    any = true;
  }
  // "bind" alone is a baseline mode's business ("bind+fused"); here it goes with something
  // else: a budget, a memory slack, micro-batches, threads, the controller, the explore knob.
  const bool bindAlone = c.bind && !c.fraction && !c.megabytes && !c.lean && !c.explore &&
                         c.microbatches <= 1 && c.threads == 0 && !c.online;
  if (!any || bindAlone)
    return std::nullopt;
  if ((c.lean || c.explore) && !c.bind)
    return std::nullopt;  // the binder's
  if (c.split && !c.fraction && !c.megabytes)
    return std::nullopt;  // splitting is the remat budget's back-off
  if ((c.conservative || c.outward || c.horizon || c.shiftRun) && !c.online)
    return std::nullopt;  // the controller's
  return c;
}

std::string describe(const Components& c, const std::string& name) {
  std::string out;
  const auto add = [&](const std::string& text) { out += (out.empty() ? "" : "; ") + text; };
  if (c.bind)
    add(c.fraction || c.megabytes ? "DynaCompiler's binding (measured outside the budget)"
                                  : "DynaCompiler's binding");
  if (c.lean) {
    char share[32];
    std::snprintf(share, sizeof share, "%g", *c.lean * 100);
    add(std::string(share) +
        " % of the sites' time may go to candidates that keep less for the "
        "backward, the trades saving most bytes per second first "
        "(binding.memory_slack)");
  }
  if (c.explore)
    add(*c.explore ? "the binder measuring a (site, bucket) it meets unbound (binding_explore 1)"
                   : "the binder binding by its table and cost model only, the ATen op "
                     "elsewhere (binding_explore 0)");
  if (c.fraction || c.megabytes) {
    const std::string budget = name.substr(name.find(c.fraction ? "remat:" : "remat_mb:"));
    add("remat's planner: the cheapest units recomputed, per batch, to keep the step under " +
        (c.fraction ? budget.substr(6, budget.find('+') - 6) + " of its plain peak (predicted)"
                    : budget.substr(9, budget.find('+') - 9) + " MB") +
        ", enforced");
  }
  if (c.microbatches > 1)
    add(std::to_string(c.microbatches) + " micro-batches, their gradients added up");
  if (c.split)
    add("a step no plan fits split into more micro-batches");
  if (c.online)
    add("the online controller choosing each step's configuration");
  if (c.conservative) {
    char share[32];
    std::snprintf(share, sizeof share, "%g", *c.conservative);
    add(*c.conservative > 0 ? std::string("exploring while it keeps ") + share +
                                  " of its first configuration's throughput"
                            : std::string("exploring freely"));
  }
  if (c.outward)
    add("exploring next to any value measured, not only the fastest");
  if (c.horizon) {
    char steps[32];
    std::snprintf(steps, sizeof steps, "%g", *c.horizon);
    add(*c.horizon > 0 ? std::string("its model remembering about ") + steps + " steps"
                       : std::string("its model weighing every step alike"));
  }
  if (c.shiftRun) {
    add(*c.shiftRun > 0 ? "its model believing a speed moved after " + std::to_string(*c.shiftRun) +
                              " steps in a row far off one side"
                        : std::string("its model never believing a speed moved"));
  }
  if (c.threads > 0)
    add(std::to_string(c.threads) + " intra-op threads");
  return out;
}

// Megabytes as a mode's name gives them: to the byte (three decimals).
std::string megabytesText(double bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3f", bytes / 1e6);
  return text;
}

// What every grid mode's name begins with: "bind+" or "bind+lean:S+" where the grid runs bound
// (RunConfig::gridBind), else nothing.
std::string gridBase(const RunConfig& config) {
  if (!config.gridBind)
    return "";
  if (*config.gridBind <= 0)
    return "bind+";
  char slack[32];
  std::snprintf(slack, sizeof slack, "%g", *config.gridBind);
  return std::string("bind+lean:") + slack + "+";
}

// The grid's session bound as its modes' names say (gridBase): the session's own binder under
// its remat budget (remat.bind), with the memory slack asked for.
void bindLikeTheGrid(Session& session, const RunConfig& config) {
  if (!config.gridBind)
    return;
  session.binding.enabled = true;
  session.binding.memorySlack = *config.gridBind;
  session.remat.bind = true;
}

// The grid's mode name of configuration `c`: its remat budget share (the grid's own when unset)
// of the plain peak `peak` in MB, its micro-batches and threads, after the grid's base.
std::string gridName(const control::Configuration& c, double peak, const RunConfig& config) {
  std::string name =
      gridBase(config) + "remat_mb:" + megabytesText(c.rematBudget.value_or(*config.grid) * peak);
  if (c.microbatches > 1)
    name += "+micro:" + std::to_string(c.microbatches);
  if (c.threads > 0)
    name += "+threads:" + std::to_string(c.threads);
  if (c.bindingExplore && !*c.bindingExplore)
    name += "+explore:0";  // 1 is how a binder begins
  return name;
}

}  // namespace

const Mode* configuredMode(const std::string& name) {
  const std::optional<Components> parsed = parse(name);
  if (!parsed)
    return nullptr;
  // Made on first use and kept for the process (modes are handed out by address).
  static std::deque<Mode> made;
  for (const auto& m : made) {
    if (m.name == name)
      return &m;
  }
  const Components c = *parsed;
  Mode mode{name, describe(c, name), {}, {}, {}, {}};
  const bool remat = c.fraction || c.megabytes;
  if (c.bind && remat) {
    // A session with a remat block runs unbound (docs/remat.md, "With the binder"): the mode
    // gives the trainer's executor a binder of its own, which measures outside the budget.
    mode.setup = [slack = c.lean.value_or(0), explore = c.explore](Trainer& trainer) {
      auto* segments = dynamic_cast<SegmentExecutor*>(&trainer.executor());
      TORCH_CHECK(segments != nullptr, "bind+remat: the remat block runs a SegmentExecutor");
      binding::BinderOptions options;
      options.memorySlack = slack;
      auto binder = std::make_shared<binding::Binder>(
          segments->symugen()->staticGraph(), binding::currentMachine(trainer.device()), options);
      if (explore)
        binder->setExploring(*explore);
      segments->setBinder(std::move(binder));
    };
  }
  if (c.threads > 0 || c.online) {
    // The intra-op pool is the process's: set around each of the mode's steps, and put back
    // after them (the controller sets its own choice in its steps).
    auto before = std::make_shared<int>(0);
    mode.enter = [before, threads = c.threads] {
      *before = at::get_num_threads();
      if (threads > 0)
        at::set_num_threads(threads);
    };
    mode.leave = [before] { at::set_num_threads(*before); };
  }
  mode.configure = [c, remat](Session& session) {
    if (c.bind && !remat) {
      session.binding.enabled = true;
      session.binding.memorySlack = c.lean.value_or(0);
      if (c.explore) {
        session.control.enabled = true;
        session.control.bindingExplore = c.explore;
      }
    }
    if (remat) {
      session.remat.enabled = true;
      session.remat.strategy = "plan";
      session.remat.budgetFraction = c.fraction;
      session.remat.budgetMb = c.megabytes;
    }
    if (c.microbatches > 1 || c.split || c.online) {
      session.control.enabled = true;
      session.control.microbatches = c.microbatches;
      session.control.splitOnOverrun = c.split;
      session.control.mode = c.online ? "online" : "fixed";
      if (c.conservative)
        session.control.conservative = *c.conservative;
      if (c.outward)
        session.control.explore = "outward";
      session.control.horizon = c.horizon;
      session.control.shiftRun = c.shiftRun;
    }
  };
  made.push_back(std::move(mode));
  return &made.back();
}

std::vector<std::string> gridModes(const std::string& model, const RunConfig& config,
                                   double* budgetBytes) {
  TORCH_CHECK(config.grid && *config.grid > 0 && *config.grid <= 1,
              "the grid needs a budget fraction in (0, 1]");
  // The plain run's peak (as "script" runs it, over the batches the modes will train on): the
  // budget is config.grid of it, in bytes, for every configuration alike (a fraction of each
  // configuration's own plain step would be of a smaller step when it splits the batch).
  Session session = benchSession(model, config);
  Trainer plain(session);
  plain.setTelemetry(Telemetry::Off);
  double peak = 0;
  for (int i = 0; i < config.warmup + config.steps; ++i) {
    const StepPeak step(plain.device());
    plain.step();
    peak = std::max(peak, step.bytes());
  }
  const double budget = *config.grid * peak;
  *budgetBytes = budget;
  // The configuration space under that budget: the remat knob from 0.3 of the plain peak up to
  // the budget, in the same steps as Trainer::configSpace.
  session.remat.enabled = true;
  session.remat.budgetFraction = *config.grid;
  bindLikeTheGrid(session, config);
  Trainer probe(session);
  const control::ConfigSpace space = probe.configSpace();
  std::vector<std::string> names;
  for (const control::Configuration& c : space.grid())
    names.push_back(gridName(c, peak, config));
  // The online controller over the same space, under the same budget (split: its first steps
  // may choose a configuration no plan fits).
  names.push_back(gridBase(config) + "remat_mb:" + megabytesText(budget) + "+online+split");
  return names;
}

json tuneBesideGrid(const std::string& model, const RunConfig& config, size_t configurations,
                    double budgetBytes) {
  const double peak = budgetBytes / *config.grid;  // the grid's plain peak
  Session session = benchSession(model, config);
  session.remat.enabled = true;
  session.remat.strategy = "plan";
  session.remat.budgetFraction = *config.grid;
  // Its fractions of the grid's plain peak, the largest over every step the grid runs (of the
  // warm-up steps' where larger): the tuner's remat budgets are the grid's bytes. Of the warm-up
  // steps' alone, they were less wherever those steps' batches were not the largest.
  session.remat.calibrationSteps = std::max(1, config.warmup);
  session.remat.plainPeakMb = peak / 1e6;
  bindLikeTheGrid(session, config);
  if (config.sharedTables && config.gridBind) {
    // Its evaluations read the run's table as a session's saved one (harness.h).
    session.binding.useTable = true;
    session.binding.table = config.sharedTables->of(model, *config.gridBind, config).path;
    session.binding.save = false;
  }
  TuneSessionOptions options;
  options.warmupSteps = config.warmup;
  options.measuredSteps = config.steps;
  options.budgetSteps =
      static_cast<int>(std::max<size_t>(1, configurations / 4)) * (config.warmup + config.steps);
  options.telemetry = config.telemetry;
  options.search.seed = config.seed;
  try {
    const TunedSession tuned = tuneSession(session, options);
    const control::TuneResult& r = tuned.search;
    const control::Configuration& best = r.evaluations[*r.best].configuration;
    int64_t failed = 0;
    json search = json::array();  // each evaluation, in the order run
    for (const auto& e : r.evaluations) {
      failed += !e.failed.empty();
      search.push_back({{"mode", gridName(e.configuration, peak, config)},
                        {"samples_per_s", e.samplesPerSecond},
                        {"failed", e.failed}});
    }
    // Note [Side by side at the end] (runtime/tuning.h): its two evaluations' steps count.
    const auto& side = tuned.sideBySide;
    json sideBySide = nullptr;
    if (side) {
      sideBySide = {{"first", gridName(side->first, peak, config)},
                    {"first_samples_per_s", side->firstSamplesPerSecond},
                    {"second", gridName(side->second, peak, config)},
                    {"second_samples_per_s", side->secondSamplesPerSecond},
                    {"reversed", side->reversed},
                    {"failed", side->failed},
                    {"steps", side->steps},
                    {"seconds", side->seconds}};
    }
    return {{"mode", gridName(best, peak, config)},
            {"configuration", best.text()},
            {"evaluations", r.evaluations.size() + (side ? 2 : 0)},
            {"evaluations_allowed", options.budgetSteps / (config.warmup + config.steps)},
            {"failed", failed},
            {"pruned", r.pruned.size()},
            {"steps", r.steps + (side ? side->steps : 0)},
            {"seconds", r.seconds + (side ? side->seconds : 0)},
            {"stopped", tuned.session.control.tuned->stopped},
            {"samples_per_s_in_search", r.evaluations[*r.best].samplesPerSecond},
            {"search", search},
            {"side_by_side", sideBySide}};
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

// Note [The choice and the best, head to head]
// The grid steps every configuration of the space in turn, forty or more trainers of one model
// one after another, for a few steps each; auto_tune measures one trainer at a time. The two
// rank close configurations differently: in one round on Transformer-XL under 0.6 the grid put
// the whole batch at 74.2 MB first (77.8 samples/s) and two micro-batches at 111.3 MB fifth
// (72.5), which the tuner had measured at 88.4, faster than anything else it ran; forty steps
// side by side the same day, the whole batch at 74.2 MB ran at 0.92 of the whole batch at 111.3,
// and that at 0.98 of two micro-batches. So where auto_tune's choice is not the grid's best, the
// two run again side by side on fresh trainers, alone, four times as many measured steps as the
// grid's (at least 24): the ratio of their medians there is how near the choice is to the grid's
// best (`head_to_head.tune_to_best`), beside the grid's own figure (`tune_to_best`).
json headToHead(const std::string& model, const RunConfig& config, const Probes& probes,
                const std::string& best, const std::string& tune) {
  RunConfig pair = config;
  pair.grid.reset();
  pair.modes = {best, tune};
  pair.baseline = best;
  pair.steps = std::max(24, 4 * config.steps);
  pair.exportDir.clear();
  pair.lockstep.reset();
  pair.memoryPrediction = false;
  std::cerr << "  auto_tune's choice and the grid's best, head to head (" << pair.steps
            << " steps)\n";
  try {
    const json run = runModel(model, pair, probes);
    json modes = json::array();
    std::optional<double> bestSpeed, tuneSpeed;
    for (const auto& m : run["modes"]) {
      if (m.contains("infeasible") || m.contains("refused")) {
        modes.push_back(
            {{"mode", m["mode"]}, {"infeasible", m.value("infeasible", m.value("refused", ""))}});
        continue;
      }
      const double speed = m["samples_per_s"]["median"].get<double>();
      if (m["mode"] == best)
        bestSpeed = speed;
      else
        tuneSpeed = speed;
      modes.push_back({{"mode", m["mode"]}, {"samples_per_s", speed}});
    }
    return {
        {"steps", pair.steps},
        {"warmup", pair.warmup},
        {"modes", modes},
        {"tune_to_best", bestSpeed && tuneSpeed ? json(*tuneSpeed / *bestSpeed) : json(nullptr)}};
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

json gridSummary(const json& modeResults, const std::vector<std::string>& grid, double fraction,
                 double budgetBytes, json tune) {
  json feasible = json::array(), infeasible = json::array(), online = nullptr;
  for (const auto& m : modeResults) {
    const std::string name = m["mode"].get<std::string>();
    if (std::find(grid.begin(), grid.end(), name) == grid.end())
      continue;
    if (name.find("+online") != std::string::npos) {
      if (m.contains("infeasible") || m.contains("refused"))
        online = {{"mode", name}, {"infeasible", m.value("infeasible", m.value("refused", ""))}};
      else
        online = {{"mode", name},
                  {"samples_per_s", m["samples_per_s"]["median"]},
                  {"samples_per_s_last_quarter", m.contains("controller")
                                                     ? m["controller"]["samples_per_s_last_quarter"]
                                                     : json(nullptr)},
                  {"peak_bytes", m["peak_bytes"]["max"]}};
      continue;
    }
    if (m.contains("infeasible") || m.contains("refused")) {
      infeasible.push_back(name);
      continue;
    }
    feasible.push_back({{"mode", name},
                        {"samples_per_s", m["samples_per_s"]["median"]},
                        {"peak_bytes", m["peak_bytes"]["max"]}});
  }
  std::sort(feasible.begin(), feasible.end(), [](const json& a, const json& b) {
    return a["samples_per_s"].get<double>() > b["samples_per_s"].get<double>();
  });
  const auto controllers = std::count_if(grid.begin(), grid.end(), [](const std::string& name) {
    return name.find("+online") != std::string::npos;
  });
  // auto_tune's choice as the grid measured it.
  std::optional<double> tuneToBest;
  if (tune.is_object() && tune.contains("mode")) {
    for (const auto& f : feasible) {
      if (f["mode"] == tune["mode"]) {
        tune["samples_per_s"] = f["samples_per_s"];
        tuneToBest = f["samples_per_s"].get<double>() / feasible[0]["samples_per_s"].get<double>();
      }
    }
  }
  return {{"budget_fraction", fraction},
          {"budget_bytes", budgetBytes},
          {"configurations", grid.size() - static_cast<size_t>(controllers)},
          {"feasible", feasible},
          {"infeasible", infeasible},
          {"best", feasible.empty() ? json(nullptr) : feasible[0]},
          {"runner_up", feasible.size() < 2 ? json(nullptr) : feasible[1]},
          {"online", online},
          {"online_to_best", online.is_null() || online.contains("infeasible") || feasible.empty()
                                 ? json(nullptr)
                                 : json(online["samples_per_s"].get<double>() /
                                        feasible[0]["samples_per_s"].get<double>())},
          {"tune", tune},
          {"tune_to_best", tuneToBest ? json(*tuneToBest) : json(nullptr)}};
}

json controllerSummary(const control::OnlineController& controller,
                       const std::vector<double>& measured) {
  std::map<std::string, int64_t> runs;
  int64_t explored = 0, heldBack = 0;
  json steps = json::array();  // each decision, in order: what ran, predicted and measured
  for (const auto& d : controller.log()) {
    ++runs[d.chosen.text()];
    explored += d.explored;
    heldBack += !d.heldBack.empty();
    steps.push_back({{"step", d.step},
                     {"bucket", d.bucket},
                     {"chosen", d.chosen.text()},
                     {"explored", d.explored},
                     {"held_back", !d.heldBack.empty()},
                     {"level_moved", d.levelMoved},
                     {"predicted_samples_per_s", d.predictedSamplesPerSecond},
                     {"samples_per_s", d.samplesPerSecond ? json(*d.samplesPerSecond) : json()}});
  }
  std::vector<std::pair<int64_t, std::string>> byRuns;
  for (const auto& [text, n] : runs)
    byRuns.emplace_back(n, text);
  std::sort(byRuns.rbegin(), byRuns.rend());
  json chosen = json::array();
  for (const auto& [n, text] : byRuns)
    chosen.push_back({{"configuration", text}, {"steps", n}});
  const size_t quarter = std::min(measured.size(), std::max<size_t>(1, measured.size() / 4));
  const std::vector<double> last(measured.end() - static_cast<std::ptrdiff_t>(quarter),
                                 measured.end());
  return {{"decisions", controller.decisions()},
          {"explored", explored},
          {"held_back", heldBack},
          {"shifts_believed", controller.shifts()},
          {"seconds_since_warmup",
           {{"spent", controller.secondsSinceWarmup().first},
            {"baseline_reckoned", controller.secondsSinceWarmup().second}}},
          {"last",
           controller.log().empty() ? json(nullptr) : json(controller.log().back().chosen.text())},
          {"samples_per_s_last_quarter", measured.empty() ? json(nullptr) : json(median(last))},
          {"chosen", chosen},
          {"steps", steps}};
}

}  // namespace symtune::bench
