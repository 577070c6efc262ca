// SyMuGen's static capture: the inlined forward IR as graph nodes, control-flow blocks and module
// calls as regions, data flow as edges.

#include <functional>
#include <map>
#include <optional>
#include <string>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/nn/module.h>

#include "ir_values.h"
#include "symtune/core/cost_templates.h"
#include "symtune/graph/symugen.h"

namespace symtune {

namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// A producer of a value: the graph node and its output index.
struct Producer {
  NodeId node;
  int output = 0;
};

class StaticBuilder {
 public:
  StaticBuilder(Graph& graph, std::unordered_map<const Node*, NodeId>& nodeIds,
                std::unordered_map<const Block*, RegionId>& blockRegions, std::string method)
      : g_(graph), nodeIds_(nodeIds), blockRegions_(blockRegions), method_(std::move(method)) {}

  void build(const torch::jit::Graph& ir) {
    GraphRegion root;
    root.kind = RegionKind::Method;
    root.label = method_;
    const RegionId rootId = g_.addRegion(root);
    blockRegions_[ir.block()] = rootId;
    controlBase_[rootId.value()] = "";
    walk(ir.block(), rootId, 0);
  }

 private:
  // The region for a node of `path` inside control region `control`: nested Module regions are
  // created for each path component below the control region's own module.
  RegionId regionFor(RegionId control, const std::string& path) {
    const std::string& base = controlBase_[control.value()];
    if (path == base)
      return control;
    size_t start = 0;
    if (!base.empty() && path.rfind(base + ".", 0) == 0)
      start = base.size() + 1;
    RegionId parent = control;
    for (size_t pos = start;;) {
      const size_t dot = path.find('.', pos);
      const std::string prefix = path.substr(0, dot);
      const auto key = std::make_pair(control.value(), prefix);
      auto it = moduleRegions_.find(key);
      if (it == moduleRegions_.end()) {
        GraphRegion r;
        r.kind = RegionKind::Module;
        r.parent = parent;
        r.label = prefix;
        it = moduleRegions_.emplace(key, g_.addRegion(r)).first;
      }
      parent = it->second;
      if (dot == std::string::npos)
        break;
      pos = dot + 1;
    }
    return parent;
  }

  void addEdgesInto(NodeId to, const Node* node) {
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      for (const Producer& p : producers_[node->inputs()[i]]) {
        g_.addEdge(p.node, to, p.output, static_cast<int>(i));
      }
    }
  }

  // Data flowing through a node that is not a graph node: its outputs come from its inputs.
  void passThrough(const Node* node) {
    std::vector<Producer> all;
    for (const Value* in : node->inputs()) {
      const auto& ps = producers_[in];
      all.insert(all.end(), ps.begin(), ps.end());
    }
    for (const Value* out : node->outputs())
      producers_[out] = all;
  }

  void walk(const Block* block, RegionId control, int depth) {
    for (const Node* node : block->nodes()) {
      if (!detail::isGraphNode(node)) {
        passThrough(node);
        continue;
      }
      GraphNode n;
      n.kind = node->kind().toQualString();
      n.modulePath = detail::modulePathOf(node);
      n.region = regionFor(control, n.modulePath);
      n.source = detail::sourceOf(node, method_);
      for (const Value* in : node->inputs())
        n.inputs.push_back(detail::describeIrValue(in));
      for (const Value* out : node->outputs())
        n.outputs.push_back(detail::describeIrValue(out));
      n.features.controlDepth = depth;
      const OpCost cost = evaluateCost(n.kind, n.inputs, n.outputs);
      n.features.opClass = cost.known ? cost.opClass
                           : (node->kind() == c10::prim::If || node->kind() == c10::prim::Loop)
                               ? "control"
                               : "other";
      n.features.flops = cost.flops;
      n.features.bytesRead = cost.bytesRead;
      n.features.bytesWritten = cost.bytesWritten;
      n.features.savedBytes = cost.savedBytes;
      const NodeId id = g_.addNode(std::move(n));
      nodeIds_[node] = id;
      addEdgesInto(id, node);

      if (node->kind() == c10::prim::If || node->kind() == c10::prim::Loop) {
        const bool isIf = node->kind() == c10::prim::If;
        for (size_t b = 0; b < node->blocks().size(); ++b) {
          const Block* inner = node->blocks()[b];
          GraphRegion r;
          r.kind = isIf ? (b == 0 ? RegionKind::IfThen : RegionKind::IfElse) : RegionKind::Loop;
          r.parent = g_.node(id).region;
          r.owner = id;
          r.label = g_.node(id).modulePath;
          if (!isIf)
            r.tripCount = staticTripCount(node);
          const RegionId rid = g_.addRegion(r);
          blockRegions_[inner] = rid;
          controlBase_[rid.value()] = g_.node(id).modulePath;
          // Block parameters: a loop's counter comes from the loop, carried values from its inputs.
          for (size_t p = 0; p < inner->inputs().size(); ++p) {
            if (!isIf && p > 0 && p + 1 < node->inputs().size()) {
              producers_[inner->inputs()[p]] = producers_[node->inputs()[p + 1]];
            } else {
              producers_[inner->inputs()[p]] = {Producer{id, 0}};
            }
          }
          walk(inner, rid, depth + 1);
          // What a block returns flows into the If/Loop node.
          for (size_t o = 0; o < inner->outputs().size(); ++o) {
            for (const Producer& p : producers_[inner->outputs()[o]]) {
              g_.addEdge(p.node, id, p.output, static_cast<int>(node->inputs().size() + o));
            }
          }
        }
      }
      for (size_t o = 0; o < node->outputs().size(); ++o) {
        producers_[node->outputs()[o]] = {Producer{id, static_cast<int>(o)}};
      }
    }
  }

