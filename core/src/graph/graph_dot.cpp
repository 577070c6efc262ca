#include <map>
#include <sstream>

#include "symtune/core/graph.h"

namespace symtune {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string nodeName(NodeId id) {
  return "n" + std::to_string(id.value());
}

}  // namespace

std::string regionLabel(const GraphRegion& r) {
  switch (r.kind) {
    case RegionKind::IfThen:
    case RegionKind::IfElse: {
      std::string label = r.kind == RegionKind::IfThen ? "if: then" : "if: else";
      if (r.taken)
        label += *r.taken ? " (taken)" : " (not taken)";
      return label;
    }
    case RegionKind::Loop:
      return "loop" + (r.tripCount ? " ×" + std::to_string(*r.tripCount) : std::string());
    case RegionKind::Module:
    case RegionKind::Method:
      break;
  }
  return r.label;
}

std::string toDot(const Graph& g, const DotOptions& options) {
  std::ostringstream out;
  out << "digraph \"" << escape(g.name) << "\" {\n"
      << "  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n";

  // Forward nodes by region, regions nested as clusters (children listed after their parents,
  // which is the order SyMuGen creates them in).
  std::map<int32_t, std::vector<NodeId>> nodesOf;
  std::map<int32_t, std::vector<RegionId>> childrenOf;
  if (options.forward) {
    for (const auto& n : g.nodes()) {
      if (n.side == GraphSide::Forward)
        nodesOf[n.region.value()].push_back(n.id);
    }
    for (const auto& r : g.regions())
      childrenOf[r.parent.value()].push_back(r.id);
  }
  auto emitNode = [&](const GraphNode& n, const std::string& indent) {
    out << indent << nodeName(n.id) << " [label=\"" << escape(n.kind);
    if (!n.modulePath.empty())
      out << "\\n" << escape(n.modulePath);
    out << "\"";
    if (n.side == GraphSide::Backward)
      out << ", style=filled, fillcolor=\"#f3e8ff\"";
    out << "];\n";
  };
  // Recursive lambda over the region tree.
  auto emitRegion = [&](auto&& self, RegionId id, const std::string& indent) -> void {
    const bool cluster = id.valid() && g.region(id).parent.valid();  // the root is no cluster
    std::string inner = indent;
    if (cluster) {
      out << indent << "subgraph cluster_r" << id.value() << " {\n"
          << indent << "  label=\"" << escape(regionLabel(g.region(id))) << "\";\n";
      inner += "  ";
    }
    for (NodeId n : nodesOf[id.value()])
      emitNode(g.node(n), inner);
    for (RegionId child : childrenOf[id.value()])
      self(self, child, inner);
    if (cluster)
      out << indent << "}\n";
  };
  if (options.forward) {
    for (NodeId n : nodesOf[-1])
      emitNode(g.node(n), "  ");
    for (RegionId root : childrenOf[-1])
      emitRegion(emitRegion, root, "  ");
  }
  if (options.backward) {
    out << "  subgraph cluster_backward {\n    label=\"autograd\";\n";
    for (const auto& n : g.nodes()) {
      if (n.side == GraphSide::Backward)
        emitNode(n, "    ");
    }
    out << "  }\n";
  }
  auto shown = [&](NodeId id) {
    return g.node(id).side == GraphSide::Forward ? options.forward : options.backward;
  };
  for (const auto& e : g.edges()) {
    if (shown(e.from) && shown(e.to)) {
      out << "  " << nodeName(e.from) << " -> " << nodeName(e.to) << ";\n";
    }
  }
  if (options.links && options.forward && options.backward) {
    for (const auto& n : g.nodes()) {
      if (n.side == GraphSide::Backward && n.forward.valid()) {
        out << "  " << nodeName(n.forward) << " -> " << nodeName(n.id)
            << " [style=dashed, color=\"#9333ea\", constraint=false];\n";
      }
    }
  }
  out << "}\n";
  return out.str();
}

}  // namespace symtune
