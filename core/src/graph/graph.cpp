#include "symtune/core/graph.h"

#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace symtune {

const char* toString(GraphSide side) {
  return side == GraphSide::Forward ? "forward" : "backward";
}

const char* toString(RegionKind kind) {
  switch (kind) {
    case RegionKind::Method:
      return "method";
    case RegionKind::Module:
      return "module";
    case RegionKind::IfThen:
      return "if_then";
    case RegionKind::IfElse:
      return "if_else";
    case RegionKind::Loop:
      return "loop";
  }
  return "?";
}

std::optional<double> NodeFeatures::arithmeticIntensity() const {
  if (!flops || !bytesRead || !bytesWritten || *bytesRead + *bytesWritten <= 0)
    return std::nullopt;
  return *flops / (*bytesRead + *bytesWritten);
}

NodeId Graph::addNode(GraphNode node) {
  node.id = NodeId(static_cast<int32_t>(nodes_.size()));
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

EdgeId Graph::addEdge(NodeId from, NodeId to, int fromOutput, int toInput) {
  GraphEdge e;
  e.id = EdgeId(static_cast<int32_t>(edges_.size()));
  e.from = from;
  e.to = to;
  e.fromOutput = fromOutput;
  e.toInput = toInput;
  edges_.push_back(e);
  return e.id;
}

RegionId Graph::addRegion(GraphRegion region) {
  region.id = RegionId(static_cast<int32_t>(regions_.size()));
  regions_.push_back(std::move(region));
  return regions_.back().id;
}

GraphNode& Graph::node(NodeId id) {
  return nodes_.at(static_cast<size_t>(id.value()));
}
const GraphNode& Graph::node(NodeId id) const {
  return nodes_.at(static_cast<size_t>(id.value()));
}
GraphRegion& Graph::region(RegionId id) {
  return regions_.at(static_cast<size_t>(id.value()));
}
const GraphRegion& Graph::region(RegionId id) const {
  return regions_.at(static_cast<size_t>(id.value()));
}

size_t Graph::countNodes(GraphSide side) const {
  size_t n = 0;
  for (const auto& node : nodes_)
    n += node.side == side;
  return n;
}

void Graph::link(NodeId forward, NodeId backward) {
  node(backward).forward = forward;
  node(forward).backward.push_back(backward);
}

// ---- JSON ---------------------------------------------------------------------------------

namespace {

using json = nlohmann::ordered_json;

json idOrNull(int32_t v) {
  return v >= 0 ? json(v) : json(nullptr);
}

template <class T>
json optional(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json valuesToJson(const std::vector<ValueInfo>& values) {
  json out = json::array();
  for (const auto& v : values) {
    json j = {{"type", v.type}};
    if (v.shape)
      j["shape"] = *v.shape;
    if (!v.dtype.empty())
      j["dtype"] = v.dtype;
    if (v.ints)
      j["ints"] = *v.ints;
    out.push_back(j);
  }
  return out;
}

[[noreturn]] void bad(const std::string& what) {
  throw GraphFormatError("graph JSON: " + what);
}

const json& field(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key))
    bad(where + ": missing \"" + key + "\"");
  return obj.at(key);
}

// An integer of T's range: nlohmann's get<int> would take 1.9 as 1 and wrap 2^32 + 1 to 1.
template <class T>
T integer(const json& v, const std::string& where) {
  if (!v.is_number_integer())
    bad(where + ": expected an integer");
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                        : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                              v.get<int64_t>() <= std::numeric_limits<T>::max();
  if (!fits)
    bad(where + ": integer out of range");
  return static_cast<T>(v.get<int64_t>());
}

template <class T>
T get(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return integer<T>(v, where + "." + key);
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      bad(where + "." + key + ": wrong type");
    }
  }
}

// The id of one of `count` regions or nodes; -1 for null where `nullable`.
int32_t id(const json& v, const std::string& where, size_t count, bool nullable) {
  if (v.is_null() && nullable)
    return -1;
  if (!v.is_number_integer())
    bad(where + (nullable ? ": expected an id or null" : ": expected an id"));
  const auto i = integer<int32_t>(v, where);
  if (i < 0 || static_cast<size_t>(i) >= count)
    bad(where + ": id " + std::to_string(i) + " out of range (" + std::to_string(count) +
        " of them)");
  return i;
}

template <class T>
std::optional<T> optionalField(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj.at(key).is_null())
    return std::nullopt;
  return get<T>(obj, key, where);
}

