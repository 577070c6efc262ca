// The binder's side of rows sites, loop-carried and loop-invariant (Note [Loop-carried rows] in
// symtune/binding/op_site.h): one decision per execution of the loop, made at the first node of
// the group that execution runs, and measured by replaying the reads and writes an earlier
// execution in the same bucket made.

#include <algorithm>

#include <ATen/ATen.h>

#include "measurement.h"
#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/telemetry/allocation_limit.h"
#include "symtune/telemetry/node_context.h"

namespace symtune::binding {

void Binder::runRows(SiteState& s, torch::jit::Stack& stack, LoopFrames& loops) {
  CarriedRows& group = *s.site.rows;
  const size_t count = s.site.node->inputs().size();
  c10::IValue& decision = loops.slot(group.loop, group.choiceKey());
  if (decision.isNone()) {
    // The group's first node in this execution of the loop runs on its first trip, where the
    // carried tensor is the loop's initial value.
    const at::Tensor& entry = stack[stack.size() - count].toTensor();
    decision = c10::IValue(chooseRows(s, entry, loops.maxTrips(group.loop)));
  }
  const int64_t choice = decision.toInt();
  if (choice < 0) {
    // Run as written, noted for the measurement of the next execution in this bucket.
    CarriedRows::Event event;
    event.node = s.site.node;
    event.index = stack[stack.size() - count + 2].toTensor();
    if (s.site.node == group.writer) {
      const at::Tensor& source = stack[stack.size() - count + 3].toTensor();
      event.source = source.detach();
      event.sourceGrad = source.requires_grad() && at::GradMode::is_enabled();
    }
    group.recorded.push_back(std::move(event));
    ++noted_;
    s.candidates.front()->run(s.site, s.op, stack, loops);
    return;
  }
  const Candidate* c = s.candidates.at(static_cast<size_t>(choice));
  if (c->name() != kAten)
    ++boundExecutions_;
  c->run(s.site, s.op, stack, loops);
}

int64_t Binder::chooseRows(SiteState& s, const at::Tensor& entry, int64_t trips) {
  CarriedRows& group = *s.site.rows;
  const torch::jit::Stack key{c10::IValue(entry)};
  // The rows written carry gradient even where the initial value needs none.
  const std::string bucket = gradBucketKey(key, 1, trips);
  auto& chosen = rowsChosen_[&group];
  if (auto it = chosen.find(bucket); it != chosen.end())
    return it->second;
  // A tensor the loop only reads gains nothing when no gradient flows to it (the tree's int64
  // child tables): its reads stay the ATen op, unmeasured.
  if (group.writer == nullptr && !(entry.requires_grad() && at::GradMode::is_enabled()))
    return chosen[bucket] = 0;
  const auto indexOf = [&s](const Candidate* c) -> int64_t {
    const auto at = std::find(s.candidates.begin(), s.candidates.end(), c);
    return at == s.candidates.end() ? 0 : at - s.candidates.begin();
  };
  const Candidate* winner = nullptr;
  if (const Binding* known = table_.find(s.site.name, bucket))
    winner = byName(s, known->winner);
  if (winner == nullptr && options_.predict)
    winner = predict(s, bucket);
  if (winner == nullptr) {
    if (!mayMeasure()) {
      winner = s.candidates.front();
    } else if (group.recordedBucket == bucket && !group.recorded.empty()) {
      Binding b = measureRows(s, bucket, trips);
      winner = byName(s, b.winner);
      put(std::move(b), s);
      ++measurements_;
    } else {
      // Nothing to measure with yet: this execution runs as written and is recorded.
      group.recordedBucket = bucket;
      group.recordedEntry = entry.detach().clone();
      group.entryGrad = entry.requires_grad() && at::GradMode::is_enabled();
      group.recorded.clear();
      return -1;
    }
  }
  group.recordedBucket.clear();
  group.recordedEntry = at::Tensor();
  group.recorded.clear();
  return chosen[bucket] = indexOf(winner);
}

Binding Binder::measureRows(SiteState& s, const std::string& bucket, int64_t trips) {
  // Measuring is not the step's work: a memory budget the step is held to (docs/remat.md, "With
  // the binder") would count the replays against it and refuse a candidate that ran out for good.
  const ScopedAllocationLimitLift unbudgeted;
  CarriedRows& group = *s.site.rows;
  const int64_t dim = group.dim;
  // Leaves: the loop's initial value (the read tensor) and the rows each write wrote, as they
  // were.
  at::Tensor entry = group.recordedEntry;
  std::vector<at::Tensor> leaves;
  if (group.entryGrad) {
    entry = entry.detach().requires_grad_(true);
    leaves.push_back(entry);
  }
  std::vector<at::Tensor> sources(group.recorded.size());
  for (size_t i = 0; i < group.recorded.size(); ++i) {
    const auto& e = group.recorded[i];
    if (e.node != group.writer)
      continue;
    sources[i] = e.source;
    if (e.sourceGrad) {
      sources[i] = e.source.detach().requires_grad_(true);
      leaves.push_back(sources[i]);
    }
  }
  const bool cuda = entry.is_cuda();

  CurrentNodeScope unattributed{NodeId()};
  std::vector<at::Tensor> gradOutputs;  // fixed for every candidate, made on the first replay
  const auto replay = [&](const Candidate& c, bool timed, detail::Replay& out) {
    LoopFrames frames;
    frames.enter(group.loop, trips);
    at::Tensor carried = entry;
    std::vector<at::Tensor> outputs;
    detail::synchronize(cuda && timed);
    const int64_t live0 = detail::liveCpuBytes(cuda);
    const auto t0 = detail::Clock::now();
    for (size_t i = 0; i < group.recorded.size(); ++i) {
      const auto& e = group.recorded[i];
      SiteState& member = *states_.at(e.node);
      torch::jit::Stack st{c10::IValue(carried), c10::IValue(dim), c10::IValue(e.index)};
      if (e.node == group.writer) {
        st.emplace_back(sources[i]);
        if (group.accumulate)
          st.emplace_back(int64_t{1});  // index_add's alpha
      }
      c.run(member.site, member.op, st, frames);
      if (e.node == group.writer)
        carried = st.back().toTensor();
      else
        outputs.push_back(st.back().toTensor());
    }
    if (group.writer != nullptr)
      outputs.push_back(carried);  // the loop's result
    frames.leave(group.loop);
    detail::finishReplay(std::move(outputs), leaves, gradOutputs, cuda, timed, t0, live0, out);
  };
  detail::Compared compared = detail::compareCandidates(s.candidates, replay, options_.repetitions,
                                                        options_.margin, s.site.name);
  Binding b = detail::siteBinding(s.site, bucket);
  b.winner = std::move(compared.winner);
  b.candidates = std::move(compared.candidates);
  return b;
}

}  // namespace symtune::binding
