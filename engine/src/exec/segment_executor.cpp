#include "symtune/exec/segment_executor.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <c10/util/StringUtil.h>

namespace symtune {

SegmentExecutor::SegmentExecutor(torch::jit::Module module, std::string graphName)
    : inner_(module), gen_(module, std::move(graphName)) {
}

ForwardResult SegmentExecutor::run(const std::vector<torch::jit::IValue>& inputs,
                                   const ForwardRequest& request) {
  ForwardOptions options;
  options.plan = &plan_;
  options.record = request.record;
  // Under a plan that recomputes a loop trip by trip, or a run the binder's sites refuse, the op
  // sites run as written (setBinder, refusedUnits).
  const auto named = [&](const auto& units) {
    return std::any_of(units.begin(), units.end(),
                       [&](const std::string& u) { return plan_.recompute.count(u) > 0; });
  };
  const bool unbound = binder_ != nullptr && !plan_.empty() && named(refusedUnits());
  binding::Binder* binder = unbound ? nullptr : binder_.get();
  options.binder = binder;
  if (binder != nullptr) {
    // Note [Regions split by a recomputed unit]
    const std::vector<std::string> segmentBlocks = segments();
    std::set<std::string> blocks;
    bool runsOrLoops = false;
    for (const auto& unit : plan_.recompute) {
      const auto first = SegmentPlan::splitFirstCalls(unit);
      const std::string& block = first ? first->first : unit;
      if (std::find(segmentBlocks.begin(), segmentBlocks.end(), block) != segmentBlocks.end())
        blocks.insert(block);
      else
        runsOrLoops = true;
    }
    binder->setRecomputed(std::move(blocks), runsOrLoops);
  }
  std::optional<std::vector<torch::jit::IValue>> bound;
  if (binder != nullptr) {
    bound = binder->bindInputs(inputs, [this] {
      binding::ModelReplay model;
      model.forward = [this](const std::vector<torch::jit::IValue>& in) {
        return forwardOutput(gen_.forward(in, ForwardOptions{}).output, output_);
      };
      model.parameters = inner_.parameters();
      for (const auto& b : inner_.scriptModule()->buffers())
        model.buffers.push_back(b);
      return model;
    });
  }
  EvaluatorRun run = gen_.forward(bound ? *bound : inputs, options);
  lastRecomputed_ = run.recomputed;
  ForwardResult result;
  result.returned = std::move(run.output);
  result.output = forwardOutput(result.returned, output_);
  result.owners = std::move(run.owners);
  result.recomputed = run.recomputed;
  result.branches = std::move(run.branches);
  return result;
}

void SegmentExecutor::setPlan(SegmentPlan plan) {
  std::vector<std::string> known = segments();
  const std::vector<std::string>& loops = gen_.loopSpans();
  known.insert(known.end(), loops.begin(), loops.end());
  const std::vector<std::string>& runs = gen_.opRuns();
  const std::vector<std::string> blocks = segments();
  std::set<std::string> firstOf;
  for (const auto& block : plan.recompute) {
    if (const auto first = SegmentPlan::splitFirstCalls(block)) {
      TORCH_CHECK(std::find(blocks.begin(), blocks.end(), first->first) != blocks.end(),
                  "SegmentPlan: \"", block, "\" names the first calls of \"", first->first,
                  "\", which is not a top-level block of the model (those are ",
                  c10::Join(", ", blocks), ")");
      TORCH_CHECK(plan.recompute.count(first->first) == 0, "SegmentPlan: \"", block, "\" and \"",
                  first->first,
                  "\" both: a block is recomputed on every call or on "
                  "its first calls");
      TORCH_CHECK(firstOf.insert(first->first).second, "SegmentPlan: the first calls of \"",
                  first->first, "\" named twice");
      continue;
    }
    TORCH_CHECK(std::find(known.begin(), known.end(), block) != known.end() ||
                    std::find(runs.begin(), runs.end(), block) != runs.end(),
                "SegmentPlan: \"", block,
                "\" is not a segment of the model (its top-level blocks and loops are ",
                c10::Join(", ", known), ", and it has ", runs.size(), " runs of ops)");
  }
  plan_ = std::move(plan);
}

const std::set<std::string>& SegmentExecutor::refusedUnits() {
  if (binder_ == nullptr) {
    refused_.clear();
    return refused_;
  }
  if (refusedFor_ == binder_->nodesMet())
    return refused_;
  refusedFor_ = binder_->nodesMet();
  refused_.clear();
  const binding::Binder::RecomputeLimits limits = binder_->recomputeLimits();
  const std::map<std::string, std::vector<NodeId>> nodes = gen_.unitNodes();
  const Graph& graph = gen_.staticGraph();
  std::vector<std::string> units = gen_.loopSpans();
  const std::vector<std::string>& runs = gen_.opRuns();
  units.insert(units.end(), runs.begin(), runs.end());
  for (const auto& run : units) {
    const auto found = nodes.find(run);
    if (found == nodes.end())
      continue;  // no node: nothing to run again
    std::set<int32_t> inside;
    bool refused = false;
    for (const NodeId id : found->second) {
      inside.insert(id.value());
      // An op the binder has not met may be a site of several nodes (prim nodes it never binds).
      const bool op = graph.node(id).kind.rfind("aten::", 0) == 0;
      refused = refused || limits.never.count(id.value()) != 0 ||
                (op && limits.met.count(id.value()) == 0);
    }
    for (size_t i = 0; !refused && i < limits.whole.size(); ++i) {
      const auto& site = limits.whole[i];
      const auto in = std::count_if(site.begin(), site.end(),
                                    [&](int32_t id) { return inside.count(id) != 0; });
      refused = in != 0 && static_cast<size_t>(in) != site.size();
    }
    if (refused)
      refused_.insert(run);
  }
  return refused_;
}

// Note [Regions split by a recomputed unit]
// A cell region (symtune/binding/op_site.h) bound to a fused candidate decides at its first node,
// notes the values its nodes read, leaves undefined tensors for its nodes' results and computes
// its result at its last node. A top-level block the plan recomputes that holds part of a region
// — a batch norm and its ReLU at the end of one block, the convolution reading them at the start
// of the next (kBatchNormReluConv between early exit's blocks) — would checkpoint an undefined
// tensor as its output, and the recomputation of the part holding the last node would compute
// from values noted in the forward, outside the checkpoint's autograd graph and with the
// forward's momentum for the batch norm's running statistics. So the executor tells the binder
// which blocks the plan recomputes, and a region those split runs as written (Binder::
// setRecomputed; its nodes' own sites still bound); the rest of the step binds as usual. Runs of
// ops and loops that split a site refuse the whole step (refusedUnits) — but a batch norm, ReLU
// and convolution region would split most plans of runs (a run of cheap ops ends before its
// convolution), so under a plan with runs or loops those regions run as written instead, split
// or not. The lean block's memory under a plan is left to a planner that knows it (not yet).

SegmentPlan SegmentExecutor::recomputeAll() const {
  SegmentPlan plan;
  for (auto& block : segments())
    plan.recompute.insert(std::move(block));
  return plan;
}

SegmentPlan SegmentExecutor::recomputeCheapOps() {
  const std::vector<std::string>& runs = gen_.opRuns();
  SegmentPlan plan;
  for (const auto& unit : gen_.recomputableUnits()) {
    if (std::find(runs.begin(), runs.end(), unit.parent) != runs.end())
      plan.recompute.insert(unit.name);
  }
  return plan;
}

}  // namespace symtune