std::vector<ValueInfo> valuesFromJson(const json& arr, const std::string& where) {
  if (!arr.is_array())
    bad(where + ": expected an array");
  std::vector<ValueInfo> out;
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    ValueInfo v;
    v.type = get<std::string>(arr[i], "type", w);
    v.shape = optionalField<std::vector<int64_t>>(arr[i], "shape", w);
    if (arr[i].contains("dtype"))
      v.dtype = get<std::string>(arr[i], "dtype", w);
    v.ints = optionalField<std::vector<int64_t>>(arr[i], "ints", w);
    out.push_back(std::move(v));
  }
  return out;
}

template <class Enum, size_t N>
Enum enumFromString(const std::string& s, const Enum (&all)[N], const std::string& where) {
  for (Enum e : all) {
    if (s == toString(e))
      return e;
  }
  bad(where + ": unknown value \"" + s + "\"");
}

}  // namespace

std::string toJson(const Graph& g) {
  json regions = json::array();
  for (const auto& r : g.regions()) {
    regions.push_back({{"id", r.id.value()},
                       {"kind", toString(r.kind)},
                       {"parent", idOrNull(r.parent.value())},
                       {"owner", idOrNull(r.owner.value())},
                       {"label", r.label},
                       {"taken", optional(r.taken)},
                       {"trip_count", optional(r.tripCount)}});
  }
  json nodes = json::array();
  for (const auto& n : g.nodes()) {
    json backward = json::array();
    for (NodeId b : n.backward)
      backward.push_back(b.value());
    const auto& f = n.features;
    nodes.push_back(
        {{"id", n.id.value()},
         {"side", toString(n.side)},
         {"kind", n.kind},
         {"region", idOrNull(n.region.value())},
         {"module", n.modulePath},
         {"source",
          {{"file", n.source.file}, {"line", n.source.line}, {"function", n.source.function}}},
         {"inputs", valuesToJson(n.inputs)},
         {"outputs", valuesToJson(n.outputs)},
         {"saved", valuesToJson(n.saved)},
         {"sequence_nr", n.sequenceNr},
         {"forward", idOrNull(n.forward.value())},
         {"backward", backward},
         {"features",
          {{"op_class", f.opClass},
           {"flops", optional(f.flops)},
           {"bytes_read", optional(f.bytesRead)},
           {"bytes_written", optional(f.bytesWritten)},
           {"saved_bytes", optional(f.savedBytes)},
           {"arithmetic_intensity", optional(f.arithmeticIntensity())},
           {"control_depth", f.controlDepth}}}});
  }
  json edges = json::array();
  for (const auto& e : g.edges()) {
    edges.push_back({e.from.value(), e.fromOutput, e.to.value(), e.toInput});
  }
  json out = {{"format", "symtune-graph"},
              {"version", Graph::kFormatVersion},
              {"name", g.name},
              {"regions", regions},
              {"nodes", nodes},
              {"edges", edges}};
  return out.dump(1) + "\n";
}

namespace {
Graph graphFromFields(const json& root);

// Every field is read through the checks below; a JSON error that slips past them still names
// the graph JSON, as GraphFormatError, which is what the studio and the attach client catch.
Graph graphFromRoot(const json& root) {
  try {
    return graphFromFields(root);
  } catch (const json::exception& e) {
    bad(e.what());
  }
}
}  // namespace

Graph graphFromJson(const std::string& text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    bad(std::string("not valid JSON (") + e.what() + ")");
  }
  return graphFromRoot(root);
}

Graph graphFromJson(const nlohmann::json& value) {
  return graphFromRoot(json(value));  // the graph's own (ordered) JSON type
}

