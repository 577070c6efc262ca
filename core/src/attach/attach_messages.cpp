#include "symtune/core/attach_messages.h"

#include <cmath>
#include <limits>

#include "symtune/core/attach_protocol.h"

namespace symtune::attach {

namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The message being decoded, for errors: "step: \"loss\" must be a number".
struct Reader {
  const json& message;
  std::string type;

  [[noreturn]] void fail(const std::string& what) const { throw ProtocolError(type + ": " + what); }
  const json& field(const json& object, const char* key) const {
    const auto it = object.find(key);
    if (it == object.end())
      fail(std::string("\"") + key + "\" is missing");
    return *it;
  }
  // A number, or null for a value that was not finite.
  double number(const json& object, const char* key) const {
    const json& v = field(object, key);
    if (v.is_null())
      return kNaN;
    if (!v.is_number())
      fail(std::string("\"") + key + "\" must be a number");
    return v.get<double>();
  }
  int64_t integer(const json& object, const char* key) const {
    try {
      return integerField(object, key);
    } catch (const ProtocolError& e) {
      fail(e.what());
    }
  }
  std::string string(const json& object, const char* key) const {
    try {
      return stringField(object, key);
    } catch (const ProtocolError& e) {
      fail(e.what());
    }
  }
  bool boolean(const json& object, const char* key) const {
    try {
      return boolField(object, key);
    } catch (const ProtocolError& e) {
      fail(e.what());
    }
  }
  const json& array(const json& object, const char* key) const {
    const json& v = field(object, key);
    if (!v.is_array())
      fail(std::string("\"") + key + "\" must be an array");
    return v;
  }
  const json& object(const json& object, const char* key) const {
    const json& v = field(object, key);
    if (!v.is_object())
      fail(std::string("\"") + key + "\" must be an object");
    return v;
  }
  // A number; none when the key is absent or null.
  std::optional<double> optionalNumber(const json& object, const char* key) const {
    if (!object.contains(key) || object.at(key).is_null())
      return std::nullopt;
    return number(object, key);
  }
  std::vector<std::string> strings(const json& object, const char* key) const {
    std::vector<std::string> out;
    for (const json& item : array(object, key)) {
      if (!item.is_string())
        fail(std::string("\"") + key + "\" must hold strings");
      out.push_back(item.get<std::string>());
    }
    return out;
  }
};

json number(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}

StepMessage decodeStep(const Reader& r) {
  const json& m = r.message;
  StepMessage s;
  s.step = r.integer(m, "step");
  s.loss = r.number(m, "loss");
  s.seconds = r.number(m, "seconds");
  const json& features = r.object(m, "features");
  s.features.values.fill(kNaN);
  for (auto it = features.begin(); it != features.end(); ++it) {
    // A feature this version does not know (a newer runner) is skipped, not an error.
    if (const auto f = featureNamed(it.key()))
      s.features[*f] = r.number(features, it.key().c_str());
  }
  const json& rules = r.object(m, "rules");
  s.rulesInForce = r.strings(rules, "in_force");
  s.rulesFired = r.strings(rules, "fired");
  s.skipped = r.boolean(m, "skipped");
  if (m.contains("coalesced"))
    s.coalesced = r.integer(m, "coalesced");
  if (m.contains("remat")) {
    const json& p = r.object(m, "remat");
    StepRemat remat;
    remat.budgetBytes = r.optionalNumber(p, "budget_bytes");
    remat.predictedPeak = r.optionalNumber(p, "predicted_peak");
    remat.peakBytes = r.number(p, "peak");
    remat.recomputed = r.strings(p, "recomputed");
    remat.attempts = r.integer(p, "attempts");
    remat.cached = r.boolean(p, "cached");
    if (p.contains("note"))
      remat.note = r.string(p, "note");
    s.remat = std::move(remat);
  }
  if (m.contains("control")) {
    const json& p = r.object(m, "control");
    StepControl control;
    control.microbatches = r.integer(p, "microbatches");
    control.configuration = r.string(p, "configuration");
    const json& knobs = r.object(p, "knobs");
    for (auto it = knobs.begin(); it != knobs.end(); ++it)
      control.knobs.emplace_back(it.key(), r.number(knobs, it.key().c_str()));
    if (p.contains("decision")) {
      const json& d = r.object(p, "decision");
      control.decided = true;
      control.predictedSamplesPerSecond = r.number(d, "predicted_samples_per_s");
      control.samplesPerSecond = r.optionalNumber(d, "samples_per_s");
      control.explored = r.boolean(d, "explored");
      for (const json& item : r.array(d, "alternatives")) {
        if (!item.is_object())
          r.fail("\"alternatives\" must hold objects");
        control.alternatives.push_back(
            {r.string(item, "configuration"), r.number(item, "predicted_samples_per_s")});
      }
      if (d.contains("signals")) {
        const json& batchSignals = r.object(d, "signals");
        for (auto it = batchSignals.begin(); it != batchSignals.end(); ++it)
          control.batchSignals.emplace_back(it.key(), r.number(batchSignals, it.key().c_str()));
      }
      if (d.contains("drivers")) {
        for (const json& item : r.array(d, "drivers")) {
          if (!item.is_object())
            r.fail("\"drivers\" must hold objects");
          control.drivers.emplace_back(r.string(item, "what"), r.number(item, "factor"));
        }
      }
      if (d.contains("violation") && !d["violation"].is_null())
        control.violation = r.string(d, "violation");
      if (d.contains("held_back") && !d["held_back"].is_null())
        control.heldBack = r.string(d, "held_back");
      if (d.contains("level_moved"))  // none from a peer before 2026-12-05
        control.levelMoved = r.boolean(d, "level_moved");
      if (d.contains("idle")) {  // none from a peer before 2026-12-06
        const json& idle = r.object(d, "idle");
        for (auto it = idle.begin(); it != idle.end(); ++it)
          control.idle.emplace_back(it.key(), r.number(idle, it.key().c_str()));
      }
    }
    s.control = std::move(control);
  }
  return s;
}

ControlMessage decodeControl(const Reader& r) {
  const json& p = r.object(r.message, "control");
  ControlMessage out;
  out.mode = r.string(p, "mode");
  for (const json& item : r.array(p, "knobs")) {
    if (!item.is_object())
      r.fail("\"knobs\" must hold objects");
    KnobState k;
    k.name = r.string(item, "name");
    for (const json& v : r.array(item, "values")) {
      if (!v.is_number())
        r.fail("\"values\" must hold numbers");
      k.values.push_back(v.get<double>());
    }
    k.current = r.number(item, "current");
    k.constraint = r.string(item, "constraint");
    k.pinned = r.optionalNumber(item, "pinned");
    out.knobs.push_back(std::move(k));
  }
  if (p.contains("excluded")) {
    for (const json& item : r.array(p, "excluded")) {
      if (!item.is_string())
        r.fail("\"excluded\" must hold strings");
      out.excluded.push_back(item.get<std::string>());
    }
  }
  return out;
}

RematMessage decodeRemat(const Reader& r) {
  const json& p = r.object(r.message, "remat");
  RematMessage out;
  out.step = r.integer(p, "step");
  out.strategy = r.string(p, "strategy");
  out.budgetBytes = r.optionalNumber(p, "budget_bytes");
  out.budgetMb = r.optionalNumber(p, "budget_mb");
  out.budgetFraction = r.optionalNumber(p, "budget_fraction");
  for (const json& item : r.array(p, "units")) {
    if (!item.is_object())
      r.fail("\"units\" must hold objects");
    RematUnitState u;
    u.name = r.string(item, "name");
    u.parent = r.string(item, "parent");
    for (const json& node : r.array(item, "nodes")) {
      if (!node.is_number_integer() || node.get<int64_t>() < 0 ||
          node.get<int64_t>() > std::numeric_limits<int32_t>::max())
        r.fail("\"nodes\" must hold node ids");
      u.nodes.push_back(node.get<int32_t>());
    }
    u.savedBytes = r.number(item, "saved_bytes");
    u.recomputed = r.boolean(item, "recomputed");
    out.units.push_back(std::move(u));
  }
  return out;
}

NodesMessage decodeNodes(const Reader& r) {
  const json& p = r.object(r.message, "nodes");
  NodesMessage n;
  n.step = r.integer(p, "step");
  n.attributedSeconds = r.number(p, "attributed_s");
  n.unattributedSeconds = r.number(p, "unattributed_s");
  for (const json& item : r.array(p, "nodes")) {
    if (!item.is_object())
      r.fail("\"nodes\" must hold objects");
    NodeFigures f;
    const int64_t id = r.integer(item, "node");
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      r.fail("node id " + std::to_string(id) + " is out of range");
    f.node = static_cast<int32_t>(id);
    f.calls = r.integer(item, "calls");
    f.backwardCalls = r.integer(item, "backward_calls");
    f.forwardSeconds = r.number(item, "forward_s");
    f.backwardSeconds = r.number(item, "backward_s");
    f.bytesAllocated = r.integer(item, "bytes_allocated");
    f.backwardBytesAllocated = r.integer(item, "backward_bytes_allocated");
    if (item.contains("forward_device_s"))
      f.forwardDeviceSeconds = r.number(item, "forward_device_s");
    if (item.contains("backward_device_s"))
      f.backwardDeviceSeconds = r.number(item, "backward_device_s");
    if (item.contains("live_bytes_after"))
      f.liveBytesAfter = r.integer(item, "live_bytes_after");
    if (item.contains("cuda_bytes_allocated"))
      f.cudaBytesAllocated = r.integer(item, "cuda_bytes_allocated");
    if (item.contains("backward_cuda_bytes_allocated"))
      f.backwardCudaBytesAllocated = r.integer(item, "backward_cuda_bytes_allocated");
    if (item.contains("kernels"))
      f.kernels = r.integer(item, "kernels");
    if (item.contains("backward_kernels"))
      f.backwardKernels = r.integer(item, "backward_kernels");
    if (item.contains("kernel_list")) {
      for (const json& k : r.array(item, "kernel_list")) {
        if (!k.is_object())
          r.fail("\"kernel_list\" must hold objects");
        f.kernelList.push_back({r.string(k, "name"), r.string(k, "kind"), r.boolean(k, "backward"),
                                r.integer(k, "calls"), r.number(k, "s")});
      }
    }
    n.nodes.push_back(std::move(f));
  }
  if (p.contains("parameters")) {
    for (const json& item : r.array(p, "parameters")) {
      if (!item.is_object())
        r.fail("\"parameters\" must hold objects");
      n.parameters.push_back({r.string(item, "name"), r.number(item, "grad_norm")});
    }
  }
  return n;
}

RulesMessage decodeRules(const Reader& r) {
  RulesMessage out;
  for (const json& item : r.array(r.message, "rules")) {
    if (!item.is_object())
      r.fail("\"rules\" must hold objects");
    RuleState s;
    s.name = r.string(item, "name");
    s.enabled = r.boolean(item, "enabled");
    s.origin = item.contains("origin") ? r.string(item, "origin") : std::string();
    s.description = item.contains("description") ? r.string(item, "description") : std::string();
    out.rules.push_back(std::move(s));
  }
  return out;
}

GraphMessage decodeGraph(const Reader& r) {
  const json& g = r.object(r.message, "graph");
  GraphMessage out;
  if (g.contains("error")) {
    out.error = r.string(g, "error");
    return out;
  }
  try {
    out.graph = std::make_shared<const Graph>(graphFromJson(g));
  } catch (const GraphFormatError& e) {
    out.error = std::string("the graph cannot be read: ") + e.what();
  }
  return out;
}

ReplyMessage decodeReply(const Reader& r, bool ok) {
  const json& m = r.message;
  ReplyMessage out;
  out.ok = ok;
  if (m.contains("id"))
    out.id = r.integer(m, "id");
  if (ok) {
    out.command = r.string(m, "command");
    out.result = json::object();
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() != "type" && it.key() != "id" && it.key() != "command")
        out.result[it.key()] = it.value();
    }
  } else {
    out.reason = r.string(m, "reason");
  }
  return out;
}

}  // namespace

