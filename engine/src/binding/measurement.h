#pragma once
// What the binder's measurements share (Note [Lazy binding] in symtune/binding/binder.h): timing
// a replay of a site with each candidate, comparing each with the reference, and choosing.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "symtune/binding/candidate.h"
#include "symtune/core/binding_table.h"

namespace symtune::binding::detail {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v);
// A binding of `site` in `bucket` against the ATen reference, its winner and candidates to fill.
Binding siteBinding(const OpSite& site, const std::string& bucket);

// Waits for the GPU when `cuda` (around timed regions).
void synchronize(bool cuda);

// The random generators a replay draws from — the CPU's and, for each CUDA device an input is on,
// that device's — kept when made and put back by restore(): every replay starts from the same
// state (a dropout draws the same mask in each), and the run draws on after the measurement as
// if it had not happened.
class KeptRandomState {
 public:
  explicit KeptRandomState(const std::vector<c10::IValue>& inputs);
  void restore() const;

 private:
  std::vector<std::pair<at::Generator, at::Tensor>> states_;
};
// The largest |a - b| over the largest |b|: 0 when they agree exactly; infinity when the lists
// differ in length, shape or definedness.
double scaledError(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want);
std::string firstLine(const std::string& text);

// What one candidate produced on a replayed site.
struct Replay {
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> grads;  // of the leaves that require grad
  double forward = 0, backward = 0;
  // CPU bytes live after the forward that were not before it (liveCpuBytes); -1: not counted.
  int64_t keptBytes = -1;
};

// Why a candidate whose replay `got` differs from the reference's `want` by `error` (more than
// `tolerance`) is refused: by how much, and where — outputs or gradients, in how many values.
std::string disagreement(const Replay& got, const Replay& want, double error, double tolerance);

// The live CPU bytes by the allocation counter; -1 on a GPU (`cuda`) or without the counter.
int64_t liveCpuBytes(bool cuda);

// The backward half of a replay: differentiates those of `outputs` that require grad with
// respect to `leaves` against fixed random output gradients (made on the first call, into
// `gradOutputs`, the same for every candidate), and fills `out` (`forwardStart`: when the
// replay's forward began, and `liveAtStart` liveCpuBytes then; the forward ended on entry).
void finishReplay(std::vector<at::Tensor> outputs, const std::vector<at::Tensor>& leaves,
                  std::vector<at::Tensor>& gradOutputs, bool cuda, bool timed,
                  Clock::time_point forwardStart, int64_t liveAtStart, Replay& out);

// One replay of the site with `candidate` (timed or not) into `out`.
using ReplayWith = std::function<void(const Candidate& candidate, bool timed, Replay& out)>;

// Replays the site with every candidate (the reference first): once each untimed, comparing
// with the reference (refusing one that differs by more than its tolerance or throws), then
// `repetitions` timed runs taking turns. A candidate with draws of its own (Candidate::ownDraws)
// is compared with `onOwnDraws`'s replay of it instead (refused when there is none). Returns the
// candidates' medians, what each kept after its forward, and the winner: fastestAgreeing's. `site`
// names it in the error when the reference itself fails.
struct Compared {
  std::vector<CandidateMeasurement> candidates;
  std::string winner;
};
Compared compareCandidates(const std::vector<const Candidate*>& candidates,
                           const ReplayWith& replay, int repetitions, double margin,
                           const std::string& site, const ReplayWith* onOwnDraws = nullptr,
                           const std::function<bool(const Candidate&)>& runsAsWritten = {});

// The index in `candidates` (the reference first) of the fastest agreeing one when it beats the
// reference by `margin`; else 0.
size_t fastestAgreeing(const std::vector<CandidateMeasurement>& candidates, double margin);

// Note [Memory slack]: sets the winner of every measured binding of `bindings` to its
// fastestAgreeing one, or to a candidate that keeps less where `slack` of their time allows.
// Returns how many winners it changed.
int spendMemorySlack(const std::vector<Binding*>& bindings, double margin, double slack);

}  // namespace symtune::binding::detail
