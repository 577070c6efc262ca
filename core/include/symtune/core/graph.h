#pragma once
// symtune::Graph: a model as one graph — the forward TorchScript IR with its control-flow regions
// and module paths, and the autograd (backward) nodes of a sampled step, linked to the forward ops
// that created them. Part of symtune::core: the studio draws it without LibTorch. SyMuGen
// (syMuGen.h) builds it; docs/graph-format.md documents its JSON.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "symtune/core/ids.h"

namespace symtune {

enum class GraphSide : uint8_t { Forward, Backward };
enum class RegionKind : uint8_t {
  Method,  // the root: a module's forward
  Module,  // a submodule call, labelled with its module path
  IfThen,  // the true branch of a prim::If
  IfElse,  // the false branch
  Loop,    // the body of a prim::Loop
};

const char* toString(GraphSide side);
const char* toString(RegionKind kind);

struct GraphRegion;
// A region as drawn (DOT clusters, the studio): the module path or method name, "if: then
// (taken)", "if: else (not taken)", "loop ×3" — what is known of the captured step.
std::string regionLabel(const GraphRegion& region);

// A value flowing into or out of a node.
struct ValueInfo {
  std::string type;                           // "Tensor", "int", "bool", "float[]", ...
  std::optional<std::vector<int64_t>> shape;  // tensors with a known shape
  std::string dtype;                          // tensors with a known dtype: "float32", ...
  std::optional<std::vector<int64_t>> ints;   // the value of an int or int[] (kernel sizes, dims)
};

struct SourceLocation {
  std::string file;  // "<string>" for source compiled from text
  int line = 0;      // 1-based; 0: unknown
  std::string function;
  bool known() const { return line > 0; }
};

// Per-node figures from the operator expression templates (cost_templates.h) and the graph's
// structure. Costs are absent when the op has no template or its shapes are unknown — never
// guessed.
struct NodeFeatures {
  std::string opClass;  // "conv", "matmul", "attention", "rnn", "norm", "activation",
                        // "elementwise", "reduction", "pool", "lookup", "loss", "layout",
                        // "creation", "control", "other" (backward nodes: "autograd";
                        // module-tree nodes: "module")
  std::optional<double> flops, bytesRead, bytesWritten, savedBytes;
  int controlDepth = 0;  // number of enclosing prim::If / prim::Loop regions

  std::optional<double> arithmeticIntensity() const;  // flops / (read + written)
};

struct GraphNode {
  NodeId id;
  GraphSide side = GraphSide::Forward;
  std::string kind;        // "aten::conv2d", "prim::If", "ConvolutionBackward0", ...
  RegionId region;         // innermost enclosing region (forward); none for backward nodes
  std::string modulePath;  // "layer3.1.body.conv1"; empty: the root module
  SourceLocation source;
  std::vector<ValueInfo> inputs, outputs;
  std::vector<ValueInfo> saved;  // backward nodes: the tensors autograd saved for them
  int64_t sequenceNr = -1;  // autograd sequence number: a forward op's equals its backward node's
  NodeId forward;           // backward nodes: the forward op that created it (when known)
  std::vector<NodeId> backward;  // forward nodes: the autograd nodes it created
  NodeFeatures features;
};

// Data flow from output `fromOutput` of `from` to input `toInput` of `to`. Backward edges follow
// gradient flow (from a node to the nodes of its next_edges).
struct GraphEdge {
  EdgeId id;
  NodeId from, to;
  int fromOutput = 0, toInput = 0;
};

struct GraphRegion {
  RegionId id;
  RegionKind kind = RegionKind::Method;
  RegionId parent;            // none for the root
  NodeId owner;               // the prim::If / prim::Loop node of a branch or body; none otherwise
  std::string label;          // module path for Module regions, method name for Method
  std::optional<bool> taken;  // branches: whether it ran in the captured step
  std::optional<int64_t> tripCount;  // loops: constant trip count, or iterations in the step
};

class GraphFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Graph {
 public:
  static constexpr int kFormatVersion = 1;

  std::string name;  // the model's name

  NodeId addNode(GraphNode node);  // assigns node.id
  EdgeId addEdge(NodeId from, NodeId to, int fromOutput = 0, int toInput = 0);
  RegionId addRegion(GraphRegion region);  // assigns region.id

  GraphNode& node(NodeId id);
  const GraphNode& node(NodeId id) const;
  const GraphRegion& region(RegionId id) const;
  GraphRegion& region(RegionId id);

  const std::vector<GraphNode>& nodes() const { return nodes_; }
  const std::vector<GraphEdge>& edges() const { return edges_; }
  const std::vector<GraphRegion>& regions() const { return regions_; }

  size_t countNodes(GraphSide side) const;
  // Links a forward op and the autograd node it created (both directions).
  void link(NodeId forward, NodeId backward);

 private:
  std::vector<GraphNode> nodes_;
  std::vector<GraphEdge> edges_;
  std::vector<GraphRegion> regions_;
};

// JSON with a format version (docs/graph-format.md). graphFromJson throws GraphFormatError naming
// what is wrong; toJson(graphFromJson(text)) == text for text that toJson wrote.
std::string toJson(const Graph& graph);
Graph graphFromJson(const std::string& text);
// The same from parsed JSON (a graph inside an attach message).
Graph graphFromJson(const nlohmann::json& value);

struct DotOptions {
  bool forward = true;   // include forward nodes (regions as clusters)
  bool backward = true;  // include backward nodes
  bool links = true;     // dashed edges from forward ops to their autograd nodes
};

// Graphviz DOT text of the graph: a pure function of the graph (tested as text).
std::string toDot(const Graph& graph, const DotOptions& options = {});

}  // namespace symtune