ServerMessage decodeServerMessage(const json& message) {
  if (!message.is_object())
    throw ProtocolError("a server message must be a JSON object");
  Reader r{message, stringField(message, "type")};
  const std::string& type = r.type;
  if (type == "step")
    return decodeStep(r);
  if (type == "nodes")
    return decodeNodes(r);
  if (type == "graph")
    return decodeGraph(r);
  if (type == "rules")
    return decodeRules(r);
  if (type == "bindings") {
    BindingsMessage out;
    const json& table = r.object(message, "bindings");  // ProtocolError when missing
    try {
      out.table =
          std::make_shared<const BindingTable>(BindingTable::fromJson(table.dump(), "bindings"));
    } catch (const std::runtime_error& e) {
      out.error = std::string("the binding table cannot be read: ") + e.what();
    }
    return out;
  }
  if (type == "remat")
    return decodeRemat(r);
  if (type == "control")
    return decodeControl(r);
  if (type == "validation") {
    const json& v = r.object(message, "validation");
    ValidationMessage out;
    out.step = r.integer(v, "step");
    out.samples = r.integer(v, "samples");
    out.loss = r.number(v, "loss");
    for (auto [key, field] : {std::pair{"top1", &out.top1}, std::pair{"top5", &out.top5}})
      if (v.contains(key) && !v.at(key).is_null())
        *field = r.number(v, key);
    return out;
  }
  if (type == "state")
    return StateMessage{r.string(message, "state")};
  if (type == "dropped")
    return DroppedMessage{r.integer(message, "nodes")};
  if (type == "ack" || type == "error")
    return decodeReply(r, type == "ack");
  if (type == "hello") {
    HelloMessage h;
    h.protocol = r.integer(message, "protocol");
    h.engine = message.contains("engine") ? r.string(message, "engine") : std::string();
    h.auth = message.contains("auth") ? r.string(message, "auth") : std::string("none");
    h.run = r.object(message, "run");
    h.session = h.run.contains("session") ? r.string(h.run, "session") : std::string();
    h.model = h.run.contains("model") ? r.string(h.run, "model") : std::string();
    return h;
  }
  throw ProtocolError("unknown server message type \"" + type + "\"");
}

