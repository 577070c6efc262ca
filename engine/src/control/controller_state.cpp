#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "symtune/control/additive_model.h"
#include "symtune/control/controller.h"

// The online controller's state for checkpoints (OnlineController::state, AdditiveModel::state).
// nlohmann writes doubles with as many digits as read them back exactly.

namespace symtune::control {

namespace {

using json = nlohmann::json;

json configurationJson(const ConfigSpace& space, const Configuration& c) {
  json out = json::object();
  for (const Knob& k : space.knobs())
    out[k.name] = valueOf(c, k);
  return out;
}

Configuration configurationFrom(const ConfigSpace& space, const json& in) {
  Configuration c = space.current();
  for (const auto& [name, value] : in.items()) {
    if (space.knob(name) == nullptr)
      throw std::invalid_argument("the controller's state names a knob " + name +
                                  " this run's space does not have");
    setValue(c, name, value.get<double>());
  }
  return c;
}

json parsed(const std::string& text, const char* what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string(what) + ": not valid JSON: " + e.what());
  }
}

}  // namespace

std::string AdditiveModel::state() const {
  json contexts = json::object();
  for (const auto& [name, at] : contexts_)
    contexts[name] = at;
  json recent = json::array();
  for (const Recent& r : recent_) {
    recent.push_back({{"x", r.x},
                      {"centred", r.centred},
                      {"residual", r.residual},
                      {"weight", r.weight},
                      {"scale", r.scale}});
  }
  return json{{"terms", dim_},           {"contexts", contexts},
              {"prior", prior_},         {"precision", precision_},
              {"moment", moment_},       {"residuals", residualSum_},
              {"reference", reference_}, {"observations", observations_},
              {"counted", counted_},     {"recent", recent},
              {"shifts", shifts_}}
      .dump();
}

void AdditiveModel::restore(const std::string& text) {
  const json in = parsed(text, "the speed model's state");
  try {
    const auto terms = in.at("terms").get<size_t>();
    const auto contexts = in.at("contexts").get<std::map<std::string, size_t>>();
    // The knobs' and signals' terms come first; each context adds one.
    const size_t firstContext = knobTerms_ + signals_ * (knobTerms_ + 1);
    if (terms != firstContext + contexts.size())
      throw std::invalid_argument("the speed model's state is of another configuration space");
    // Each context its own term after the others' (features() writes x at it).
    std::set<size_t> taken;
    for (const auto& [name, at] : contexts) {
      if (at < firstContext || at >= terms || !taken.insert(at).second)
        throw std::invalid_argument("the speed model's state: context \"" + name + "\" has term " +
                                    std::to_string(at) + ", not one of its own");
    }
    auto prior = in.at("prior").get<std::vector<double>>();
    auto precision = in.at("precision").get<std::vector<double>>();
    auto moment = in.at("moment").get<std::vector<double>>();
    if (prior.size() != terms || moment.size() != terms || precision.size() != terms * terms)
      throw std::invalid_argument("the speed model's state does not hold its terms");
    const auto residuals = in.at("residuals").get<double>();
    const auto reference = in.at("reference").get<double>();
    const auto observations = in.at("observations").get<int64_t>();
    // A state written before the horizon (Note [Old steps fade]) counted every observation.
    const auto counted = in.value("counted", static_cast<double>(observations));
    // Note [A level that moves]: none in a state written before it.
    std::deque<Recent> recent;
    for (const json& r : in.value("recent", json::array())) {
      Recent seen{r.at("x").get<std::vector<double>>(), r.at("centred").get<double>(),
                  r.at("residual").get<double>(), r.at("weight").get<double>(),
                  r.at("scale").get<double>()};
      if (seen.x.size() != terms)
        throw std::invalid_argument("the speed model's state does not hold its terms");
      recent.push_back(std::move(seen));
    }
    const auto shifts = in.value("shifts", int64_t{0});
    contexts_ = contexts;  // all read: nothing changes when the state is refused
    dim_ = terms;
    prior_ = std::move(prior);
    precision_ = std::move(precision);
    moment_ = std::move(moment);
    residualSum_ = residuals;
    reference_ = reference;
    observations_ = observations;
    counted_ = counted;
    recent_ = std::move(recent);
    shifts_ = shifts;
    posteriorFresh_ = false;
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("the speed model's state: ") + e.what());
  }
}

std::string OnlineController::state() const {
  std::ostringstream rng;
  rng << rng_;
  json pins = json::object();
  for (const auto& [name, value] : pins_)
    pins[name] = value;
  json excluded = json::array();
  for (const auto& c : excluded_)
    excluded.push_back(configurationJson(space_, c));
  json notFitting = json::object();
  for (const auto& [bucket, records] : notFitting_) {
    json& list = notFitting[bucket] = json::array();
    for (const auto& c : records)
      list.push_back(configurationJson(space_, c));
  }
  // The space it learnt: a state restored into a space with as many terms but other values would
  // read one value's terms as another's.
  json space = json::object();
  for (const Knob& k : space_.knobs())
    space[k.name] = k.values;
  json out = {{"space", space},
              {"model", model_.state()},
              {"rng", rng.str()},
              {"signal_reference", signalReference_},
              {"pins", pins},
              {"excluded", excluded},
              {"not_fitting", notFitting},
              {"loss_average", lossAverage_},
              {"losses", losses_},
              {"last_diverged", lastDiverged_},
              {"high_in_a_row", highInARow_},
              {"baseline", configurationJson(space_, baseline_)},
              {"observed", observed_},
              {"spent", spent_},
              {"baseline_spent", baselineSpent_},
              {"last_samples", lastSamples_},
              {"decisions", decisions_}};
  if (blamed_)
    out["blamed"] = configurationJson(space_, *blamed_);
  if (refusedBudget_)
    out["refused_budget"] = *refusedBudget_;
  if (!log_.empty()) {
    out["last"] = {{"step", log_.back().step},
                   {"bucket", log_.back().bucket},
                   {"chosen", configurationJson(space_, log_.back().chosen)}};
    // Note [Divergence constraint]: what the next step's loss is judged against.
    if (log_.back().ran)
      out["last"]["ran"] = configurationJson(space_, *log_.back().ran);
  }
  return out.dump();
}

