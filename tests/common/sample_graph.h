#pragma once
// A small model graph built in code for the studio's tests: a module with a loop (×3) holding two
// ops, an if whose then-branch ran and else-branch did not, and autograd nodes linked to their
// forward ops.
//
//   root (forward)
//     n0 aten::linear   [encoder]
//     loop ×3 · encoder: n1 aten::matmul, n2 aten::add   [encoder.cell]
//     n3 prim::If
//     if: then (taken): n4 aten::relu     if: else (not taken): n5 aten::gelu
//     n6 aten::sum
//   backward: n7 SumBackward0 ← n6, n8 AddBackward0 ← n2, n9 MmBackward0 ← n1

#include "symtune/core/graph.h"

namespace symtune::testing {

struct SampleGraph {
  Graph graph;
  RegionId root, encoder, loop, thenBranch, elseBranch;
  NodeId linear, matmul, add, branch, relu, gelu, sum, sumBackward, addBackward, mmBackward;
};

inline SampleGraph sampleGraph() {
  SampleGraph s;
  Graph& g = s.graph;
  g.name = "sample";
  auto addRegion = [&](RegionKind kind, RegionId parent, const std::string& label) {
    GraphRegion r;
    r.kind = kind;
    r.parent = parent;
    r.label = label;
    return g.addRegion(r);
  };
  auto addNode = [&](const std::string& kind, RegionId region, const std::string& module,
                     GraphSide side = GraphSide::Forward) {
    GraphNode n;
    n.kind = kind;
    n.region = side == GraphSide::Forward ? region : RegionId();
    n.side = side;
    n.modulePath = module;
    return g.addNode(n);
  };
  s.root = addRegion(RegionKind::Method, {}, "forward");
  s.encoder = addRegion(RegionKind::Module, s.root, "encoder");
  s.loop = addRegion(RegionKind::Loop, s.encoder, "encoder");
  g.region(s.loop).tripCount = 3;
  s.linear = addNode("aten::linear", s.encoder, "encoder");
  g.node(s.linear).features.flops = 2e9;
  s.matmul = addNode("aten::matmul", s.loop, "encoder.cell");
  g.node(s.matmul).features.flops = 6e9;
  s.add = addNode("aten::add", s.loop, "encoder.cell");
  s.branch = addNode("prim::If", s.root, "");
  s.thenBranch = addRegion(RegionKind::IfThen, s.root, "");
  g.region(s.thenBranch).owner = s.branch;
  g.region(s.thenBranch).taken = true;
  s.elseBranch = addRegion(RegionKind::IfElse, s.root, "");
  g.region(s.elseBranch).owner = s.branch;
  g.region(s.elseBranch).taken = false;
  s.relu = addNode("aten::relu", s.thenBranch, "");
  s.gelu = addNode("aten::gelu", s.elseBranch, "");
  s.sum = addNode("aten::sum", s.root, "");
  g.addEdge(s.linear, s.matmul);
  g.addEdge(s.matmul, s.add);
  g.addEdge(s.add, s.matmul);  // the loop-carried value
  g.addEdge(s.add, s.branch);
  g.addEdge(s.branch, s.relu);
  g.addEdge(s.branch, s.gelu);
  g.addEdge(s.relu, s.sum);
  g.addEdge(s.gelu, s.sum);
  s.sumBackward = addNode("SumBackward0", {}, "", GraphSide::Backward);
  s.addBackward = addNode("AddBackward0", {}, "encoder.cell", GraphSide::Backward);
  s.mmBackward = addNode("MmBackward0", {}, "encoder.cell", GraphSide::Backward);
  g.link(s.sum, s.sumBackward);
  g.link(s.add, s.addBackward);
  g.link(s.matmul, s.mmBackward);
  g.addEdge(s.sumBackward, s.addBackward);
  g.addEdge(s.addBackward, s.mmBackward);
  return s;
}

}  // namespace symtune::testing
