#pragma once
// The configuration space a step can run with (docs/control.md, "The configuration space"): each
// knob with the values it may take and what limits them. The trainer builds its run's space
// (Trainer::configSpace) and applies a configuration (Trainer::configure); the harness's grid,
// the controller and auto_tune search it.

#include <optional>
#include <string>
#include <vector>

namespace symtune::control {

// One knob: its values in increasing order, the one the run uses now, and what limits the values
// (one line; empty when nothing does beyond the knob's own range).
struct Knob {
  std::string name;
  std::vector<double> values;
  double current = 0;
  std::string constraint;
};

// How a step runs. Knob names: "microbatches", "threads", "remat_budget", "binding_explore".
struct Configuration {
  // The batch runs as this many micro-batches whose gradients add up to the batch's
  // (Note [Micro-batches] in trainer.h).
  int microbatches = 1;
  // LibTorch's intra-op threads (at::set_num_threads); 0: as the run began.
  int threads = 0;
  // The remat planner's budget as a share of the plain step's peak; nullopt: the session's.
  std::optional<double> rematBudget;
  // Whether DynaCompiler's binder measures the candidates of a (site, bucket) it meets unbound
  // (knob value 1) or binds by its table and cost model only (0; Binder::setExploring); nullopt:
  // as the run has it.
  std::optional<bool> bindingExplore;

  // "microbatches 2, threads 1, remat_budget 0.5" (and ", binding_explore 1" when set)
  std::string text() const;
  bool operator==(const Configuration& other) const {
    return microbatches == other.microbatches && threads == other.threads &&
           rematBudget == other.rematBudget && bindingExplore == other.bindingExplore;
  }
  bool operator!=(const Configuration& other) const { return !(*this == other); }
};

// The value `c` gives `knob`: the knob's current value when `c` leaves it as the session has it
// (threads 0, remat_budget or binding_explore unset).
double valueOf(const Configuration& c, const Knob& knob);
// Sets knob `name` of `c` to `v` (a name Configuration does not know changes nothing).
void setValue(Configuration& c, const std::string& name, double v);
// Whether two knob values are the same value.
inline bool sameValue(double a, double b) {
  return a - b <= 1e-9 && b - a <= 1e-9;
}

class ConfigSpace {
 public:
  ConfigSpace() = default;
  explicit ConfigSpace(std::vector<Knob> knobs) : knobs_(std::move(knobs)) {}

  const std::vector<Knob>& knobs() const { return knobs_; }
  const Knob* knob(const std::string& name) const;
  // Why `c` lies outside the space (a value its knob does not allow, a knob the run does not
  // have), one line; nullopt when it lies inside.
  std::optional<std::string> outside(const Configuration& c) const;
  // Every configuration of the space, the first knob's values varying slowest; knobs the space
  // lacks keep Configuration's defaults.
  std::vector<Configuration> grid() const;
  // The configuration the knobs are at now.
  Configuration current() const;

 private:
  std::vector<Knob> knobs_;
};

}  // namespace symtune::control
