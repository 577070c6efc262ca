#include "symtune/gradient_monitor.h"

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
  // Hooks capture a slot index; stats_ is never resized after this point (Note [Gradient hooks]).
  for (size_t slot = 0; slot < params_.size(); ++slot) {
    hookIds_.push_back(params_[slot].register_hook([this, slot](const torch::Tensor& grad) {
      ParameterStats& s = stats_[slot];
      const torch::Tensor st = kernels::gradStats(grad.detach()).cpu();
      const double* v = st.const_data_ptr<double>();
      const int64_t nonFinite = static_cast<int64_t>(v[kernels::kNanCount] + v[kernels::kInfCount]);
      const int64_t finite = grad.numel() - nonFinite;
      s.hasGradient = true;
      s.norm = std::sqrt(v[kernels::kSumSquares]);
      s.meanAbs = finite > 0 ? v[kernels::kSumAbs] / static_cast<double>(finite) : 0.0;
      s.maxAbs = v[kernels::kMaxAbs];
      s.nanCount = static_cast<int64_t>(v[kernels::kNanCount]);
      s.infCount = static_cast<int64_t>(v[kernels::kInfCount]);
    }));
  }
}

GradientMonitor::~GradientMonitor() {
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].remove_hook(hookIds_[i]);
}

void GradientMonitor::beginStep() {
  for (auto& s : stats_) {
    ParameterStats fresh;
    fresh.name = std::move(s.name);
    fresh.numel = s.numel;
    s = std::move(fresh);
  }
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
  for (const auto& s : stats_)
    sum += s.norm * s.norm;
  return std::sqrt(sum);
}

int64_t GradientMonitor::nanCount() const {
  int64_t n = 0;
  for (const auto& s : stats_)
    n += s.nanCount;
  return n;
}

}  // namespace symtune
