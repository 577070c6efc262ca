#include "symtune/graphview/view_dot.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

namespace symtune::graphview {

namespace {

// A name inside a quoted DOT string: quotes and backslashes escaped, control characters a space
// (a NUL, which JSON allows, ended the text Graphviz read in the middle of the string, and the
// whole view failed to lay out).
std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out;
}

std::string shortKind(const std::string& kind) {
  const auto colons = kind.rfind("::");
  // "aten::conv2d" → "conv2d"; keep "prim::If" whole (control flow reads better with its prefix)
  if (colons != std::string::npos && kind.rfind("prim::", 0) != 0)
    return kind.substr(colons + 2);
  return kind;
}

std::string lastComponent(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// Region ancestry, read once per view.
class Regions {
 public:
  explicit Regions(const Graph& g) : g_(g) {}
  bool isRoot(RegionId id) const { return !id.valid() || !g_.region(id).parent.valid(); }
  // The outermost collapsed region that holds `id` (itself included), or none.
  RegionId outermostCollapsed(RegionId id, const std::set<RegionId>& collapsed) const {
    RegionId found;
    for (RegionId r = id; r.valid(); r = g_.region(r).parent) {
      if (collapsed.count(r) != 0)
        found = r;
    }
    return found;
  }
  int depth(RegionId id) const {
    int d = 0;
    for (RegionId r = id; r.valid(); r = g_.region(r).parent)
      ++d;
    return d;
  }

 private:
  const Graph& g_;
};

// The drawn label of a cluster: a module's path relative to the module around it.
std::string clusterLabel(const Graph& g, const GraphRegion& r) {
  std::string label = regionLabel(r);
  if (r.kind == RegionKind::Module) {
    for (RegionId p = r.parent; p.valid(); p = g.region(p).parent) {
      const GraphRegion& parent = g.region(p);
      if (parent.kind != RegionKind::Module)
        continue;
      if (label.rfind(parent.label + ".", 0) == 0)
        label = label.substr(parent.label.size() + 1);
      break;
    }
  } else if (!r.label.empty() && r.kind != RegionKind::Method) {
    label += " · " + lastComponent(r.label);  // the module a branch or loop sits in
  }
  return label;
}

int drawnCount(const Graph& g, GraphSide side, const std::set<RegionId>& collapsed) {
  const Regions regions(g);
  std::set<RegionId> groups;
  int drawn = 0;
  for (const auto& n : g.nodes()) {
    if (n.side != side)
      continue;
    const RegionId c = regions.outermostCollapsed(groupOf(g, n), collapsed);
    if (!c.valid())
      ++drawn;
    else if (groups.insert(c).second)
      ++drawn;
  }
  return drawn;
}

}  // namespace

RegionId groupOf(const Graph& g, const GraphNode& n) {
  if (n.side == GraphSide::Forward)
    return n.region;
  if (n.forward.valid())
    return g.node(n.forward).region;
  // An autograd node without a forward op: an AccumulateGrad, whose path names its parameter
  // ("encoder.cell.weight"). The module region of the longest leading part of it that has one
  // (the first region SyMuGen made for that path); matched whole, none ever did.
  for (std::string path = n.modulePath; !path.empty();) {
    for (const auto& r : g.regions()) {
      if (r.kind == RegionKind::Module && r.label == path)
        return r.id;
    }
    const auto dot = path.rfind('.');
    path.resize(dot == std::string::npos ? 0 : dot);
  }
  return {};
}

std::unordered_map<RegionId, int> groupSizes(const Graph& g, GraphSide side) {
  std::unordered_map<RegionId, int> sizes;
  for (const auto& n : g.nodes()) {
    if (n.side != side)
      continue;
    for (RegionId r = groupOf(g, n); r.valid(); r = g.region(r).parent)
      ++sizes[r];
  }
  return sizes;
}

std::vector<RegionId> groupsWithNodes(const Graph& g, GraphSide side) {
  const auto sizes = groupSizes(g, side);
  const Regions regions(g);
  std::vector<RegionId> groups;
  for (const auto& r : g.regions()) {  // parents come before their children
    if (!regions.isRoot(r.id) && sizes.count(r.id) != 0)
      groups.push_back(r.id);
  }
  return groups;
}

// Note [Fast layout]
// dot's time goes to ranking and crossing reduction, and grows quickly with the node count
// (measured with Debian 12's Graphviz 2.42 on 2 cores: 2,000 DNN-like nodes 1.6 s, with random
// back-references 9.9 s; 4,000 of those 51 s).
// Two things keep a large model inside the budget: it opens with groups collapsed until at most
// a few hundred nodes are drawn (collapseToFit), and above `fastLayoutAbove` drawn nodes the
// network-simplex and mincross iteration limits are lowered, which costs a few more crossings.
std::set<RegionId> collapseToFit(const Graph& g, GraphSide side, int maxDrawn) {
  std::set<RegionId> collapsed;
  if (drawnCount(g, side, collapsed) <= maxDrawn)
    return collapsed;
  const auto sizes = groupSizes(g, side);
  const Regions regions(g);
  std::vector<RegionId> candidates;
  for (RegionId r : groupsWithNodes(g, side)) {
    if (sizes.at(r) > 1)
      candidates.push_back(r);
  }
  // Innermost first; within one depth, the largest first.
  std::stable_sort(candidates.begin(), candidates.end(), [&](RegionId a, RegionId b) {
    const int da = regions.depth(a), db = regions.depth(b);
    return da != db ? da > db : sizes.at(a) > sizes.at(b);
  });
  // What each region holds as drawn: its nodes at first. Collapsing one makes what it holds one
  // entry, for it and for each region around it; innermost first, none around it is collapsed
  // yet. (Counting every node again per candidate took 6.4 s at 10,000 nodes, 24 s at 20,000,
  // on the studio's GUI thread.)
  auto within = sizes;
  int drawn = drawnCount(g, side, collapsed);
  for (RegionId r : candidates) {
    if (drawn <= maxDrawn)
      break;
    collapsed.insert(r);
    const int hidden = within.at(r) - 1;
    for (RegionId around = r; around.valid(); around = g.region(around).parent)
      within[around] -= hidden;
    drawn -= hidden;
  }
  return collapsed;
}

ViewDot buildViewDot(const Graph& g, const ViewOptions& options) {
  ViewDot view;
  const Regions regions(g);
  const auto sizes = groupSizes(g, options.side);

  // Which DOT node each node of the side is drawn as, and what lives in each region.
  std::map<int32_t, std::vector<std::string>> drawnIn;  // region (-1: top level) → DOT nodes
  for (const auto& n : g.nodes()) {
    if (n.side != options.side)
      continue;
    const RegionId group = groupOf(g, n);
    const RegionId collapsed = regions.outermostCollapsed(group, options.collapsed);
    if (collapsed.valid()) {
      const std::string name = "g" + std::to_string(collapsed.value());
      view.shownAs.emplace(n.id, name);
      if (view.entries.count(name) == 0) {
        const GraphRegion& r = g.region(collapsed);
        ViewEntry e;
        e.group = collapsed;
        e.members = sizes.at(collapsed);
        e.label = "▸ " + clusterLabel(g, r);
        e.detail = std::to_string(e.members) + (e.members == 1 ? " op" : " ops");
        view.entries.emplace(name, e);
        drawnIn[regions.isRoot(r.parent) ? -1 : r.parent.value()].push_back(name);
      }
      continue;
    }
    const std::string name = "n" + std::to_string(n.id.value());
    ViewEntry e;
    e.node = n.id;
    e.label = shortKind(n.kind);
    // The module, unless the cluster around the node already names it.
    const bool named = group.valid() && g.region(group).kind == RegionKind::Module &&
                       g.region(group).label == n.modulePath;
    if (!named)
      e.detail = lastComponent(n.modulePath);
    view.entries.emplace(name, e);
    view.shownAs.emplace(n.id, name);
    drawnIn[regions.isRoot(group) ? -1 : group.value()].push_back(name);
  }

  std::ostringstream out;
  out << "digraph view {\n"
      << "  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, fontname=\"Helvetica\", fontsize=10";
  if (static_cast<int>(view.entries.size()) > options.fastLayoutAbove)
    out << ", mclimit=0.05, nslimit=0.5, nslimit1=0.5, searchsize=30";  // Note [Fast layout]
  out << "];\n"
      << "  node [shape=box, fontname=\"Helvetica\", fontsize=10, width=0.9, height=0.36, "
         "margin=\"0.12,0.04\"];"
         "\n  edge [arrowsize=0.6];\n";
  auto emitNodes = [&](int32_t region, const std::string& indent) {
    for (const auto& name : drawnIn[region]) {
      const ViewEntry& e = view.entries.at(name);
      out << indent << name << " [label=\"" << escape(e.label);
      if (!e.detail.empty())
        out << "\\n" << escape(e.detail);
      out << "\"];\n";
    }
  };
  std::map<int32_t, std::vector<RegionId>> childrenOf;
  for (const auto& r : g.regions()) {
    if (!regions.isRoot(r.id) && sizes.count(r.id) != 0 && options.collapsed.count(r.id) == 0)
      childrenOf[regions.isRoot(r.parent) ? -1 : r.parent.value()].push_back(r.id);
  }
  auto emitCluster = [&](auto&& self, RegionId id, const std::string& indent) -> void {
    if (regions.outermostCollapsed(id, options.collapsed).valid())
      return;  // inside a collapsed group: drawn as the group
    const GraphRegion& r = g.region(id);
    const std::string name = "cluster_r" + std::to_string(id.value());
    ViewCluster c;
    c.region = id;
    c.label = clusterLabel(g, r);
    c.dimmed = r.taken.has_value() && !*r.taken;
    view.clusters.emplace(name, c);
    out << indent << "subgraph " << name << " {\n"
        << indent << "  label=\"" << escape(c.label) << "\";\n";
    emitNodes(id.value(), indent + "  ");
    for (RegionId child : childrenOf[id.value()])
      self(self, child, indent + "  ");
    out << indent << "}\n";
  };
  emitNodes(-1, "  ");
  for (RegionId top : childrenOf[-1])
    emitCluster(emitCluster, top, "  ");

  std::set<std::pair<std::string, std::string>> edges;
  for (const auto& e : g.edges()) {
    auto from = view.shownAs.find(e.from);
    auto to = view.shownAs.find(e.to);
    if (from == view.shownAs.end() || to == view.shownAs.end() || from->second == to->second)
      continue;
    if (edges.emplace(from->second, to->second).second)
      out << "  " << from->second << " -> " << to->second << ";\n";
  }
  view.edges = static_cast<int>(edges.size());
  out << "}\n";
  view.dot = out.str();
  return view;
}

}  // namespace symtune::graphview
