#pragma once
// What one graph view shows, as DOT: the nodes of one side (forward or backward) of a
// symtune::Graph, nested in clusters for its control-flow regions (prim::If branches, prim::Loop
// bodies) and modules, with collapsed groups drawn as one node that stands for everything inside.
// A pure function of the graph and the options, tested as text; the layout (dot_layout.h) and the
// scene (graph_scene.h) read the names it gives.
//
//   ViewOptions options;
//   options.collapsed.insert(loopRegion);
//   ViewDot view = buildViewDot(graph, options);   // view.dot for Graphviz, view.entries by name

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "symtune/core/graph.h"

namespace symtune::graphview {

struct ViewOptions {
  GraphSide side = GraphSide::Forward;
  std::set<RegionId> collapsed;  // groups drawn as one node
  // Above this many drawn nodes the layout trades some crossing reduction for time
  // (Note [Fast layout]).
  int fastLayoutAbove = 400;
};

// What a DOT node of the view stands for: one graph node, or a collapsed group.
struct ViewEntry {
  NodeId node;         // a graph node, or none for a group
  RegionId group;      // the collapsed group, or none
  int members = 0;     // groups: how many nodes of the side it holds
  std::string label;   // the text drawn on it
  std::string detail;  // second line: module path, or what the group holds
};

struct ViewCluster {
  RegionId region;
  std::string label;
  bool dimmed = false;  // a branch that did not run in the captured step
};

struct ViewDot {
  std::string dot;
  std::map<std::string, ViewEntry> entries;         // by DOT node name ("n12", "g7")
  std::map<std::string, ViewCluster> clusters;      // by DOT cluster name ("cluster_r7")
  std::unordered_map<NodeId, std::string> shownAs;  // every node of the side → its DOT node
  int edges = 0;
};

// The group a node belongs to: forward nodes their region; backward nodes the region of the
// forward op that created them, else the module region of their module path or of the longest
// leading part of it that has one (an AccumulateGrad's path names its parameter), else the root.
RegionId groupOf(const Graph& graph, const GraphNode& node);

// Groups (regions other than the root) that hold at least one node of `side`, outermost first.
std::vector<RegionId> groupsWithNodes(const Graph& graph, GraphSide side);

// How many nodes of `side` each group holds, nested groups' included.
std::unordered_map<RegionId, int> groupSizes(const Graph& graph, GraphSide side);

// Collapses groups, innermost-largest first, until at most `maxDrawn` nodes are drawn (a large
// graph opens at a size that lays out in well under the time budget; the user expands the rest).
std::set<RegionId> collapseToFit(const Graph& graph, GraphSide side, int maxDrawn);

ViewDot buildViewDot(const Graph& graph, const ViewOptions& options = {});

}  // namespace symtune::graphview
