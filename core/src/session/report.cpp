#include "symtune/core/report.h"

#include "symtune/core/atomic_file.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace symtune {

double RunReport::samplesPerSecond() const {
  const int64_t n = samples > 0 ? samples : stepsCompleted() * batchSize;
  return trainSeconds > 0 ? static_cast<double>(n) / trainSeconds : 0.0;
}

const char* toString(RunReport::Status status) {
  switch (status) {
    case RunReport::Status::Completed:
      return "completed";
    case RunReport::Status::Interrupted:
      return "interrupted";
    case RunReport::Status::Failed:
      return "failed";
  }
  return "?";
}

std::string toJson(const RunReport& r) {
  using json = nlohmann::ordered_json;
  json loss = json::object();
  loss["curve"] = r.loss;
  if (!r.loss.empty()) {
    loss["first"] = r.loss.front();
    loss["last"] = r.loss.back();
  }
  json memory = {{"peak_rss_bytes", r.peakRssBytes}};
  memory["peak_cuda_allocated_bytes"] =
      r.peakCudaAllocatedBytes ? json(*r.peakCudaAllocatedBytes) : json(nullptr);

  json features = json::object();
  for (const auto& [name, value] : r.features) {
    features[name] = std::isfinite(value) ? json(value) : json(nullptr);
  }
  json fired = json::object();
  for (const auto& [name, steps] : r.rulesFired)
    fired[name] = steps;
  json rewrites = json::array();
  for (const auto& [name, sites] : r.rewrites)
    rewrites.push_back({{"rule", name}, {"sites", sites}});
  json out = {
      {"format", "symtune-report"},
      {"version", RunReport::kFormatVersion},
      {"status", toString(r.status)},
      {"versions",
       {{"symtune", r.symtuneVersion},
        {"torch", r.torchVersion},
        {"cuda_compiled", r.cudaCompiled},
        {"cuda_available", r.cudaAvailable}}},
      {"session", {{"name", r.sessionName}, {"path", r.sessionPath.string()}}},
      {"model", {{"name", r.model}, {"preset", r.preset}, {"parameters", r.parameterCount}}},
      {"device", r.device},
      {"optimizer", {{"name", r.optimizer}, {"fused", r.optimizerFused}}},
      {"device_timing", r.deviceTiming.empty() ? json(nullptr) : json(r.deviceTiming)},
      {"threads", r.threads},
      {"batch_size", r.batchSize},
      {"steps",
       {{"planned", r.stepsPlanned},
        {"completed", r.stepsCompleted()},
        {"resumed_at", r.resumedAt}}},
      {"loss", loss},
      {"throughput",
       {{"samples_per_s", r.samplesPerSecond()},
        {"samples", r.samples},
        {"train_s", r.trainSeconds},
        {"step_s", r.stepSeconds}}},
      {"memory", memory},
      {"features", features},
      {"rules",
       {{"in_force", r.rulesInForce},
        {"fired_steps", fired},
        {"skipped_steps", r.stepsSkipped},
        {"rewrites", rewrites},
        {"unselected", r.rulesUnselected}}},
      {"wall_time_s", r.wallSeconds},
      {"started_at", r.startedAt},
  };
  if (r.remat) {
    json steps = json::array();
    int64_t again = 0;
    for (const auto& step : r.remat->steps) {
      steps.push_back({{"limit_bytes", step.limitBytes ? json(*step.limitBytes) : json(nullptr)},
                       {"peak_bytes", step.peakBytes},
                       {"recomputed", step.recomputed},
                       {"attempts", step.attempts}});
      again += step.attempts > 1;
    }
    out["remat"] = {{"buckets", r.remat->buckets},
                    {"plans_made", r.remat->plansMade},
                    {"cache_hits", r.remat->cacheHits},
                    {"back_offs", r.remat->backOffs},
                    {"steps_run_again", again},
                    {"profiles", r.remat->profiles},
                    {"shape_profiles", r.remat->shapeProfiles},
                    {"shapes_refused",
                     r.remat->shapesRefused.empty() ? json(nullptr) : json(r.remat->shapesRefused)},
                    {"steps", steps}};
  } else {
    out["remat"] = nullptr;
  }
  {
    json splits = json::array(), required = json::array();
    for (const auto& [step, why] : r.splits)
      splits.push_back({{"step", step}, {"why", why}});
    for (const auto& [step, reasons] : r.optimizeRequired)
      required.push_back({{"step", step}, {"reasons", reasons}});
    json decisions = json::array();
    for (const auto& d : r.decisions) {
      json alternatives = json::array();
      for (const auto& [configuration, predicted] : d.alternatives)
        alternatives.push_back(
            {{"configuration", configuration}, {"predicted_samples_per_s", predicted}});
      json batchSignals = json::object(), drivers = json::array(), idle = json::object();
      for (const auto& [name, value] : d.batchSignals)
        batchSignals[name] = value;
      for (const auto& [knob, value] : d.idle)
        idle[knob] = value;
      for (const auto& [what, factor] : d.drivers)
        drivers.push_back({{"what", what}, {"factor", factor}});
      decisions.push_back({{"step", d.step},
                           {"chosen", d.chosen},
                           {"predicted_samples_per_s", d.predictedSamplesPerSecond},
                           {"samples_per_s", d.samplesPerSecond},
                           {"explored", d.explored},
                           {"alternatives", alternatives},
                           {"signals", batchSignals},
                           {"drivers", drivers},
                           {"violation", d.violation.empty() ? json(nullptr) : json(d.violation)},
                           {"held_back", d.heldBack.empty() ? json(nullptr) : json(d.heldBack)},
                           {"level_moved", d.levelMoved},
                           {"idle", idle}});
    }
    out["control"] = {{"microbatches", r.microbatches},
                      {"splits", splits},
                      {"optimize_required", required},
                      {"decisions", decisions}};
  }
  {
    json validation = json::array();
    const auto orNull = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    for (const auto& v : r.validation)
      validation.push_back({{"step", v.step},
                            {"samples", v.samples},
                            {"loss", v.loss},
                            {"top1", orNull(v.top1)},
                            {"top5", orNull(v.top5)}});
    out["validation"] = validation;
  }
  if (r.bindings) {
    int64_t measured = 0;
    for (int64_t n : r.bindingMeasurements)
      measured += n;
    out["binding"] = {
        {"measurements", measured},
        {"measurements_per_step", r.bindingMeasurements},
        {"note", r.bindingNote.empty() ? json(nullptr) : json(r.bindingNote)},
        {"table_file", r.bindingTableFile.empty() ? json(nullptr) : json(r.bindingTableFile)},
        {"table", json::parse(r.bindings->toJson())}};
  } else {
    out["binding"] = nullptr;
  }
  if (!r.error.empty()) {
    out["error"] = r.error;
  }
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

void writeReport(const RunReport& report, const std::filesystem::path& path) {
  writeFileAtomically(path, toJson(report));
}

}  // namespace symtune
