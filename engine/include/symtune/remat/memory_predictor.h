#pragma once
// The step's peak memory, predicted before the step runs (docs/remat.md, "The predictor").
//
// Note [Memory predictor]
// What a training step holds at its peak is mostly what its forward saves for the backward, and
// that grows with the batch's shapes and branches: a longer sequence, more tree levels, more
// images through the second stage. SyMuGen's cost templates name, for one forward on the batch's
// inputs, the operands each op saves for its backward; the counted forward adds up the storages
// they lie in, each once (a tensor two ops save counts once), the parameters left out, with what
// the templates say the ops allocate for themselves (ForwardCost::savedBytes, over the ops that
// ran — the branches taken, the trips made; Note [Counting a run's saved bytes]). That knows
// nothing of the allocator's rounding or the backward's own temporaries: the predictor does not
// take it at its word, but learns from the measured history how a model's peaks follow it. It fits
// peak ≈ a + b · saved by least squares over the steps it has seen (the last `window` of them),
// which carries a model's constant part (gradients of parameters a step allocates, the loss's
// buffers) in `a` and the template's over- or under-counting in `b`. With one step seen, or all
// steps at one size, it scales that step's peak by the saved bytes (b = peak / saved, a = 0). A
// fit whose slope comes out negative (noise over too narrow a range) falls back to that ratio;
// one whose intercept comes out negative (steps over a narrow range of sizes, extrapolated to a
// plan that keeps a fifth of them: Transformer-XL's first planned step was predicted at -26 MB)
// goes through the origin instead, peak ≈ b · saved fitted without an intercept (a step's
// constant part — the parameters' gradients, the loss's buffers — is never below nothing).
//
// Under a remat plan a step keeps less, but a recomputed block's activations live again while
// its backward runs: how much of them adds to the peak depends on what else is alive then (on
// Transformer-XL little, the vocabulary's logits and their gradient being gone by then). So the
// predictor takes a second term, the largest recomputed block's saved bytes r, and fits
// peak ≈ a + b · kept + c · r by least squares once its steps tell the terms apart (three or more
// steps not on one plane through them, b and c not negative); until then c = 0 and the line
// above holds on the kept bytes.

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace symtune::remat {

class MemoryPredictor {
 public:
  explicit MemoryPredictor(size_t window = 64);

  // A measured step: the bytes its forward kept for backward by the templates, its peak above
  // what was live when it began, and the largest recomputed block's saved bytes (0: none).
  void observe(double savedBytes, double peakBytes, double recomputedBytes = 0);
  // The predicted peak of a step that keeps `savedBytes` (and recomputes a block of at most
  // `recomputedBytes`); nullopt before any step.
  std::optional<double> predict(double savedBytes, double recomputedBytes = 0) const;
  // What predict() follows: peak = intercept + slope * saved + recomputedSlope * recomputed.
  struct Fit {
    double intercept = 0, slope = 0, recomputedSlope = 0;
  };
  std::optional<Fit> fit() const;
  size_t observations() const { return seen_.size(); }
  // The steps observe() was given (the window's, oldest first), as {saved, peak, recomputed}:
  // observing them again in order gives the same fit (a resumed run's).
  std::vector<std::array<double, 3>> observed() const;

 private:
  size_t window_;
  struct Seen {
    double saved, peak, recomputed;
  };
  std::deque<Seen> seen_;  // oldest first
};

}  // namespace symtune::remat
