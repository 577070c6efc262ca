#include <limits>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "symtune/core/report.h"

// The inverse of toJson for what a run accumulates step by step: a resumed run's report goes on
// from the one its checkpoint holds.

namespace symtune {

namespace {

using json = nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A value that may be null (a non-finite number, an absent top-5).
std::optional<double> optionalNumber(const json& v) {
  return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
}

// A number the report wrote as null because it was not finite: NaN again.
double numberOrNaN(const json& v) {
  return v.is_number() ? v.get<double>() : kNaN;
}

// object[key] as a number: `fallback` when it is absent, NaN when null.
double numberAt(const json& object, const char* key, double fallback) {
  if (!object.is_object() || !object.contains(key))
    return fallback;
  return numberOrNaN(object[key]);
}

template <typename T>
std::vector<T> listOf(const json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_array())
    return {};
  std::vector<T> out;
  for (const auto& v : object[key]) {
    if constexpr (std::is_floating_point_v<T>)
      out.push_back(static_cast<T>(numberOrNaN(v)));  // a NaN loss stays NaN, not 0
    else
      out.push_back(v.is_null() ? T{} : v.get<T>());
  }
  return out;
}

// object[key], or an empty object when it has none.
const json& member(const json& object, const char* key) {
  static const json none = json::object();
  return object.is_object() && object.contains(key) ? object[key] : none;
}

std::string text(const json& object, const char* key) {
  return object.is_object() && object.contains(key) && object[key].is_string()
             ? object[key].get<std::string>()
             : "";
}

void readControl(const json& control, RunReport& r) {
  r.microbatches = listOf<int>(control, "microbatches");
  for (const auto& s : control.value("splits", json::array()))
    r.splits.emplace_back(s.at("step").get<int64_t>(), s.at("why").get<std::string>());
  for (const auto& o : control.value("optimize_required", json::array()))
    r.optimizeRequired.emplace_back(o.at("step").get<int64_t>(),
                                    o.at("reasons").get<std::vector<std::string>>());
  for (const auto& d : control.value("decisions", json::array())) {
    RunReport::Decision decision;
    decision.step = d.at("step").get<int64_t>();
    decision.chosen = d.at("chosen").get<std::string>();
    decision.predictedSamplesPerSecond = numberAt(d, "predicted_samples_per_s", 0.0);
    decision.samplesPerSecond = numberAt(d, "samples_per_s", 0.0);
    decision.explored = d.value("explored", false);
    decision.levelMoved = d.value("level_moved", false);  // none before 2026-12-05
    for (const auto& a : d.value("alternatives", json::array()))
      decision.alternatives.emplace_back(a.at("configuration").get<std::string>(),
                                         numberAt(a, "predicted_samples_per_s", 0.0));
    // Each object held by name first: items() of the temporary value() returns would outlive it
    // (a range-for keeps only the proxy), and read freed memory.
    const json signals = d.value("signals", json::object());
    for (const auto& [name, value] : signals.items())
      decision.batchSignals.emplace_back(name, numberOrNaN(value));
    for (const auto& driver : d.value("drivers", json::array()))
      decision.drivers.emplace_back(driver.at("what").get<std::string>(),
                                    numberAt(driver, "factor", 1.0));
    decision.violation = text(d, "violation");
    decision.heldBack = text(d, "held_back");
    const json idle = d.value("idle", json::object());
    for (const auto& [knob, value] : idle.items())           // none before
      decision.idle.emplace_back(knob, numberOrNaN(value));  // 2026-12-06
    r.decisions.push_back(std::move(decision));
  }
}

}  // namespace

RunReport reportFromJson(const std::string& input) {
  RunReport r;
  try {
    const json in = json::parse(input);
    if (!in.is_object() || in.value("format", "") != "symtune-report")
      throw std::runtime_error("not a symtune-report");
    // A later version may mean its fields otherwise: read as this one, it would be misread.
    if (const auto v = in.find("version"); v == in.end() || !v->is_number_integer() ||
                                           v->get<int64_t>() < 1 ||
                                           v->get<int64_t>() > RunReport::kFormatVersion)
      throw std::runtime_error(
          "a symtune-report of version " + (v == in.end() ? std::string("(none)") : v->dump()) +
          ": this Symtune reads versions 1 to " + std::to_string(RunReport::kFormatVersion));
    r.sessionName = text(member(in, "session"), "name");
    r.sessionPath = text(member(in, "session"), "path");
    r.model = text(member(in, "model"), "name");
    r.preset = text(member(in, "model"), "preset");
    r.parameterCount = member(in, "model").value("parameters", int64_t{0});
    r.device = text(in, "device");
    r.threads = in.value("threads", 0);
    r.batchSize = in.value("batch_size", int64_t{0});
    r.stepsPlanned = member(in, "steps").value("planned", int64_t{0});
    r.resumedAt = listOf<int64_t>(member(in, "steps"), "resumed_at");
    r.startedAt = text(in, "started_at");
    r.loss = listOf<double>(member(in, "loss"), "curve");
    r.stepSeconds = listOf<double>(member(in, "throughput"), "step_s");
    r.trainSeconds = numberAt(member(in, "throughput"), "train_s", 0.0);
    r.wallSeconds = numberAt(in, "wall_time_s", 0.0);
    r.samples = member(in, "throughput").value("samples", int64_t{0});
    const json& rules = member(in, "rules");
    r.rulesInForce = listOf<std::string>(rules, "in_force");
    const json features =
        in.value("features", json::object());  // held: items() outlives no temporary
    for (const auto& [name, value] : features.items())
      r.features.emplace_back(name, numberOrNaN(value));
    const json fired = rules.value("fired_steps", json::object());
    for (const auto& [name, steps] : fired.items())
      r.rulesFired.emplace_back(name, steps.get<int64_t>());
    r.stepsSkipped = rules.value("skipped_steps", int64_t{0});
    r.rulesUnselected = listOf<std::string>(rules, "unselected");
    for (const auto& w : rules.value("rewrites", json::array()))
      r.rewrites.emplace_back(w.at("rule").get<std::string>(), w.at("sites").get<int64_t>());
    if (in.contains("remat") && in.at("remat").is_object()) {
      RunReport::Remat remat;
      for (const auto& s : member(in, "remat").value("steps", json::array())) {
        RunReport::RematStep step;
        if (s.contains("limit_bytes") && s["limit_bytes"].is_number())
          step.limitBytes = s["limit_bytes"].get<int64_t>();
        step.peakBytes = numberAt(s, "peak_bytes", 0.0);
        step.recomputed = s.value("recomputed", int64_t{0});
        step.attempts = s.value("attempts", 1);
        remat.steps.push_back(step);
      }
      r.remat = std::move(remat);
    }
    readControl(member(in, "control"), r);
    for (const auto& v : in.value("validation", json::array()))
      r.validation.push_back({v.at("step").get<int64_t>(), v.at("samples").get<int64_t>(),
                              numberOrNaN(v.at("loss")), optionalNumber(v.value("top1", json())),
                              optionalNumber(v.value("top5", json()))});
    r.bindingMeasurements = listOf<int64_t>(member(in, "binding"), "measurements_per_step");
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("a report that cannot be read back: ") + e.what());
  }
  return r;
}

}  // namespace symtune
