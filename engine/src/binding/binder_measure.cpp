// Binder::measure: one (site, bucket) measured on the step's own values (Note [Lazy binding] in
// symtune/binding/binder.h), every applicable candidate replayed, compared and timed.

#include "symtune/binding/binder.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "measurement.h"
#include "symtune/telemetry/allocation_limit.h"
#include "symtune/telemetry/node_context.h"

namespace symtune::binding {

namespace {

// The most trips a measurement of a region in a loop replays.
constexpr int64_t kLoopReplayTrips = 16;

using detail::Clock;
using detail::Replay;
using detail::synchronize;

}  // namespace

Binding Binder::measure(SiteState& s, const std::string& bucket, const torch::jit::Stack& stack,
                        int64_t trips) {
  // Measuring is not the step's work: a memory budget the step is held to (docs/remat.md, "With
  // the binder") would count the replays against it and refuse a candidate that ran out for good.
  const ScopedAllocationLimitLift unbudgeted;
  const OpSite& site = s.site;
  const size_t n = siteArity(site);
  torch::jit::Stack inputs(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
  // Leaves: the real values, detached, so the replay's autograd graph is its own.
  std::vector<at::Tensor> leaves;
  std::vector<size_t> leafSlot;
  bool cuda = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isTensor() || !inputs[i].toTensor().defined())
      continue;
    const at::Tensor& t = inputs[i].toTensor();
    cuda = cuda || t.is_cuda();
    if (t.requires_grad() && at::GradMode::is_enabled()) {
      leaves.push_back(t.detach().requires_grad_(true));
      leafSlot.push_back(i);
      inputs[i] = leaves.back();
    }
  }
  // The executions one step has, as the inputs each changes: every trip of the loop (a select
  // cannot go past its tensor's size: ATen would stop the model there); each slice of a slice
  // group (the group's ranges, on the one tensor).
  std::vector<std::vector<std::pair<size_t, c10::IValue>>> executions(1);
  if (site.loop != nullptr && site.cell != nullptr) {
    // A region in a loop (a recurrent projection): a loop's worth of trips on the same inputs, up
    // to kLoopReplayTrips, so that what a candidate does across trips is measured too.
    executions.assign(static_cast<size_t>(std::clamp<int64_t>(trips, 1, kLoopReplayTrips)), {});
  } else if (site.loop != nullptr) {
    int64_t count = std::max<int64_t>(trips, 0);
    if (site.pattern == kLoopIndexedSelect) {
      const at::Tensor& self = inputs[0].toTensor();
      const int64_t dim = inputs[1].toInt();
      if (self.dim() > 0 && dim >= -self.dim() && dim < self.dim())
        count = std::min(count, self.size(dim));
    }
    executions.assign(static_cast<size_t>(count), {});
    for (int64_t k = 0; k < count; ++k)
      executions[static_cast<size_t>(k)].emplace_back(site.counterInput, c10::IValue(k));
  } else if (site.group != nullptr) {
    executions.clear();
    for (const auto& [start, end] : site.group->ranges())
      executions.push_back({{2, c10::IValue(start)}, {3, c10::IValue(end)}});
  }

  CurrentNodeScope unattributed{NodeId()};
  const detail::KeptRandomState random(inputs);
  std::vector<at::Tensor> gradOutputs;  // fixed for every candidate, made on the first replay

  // `onDraws`: the candidate's onOwnDraws in place of its run. Every replay starts from the same
  // random state, so a dropout draws the same mask in each.
  const auto replayWith = [&](const Candidate& c, bool timed, Replay& out, bool onDraws) {
    random.restore();
    LoopFrames frames;
    if (site.loop != nullptr)
      frames.enter(site.loop, trips);
    // A slice group of its own: the replay splits its leaf afresh and leaves the model's be.
    OpSite own = site;
    if (site.group != nullptr) {
      own.group = std::make_shared<SliceGroup>();
      own.group->members = site.group->members;
      own.group->setRanges(site.group->ranges());
    }
    // What the op updates in place (running statistics): the replay's own copy.
    torch::jit::Stack given = inputs;
    for (size_t i : site.updated) {
      if (given[i].isTensor() && given[i].toTensor().defined())
        given[i] = given[i].toTensor().clone();
    }
    std::vector<at::Tensor> outputs;
    synchronize(cuda && timed);
    const int64_t live0 = detail::liveCpuBytes(cuda);
    const auto t0 = Clock::now();
    for (const auto& changes : executions) {
      torch::jit::Stack st = given;
      for (const auto& [slot, value] : changes)
        st[slot] = value;
      if (onDraws)
        c.onOwnDraws(own, s.op, st);
      else
        c.run(own, s.op, st, frames);
      for (const auto& v : st) {
        if (v.isTensor())
          outputs.push_back(v.toTensor());
      }
    }
    detail::finishReplay(std::move(outputs), leaves, gradOutputs, cuda, timed, t0, live0, out);
  };
  const detail::ReplayWith replay = [&](const Candidate& c, bool timed, Replay& out) {
    replayWith(c, timed, out, false);
  };
  const detail::ReplayWith onOwnDraws = [&](const Candidate& c, bool timed, Replay& out) {
    replayWith(c, timed, out, true);
  };

  Binding b = detail::siteBinding(site, bucket);
  // A candidate that would run the ops as written on these inputs (a batch norm kernel's in
  // evaluation mode) is refused: timed, it is the reference against itself, and won by noise.
  const auto asWritten = [&](const Candidate& c) { return c.runsAsWritten(site, inputs); };
  detail::Compared compared =
      detail::compareCandidates(s.candidates, replay, options_.repetitions, options_.margin,
                                site.name, &onOwnDraws, asWritten);
  random.restore();
  b.winner = std::move(compared.winner);
  b.candidates = std::move(compared.candidates);
  return b;
}

}  // namespace symtune::binding
