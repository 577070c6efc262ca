#pragma once
// Per-parameter gradient statistics, collected by hooks as each gradient is computed (on the
// autograd engine's threads), and the update-to-weight ratio of the optimizer step. Part of
// MetaInfoBroker (docs/features.md); rules and the studio read it.
//
//   symtune::GradientMonitor monitor(named_parameters);
//   loss.backward();                 // hooks fill the statistics
//   monitor.beforeUpdate();          // on steps that want the update ratio
//   optimizer.step();
//   monitor.afterUpdate();
//   for (const auto& s : monitor.stats()) { ... s.norm, s.nanCount, s.updateRatio ... }
//
// Note [Gradient hooks]
// Each parameter has its own slot, written only by the hook of that parameter's gradient, so the
// hooks take no lock even when autograd runs them on several threads; a step's statistics are
// complete once backward() has returned (autograd joins its threads before returning). A hook only
// keeps a reference to its gradient; the first stats() call after backward computes the
// statistics of all of them in one symtune::grad_stats_multi call per device (one dispatch, one
// read-back), so call it before anything changes the gradients (MetaInfoBroker::afterBackward).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace symtune {

struct ParameterStats {
  std::string name;
  int64_t numel = 0;
  bool hasGradient = false;  // false: no gradient reached the parameter this step
  double norm = 0;           // L2 norm of the finite gradient elements
  double meanAbs = 0;        // mean |g| over the finite elements
  double maxAbs = 0;
  int64_t nanCount = 0, infCount = 0;
  std::optional<double> updateRatio;  // ||w_after - w_before|| / ||w_before||, when measured
};

class GradientMonitor {
 public:
  // Registers a gradient hook on every parameter that requires grad.
  explicit GradientMonitor(const std::vector<std::pair<std::string, torch::Tensor>>& parameters);
  ~GradientMonitor();
  GradientMonitor(const GradientMonitor&) = delete;
  GradientMonitor& operator=(const GradientMonitor&) = delete;

  // Hooks are on from construction; off, backward runs with no hook of ours.
  void setEnabled(bool on);
  bool enabled() const { return !hookIds_.empty(); }

  // Clears the statistics for a new step (call before backward).
  void beginStep();
  // The statistics are to be of each parameter's gradient as it stands (several backwards added
  // up: micro-batches), not of what its hook saw last.
  void readAccumulated();
  // Snapshot the weights so afterUpdate() can measure the update ratio (copies every parameter:
  // call it on sampled steps).
  void beforeUpdate();
  void afterUpdate();

  // The step's statistics (Note [Gradient hooks]).
  const std::vector<ParameterStats>& stats() const;
  // Over all parameters with a gradient: sqrt(sum of squared norms).
  double globalNorm() const;
  int64_t nanCount() const;

 private:
  std::vector<torch::Tensor> params_;
  mutable std::vector<ParameterStats> stats_;
  mutable std::vector<torch::Tensor> pending_;  // per slot: this step's gradient, not yet read
  std::vector<unsigned> hookIds_;
  std::vector<torch::Tensor> before_;
};

}  // namespace symtune
