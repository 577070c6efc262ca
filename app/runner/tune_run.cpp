#include "tune_run.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "rule_plugins.h"
#include "run_files.h"
#include "symtune/core/atomic_file.h"
#include "symtune/core/session.h"
#include "symtune/runtime/tuning.h"

namespace symtune::app {

namespace {

std::string rate(double samplesPerSecond) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f samples/s", samplesPerSecond);
  return text;
}

std::string knobsText(const control::ConfigSpace& space) {
  std::string out;
  for (const control::Knob& k : space.knobs()) {
    out += (out.empty() ? "" : "; ") + k.name;
    for (double v : k.values) {
      char text[32];
      std::snprintf(text, sizeof text, " %g", v);
      out += text;
    }
  }
  return out;
}

nlohmann::ordered_json searchJson(const TunedSession& tuned, const std::string& written,
                                  const std::string& table) {
  const control::TuneResult& r = tuned.search;
  nlohmann::ordered_json evaluations = nlohmann::ordered_json::array();
  for (const auto& e : r.evaluations) {
    nlohmann::ordered_json one = {{"configuration", e.configuration.text()},
                                  {"predicted_samples_per_s", e.predictedSamplesPerSecond},
                                  {"samples_per_s", e.samplesPerSecond},
                                  {"steps", e.steps},
                                  {"seconds", e.seconds}};
    if (!e.failed.empty())
      one["failed"] = e.failed;
    evaluations.push_back(one);
  }
  nlohmann::ordered_json pruned = nlohmann::ordered_json::array();
  for (const auto& [c, why] : r.pruned)
    pruned.push_back({{"configuration", c.text()}, {"why", why}});
  const auto pick = [&](const std::optional<size_t>& i) {
    return i ? nlohmann::ordered_json{{"configuration", r.evaluations[*i].configuration.text()},
                                      {"samples_per_s", r.evaluations[*i].samplesPerSecond}}
             : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json sideBySide = nullptr;
  if (const auto& s = tuned.sideBySide) {
    sideBySide = {{"first", s->first.text()},   {"first_samples_per_s", s->firstSamplesPerSecond},
                  {"second", s->second.text()}, {"second_samples_per_s", s->secondSamplesPerSecond},
                  {"reversed", s->reversed},    {"steps", s->steps},
                  {"seconds", s->seconds}};
    if (!s->failed.empty())
      sideBySide["failed"] = s->failed;
  }
  return {{"format", "symtune-tune"},
          {"configurations", r.configurations},
          {"evaluations", evaluations},
          {"pruned", pruned},
          {"best", pick(r.best)},
          {"runner_up", pick(r.runnerUp)},
          {"side_by_side", sideBySide},
          {"simulations", r.simulations},
          {"steps", r.steps},
          {"seconds", r.seconds},
          {"stopped", r.stopped},
          {"written", written},
          {"binding_table",
           table.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(table)}};
}

}  // namespace

int runTuneCommand(const CommandLine& cl) {
  Session session;
  try {
    session = loadSession(cl.session);
  } catch (const std::exception& e) {
    std::cerr << "symtune: error: " << e.what() << std::endl;
    return 2;
  }
  if (!session.rules.empty())
    loadRulePlugins();
  try {  // where the search's result goes, checked before the search spends its budget
    checkWritable(cl.output.value_or(cl.session));
  } catch (const std::exception& e) {
    std::cerr << "symtune: error: cannot write the tuned session: " << e.what() << std::endl;
    return 2;
  }
  {
    // Not over what the session reads (`--output data.csv` wrote the session over its data); over
    // the session itself is tune's default, in place.
    const std::string target = cl.output.value_or(cl.session);
    std::vector<NamedFile> written{{cl.output ? "--output" : "the session", target}};
    Session tunedAt = session;
    tunedAt.path = target;
    if (const auto table = bindingTablePath(tunedAt); !table.empty())
      written.push_back({"binding.table", table});
    std::vector<NamedFile> read = sessionInputs(session, cl.session);
    if (sharedFile({{"", target}}, {read.front()}))
      read.erase(read.begin());  // the session itself, written in place (tune's default)
    if (const auto why = sharedFile(written, read)) {
      std::cerr << "symtune: error: " << *why << std::endl;
      return 2;
    }
  }
  if (cl.tuneBudgetSteps < cl.tuneWarmup + cl.tuneMeasured) {
    std::cerr << "symtune: error: tune: a budget of " << cl.tuneBudgetSteps
              << " steps buys no evaluation (each takes " << cl.tuneWarmup + cl.tuneMeasured << ": "
              << cl.tuneWarmup << " warm-up and " << cl.tuneMeasured << " measured)" << std::endl;
    return 2;
  }
  TuneSessionOptions options;
  options.budgetSteps = static_cast<int>(cl.tuneBudgetSteps);
  options.warmupSteps = static_cast<int>(cl.tuneWarmup);
  options.measuredSteps = static_cast<int>(cl.tuneMeasured);
  int done = 0;
  options.progress = [&](const control::Evaluation& e) {
    std::cerr << "  " << ++done << "  " << e.configuration.text() << ": "
              << (e.failed.empty() ? rate(e.samplesPerSecond) : "failed: " + e.failed);
    if (done > 1 && e.predictedSamplesPerSecond > 0)
      std::cerr << " (predicted " << rate(e.predictedSamplesPerSecond) << ")";
    if (done == 1)
      std::cerr << " (the session's)";
    std::cerr << std::endl;
  };
  std::cerr << "auto_tune: " << cl.session << ", at most " << cl.tuneBudgetSteps
            << " training steps, " << cl.tuneWarmup << " warm-up + " << cl.tuneMeasured
            << " measured per configuration" << std::endl;
  TunedSession tuned;
  try {
    tuned = tuneSession(session, options);
  } catch (const SetupError& e) {  // names what it is about, not the session's file
    std::cerr << "symtune: error: " << cl.session << ": " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "symtune: error: " << e.what() << std::endl;
    return 1;
  }
  const std::string target = cl.output.value_or(cl.session);
  // Note [One binding table for the search]: the table the search measured goes with the tuned
  // session, where a run of it reads its table, so that it binds from its first step.
  // The table first: a session written before a table that then failed named a table that was
  // not there (or an older one), and said it was tuned.
  std::string tableWritten;
  try {
    Session written = tuned.session;
    written.path = target;  // its paths relative to where it is written
    const std::filesystem::path table = bindingTablePath(written);
    if (tuned.bindings && written.binding.save && !table.empty()) {
      tuned.bindings->save(table.string());
      tableWritten = table.string();
    }
    writeFileAtomically(target, sessionJson(written));
  } catch (const std::exception& e) {
    std::cerr << "symtune: error: " << e.what() << std::endl;
    return 1;
  }
  const control::TuneResult& r = tuned.search;
  if (cl.tuneJson) {
    std::cout << searchJson(tuned, target, tableWritten).dump(2) << std::endl;
    return 0;
  }
  std::cout << "space: " << r.configurations << " configurations (" << knobsText(tuned.space)
            << ")\n";
  for (const auto& [c, why] : r.pruned)
    std::cout << "pruned: " << c.text() << ": " << why << "\n";
  const auto& best = r.evaluations[*r.best];
  const auto& start = r.evaluations.front();
  std::cout << "best: " << best.configuration.text() << ", " << rate(best.samplesPerSecond);
  if (start.failed.empty()) {
    char ratio[64];
    std::snprintf(ratio, sizeof ratio, "%.3f", best.samplesPerSecond / start.samplesPerSecond);
    std::cout << " (" << ratio << "x the session's " << rate(start.samplesPerSecond) << ")\n";
  } else {
    std::cout << " (the session's own configuration failed)\n";
  }
  if (r.runnerUp)
    std::cout << "runner-up: " << r.evaluations[*r.runnerUp].configuration.text() << ", "
              << rate(r.evaluations[*r.runnerUp].samplesPerSecond) << "\n";
  if (const auto& s = tuned.sideBySide) {
    // Note [Side by side at the end]: the choice is the faster there and in the search together.
    char spent[64];
    std::snprintf(spent, sizeof spent, "%.1f s", s->seconds);
    std::cout << "side by side (2 evaluations, " << s->steps << " steps, " << spent
              << "): " << s->first.text() << ", " << rate(s->firstSamplesPerSecond) << "; "
              << s->second.text() << ", " << rate(s->secondSamplesPerSecond)
              << (s->reversed
                      ? " (the runner-up the faster, there and in the search together: chosen)"
                      : "")
              << (s->failed.empty() ? "" : "; failed: " + s->failed) << "\n";
  }
  char spent[64];
  std::snprintf(spent, sizeof spent, "%.1f s", r.seconds);
  std::cout << "search: " << r.evaluations.size() << " evaluations, " << r.steps << " steps, "
            << r.simulations << " tree descents, " << spent << "; stopped: " << r.stopped << "\n";
  std::cout << "wrote " << target << " (control: mode tuned, " << best.configuration.text() << ")"
            << (tableWritten.empty() ? "" : " and its binding table " + tableWritten) << std::endl;
  return 0;
}

}  // namespace symtune::app