json encode(const StepMessage& m) {
  json features = json::object();
  for (int f = 0; f < kFeatureCount; ++f)
    features[featureName(static_cast<Feature>(f))] = number(m.features.values[f]);
  json out = {
      {"type", "step"},         {"step", m.step},
      {"loss", number(m.loss)}, {"seconds", m.seconds},
      {"features", features},   {"rules", {{"in_force", m.rulesInForce}, {"fired", m.rulesFired}}},
      {"skipped", m.skipped}};
  if (m.coalesced > 0)
    out["coalesced"] = m.coalesced;
  if (m.remat) {
    const StepRemat& r = *m.remat;
    out["remat"] = {{"budget_bytes", r.budgetBytes ? json(*r.budgetBytes) : json(nullptr)},
                    {"predicted_peak", r.predictedPeak ? number(*r.predictedPeak) : json(nullptr)},
                    {"peak", r.peakBytes},
                    {"recomputed", r.recomputed},
                    {"attempts", r.attempts},
                    {"cached", r.cached}};
    if (!r.note.empty())
      out["remat"]["note"] = r.note;
  }
  if (m.control) {
    const StepControl& c = *m.control;
    json knobs = json::object();
    for (const auto& [name, value] : c.knobs)
      knobs[name] = number(value);
    out["control"] = {
        {"microbatches", c.microbatches}, {"configuration", c.configuration}, {"knobs", knobs}};
    if (c.decided) {
      json alternatives = json::array();
      for (const auto& a : c.alternatives)
        alternatives.push_back({{"configuration", a.configuration},
                                {"predicted_samples_per_s", number(a.predictedSamplesPerSecond)}});
      out["control"]["decision"] = {
          {"predicted_samples_per_s", number(c.predictedSamplesPerSecond)},
          {"samples_per_s", c.samplesPerSecond ? number(*c.samplesPerSecond) : json(nullptr)},
          {"explored", c.explored},
          {"alternatives", alternatives}};
      json batchSignals = json::object(), drivers = json::array();
      for (const auto& [name, value] : c.batchSignals)
        batchSignals[name] = number(value);
      for (const auto& [what, factor] : c.drivers)
        drivers.push_back({{"what", what}, {"factor", number(factor)}});
      out["control"]["decision"]["signals"] = batchSignals;
      out["control"]["decision"]["drivers"] = drivers;
      out["control"]["decision"]["violation"] =
          c.violation.empty() ? json(nullptr) : json(c.violation);
      out["control"]["decision"]["held_back"] =
          c.heldBack.empty() ? json(nullptr) : json(c.heldBack);
      out["control"]["decision"]["level_moved"] = c.levelMoved;
      json idle = json::object();
      for (const auto& [knob, value] : c.idle)
        idle[knob] = number(value);
      out["control"]["decision"]["idle"] = idle;
    }
  }
  return out;
}

