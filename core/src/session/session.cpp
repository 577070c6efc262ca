#include "symtune/core/session.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_fields.h"
#include "session_data.h"
#include "symtune/core/rules.h"
#include "symtune/core/zoo_catalog.h"

namespace symtune {

namespace {

// The largest memory figure a session may give, in MB (a petabyte): as bytes it fits an int64.
constexpr double kMostMegabytes = 1e9;

using detail::describeJsonType;
using detail::JsonFields;

constexpr const char* kFormatName = "symtune-session";

// 0.5, 256, 1e-06: a number as the session would write it, with the digits it needs to read
// back (1.0000001 was "1", and "expected ... in (0, 1], found 1" made no sense).
std::string numberText(double x) {
  for (int digits = 6;; ++digits) {
    std::ostringstream out;
    out << std::setprecision(digits) << x;
    if (digits >= 17 || !(std::strtod(out.str().c_str(), nullptr) != x))
      return out.str();
  }
}

std::string inQuotes(const std::string& s) {
  return "\"" + s + "\"";
}

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

DType parseDType(const JsonFields& spec) {
  const std::string name = spec.string("dtype", "float32");
  if (name == "float32")
    return DType::Float32;
  if (name == "float64")
    return DType::Float64;
  if (name == "int64")
    return DType::Int64;
  spec.fail("dtype", "expected one of float32, float64, int64, found " + inQuotes(name));
}

std::vector<InputSpec> parseInputs(const JsonFields& model) {
  const auto& list = model.require("inputs");
  if (!list.is_array() || list.empty()) {
    model.fail("inputs",
               "expected a non-empty array of {\"shape\": [...], \"dtype\": ...}, found " +
                   describeJsonType(list));
  }
  std::vector<InputSpec> inputs;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = "inputs[" + std::to_string(i) + "]";
    if (!list[i].is_object()) {
      model.fail(item, "expected an object, found " + describeJsonType(list[i]));
    }
    const JsonFields spec(list[i], model.fieldPath(item), model.failFn());
    spec.rejectUnknown({"shape", "dtype"});
    const auto& shape = spec.require("shape");
    if (!shape.is_array() || shape.empty()) {
      spec.fail("shape", "expected a non-empty array of positive integers, found " +
                             describeJsonType(shape));
    }
    InputSpec input;
    for (size_t d = 0; d < shape.size(); ++d) {
      const std::string dim = "shape[" + std::to_string(d) + "]";
      const int64_t v = JsonFields::asInteger(shape[d], spec.fieldPath(dim), model.failFn());
      if (v <= 0) {
        spec.fail(dim, "expected a positive integer, found " + std::to_string(v));
      }
      input.shape.push_back(v);
    }
    input.dtype = parseDType(spec);
    inputs.push_back(std::move(input));
  }
  return inputs;
}

}  // namespace

SessionError::SessionError(std::string file, std::string field, std::string problem)
    : std::runtime_error((file.empty() ? std::string() : file + ": ") +
                         (field.empty() ? std::string() : field + ": ") + problem),
      file_(std::move(file)),
      field_(std::move(field)),
      problem_(std::move(problem)) {
}

std::string OutputRef::text() const {
  return index ? std::to_string(*index) : inQuotes(key);
}

const char* toString(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Int64:
      return "int64";
  }
  return "?";
}

