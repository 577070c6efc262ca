#include "symtune/core/binding_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "../session/json_fields.h"
#include "symtune/core/atomic_file.h"

namespace symtune {

namespace {

constexpr const char* kFormat = "symtune-bindings";
constexpr int kVersion = 1;

std::string formatSeconds(double s) {
  char buf[32];
  if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

}  // namespace

std::string MachineFingerprint::describe() const {
  std::string s = (cpu.empty() ? std::string("unknown CPU") : cpu) + ", " +
                  std::to_string(threads) + (threads == 1 ? " thread, " : " threads, ");
  s += gpu.empty() ? std::string("no GPU") : gpu;
  return s + ", LibTorch " + (libtorch.empty() ? std::string("?") : libtorch);
}

const CandidateMeasurement* Binding::measurement(const std::string& candidate) const {
  for (const auto& c : candidates) {
    if (c.name == candidate)
      return &c;
  }
  return nullptr;
}

double Binding::speedup() const {
  const CandidateMeasurement* ref = measurement(reference);
  const CandidateMeasurement* win = measurement(winner);
  if (ref == nullptr || win == nullptr || win->seconds() <= 0)
    return 1.0;
  return ref->seconds() / win->seconds();
}

const Binding* BindingTable::find(const std::string& site, const std::string& bucket) const {
  for (const auto& b : bindings) {
    if (b.site == site && b.bucket == bucket)
      return &b;
  }
  return nullptr;
}

void BindingTable::put(Binding binding) {
  for (auto& b : bindings) {
    if (b.site == binding.site && b.bucket == binding.bucket) {
      b = std::move(binding);
      return;
    }
  }
  bindings.push_back(std::move(binding));
}

std::vector<const Binding*> BindingTable::ofSite(const std::string& site) const {
  std::vector<const Binding*> out;
  for (const auto& b : bindings) {
    if (b.site == site)
      out.push_back(&b);
  }
  return out;
}

std::optional<std::string> BindingTable::refusal(const MachineFingerprint& here,
                                                 const std::string& forModel) const {
  // The name before the hash is the session's; the hash says which model it is.
  const auto hash = [](const std::string& key) { return key.substr(key.rfind(':') + 1); };
  if (hash(model) != hash(forModel))
    return "measured for another model (" + model + ", not " + forModel + ")";
  if (machine != here)
    return "measured on another kind of machine (" + machine.describe() + "; this one is " +
           here.describe() + ")";
  return std::nullopt;
}

std::string BindingTable::toJson() const {
  using json = nlohmann::ordered_json;
  json list = json::array();
  for (const auto& b : bindings) {
    json candidates = json::array();
    for (const auto& c : b.candidates) {
      json entry{{"name", c.name},
                 {"forward_seconds", c.forwardSeconds},
                 {"backward_seconds", c.backwardSeconds},
                 // null: beyond measure (a NaN where the reference had none, another shape)
                 {"max_error", std::isfinite(c.maxError) ? json(c.maxError) : json(nullptr)}};
      if (!c.refused.empty())
        entry["refused"] = c.refused;
      if (c.keptBytes >= 0)
        entry["kept_bytes"] = c.keptBytes;
      candidates.push_back(std::move(entry));
    }
    json entry{{"site", b.site},
               {"node", b.node},
               {"pattern", b.pattern},
               {"bucket", b.bucket},
               {"reference", b.reference},
               {"winner", b.winner},
               {"predicted", b.predicted},
               {"speedup", b.speedup()},
               {"candidates", std::move(candidates)}};
    if (!b.nodes.empty())
      entry["nodes"] = b.nodes;
    list.push_back(std::move(entry));
  }
  json root{{"format", kFormat},
            {"version", kVersion},
            {"model", model},
            {"machine",
             {{"cpu", machine.cpu},
              {"threads", machine.threads},
              {"gpu", machine.gpu},
              {"libtorch", machine.libtorch}}}};
  if (memorySlack != 0)
    root["memory_slack"] = memorySlack;
  root["bindings"] = std::move(list);
  return root.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

BindingTable BindingTable::fromJson(const std::string& text, const std::string& origin) {
  const auto fail = [&](const std::string& field, const std::string& problem) {
    throw std::runtime_error(origin + ": " + (field.empty() ? "" : field + ": ") + problem);
  };
  nlohmann::json root;
  std::string duplicate;
  try {
    root = detail::parseJson(text, duplicate);
  } catch (const nlohmann::json::parse_error& e) {
    fail("", std::string("not JSON (") + e.what() + ")");
  }
  if (!root.is_object())
    fail("", "expected a binding table (an object), found " + detail::describeJsonType(root));
  if (!duplicate.empty())
    fail(duplicate, detail::kGivenTwice);
  detail::JsonFields top(root, "", fail);
  if (top.string("format") != kFormat)
    top.fail("format", "expected \"" + std::string(kFormat) + "\"");
  if (top.integer("version") != kVersion)
    top.fail("version", "version " + std::to_string(top.integer("version")) +
                            " is not supported (this build reads " + std::to_string(kVersion) +
                            ")");
  top.rejectUnknown({"format", "version", "model", "machine", "memory_slack", "bindings"});
  BindingTable table;
  table.model = top.string("model");
  table.memorySlack = top.number("memory_slack", 0);
  if (!(table.memorySlack >= 0 && table.memorySlack < 1))
    top.fail("memory_slack", "expected a share in [0, 1)");
  const detail::JsonFields machine = top.object("machine");
  machine.rejectUnknown({"cpu", "threads", "gpu", "libtorch"});
  table.machine.cpu = machine.string("cpu");
  table.machine.threads = static_cast<int>(machine.integer("threads"));
  table.machine.gpu = machine.string("gpu", "");
  table.machine.libtorch = machine.string("libtorch");
  const auto& list = top.require("bindings");
  if (!list.is_array())
    top.fail("bindings", "expected an array, found " + detail::describeJsonType(list));
  std::map<std::pair<std::string, std::string>, size_t> seen;  // (site, bucket): where
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = "bindings[" + std::to_string(i) + "]";
    if (!list[i].is_object())
      fail(path, "expected an object, found " + detail::describeJsonType(list[i]));
    detail::JsonFields f(list[i], path, fail);
    f.rejectUnknown({"site", "node", "nodes", "pattern", "bucket", "reference", "winner",
                     "predicted", "speedup", "candidates"});
    Binding b;
    b.site = f.string("site");
    const auto nodeId = [&](const nlohmann::json& v, const std::string& where) {
      if (!v.is_number_integer() || v.get<int64_t>() < -1 ||
          v.get<int64_t>() > std::numeric_limits<int32_t>::max())
        fail(where, "expected a node id (an integer in [0, 2^31), or -1 for none), found " +
                        (v.is_number_integer() ? v.dump() : detail::describeJsonType(v)));
      return v.get<int32_t>();
    };
    b.node = nodeId(f.require("node"), path + ".node");
    if (list[i].contains("nodes")) {
      const auto& nodes = list[i]["nodes"];
      if (!nodes.is_array())
        f.fail("nodes", "expected an array of node ids, found " + detail::describeJsonType(nodes));
      for (size_t j = 0; j < nodes.size(); ++j)
        b.nodes.push_back(nodeId(nodes[j], path + ".nodes[" + std::to_string(j) + "]"));
    }
    b.pattern = f.string("pattern", "");
    b.bucket = f.string("bucket");
    b.reference = f.string("reference");
    b.winner = f.string("winner");
    b.predicted = f.boolean("predicted", false);
    const auto& candidates = f.require("candidates");
    if (!candidates.is_array())
      f.fail("candidates", "expected an array, found " + detail::describeJsonType(candidates));
    for (size_t j = 0; j < candidates.size(); ++j) {
      const std::string cpath = path + ".candidates[" + std::to_string(j) + "]";
      if (!candidates[j].is_object())
        fail(cpath, "expected an object, found " + detail::describeJsonType(candidates[j]));
      detail::JsonFields c(candidates[j], cpath, fail);
      c.rejectUnknown(
          {"name", "forward_seconds", "backward_seconds", "max_error", "refused", "kept_bytes"});
      CandidateMeasurement m;
      m.name = c.string("name");
      m.forwardSeconds = c.number("forward_seconds", 0);
      m.backwardSeconds = c.number("backward_seconds", 0);
      m.maxError = c.has("max_error") && candidates[j]["max_error"].is_null()
                       ? std::numeric_limits<double>::infinity()
                       : c.number("max_error", 0);
      m.refused = c.string("refused", "");
      m.keptBytes = c.integer("kept_bytes", -1);
      for (const auto& [field, value] :
           {std::pair<const char*, double>{"forward_seconds", m.forwardSeconds},
            {"backward_seconds", m.backwardSeconds},
            {"max_error", m.maxError}}) {
        if (!(value >= 0))
          c.fail(field, "expected a number at least 0");
      }
      if (m.keptBytes < -1)
        c.fail("kept_bytes", "expected a byte count, or -1 where none was counted");
      b.candidates.push_back(std::move(m));
    }
    // What the binder wrote: the reference first (a trade of memory for time reckons from it,
    // Note [Memory slack]), and a winner that agreed with it.
    if (!b.candidates.empty() && b.candidates.front().name != b.reference)
      fail(path + ".candidates[0]", "expected the reference, \"" + b.reference + "\", found \"" +
                                        b.candidates.front().name + "\"");
    if (!b.candidates.empty() && !b.candidates.front().refused.empty())
      fail(path + ".candidates[0].refused", "the reference cannot be refused");
    if (!b.predicted) {
      const CandidateMeasurement* winner = b.measurement(b.winner);
      if (winner == nullptr)
        f.fail("winner", "\"" + b.winner + "\" is not among the measured candidates");
      if (!winner->refused.empty())
        f.fail("winner", "\"" + b.winner + "\" is recorded as refused (" + winner->refused + ")");
    }
    const auto [at, fresh] = seen.emplace(std::make_pair(b.site, b.bucket), i);
    if (!fresh)
      fail(path, "site " + b.site + " on bucket " + b.bucket + " is bound already, at bindings[" +
                     std::to_string(at->second) + "]");
    table.bindings.push_back(std::move(b));
  }
  return table;
}

void BindingTable::save(const std::string& path) const {
  writeFileAtomically(path, toJson());
}

BindingTable BindingTable::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open the binding table");
  std::ostringstream text;
  text << in.rdbuf();
  return fromJson(text.str(), path);
}

std::string BindingTable::describe() const {
  std::ostringstream out;
  out << "bindings of " << (model.empty() ? std::string("?") : model) << ", measured on "
      << machine.describe();
  if (memorySlack > 0)
    out << ", up to " << memorySlack * 100
        << " % of the sites' time given to candidates that keep less";
  out << "\n";
  if (bindings.empty()) {
    out << "  (none)\n";
    return out.str();
  }
  for (const auto& b : bindings) {
    out << "  " << b.site << "  [" << b.bucket << "]  -> " << b.winner;
    if (b.predicted) {
      out << " (predicted, not measured)";  // no times: no speedup to state
    } else {
      char speed[32];
      std::snprintf(speed, sizeof speed, "%.2fx", b.speedup());
      out << "  " << speed << " over " << b.reference;
    }
    // What the site is: its pattern, and how many nodes when it spans several (a GRU cell's 25).
    if (!b.pattern.empty()) {
      out << "  (" << b.pattern;
      if (!b.nodes.empty())
        out << ", " << b.nodes.size() + 1 << " nodes";
      out << ")";
    }
    out << "\n";
    for (const auto& c : b.candidates) {
      out << "      " << c.name << ": forward " << formatSeconds(c.forwardSeconds) << ", backward "
          << formatSeconds(c.backwardSeconds);
      if (c.keptBytes >= 0) {
        char kept[48];
        std::snprintf(kept, sizeof kept, ", keeps %.2f MB", static_cast<double>(c.keptBytes) / 1e6);
        out << kept;
      }
      if (!c.refused.empty())
        out << "  refused: " << c.refused;
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace symtune