json encode(const NodesMessage& m) {
  json nodes = json::array();
  for (const auto& n : m.nodes) {
    json node = {{"node", n.node},
                 {"calls", n.calls},
                 {"backward_calls", n.backwardCalls},
                 {"forward_s", n.forwardSeconds},
                 {"backward_s", n.backwardSeconds},
                 {"bytes_allocated", n.bytesAllocated},
                 {"backward_bytes_allocated", n.backwardBytesAllocated}};
    if (n.forwardDeviceSeconds)
      node["forward_device_s"] = *n.forwardDeviceSeconds;
    if (n.backwardDeviceSeconds)
      node["backward_device_s"] = *n.backwardDeviceSeconds;
    if (n.liveBytesAfter)
      node["live_bytes_after"] = *n.liveBytesAfter;
    if (n.cudaBytesAllocated)
      node["cuda_bytes_allocated"] = *n.cudaBytesAllocated;
    if (n.backwardCudaBytesAllocated)
      node["backward_cuda_bytes_allocated"] = *n.backwardCudaBytesAllocated;
    if (n.kernels)
      node["kernels"] = *n.kernels;
    if (n.backwardKernels)
      node["backward_kernels"] = *n.backwardKernels;
    if (!n.kernelList.empty()) {
      json list = json::array();
      for (const auto& k : n.kernelList) {
        list.push_back({{"name", k.name},
                        {"kind", k.kind},
                        {"backward", k.backward},
                        {"calls", k.calls},
                        {"s", k.seconds}});
      }
      node["kernel_list"] = std::move(list);
    }
    nodes.push_back(std::move(node));
  }
  json payload = {{"step", m.step},
                  {"nodes", nodes},
                  {"attributed_s", m.attributedSeconds},
                  {"unattributed_s", m.unattributedSeconds}};
  if (!m.parameters.empty()) {
    json parameters = json::array();
    for (const auto& p : m.parameters)
      parameters.push_back({{"name", p.name}, {"grad_norm", number(p.gradNorm)}});
    payload["parameters"] = parameters;
  }
  return {{"type", "nodes"}, {"nodes", payload}};
}