Session parseSession(const std::string& text, const std::filesystem::path& origin) {
  const std::string file = origin.string();
  const detail::FieldErrorFn fail = [&](const std::string& field, const std::string& problem) {
    throw SessionError(file, field, problem);
  };

  nlohmann::json root;
  std::string duplicate;
  try {
    root = detail::parseJson(text, duplicate);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the 1-based offset of the error; report it as line:column.
    size_t line = 1, column = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string problem =
        "not valid JSON at line " + std::to_string(line) + ", column " + std::to_string(column);
    if (e.id == detail::kNumberOutOfRange) {
      const std::string what = e.what();
      problem += what.substr(what.rfind(": "));
    }
    throw SessionError(file, "", problem);
  }
  if (!root.is_object()) {
    throw SessionError(file, "",
                       "expected a JSON object at the top, found " + describeJsonType(root));
  }
  if (!duplicate.empty())
    throw SessionError(file, duplicate, detail::kGivenTwice);

  JsonFields top(root, "", fail);
  const std::string format = top.string("format");
  if (format != kFormatName) {
    top.fail("format", "expected " + inQuotes(kFormatName) + ", found " + inQuotes(format));
  }
  const int64_t version = top.integer("version");
  if (version != Session::kFormatVersion) {
    top.fail("version", "unsupported session version " + std::to_string(version) +
                            " (this Symtune reads version " +
                            std::to_string(Session::kFormatVersion) + ")");
  }
  top.rejectUnknown({"format", "version", "name", "model", "data", "loss", "optimizer", "run",
                     "rules", "binding", "remat", "control"});

  Session s;
  s.path = origin;
  s.name = top.string("name", origin.stem().string());

  // model
  {
    const JsonFields model = top.object("model");
    const bool zoo = model.has("zoo"), fileModel = model.has("file");
    if (zoo == fileModel) {
      model.fail("", zoo ? "give either \"zoo\" or \"file\", not both"
                         : "missing \"zoo\" (a bundled model) or \"file\" (a TorchScript archive)");
    }
    if (zoo) {
      model.rejectUnknown({"zoo", "preset"});
      s.model.zoo = model.string("zoo");
      const ZooEntry* entry = findZooEntry(s.model.zoo);
      if (entry == nullptr) {
        std::vector<std::string> names;
        for (const auto& e : zooCatalog())
          names.push_back(e.name);
        model.fail("zoo", "unknown zoo model " + inQuotes(s.model.zoo) +
                              " (known: " + joinNames(names) + ")");
      }
      s.model.preset = model.string("preset", "ci");
      bool known = false;
      for (const auto& p : entry->presets)
        known = known || p == s.model.preset;
      if (!known) {
        model.fail("preset", "expected one of " + joinNames(entry->presets) + ", found " +
                                 inQuotes(s.model.preset));
      }
    } else {
      model.rejectUnknown({"file", "inputs", "classes", "output", "auxiliary_outputs"});
      std::filesystem::path p = model.string("file");
      if (p.empty()) {
        model.fail("file", "expected a path to a TorchScript archive, found an empty string");
      }
      if (p.is_relative()) {
        p = detail::sessionFolder(origin) / p;
      }
      s.model.file = p.lexically_normal();
      // With data files the data gives the inputs; model.inputs, when given, is checked against it.
      const bool dataFiles = top.has("data") && top.require("data").is_object() &&
                             top.require("data").contains("format");
      if (model.has("inputs") || !dataFiles)
        s.model.inputs = parseInputs(model);
      s.model.classes = model.integer("classes");
      detail::parseModelOutputs(model, s.model);
    }
  }

  // data
  if (top.has("data")) {
    const JsonFields data = top.object("data");
    // Said before the files' own fields are read: a zoo session asked for none of them.
    if (data.has("format") && s.model.isZoo())
      data.fail("format", "the zoo's models bring their own data; data files need a model file");
    s.data = detail::parseDataBlock(data, origin);
    if (s.data.files.enabled() && !s.data.batchSize && s.model.inputs.empty())
      data.fail("batch_size", "missing: with data files and no model.inputs it is required");
  }

  // loss
  if (top.has("loss")) {
    const JsonFields loss = top.object("loss");
    s.loss = detail::parseLossBlock(loss);
    if (s.model.isZoo() && !s.loss.method.empty())
      loss.fail("method", "the zoo's models have no loss method; it needs a model file");
    // The zoo's models return logits, and pad their targets with -100 (PyTorch's default).
    if (s.model.isZoo() && s.loss.kind != "cross_entropy")
      loss.fail("kind",
                "the zoo's models are classifiers returning logits: expected "
                "cross_entropy, found " +
                    inQuotes(s.loss.kind) +
                    (s.loss.kind == "nll" ? " (which takes log-probabilities)" : ""));
    if (s.model.isZoo() && s.loss.ignoreIndex != -100)
      loss.fail("ignore_index",
                "the zoo's models pad their targets with -100: expected -100, "
                "found " +
                    std::to_string(s.loss.ignoreIndex));
  }
  if (!s.model.isZoo()) {
    const int64_t least = s.loss.classIndices() ? 2 : 1;
    if (s.model.classes < least) {
      const JsonFields model = top.object("model");
      model.fail("classes", "expected an integer of at least " + std::to_string(least) + " (" +
                                (least == 2 ? "classes" : "output values") + "), found " +
                                std::to_string(s.model.classes));
    }
  }

  // optimizer
  if (top.has("optimizer")) {
    const JsonFields opt = top.object("optimizer");
    opt.rejectUnknown({"name", "lr", "weight_decay", "momentum", "fused"});
    s.optimizer.name = opt.string("name", s.optimizer.name);
    if (s.optimizer.name != "adamw" && s.optimizer.name != "adam" && s.optimizer.name != "sgd") {
      opt.fail("name", "expected one of adamw, adam, sgd, found " + inQuotes(s.optimizer.name));
    }
    s.optimizer.lr = opt.number("lr", s.optimizer.lr);
    // The step applies them to float32 parameters: a figure past float's range fails there.
    constexpr double kMostFloat = std::numeric_limits<float>::max();
    if (!(s.optimizer.lr > 0 && s.optimizer.lr <= kMostFloat)) {
      opt.fail("lr", "expected a positive number (at most float's 3.4e38), found " +
                         numberText(s.optimizer.lr));
    }
    s.optimizer.weightDecay = opt.number("weight_decay", s.optimizer.weightDecay);
    if (!(s.optimizer.weightDecay >= 0 && s.optimizer.weightDecay <= kMostFloat)) {
      opt.fail("weight_decay", "expected a non-negative number (at most float's 3.4e38), found " +
                                   numberText(s.optimizer.weightDecay));
    }
    s.optimizer.momentum = opt.number("momentum", s.optimizer.momentum);
    if (s.optimizer.momentum < 0 || s.optimizer.momentum >= 1) {
      opt.fail("momentum", "expected a number in [0, 1)");
    }
    if (opt.has("momentum") && s.optimizer.name != "sgd") {
      opt.fail("momentum", "only the sgd optimizer takes a momentum");
    }
    if (opt.has("fused"))
      s.optimizer.fused = opt.boolean("fused", false);
  }

  // run
  if (top.has("run")) {
    const JsonFields run = top.object("run");
    run.rejectUnknown({"steps", "device", "threads", "cpu_memory", "gpu_trace", "nvtx", "save",
                       "save_every", "checkpoint", "checkpoint_every"});
    s.run.steps = run.integer("steps", s.run.steps);
    if (s.run.steps <= 0) {
      run.fail("steps", "expected a positive integer, found " + std::to_string(s.run.steps));
    }
    s.run.device = run.string("device", s.run.device);
    if (s.run.device != "cpu" && s.run.device != "cuda" && s.run.device != "auto") {
      run.fail("device", "expected one of cpu, cuda, auto, found " + inQuotes(s.run.device));
    }
    const int64_t threads = run.integer("threads", 0);
    if (threads < 0 || threads > 1024) {
      run.fail("threads", "expected an integer in [0, 1024], found " + std::to_string(threads));
    }
    s.run.threads = static_cast<int>(threads);
    s.run.cpuMemory = run.string("cpu_memory", s.run.cpuMemory);
    if (s.run.cpuMemory != "retain" && s.run.cpuMemory != "system") {
      run.fail("cpu_memory", "expected one of retain, system, found " + inQuotes(s.run.cpuMemory));
    }
    s.run.gpuTrace = run.boolean("gpu_trace", s.run.gpuTrace);
    s.run.nvtx = run.boolean("nvtx", s.run.nvtx);
    // A file the run writes (relative to the session file) and how often.
    const auto written = [&](const char* key, const char* every, const char* what,
                             std::filesystem::path& into, int64_t& interval) {
      if (run.has(key)) {
        std::filesystem::path p = run.string(key);
        if (p.empty())
          run.fail(key, std::string("expected a path for ") + what + ", found \"\"");
        into = (p.is_relative() ? detail::sessionFolder(origin) / p : p).lexically_normal();
      }
      interval = run.integer(every, 0);
      if (interval < 0)
        run.fail(every, "expected a non-negative integer, found " + std::to_string(interval));
      if (interval > 0 && into.empty())
        run.fail(every, std::string("needs run.") + key + ", the file it writes");
    };
    written("save", "save_every", "the trained TorchScript module", s.run.save, s.run.saveEvery);
    written("checkpoint", "checkpoint_every", "the checkpoint file", s.run.checkpoint,
            s.run.checkpointEvery);
  }

  // rules
  if (top.has("rules")) {
    const JsonFields rules = top.object("rules");
    rules.rejectUnknown({"enable", "source"});
    if (rules.has("enable")) {
      const auto& list = rules.require("enable");
      if (!list.is_array())
        rules.fail("enable", "expected an array of rule names, found " + describeJsonType(list));
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string field = "enable[" + std::to_string(i) + "]";
        if (!list[i].is_string())
          rules.fail(field, "expected a rule name, found " + describeJsonType(list[i]));
        const std::string name = list[i].get<std::string>();
        if (std::find(s.rules.enable.begin(), s.rules.enable.end(), name) != s.rules.enable.end())
          rules.fail(field, "rule " + inQuotes(name) + " is listed twice");
        s.rules.enable.push_back(name);
      }
    }
    s.rules.source = rules.string("source", "");
    if (!s.rules.source.empty()) {
      try {
        rules::parseRules(s.rules.source);
      } catch (const rules::RuleError& e) {
        rules.fail("source", e.what());
      }
    }
  }
  // binding
  if (top.has("binding")) {
    const JsonFields binding = top.object("binding");
    binding.rejectUnknown(
        {"enabled", "budget", "repetitions", "exact", "memory_slack", "table", "save"});
    s.binding.enabled = binding.boolean("enabled", s.binding.enabled);
    if (binding.has("budget") && !binding.require("budget").is_null()) {
      const int64_t budget = binding.integer("budget");
      if (budget < 0)
        binding.fail("budget",
                     "expected a non-negative integer or null, found " + std::to_string(budget));
      s.binding.budget = budget;
    }
    const int64_t repetitions = binding.integer("repetitions", s.binding.repetitions);
    if (repetitions < 1 || repetitions > 100)
      binding.fail("repetitions",
                   "expected an integer in [1, 100], found " + std::to_string(repetitions));
    s.binding.repetitions = static_cast<int>(repetitions);
    if (binding.has("table") && binding.require("table").is_null()) {
      s.binding.useTable = false;
    } else {
      std::filesystem::path table = binding.string("table", "");
      if (!table.empty() && table.is_relative())
        table = detail::sessionFolder(origin) / table;
      s.binding.table = table.lexically_normal();
    }
    s.binding.save = binding.boolean("save", s.binding.save);
    s.binding.exact = binding.boolean("exact", s.binding.exact);
    const double slack = binding.number("memory_slack", s.binding.memorySlack);
    if (!(slack >= 0 && slack < 1))
      binding.fail("memory_slack",
                   "expected a share of the sites' time in [0, 1), found " + numberText(slack));
    s.binding.memorySlack = slack;
  }
  // remat
  if (top.has("remat")) {
    const JsonFields remat = top.object("remat");
    remat.rejectUnknown(
        {"budget_mb", "budget_fraction", "strategy", "calibration_steps", "plain_peak_mb", "bind"});
    s.remat.enabled = true;
    s.remat.bind = remat.boolean("bind", s.remat.bind);
    if (s.remat.bind && !s.binding.enabled)
      remat.fail("bind", "needs binding on (binding.enabled)");
    s.remat.strategy = remat.string("strategy", s.remat.strategy);
    if (s.remat.strategy != "plan" && s.remat.strategy != "checkpoint" &&
        s.remat.strategy != "selective")
      remat.fail("strategy", "expected \"plan\", \"checkpoint\" or \"selective\", found " +
                                 inQuotes(s.remat.strategy));
    // A bound step's plans keep to blocks and loops (the binder's sites span the runs): the runs
    // selective recomputes are all refused there, and it recomputed nothing, unsaid.
    if (s.remat.strategy == "selective" && s.remat.bind)
      remat.fail("strategy",
                 "\"selective\" recomputes runs of ops, which a bound step keeps "
                 "whole: with remat.bind it would recompute nothing (use \"plan\" "
                 "or \"checkpoint\", or leave remat.bind off)");
    if (remat.has("budget_mb")) {
      const double mb = remat.number("budget_mb", 0);
      if (!(mb > 0 && mb <= kMostMegabytes))
        remat.fail("budget_mb", "expected a number of MB in (0, 1e9], found " + numberText(mb));
      s.remat.budgetMb = mb;
    }
    if (remat.has("budget_fraction")) {
      const double share = remat.number("budget_fraction", 0);
      if (!(share > 0 && share <= 1))
        remat.fail("budget_fraction",
                   "expected a share of the plain peak in (0, 1], found " + numberText(share));
      s.remat.budgetFraction = share;
    }
    const int64_t calibration = remat.integer("calibration_steps", s.remat.calibrationSteps);
    if (calibration < 1 || calibration > 1000)
      remat.fail("calibration_steps",
                 "expected an integer in [1, 1000], found " + std::to_string(calibration));
    s.remat.calibrationSteps = static_cast<int>(calibration);
    if (remat.has("plain_peak_mb")) {
      const double mb = remat.number("plain_peak_mb", 0);
      if (!(mb > 0 && mb <= kMostMegabytes))
        remat.fail("plain_peak_mb", "expected a number of MB in (0, 1e9], found " + numberText(mb));
      if (!remat.has("budget_fraction"))
        remat.fail("plain_peak_mb", "is what budget_fraction is a share of: give budget_fraction");
      s.remat.plainPeakMb = mb;
    }
    if (s.remat.budgetMb && s.remat.budgetFraction)
      remat.fail("budget_fraction", "give budget_mb or budget_fraction, not both");
    if (s.remat.strategy != "plan" && s.remat.budgetFraction)
      remat.fail("budget_fraction", "the " + s.remat.strategy +
                                        " strategy takes budget_mb (it runs no plain step to "
                                        "measure what the fraction is of)");
    if (s.remat.strategy == "plan" && !s.remat.budgetMb && !s.remat.budgetFraction)
      remat.fail("budget_mb", "the planner needs a budget: budget_mb or budget_fraction");
  }

  // control
  if (top.has("control")) {
    const JsonFields control = top.object("control");
    control.rejectUnknown({"mode", "microbatches", "split_on_overrun", "threads", "remat_budget",
                           "binding_explore", "conservative", "warmup_steps", "horizon",
                           "shift_run", "explore", "tuned"});
    s.control.enabled = true;
    s.control.mode = control.string("mode", s.control.mode);
    if (s.control.mode != "fixed" && s.control.mode != "online" && s.control.mode != "tuned")
      control.fail(
          "mode", "expected \"fixed\", \"online\" or \"tuned\", found " + inQuotes(s.control.mode));
    const int64_t parts = control.integer("microbatches", s.control.microbatches);
    if (parts < 1 || parts > 1024)
      control.fail("microbatches", "expected a number of micro-batches from 1 to 1024, found " +
                                       std::to_string(parts));
    s.control.microbatches = static_cast<int>(parts);
    s.control.splitOnOverrun = control.boolean("split_on_overrun", s.control.splitOnOverrun);
    s.control.conservative = control.number("conservative", s.control.conservative);
    if (!(s.control.conservative >= 0 && s.control.conservative < 1))
      control.fail("conservative",
                   "expected the share of the first configuration's throughput to keep, in [0, "
                   "1) (0: explore freely), found " +
                       numberText(s.control.conservative));
    if (control.has("horizon")) {
      const double horizon = control.number("horizon", 0);
      if (!(horizon == 0 || (horizon >= 2 && horizon <= 1e9)))
        control.fail("horizon",
                     "expected the steps the controller remembers, 0 (all alike) or from 2 to 1e9, "
                     "found " +
                         numberText(horizon));
      s.control.horizon = horizon;
    }
    if (control.has("shift_run")) {
      const int64_t run = control.integer("shift_run", 0);
      if (!(run == 0 || (run >= 2 && run <= 16)))
        control.fail("shift_run",
                     "expected the steps in a row that make the controller believe a speed moved, "
                     "0 (never) or from 2 to 16, found " +
                         std::to_string(run));
      s.control.shiftRun = static_cast<int>(run);
    }
    s.control.explore = control.string("explore", s.control.explore);
    if (s.control.explore != "around_leader" && s.control.explore != "outward")
      control.fail("explore", "expected \"around_leader\" or \"outward\", found " +
                                  inQuotes(s.control.explore));
    const int64_t warmup = control.integer("warmup_steps", s.control.warmupSteps);
    if (warmup < 0 || warmup > 1000000)
      control.fail("warmup_steps",
                   "expected a number of steps from 0 to 1000000, found " + std::to_string(warmup));
    s.control.warmupSteps = static_cast<int>(warmup);
    const int64_t threads = control.integer("threads", s.control.threads);
    if (threads < 0 || threads > 1024)
      control.fail("threads",
                   "expected a number of threads from 0 (as run.threads) to 1024, "
                   "found " +
                       std::to_string(threads));
    s.control.threads = static_cast<int>(threads);
    if (control.has("remat_budget")) {
      const double share = control.number("remat_budget", 0);
      if (!(share > 0 && share <= 1))
        control.fail("remat_budget",
                     "expected a share of the plain peak in (0, 1], found " + numberText(share));
      if (!s.remat.budgetFraction)
        control.fail("remat_budget", "needs remat.budget_fraction, the run's limit it tightens");
      if (share > *s.remat.budgetFraction + 1e-9)
        control.fail("remat_budget", "expected at most remat.budget_fraction " +
                                         numberText(*s.remat.budgetFraction) + ", found " +
                                         numberText(share));
      s.control.rematBudget = share;
    }
    if (control.has("binding_explore")) {
      if (!s.binding.enabled || (s.remat.enabled && !s.remat.bind) || s.binding.budget == 0)
        control.fail("binding_explore",
                     "needs a binder that measures: binding on, with a measuring budget, and no "
                     "remat block but one with bind true (without it binding is off)");
      s.control.bindingExplore = control.boolean("binding_explore", true);
    }
    if (control.has("tuned")) {
      const JsonFields tuned = control.object("tuned");
      tuned.rejectUnknown({"evaluations", "configurations", "steps", "seconds", "samples_per_s",
                           "start", "start_samples_per_s", "runner_up", "runner_up_samples_per_s",
                           "stopped"});
      ControlSpec::Tuned t;
      t.evaluations = tuned.integer("evaluations", 0);
      t.configurations = tuned.integer("configurations", 0);
      t.steps = tuned.integer("steps", 0);
      t.seconds = tuned.number("seconds", 0);
      t.samplesPerSecond = tuned.number("samples_per_s", 0);
      t.start = tuned.string("start", "");
      t.startSamplesPerSecond = tuned.number("start_samples_per_s", 0);
      t.runnerUp = tuned.string("runner_up", "");
      t.runnerUpSamplesPerSecond = tuned.number("runner_up_samples_per_s", 0);
      t.stopped = tuned.string("stopped", "");
      s.control.tuned = t;
    }
  }
  return s;
}