namespace {

Graph graphFromFields(const json& root) {
  if (!root.is_object())
    bad("top: not an object");
  if (get<std::string>(root, "format", "top") != "symtune-graph")
    bad("format: not a symtune graph");
  const int version = get<int>(root, "version", "top");
  if (version != Graph::kFormatVersion) {
    bad("version: unsupported graph version " + std::to_string(version) + " (this Symtune reads " +
        std::to_string(Graph::kFormatVersion) + ")");
  }
  Graph g;
  g.name = get<std::string>(root, "name", "top");
  const RegionKind regionKinds[] = {RegionKind::Method, RegionKind::Module, RegionKind::IfThen,
                                    RegionKind::IfElse, RegionKind::Loop};
  const GraphSide sides[] = {GraphSide::Forward, GraphSide::Backward};

  const json& regions = field(root, "regions", "top");
  const json& nodes = field(root, "nodes", "top");
  if (!regions.is_array() || !nodes.is_array())
    bad("top: regions and nodes are arrays");
  // Ids name entries of these arrays: one out of range sent the studio's views past their end.
  const auto regionId = [&](const json& obj, const char* key, const std::string& w) {
    return RegionId(id(field(obj, key, w), w + "." + key, regions.size(), true));
  };
  const auto nodeId = [&](const json& v, const std::string& w, bool nullable) {
    return NodeId(id(v, w, nodes.size(), nullable));
  };
  for (size_t i = 0; i < regions.size(); ++i) {
    const std::string w = "regions[" + std::to_string(i) + "]";
    const json& r = regions[i];
    GraphRegion region;
    region.kind = enumFromString(get<std::string>(r, "kind", w), regionKinds, w + ".kind");
    region.parent = regionId(r, "parent", w);
    region.owner = nodeId(field(r, "owner", w), w + ".owner", true);
    region.label = get<std::string>(r, "label", w);
    region.taken = optionalField<bool>(r, "taken", w);
    region.tripCount = optionalField<int64_t>(r, "trip_count", w);
    if (get<int32_t>(r, "id", w) != static_cast<int32_t>(i))
      bad(w + ".id: ids must be 0, 1, ...");
    g.addRegion(std::move(region));
  }
  // Each region's parents end at a root: a cycle had the studio walking it for ever.
  for (const GraphRegion& r : g.regions()) {
    RegionId up = r.parent;
    for (size_t steps = 0; up.valid(); up = g.region(up).parent) {
      if (++steps > g.regions().size())
        bad("regions[" + std::to_string(r.id.value()) + "]: its parents form a cycle");
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string w = "nodes[" + std::to_string(i) + "]";
    const json& n = nodes[i];
    GraphNode node;
    node.side = enumFromString(get<std::string>(n, "side", w), sides, w + ".side");
    node.kind = get<std::string>(n, "kind", w);
    node.region = regionId(n, "region", w);
    node.modulePath = get<std::string>(n, "module", w);
    const json& src = field(n, "source", w);
    node.source.file = get<std::string>(src, "file", w + ".source");
    node.source.line = get<int>(src, "line", w + ".source");
    node.source.function = get<std::string>(src, "function", w + ".source");
    node.inputs = valuesFromJson(field(n, "inputs", w), w + ".inputs");
    node.outputs = valuesFromJson(field(n, "outputs", w), w + ".outputs");
    node.saved = valuesFromJson(field(n, "saved", w), w + ".saved");
    node.sequenceNr = get<int64_t>(n, "sequence_nr", w);
    node.forward = nodeId(field(n, "forward", w), w + ".forward", true);
    const json& backward = field(n, "backward", w);
    if (!backward.is_array())
      bad(w + ".backward: expected an array of ids");
    for (size_t b = 0; b < backward.size(); ++b)
      node.backward.push_back(
          nodeId(backward[b], w + ".backward[" + std::to_string(b) + "]", false));
    const json& f = field(n, "features", w);
    const std::string wf = w + ".features";
    node.features.opClass = get<std::string>(f, "op_class", wf);
    node.features.flops = optionalField<double>(f, "flops", wf);
    node.features.bytesRead = optionalField<double>(f, "bytes_read", wf);
    node.features.bytesWritten = optionalField<double>(f, "bytes_written", wf);
    node.features.savedBytes = optionalField<double>(f, "saved_bytes", wf);
    node.features.controlDepth = get<int>(f, "control_depth", wf);
    if (get<int32_t>(n, "id", w) != static_cast<int32_t>(i))
      bad(w + ".id: ids must be 0, 1, ...");
    g.addNode(std::move(node));
  }
  const json& edges = field(root, "edges", "top");
  if (!edges.is_array())
    bad("edges: expected an array");
  for (size_t i = 0; i < edges.size(); ++i) {
    const std::string w = "edges[" + std::to_string(i) + "]";
    const json& e = edges[i];
    if (!e.is_array() || e.size() != 4)
      bad(w + ": each edge is [from, from_output, to, to_input]");
    const NodeId from = nodeId(e[0], w + "[0]", false);  // checked in order
    const int fromOutput = integer<int>(e[1], w + "[1]");
    const NodeId to = nodeId(e[2], w + "[2]", false);
    g.addEdge(from, to, fromOutput, integer<int>(e[3], w + "[3]"));
  }
  return g;
}

}  // namespace

}  // namespace symtune
