#include "symtune/telemetry/gradient_monitor.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "symtune/kernels/grad_stats.h"

namespace symtune {

GradientMonitor::GradientMonitor(
    const std::vector<std::pair<std::string, torch::Tensor>>& parameters) {
  for (const auto& [name, p] : parameters) {
    if (!p.requires_grad())
      continue;
    params_.push_back(p);
    ParameterStats s;
    s.name = name;
    s.numel = p.numel();
    stats_.push_back(std::move(s));
  }
  pending_.resize(params_.size());
  setEnabled(true);
}

void GradientMonitor::setEnabled(bool on) {
  if (on == enabled() || params_.empty())
    return;
  if (!on) {
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].remove_hook(hookIds_[i]);
    hookIds_.clear();
    return;
  }
  // Hooks capture a slot index; stats_ is never resized after this point (Note [Gradient hooks]).
  for (size_t slot = 0; slot < params_.size(); ++slot) {
    hookIds_.push_back(params_[slot].register_hook([this, slot](const torch::Tensor& grad) {
      // A later micro-batch's gradient is added to the one the parameter holds (in place): held
      // here it would outlive its backward, a parameter's worth of memory in the steps that split
      // to save it. The parameter's own holds the sum (readAccumulated reads it too).
      const torch::Tensor& held = params_[slot].grad();
      pending_[slot] = pending_[slot].defined() && held.defined() ? held.detach() : grad.detach();
    }));
  }
}

void GradientMonitor::readAccumulated() {
  if (!enabled())
    return;
  for (size_t slot = 0; slot < params_.size(); ++slot) {
    if (params_[slot].grad().defined())
      pending_[slot] = params_[slot].grad().detach();
  }
}

const std::vector<ParameterStats>& GradientMonitor::stats() const {
  // Results grouped by device, each group read back with one copy.
  std::vector<std::pair<c10::Device, std::vector<size_t>>> groups;
  for (size_t slot = 0; slot < pending_.size(); ++slot) {
    if (!pending_[slot].defined())
      continue;
    const c10::Device device = pending_[slot].device();
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& g) { return g.first == device; });
    if (group == groups.end())
      group = groups.insert(groups.end(), {device, {}});
    group->second.push_back(slot);
  }
  for (const auto& [device, slots] : groups) {
    std::vector<torch::Tensor> grads;
    for (size_t slot : slots) {
      // A sparse gradient (an embedding's with sparse=True) by its stored values, coalesced: the
      // entries it does not store are zeros, which add nothing. The kernels take dense tensors;
      // handed the sparse one, every step of such a model failed ("Could not run
      // 'symtune::grad_stats_multi' with arguments from the 'SparseCPU' backend").
      const torch::Tensor& g = pending_[slot];
      grads.push_back(g.is_sparse() ? g.coalesce().values() : g);
    }
    const torch::Tensor all = kernels::gradStatsMulti(grads).to(torch::kCPU).contiguous();
    const double* row = all.const_data_ptr<double>();
    for (size_t i = 0; i < slots.size(); ++i, row += all.size(1)) {
      ParameterStats& s = stats_[slots[i]];
      const int64_t nonFinite =
          static_cast<int64_t>(row[kernels::kNanCount] + row[kernels::kInfCount]);
      const int64_t finite = s.numel - nonFinite;
      s.hasGradient = true;
      s.norm = std::sqrt(row[kernels::kSumSquares]);
      s.meanAbs = finite > 0 ? row[kernels::kSumAbs] / static_cast<double>(finite) : 0.0;
      s.maxAbs = row[kernels::kMaxAbs];
      s.nanCount = static_cast<int64_t>(row[kernels::kNanCount]);
      s.infCount = static_cast<int64_t>(row[kernels::kInfCount]);
      pending_[slots[i]] = torch::Tensor();
    }
  }
  return stats_;
}

GradientMonitor::~GradientMonitor() {
  setEnabled(false);
}

void GradientMonitor::beginStep() {
  for (auto& s : stats_) {
    ParameterStats fresh;
    fresh.name = std::move(s.name);
    fresh.numel = s.numel;
    s = std::move(fresh);
  }
  for (auto& p : pending_)
    p = torch::Tensor();
  before_.clear();
}

void GradientMonitor::beforeUpdate() {
  torch::NoGradGuard noGrad;
  before_.clear();
  for (const auto& p : params_)
    before_.push_back(p.detach().clone());
}

void GradientMonitor::afterUpdate() {
  if (before_.size() != params_.size())
    return;
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const double w = before_[i].norm().item<double>();
    const double dw = (params_[i].detach() - before_[i]).norm().item<double>();
    stats_[i].updateRatio = w > 0 ? std::optional<double>(dw / w) : std::nullopt;
  }
  before_.clear();
}

double GradientMonitor::globalNorm() const {
  double sum = 0;
  for (const auto& s : stats())
    sum += s.norm * s.norm;
  return std::sqrt(sum);
}

int64_t GradientMonitor::nanCount() const {
  int64_t n = 0;
  for (const auto& s : stats())
    n += s.nanCount;
  return n;
}

}  // namespace symtune