  // A loop whose trip count is a constant and whose condition is always true.
  static std::optional<int64_t> staticTripCount(const Node* loop) {
    auto max = torch::jit::toIValue(loop->inputs()[0]);
    auto cond = torch::jit::toIValue(loop->inputs()[1]);
    auto bodyCond = torch::jit::toIValue(loop->blocks()[0]->outputs()[0]);
    if (max && max->isInt() && cond && cond->isBool() && cond->toBool() && bodyCond &&
        bodyCond->isBool() && bodyCond->toBool()) {
      return max->toInt();
    }
    return std::nullopt;
  }

  Graph& g_;
  std::unordered_map<const Node*, NodeId>& nodeIds_;
  std::unordered_map<const Block*, RegionId>& blockRegions_;
  std::string method_;
  std::unordered_map<const Value*, std::vector<Producer>> producers_;
  std::map<std::pair<int32_t, std::string>, RegionId> moduleRegions_;
  std::map<int32_t, std::string> controlBase_;  // control region -> its owner's module path
};

}  // namespace

SyMuGen::SyMuGen(torch::jit::Module module, std::string name, std::string method)
    : module_(std::move(module)), method_(std::move(method)) {
  const std::shared_ptr<torch::jit::Graph> compiled = module_.get_method(method_).graph();
  ir_ = compiled->copy();
  torch::jit::Inline(*ir_);
  detail::nameModuleCalls(*compiled, *ir_);
  graph_.name = name.empty() ? module_.type()->name()->name() : std::move(name);
  StaticBuilder(graph_, nodeIds_, blockRegions_, method_).build(*ir_);
}

SyMuGen::~SyMuGen() = default;

Graph SyMuGen::captureModuleTree(const torch::nn::Module& module, const std::string& name) {
  Graph g;
  g.name = name.empty() ? module.name() : name;
  GraphRegion root;
  root.kind = RegionKind::Method;
  root.label = "modules";
  const RegionId rootId = g.addRegion(root);
  std::map<std::string, std::pair<NodeId, RegionId>> byPath;  // path -> node, region of children
  auto add = [&](const std::string& path, const torch::nn::Module& m) {
    const auto dot = path.rfind('.');
    const std::string parentPath = dot == std::string::npos ? std::string() : path.substr(0, dot);
    RegionId parentRegion = rootId;
    NodeId parentNode;
    if (!path.empty()) {
      const auto& parent = byPath.at(parentPath);
      parentNode = parent.first;
      parentRegion = parent.second;
    }
    GraphNode n;
    n.kind = m.name();
    n.modulePath = path;
    n.region = parentRegion;
    n.features.opClass = "module";
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      ValueInfo v;
      v.type = "Tensor";
      v.shape = p.value().sizes().vec();
      v.dtype = dtypeName(p.value().scalar_type());
      n.outputs.push_back(std::move(v));
    }
    const NodeId id = g.addNode(std::move(n));
    RegionId children = rootId;
    if (!path.empty()) {
      GraphRegion r;
      r.kind = RegionKind::Module;
      r.parent = parentRegion;
      r.label = path;
      children = g.addRegion(r);
      g.addEdge(parentNode, id);
    }
    byPath[path] = {id, children};
  };
  // The root by reference: it need not live in a shared_ptr (named_modules would require one).
  add("", module);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    add(item.key(), *item.value());
  }
  return g;
}

std::optional<std::string> SyMuGen::unrunnable() const {
  // Nodes TorchScript's interpreter runs as instructions of its own, not as operators.
  static const std::map<std::string, std::string> kinds{{"prim::tolist", "Tensor.tolist()"},
                                                        {"prim::isinstance", "isinstance()"}};
  std::function<std::optional<std::string>(const torch::jit::Block*)> find =
      [&](const torch::jit::Block* block) -> std::optional<std::string> {
    for (const torch::jit::Node* n : block->nodes()) {
      if (const auto it = kinds.find(n->kind().toQualString()); it != kinds.end())
        return it->first + " (" + it->second + ")";
      for (const torch::jit::Block* inner : n->blocks()) {
        if (auto found = find(inner))
          return found;
      }
    }
    return std::nullopt;
  };
  return find(ir_->block());
}

}  // namespace symtune