void OnlineController::restore(const std::string& text) {
  OnlineController next = *this;  // this one changes only when all of the state is read
  next.read(text);
  *this = std::move(next);
}

void OnlineController::read(const std::string& text) {
  const json in = parsed(text, "the controller's state");
  try {
    // A state written before it named its space (2026-12-07) is checked by its terms alone.
    if (in.contains("space")) {
      const auto space = in["space"].get<std::map<std::string, std::vector<double>>>();
      auto describe = [](const std::vector<double>& values) {
        std::string out;
        for (const double v : values)
          out += (out.empty() ? "" : ", ") + json(v).dump();
        return out;
      };
      for (const Knob& k : space_.knobs()) {
        const auto it = space.find(k.name);
        if (it == space.end())
          throw std::invalid_argument(
              "the controller's state is of another configuration "
              "space: it has no knob " +
              k.name);
        const bool same =
            it->second.size() == k.values.size() &&
            std::equal(k.values.begin(), k.values.end(), it->second.begin(), sameValue);
        if (!same)
          throw std::invalid_argument(
              "the controller's state is of another configuration "
              "space: its knob " +
              k.name + " took " + describe(it->second) + "; this run's takes " +
              describe(k.values));
      }
      if (space.size() != space_.knobs().size())
        throw std::invalid_argument(
            "the controller's state is of another configuration space: it has " +
            std::to_string(space.size()) + " knobs; this run's has " +
            std::to_string(space_.knobs().size()));
    }
    model_.restore(in.at("model").get<std::string>());
    std::istringstream rng(in.at("rng").get<std::string>());
    rng >> rng_;
    if (!rng)
      throw std::invalid_argument("the controller's state: its random generator is unreadable");
    signalReference_ = in.at("signal_reference").get<std::vector<double>>();
    if (!signalReference_.empty() && signalReference_.size() != options_.signalNames.size())
      throw std::invalid_argument(
          "the controller's state has " + std::to_string(signalReference_.size()) +
          " batch signals; this run has " + std::to_string(options_.signalNames.size()));
    pins_.clear();
    for (const auto& [name, value] : in.at("pins").items()) {
      const Knob* k = space_.knob(name);
      if (k == nullptr)
        throw std::invalid_argument("the controller's state pins a knob " + name +
                                    " this run's space does not have");
      const auto pinned = value.get<double>();
      if (std::none_of(k->values.begin(), k->values.end(),
                       [&](double v) { return sameValue(v, pinned); }))
        throw std::invalid_argument("the controller's state pins knob " + name + " to " +
                                    json(pinned).dump() + ", which this run's space does not take");
      pins_[name] = pinned;
    }
    excluded_.clear();
    for (const auto& c : in.at("excluded"))
      excluded_.push_back(configurationFrom(space_, c));
    if (std::none_of(grid_.begin(), grid_.end(),
                     [&](const Configuration& c) { return allowed(c); }))
      throw std::invalid_argument(
          "the controller's state pins and excludes every configuration "
          "of this run's space");
    // Note [Predicted not to fit]; a state written before it has no records.
    notFitting_.clear();
    const json notFitting = in.value("not_fitting", json::object());
    for (const auto& [bucket, records] : notFitting.items()) {
      for (const auto& c : records)
        notFitting_[bucket].push_back(configurationFrom(space_, c));
    }
    // Note [A budget the run refused]; a state written before it has none.
    refusedBudget_.reset();
    if (in.contains("refused_budget"))
      refusedBudget_ = in["refused_budget"].get<double>();
    lossAverage_ = in.at("loss_average").get<double>();
    losses_ = in.at("losses").get<int64_t>();
    lastDiverged_ = in.at("last_diverged").get<bool>();
    highInARow_ = in.at("high_in_a_row").get<int64_t>();
    blamed_.reset();
    if (in.contains("blamed"))
      blamed_ = configurationFrom(space_, in["blamed"]);
    // Note [Conservative exploration]; a state written before it counts from its restore.
    if (in.contains("baseline"))
      baseline_ = configurationFrom(space_, in["baseline"]);
    observed_ = in.value("observed", int64_t{0});
    spent_ = in.value("spent", 0.0);
    baselineSpent_ = in.value("baseline_spent", 0.0);
    lastSamples_ = in.value("last_samples", int64_t{1});
    log_.clear();
    if (in.contains("last")) {
      Decision last;
      last.step = in["last"].at("step").get<int64_t>();
      last.bucket = in["last"].at("bucket").get<std::string>();
      last.chosen = configurationFrom(space_, in["last"].at("chosen"));
      if (in["last"].contains("ran"))
        last.ran = configurationFrom(space_, in["last"]["ran"]);
      log_.push_back(std::move(last));
    }
    // A state written before it kept the count (2026-12-07) counts its last decision alone.
    decisions_ = in.value("decisions", static_cast<int64_t>(log_.size()));
    if (decisions_ < static_cast<int64_t>(log_.size()))
      throw std::invalid_argument("the controller's state counts " + std::to_string(decisions_) +
                                  " decisions, fewer than the " + std::to_string(log_.size()) +
                                  " it holds");
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("the controller's state: ") + e.what());
  }
}

}  // namespace symtune::control