std::filesystem::path bindingTablePath(const Session& session) {
  if (!session.binding.useTable)
    return {};
  if (!session.binding.table.empty())
    return session.binding.table;
  if (session.path.empty())
    return {};
  std::filesystem::path p = session.path;
  return p.replace_extension(".bindings.json");
}

bool looksLikeSessionFile(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  const std::string table = ".bindings.json";
  const bool isTable = name.size() > table.size() &&
                       name.compare(name.size() - table.size(), table.size(), table) == 0;
  return path.extension() == ".json" && !isTable;
}

std::string sessionJson(const Session& s) {
  const std::filesystem::path folder = detail::sessionFolder(s.path);
  const auto written = [&](const std::filesystem::path& p) {
    return detail::writtenPath(p, folder);
  };
  nlohmann::json model;
  if (s.model.isZoo()) {
    model = {{"zoo", s.model.zoo}, {"preset", s.model.preset}};
  } else {
    nlohmann::json inputs = nlohmann::json::array();
    for (const auto& in : s.model.inputs)
      inputs.push_back({{"shape", in.shape}, {"dtype", toString(in.dtype)}});
    model = {{"file", written(s.model.file)}, {"classes", s.model.classes}};
    if (!s.model.inputs.empty())
      model["inputs"] = inputs;
    if (!s.model.output.empty())
      model["output"] = detail::outputJson(s.model.output);
    if (!s.model.auxiliaryOutputs.empty()) {
      nlohmann::json aux = nlohmann::json::array();
      for (const auto& a : s.model.auxiliaryOutputs)
        aux.push_back({{"output", detail::outputJson(a.output)}, {"weight", a.weight}});
      model["auxiliary_outputs"] = aux;
    }
  }
  const nlohmann::json data = detail::dataJson(s.data, folder);
  nlohmann::json optimizer = {{"name", s.optimizer.name},
                              {"lr", s.optimizer.lr},
                              {"weight_decay", s.optimizer.weightDecay}};
  if (s.optimizer.name == "sgd")
    optimizer["momentum"] = s.optimizer.momentum;
  if (s.optimizer.fused)
    optimizer["fused"] = *s.optimizer.fused;
  nlohmann::json out = {{"format", "symtune-session"},
                        {"version", Session::kFormatVersion},
                        {"name", s.name},
                        {"model", model},
                        {"data", data},
                        {"loss", detail::lossJson(s.loss)},
                        {"optimizer", optimizer},
                        {"run",
                         {{"steps", s.run.steps},
                          {"device", s.run.device},
                          {"threads", s.run.threads},
                          {"cpu_memory", s.run.cpuMemory},
                          {"gpu_trace", s.run.gpuTrace},
                          {"nvtx", s.run.nvtx}}}};
  if (!s.run.save.empty()) {
    out["run"]["save"] = written(s.run.save);
    out["run"]["save_every"] = s.run.saveEvery;
  }
  if (!s.run.checkpoint.empty()) {
    out["run"]["checkpoint"] = written(s.run.checkpoint);
    out["run"]["checkpoint_every"] = s.run.checkpointEvery;
  }
  if (!s.rules.empty())
    out["rules"] = {{"enable", s.rules.enable}, {"source", s.rules.source}};
  out["binding"] = {
      {"enabled", s.binding.enabled},
      {"budget", s.binding.budget ? nlohmann::json(*s.binding.budget) : nlohmann::json(nullptr)},
      {"repetitions", s.binding.repetitions},
      {"exact", s.binding.exact},
      {"memory_slack", s.binding.memorySlack},
      {"table",
       s.binding.useTable ? nlohmann::json(written(s.binding.table)) : nlohmann::json(nullptr)},
      {"save", s.binding.save}};
  if (s.remat.enabled) {
    nlohmann::json remat = {{"strategy", s.remat.strategy},
                            {"calibration_steps", s.remat.calibrationSteps},
                            {"bind", s.remat.bind}};
    if (s.remat.budgetMb)
      remat["budget_mb"] = *s.remat.budgetMb;
    if (s.remat.budgetFraction)
      remat["budget_fraction"] = *s.remat.budgetFraction;
    if (s.remat.budgetFraction && s.remat.plainPeakMb)
      remat["plain_peak_mb"] = *s.remat.plainPeakMb;
    out["remat"] = remat;
  }
  if (s.control.enabled) {
    nlohmann::json control = {{"mode", s.control.mode},
                              {"microbatches", s.control.microbatches},
                              {"split_on_overrun", s.control.splitOnOverrun},
                              {"threads", s.control.threads},
                              {"conservative", s.control.conservative},
                              {"warmup_steps", s.control.warmupSteps},
                              {"explore", s.control.explore}};
    if (s.control.horizon)
      control["horizon"] = *s.control.horizon;
    if (s.control.shiftRun)
      control["shift_run"] = *s.control.shiftRun;
    if (s.control.rematBudget)
      control["remat_budget"] = *s.control.rematBudget;
    if (s.control.bindingExplore)
      control["binding_explore"] = *s.control.bindingExplore;
    if (const auto& t = s.control.tuned)
      control["tuned"] = {{"evaluations", t->evaluations},
                          {"configurations", t->configurations},
                          {"steps", t->steps},
                          {"seconds", t->seconds},
                          {"samples_per_s", t->samplesPerSecond},
                          {"start", t->start},
                          {"start_samples_per_s", t->startSamplesPerSecond},
                          {"runner_up", t->runnerUp},
                          {"runner_up_samples_per_s", t->runnerUpSamplesPerSecond},
                          {"stopped", t->stopped}};
    out["control"] = control;
  }
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Session loadSession(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw SessionError(path.string(), "", "is a folder, not a session file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw SessionError(path.string(), "", "cannot open the file");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw SessionError(path.string(), "", "cannot read the file");
  }
  try {
    return parseSession(text.str(), std::filesystem::absolute(path));
  } catch (const SessionError& e) {  // the file named as the caller named it, not made absolute
    if (e.file() != std::filesystem::absolute(path).string())
      throw;
    throw SessionError(path.string(), e.field(), e.problem());
  }
}

}  // namespace symtune
