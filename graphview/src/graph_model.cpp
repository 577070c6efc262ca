#include "symtune/graphview/graph_model.h"

#include <algorithm>
#include <cmath>

namespace symtune::graphview {

GraphModel::GraphModel(GraphSide side, QObject* parent) : QObject(parent) {
  options_.side = side;
}

GraphModel::~GraphModel() = default;

void GraphModel::setGraph(std::shared_ptr<const Graph> graph) {
  graph_ = std::move(graph);
  members_.clear();
  figures_.clear();
  squaredNormByModule_.clear();
  squaredNormByParameter_.clear();
  statsStep_ = -1;
  options_.collapsed.clear();
  if (graph_) {
    for (const auto& n : graph_->nodes()) {
      if (n.side != options_.side)
        continue;
      std::vector<RegionId> groups;
      for (RegionId r = groupOf(*graph_, n); r.valid(); r = graph_->region(r).parent) {
        if (graph_->region(r).parent.valid())  // the root is no group
          groups.push_back(r);
      }
      std::reverse(groups.begin(), groups.end());
      members_.emplace(n.id, std::move(groups));
    }
    options_.collapsed = graphview::collapseToFit(*graph_, options_.side, kOpenDrawn);
  }
  Q_EMIT graphChanged();
  Q_EMIT viewChanged();
}

void GraphModel::clear() {
  setGraph(nullptr);
}

ViewDot GraphModel::view() const {
  return graph_ ? buildViewDot(*graph_, options_) : ViewDot{};
}

void GraphModel::setCollapsed(RegionId group, bool collapsed) {
  if (!graph_ || isCollapsed(group) == collapsed)
    return;
  if (collapsed)
    options_.collapsed.insert(group);
  else
    options_.collapsed.erase(group);
  Q_EMIT viewChanged();
}

int GraphModel::expandAll(int maxDrawn) {
  if (!graph_)
    return 0;
  auto collapsed = graphview::collapseToFit(*graph_, options_.side, maxDrawn);
  const int left = static_cast<int>(collapsed.size());
  if (collapsed != options_.collapsed) {
    options_.collapsed = std::move(collapsed);
    Q_EMIT viewChanged();
  }
  return left;
}

void GraphModel::collapseToFit(int maxDrawn) {
  if (!graph_)
    return;
  auto collapsed = graphview::collapseToFit(*graph_, options_.side, maxDrawn);
  if (collapsed == options_.collapsed)
    return;
  options_.collapsed = std::move(collapsed);
  Q_EMIT viewChanged();
}

std::vector<RegionId> GraphModel::groupsOf(NodeId node) const {
  auto it = members_.find(node);
  return it != members_.end() ? it->second : std::vector<RegionId>{};
}

bool GraphModel::reveal(NodeId node) {
  bool changed = false;
  for (RegionId g : groupsOf(node))
    changed |= options_.collapsed.erase(g) != 0;
  if (changed)
    Q_EMIT viewChanged();
  return changed;
}

void GraphModel::addNodeStats(const attach::NodesMessage& nodes) {
  if (!graph_)
    return;
  figures_.clear();
  // Note [Backward figures]: the engine attributes backward time and memory to the forward op
  // that created the autograd nodes; the backward view spreads them evenly over those nodes.
  for (const attach::NodeFigures& n : nodes.nodes) {
    const NodeId id(n.node);
    if (!id.valid() || id.value() >= static_cast<int32_t>(graph_->nodes().size()))
      continue;  // a node of another graph: ignored
    const double forwardS = n.forwardSeconds, backwardS = n.backwardSeconds;
    const double forwardB = static_cast<double>(n.bytesAllocated);
    const double backwardB = static_cast<double>(n.backwardBytesAllocated);
    const GraphNode& node = graph_->node(id);
    std::optional<double> device, backwardDevice, kernels, backwardKernels;
    if (n.forwardDeviceSeconds || n.backwardDeviceSeconds) {
      backwardDevice = n.backwardDeviceSeconds.value_or(0);
      device = n.forwardDeviceSeconds.value_or(0) + *backwardDevice;
    }
    if (n.kernels) {
      kernels = static_cast<double>(*n.kernels);
      backwardKernels = static_cast<double>(n.backwardKernels.value_or(0));
    }
    if (options_.side == node.side) {
      figures_[id] = {forwardS + backwardS, forwardB + backwardB, device, kernels};
    } else if (options_.side == GraphSide::Backward && !node.backward.empty()) {
      const double share = 1.0 / static_cast<double>(node.backward.size());
      auto shared = [share](const std::optional<double>& v) {
        return v ? std::optional<double>(*v * share) : std::nullopt;
      };
      for (NodeId b : node.backward) {
        figures_[b] = {backwardS * share, backwardB * share, shared(backwardDevice),
                       shared(backwardKernels)};
      }
    }
  }
  squaredNormByModule_.clear();
  squaredNormByParameter_.clear();
  for (const attach::ParameterNorm& p : nodes.parameters) {
    if (!std::isfinite(p.gradNorm))
      continue;
    const std::string& name = p.name;
    const double squared = std::pow(p.gradNorm, 2);
    squaredNormByParameter_[name] = squared;
    const auto dot = name.rfind('.');
    squaredNormByModule_[dot == std::string::npos ? std::string() : name.substr(0, dot)] += squared;
  }
  statsStep_ = nodes.step;
  Q_EMIT valuesChanged();
}

void GraphModel::setBindings(const BindingTable* table) {
  bindingSpeedup_.clear();
  if (table != nullptr) {
    for (const Binding& b : table->bindings) {
      // A predicted bucket has no times of its own: its site's measured buckets give the figure.
      const double speedup = b.winner == b.reference || b.predicted ? 1.0 : b.speedup();
      // A site of several nodes (a pair, a loop's reads and write) colours every one of them.
      std::vector<int32_t> nodes{b.node};
      nodes.insert(nodes.end(), b.nodes.begin(), b.nodes.end());
      for (int32_t node : nodes) {
        double& slot = bindingSpeedup_.emplace(NodeId(node), 1.0).first->second;
        slot = std::max(slot, speedup);
      }
    }
  }
  Q_EMIT valuesChanged();
}

void GraphModel::setRemat(const attach::RematMessage* plan) {
  rematState_.clear();
  if (plan != nullptr) {
    for (const attach::RematUnitState& unit : plan->units) {
      for (int32_t node : unit.nodes) {
        // A loop's nodes lie in its block too: recomputed when either is.
        double& slot = rematState_.emplace(NodeId(node), 0.0).first->second;
        slot = std::max(slot, unit.recomputed ? 1.0 : 0.0);
      }
    }
  }
  Q_EMIT valuesChanged();
}

void GraphModel::setPeakMemory(std::optional<double> bytes) {
  peakBytes_ = bytes;
}

std::optional<double> GraphModel::value(Overlay overlay, NodeId id) const {
  if (!graph_ || !id.valid())
    return std::nullopt;
  switch (overlay) {
    case Overlay::Latency:
    case Overlay::Memory:
    case Overlay::GpuTime:
    case Overlay::Kernels: {
      auto it = figures_.find(id);
      if (it == figures_.end())
        return std::nullopt;
      switch (overlay) {
        case Overlay::Latency:
          return it->second.seconds;
        case Overlay::Memory:
          return it->second.bytes;
        case Overlay::GpuTime:
          return it->second.deviceSeconds;
        default:
          return it->second.kernels;
      }
    }
    case Overlay::Flops:
      return graph_->node(id).features.flops;
    case Overlay::Binding: {
      const GraphNode& node = graph_->node(id);
      const NodeId site = node.side == GraphSide::Backward ? node.forward : id;
      auto it = bindingSpeedup_.find(site);
      if (it == bindingSpeedup_.end())
        return std::nullopt;
      return it->second;
    }
    case Overlay::Remat: {
      const GraphNode& node = graph_->node(id);
      auto it = rematState_.find(node.side == GraphSide::Backward ? node.forward : id);
      if (it == rematState_.end())
        return std::nullopt;
      return it->second;
    }
    case Overlay::GradNorm: {
      const std::string& path = graph_->node(id).modulePath;
      if (auto it = squaredNormByParameter_.find(path); it != squaredNormByParameter_.end())
        return std::sqrt(it->second);  // an AccumulateGrad node's module path is its parameter
      if (path.empty())
        return std::nullopt;  // the root module's ops: no one parameter is theirs
      if (auto it = squaredNormByModule_.find(path); it != squaredNormByModule_.end())
        return std::sqrt(it->second);
      return std::nullopt;
    }
    case Overlay::None:
      break;
  }
  return std::nullopt;
}

std::optional<double> GraphModel::groupValue(Overlay overlay, RegionId group) const {
  std::optional<double> total;
  for (const auto& [node, groups] : members_) {
    if (std::find(groups.begin(), groups.end(), group) == groups.end())
      continue;
    if (auto v = value(overlay, node)) {
      if (takesLargest(overlay))
        total = std::max(total.value_or(0.0), *v);
      else
        total = total.value_or(0.0) + *v;
    }
  }
  return total;
}

std::vector<NodeId> GraphModel::find(const QString& text) const {
  std::vector<NodeId> found;
  const QString needle = text.trimmed();
  if (!graph_ || needle.isEmpty())
    return found;
  for (const auto& n : graph_->nodes()) {
    if (n.side != options_.side)
      continue;
    if (QString::fromStdString(n.kind).contains(needle, Qt::CaseInsensitive) ||
        QString::fromStdString(n.modulePath).contains(needle, Qt::CaseInsensitive) ||
        QStringLiteral("n%1").arg(n.id.value()).compare(needle, Qt::CaseInsensitive) == 0)
      found.push_back(n.id);
  }
  return found;
}

}  // namespace symtune::graphview