json encode(const RulesMessage& m) {
  json rules = json::array();
  for (const auto& r : m.rules) {
    rules.push_back({{"name", r.name},
                     {"enabled", r.enabled},
                     {"origin", r.origin},
                     {"description", r.description}});
  }
  return {{"type", "rules"}, {"rules", rules}};
}

json encode(const BindingTable& table) {
  return {{"type", "bindings"}, {"bindings", json::parse(table.toJson())}};
}

json encode(const RematMessage& m) {
  const auto optional = [](const std::optional<double>& v) {
    return v ? number(*v) : json(nullptr);
  };
  json units = json::array();
  for (const auto& u : m.units) {
    units.push_back({{"name", u.name},
                     {"parent", u.parent},
                     {"nodes", u.nodes},
                     {"saved_bytes", u.savedBytes},
                     {"recomputed", u.recomputed}});
  }
  return {{"type", "remat"},
          {"remat",
           {{"step", m.step},
            {"strategy", m.strategy},
            {"budget_bytes", optional(m.budgetBytes)},
            {"budget_mb", optional(m.budgetMb)},
            {"budget_fraction", optional(m.budgetFraction)},
            {"units", std::move(units)}}}};
}

json encode(const ControlMessage& m) {
  json knobs = json::array();
  for (const auto& k : m.knobs) {
    knobs.push_back({{"name", k.name},
                     {"values", k.values},
                     {"current", number(k.current)},
                     {"constraint", k.constraint},
                     {"pinned", k.pinned ? number(*k.pinned) : json(nullptr)}});
  }
  return {{"type", "control"},
          {"control", {{"mode", m.mode}, {"knobs", knobs}, {"excluded", m.excluded}}}};
}

json encode(const ValidationMessage& m) {
  const auto orNull = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  return {{"type", "validation"},
          {"validation",
           {{"step", m.step},
            {"samples", m.samples},
            {"loss", m.loss},
            {"top1", orNull(m.top1)},
            {"top5", orNull(m.top5)}}}};
}

}  // namespace symtune::attach
