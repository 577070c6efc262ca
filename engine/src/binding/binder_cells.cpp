// The binder's side of cell sites (Note [Cell sites] in symtune/binding/op_site.h: GRU cells,
// bias matmuls, attention, add + layer norm, bias + dropout + add, batch norm + ReLU +
// convolution): the regions
// found once per graph, one decision per execution of a region made at its first node, the
// region's inputs noted as its nodes are given them, and a new bucket measured at its last node
// on the values an execution as written noted.

#include <algorithm>
#include <iterator>

#include <ATen/ATen.h>

#include "../graph/ir_values.h"
#include "measurement.h"
#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"

namespace symtune::binding {

namespace {

void forEachNode(const torch::jit::Block* block,
                 const std::function<void(const torch::jit::Node*)>& f) {
  for (const torch::jit::Node* node : block->nodes()) {
    f(node);
    for (const torch::jit::Block* inner : node->blocks())
      forEachNode(inner, f);
  }
}

// The region's nodes one after the other by their ATen ops, on a stack of the region's inputs:
// the reference a cell's candidates are measured against. It leaves the result, then the value
// of `alsoOut` where the region has one.
torch::jit::Operation regionReference(const std::shared_ptr<CellRegion>& region) {
  std::vector<torch::jit::Operation> ops;
  for (const torch::jit::Node* node : region->nodes)
    ops.push_back(node->getOperation());
  return torch::jit::Operation([region, ops](torch::jit::Stack& stack) mutable {
    const size_t base = stack.size() - region->inputs.size();
    std::vector<c10::IValue> results(region->nodes.size());
    torch::jit::Stack st;
    for (size_t k = 0; k < region->nodes.size(); ++k) {
      const torch::jit::Node* node = region->nodes[k];
      st.clear();
      for (size_t i = 0; i < node->inputs().size(); ++i) {
        const int slot = region->slots[k][i];
        st.push_back(slot >= 0
                         ? stack[base + static_cast<size_t>(slot)]
                         : results[static_cast<size_t>(region->indexOf(node->input(i)->node()))]);
      }
      ops[k](st);
      results[k] = std::move(st.back());
    }
    stack.resize(base);
    stack.push_back(results.back());
    if (region->alsoOut != nullptr)
      stack.push_back(
          std::move(results[static_cast<size_t>(region->indexOf(region->alsoOut->node()))]));
  });
}

}  // namespace

void Binder::findCells(const torch::jit::Graph& graph) {
  if (!searched_.insert(&graph).second)
    return;
  // Masked GRU cells first: an unmasked match at a masked cell's blend would leave its where out;
  // then bias matmuls, outside cells; then attention; then residual adds and their norms; then
  // bias, dropout and residual adds; then, when the binder weighs memory, pairs of convolution
  // blocks (pass 7: each holds a lean block region); then batch norms, their ReLUs and the
  // convolutions after.
  std::vector<int> passes{0, 1, 2, 3, 4, 5, 6};
  if (options_.memorySlack > 0)
    passes.insert(passes.end() - 1, 7);
  for (const int pass : passes) {
    forEachNode(graph.block(), [&](const torch::jit::Node* node) {
      const c10::Symbol kind = pass == 0   ? c10::aten::where
                               : pass == 3 ? c10::aten::matmul
                               : pass == 4 ? c10::aten::layer_norm
                               : pass == 6 ? c10::aten::conv2d
                               : pass == 7 ? c10::aten::relu
                                           : c10::aten::add;
      if (node->kind() != kind || cellOf_.count(node) != 0)
        return;
      std::shared_ptr<CellRegion> region = pass < 2    ? findGruCell(node)
                                           : pass == 2 ? findBiasMatmul(node)
                                           : pass == 3 ? findAttention(node)
                                           : pass == 4 ? findAddLayerNorm(node)
                                           : pass == 5 ? findBiasDropoutAdd(node)
                                           : pass == 7 ? findConvBlockPair(node)
                                                       : findBatchNormReluConv(node);
      if (region == nullptr)
        return;
      for (const torch::jit::Node* member : region->nodes) {
        if (cellOf_.count(member) != 0)
          return;  // overlaps a region found before
        if (symtune::detail::enclosingWith(member) != nullptr)
          return;  // in a `with` block (Note [With blocks] in engine/src/graph/evaluator.h)
      }
      for (const torch::jit::Node* member : region->nodes)
        cellOf_.emplace(member, region);
    });
  }
}

Binder::CellState& Binder::cellState(const std::shared_ptr<CellRegion>& region, NodeId id) {
  CellState& cs = cells_[region.get()];
  if (cs.lead != nullptr)
    return cs;
  // Made when the first of its nodes is asked (its first node, which runs first), named after it.
  OpSite site;
  site.node = region->first();
  site.id = id;
  site.name = siteName(region->first(), id, graph_);
  // Its first node is a batch norm ReLU pair's site too, decided while the region runs as
  // written, with the same bucket: the table tells the two apart by name.
  if (region->pattern == kBatchNormReluConv)
    site.name += " (+ conv)";
  else if (region->pattern == kConvBlockPair)
    site.name += " (+ block)";
  site.pattern = region->pattern;
  site.cell = region;
  // A recurrent projection runs once per trip of its loop: measured over a loop's worth of trips
  // (Note [Batched weight gradient] in batched_projection.cpp).
  const torch::jit::Node* owner = region->first()->owningBlock()->owningNode();
  if (region->pattern == kBiasMatmul && owner != nullptr && owner->kind() == c10::prim::Loop)
    site.loop = owner;
  // The batch norms' running statistics, updated in place: each replay of a measurement gets its
  // own copy.
  const std::vector<size_t> norms = region->pattern == kBatchNormReluConv ? std::vector<size_t>{0}
                                    : region->pattern == kConvBlockPair ? std::vector<size_t>{1, 4}
                                                                        : std::vector<size_t>{};
  for (const size_t norm : norms) {
    for (const size_t input : {3, 4}) {
      const int slot = region->slots[norm][input];
      if (slot >= 0)
        site.updated.push_back(static_cast<size_t>(slot));
    }
  }
  // The region's bucket is decided at its first node, on that node's inputs (chooseCell): only
  // its flag can say the mode (Note [Evaluation buckets] in binder.cpp).
  if (region->first()->kind() == c10::aten::batch_norm)
    site.modeInputs = {5};  // training
  std::vector<const Candidate*> applicable = applicableTo(site);
  cs.lead.reset(new SiteState{std::move(site),
                              regionReference(region),
                              std::move(applicable),
                              {},
                              {},
                              nullptr,
                              false,
                              nullptr});
  if (cs.lead->candidates.size() > 1)
    order_.push_back(cs.lead.get());
  return cs;
}

const Candidate* Binder::chooseCell(CellState& cs, const torch::jit::Stack& stack, size_t count) {
  SiteState& lead = *cs.lead;
  signature(lead.site, stack, count, -1);
  if (cs.last != nullptr && signature_ == cs.lastSignature)
    return cs.last;
  const std::string bucket = siteBucket(lead.site, stack, count, -1);
  const Candidate* c = nullptr;
  auto it = cs.chosen.find(bucket);
  if (it != cs.chosen.end()) {
    c = it->second;
  } else if (const Binding* known = table_.find(lead.site.name, bucket)) {
    c = byName(lead, known->winner);
  }
  if (c == nullptr && options_.predict)
    c = predict(lead, bucket);
  if (c == nullptr) {
    if (mayMeasure()) {
      // As written this time; the last node measures on what this execution notes.
      cs.pending = bucket;
      return lead.candidates.front();
    }
    c = lead.candidates.front();
  }
  cs.chosen[bucket] = c;
  cs.last = c;
  cs.lastSignature = signature_;
  return c;
}

void Binder::runCell(SiteState& s, const torch::jit::Node* node, torch::jit::Stack& stack,
                     LoopFrames& loops) {
  const CellRegion& region = *s.region;
  CellState& cs = cells_.at(&region);
  const size_t count = node->inputs().size();
  const size_t base = stack.size() - count;
  const int k = region.indexOf(node);
  if (k == 0) {
    cs.noted.assign(region.inputs.size(), c10::IValue());
    cs.pending.clear();
    cs.began.reset();
    cs.active =
        splitByRecomputedBlock(region) ? cs.lead->candidates.front() : chooseCell(cs, stack, count);
    if (!cs.pending.empty() && !region.drawsBetween) {
      cs.began = std::make_shared<const detail::KeptRandomState>(
          std::vector<c10::IValue>(stack.begin() + static_cast<std::ptrdiff_t>(base), stack.end()));
    }
  } else if (cs.noted.size() != region.inputs.size()) {
    // The region's first node did not run before it in this execution: a recomputed block that
    // holds the rest of a region split by the plan, which runs as written.
    runSite(s, node, stack, loops);
    return;
  }
  // Only what the last node will read is noted: a bound candidate's inputs, or a measurement's.
  // A region that runs as written (the reference chosen, or split by a recomputed block) holds
  // nothing of its execution (Note [What a region holds] in binder.h).
  if (!cs.pending.empty() || (cs.active != nullptr && cs.active->name() != kAten)) {
    for (size_t i = 0; i < count; ++i) {
      const int slot = region.slots[static_cast<size_t>(k)][i];
      if (slot >= 0)
        cs.noted[static_cast<size_t>(slot)] = stack[base + i];
    }
  }
  const bool last = node == region.last();
  bool measuredNow = false;
  if (last && !cs.pending.empty()) {
    measuredNow = true;
    // A new bucket, run as written up to here: measured on what this execution noted, and its
    // result computed by the winner, as the next execution in the bucket will compute it.
    const std::string bucket = std::move(cs.pending);
    cs.pending.clear();
    const torch::jit::Stack inputs(cs.noted.begin(), cs.noted.end());
    const torch::jit::Node* loop = cs.lead->site.loop;
    Binding b = measure(*cs.lead, bucket, inputs, loop != nullptr ? loops.maxTrips(loop) : -1);
    cs.active = byName(*cs.lead, b.winner);
    cs.chosen[bucket] = cs.active;
    cs.last = nullptr;
    put(std::move(b), *cs.lead);
    ++measurements_;
  }
  if (cs.active != nullptr && cs.active->name() != kAten) {
    stack.resize(base);
    if (!last) {
      stack.emplace_back(at::Tensor());  // read by no node but the region's, which are skipped
      return;
    }
    torch::jit::Stack inputs(std::make_move_iterator(cs.noted.begin()),
                             std::make_move_iterator(cs.noted.end()));
    cs.noted.clear();  // holds the region's inputs no longer than the region runs
    if (measuredNow) {
      // Its nodes ran as written this time and updated what they update in place (a batch norm's
      // running statistics): the winner's result is made on copies of those.
      for (size_t i : cs.lead->site.updated) {
        if (inputs[i].isTensor() && inputs[i].toTensor().defined())
          inputs[i] = inputs[i].toTensor().clone();
      }
      // Note [A measured region draws as a bound one]
      // Its nodes drew from the random state as the region began (a dropout's mask), and the
      // winner, bound in every later execution of the bucket and in a run that reads the table,
      // draws from that state there: so it does here, and the step draws on as theirs do. Until
      // 2026-12-07 bias-dropout-add drew after the dropout as written, and every draw of the
      // measuring step after it differed from a run that read the table. Where a node outside
      // the region draws between its first and last node (CellRegion::drawsBetween), going back
      // would draw that node's numbers again: the winner draws on from where the step is.
      if (cs.began)
        cs.began->restore();
    }
    cs.began.reset();
    cs.active->run(cs.lead->site, cs.lead->op, inputs, loops);
    ++boundExecutions_;
    if (region.alsoOut != nullptr) {
      // The earlier node's value, which it left undefined: the evaluator stores it now, before
      // anything outside the region reads it.
      TORCH_CHECK(inputs.size() == 2, "Binder: ", cs.active->name(), " left ", inputs.size(),
                  " values at ", cs.lead->site.name, ", which computes its result and ",
                  region.alsoOut->debugName());
      late_.emplace(region.alsoOut, std::move(inputs.back()));
      inputs.pop_back();
    }
    stack.push_back(std::move(inputs.back()));
    return;
  }
  if (last) {
    cs.noted.clear();
    cs.began.reset();
  }
  runSite(s, node, stack, loops);
}

void Binder::setRecomputed(std::set<std::string> blocks, bool runsOrLoops) {
  if (blocks == recomputedBlocks_ && runsOrLoops == recomputesRuns_)
    return;
  recomputedBlocks_ = std::move(blocks);
  recomputesRuns_ = runsOrLoops;
  split_.clear();
}

bool Binder::splitByRecomputedBlock(const CellRegion& region) {
  // A run of ops or a loop that splits another region refuses the step (recomputeLimits).
  if (recomputesRuns_ && isConvBlockRegion(region.pattern))
    return true;
  if (recomputedBlocks_.empty())
    return false;
  const auto [it, fresh] = split_.emplace(&region, false);
  if (!fresh)
    return it->second;
  for (const std::string& block : recomputedBlocks_) {
    const auto inside = std::count_if(
        region.nodes.begin(), region.nodes.end(), [&block](const torch::jit::Node* node) {
          const std::string path = symtune::detail::modulePathOf(node);
          return path == block || path.rfind(block + ".", 0) == 0;
        });
    if (inside != 0 && static_cast<size_t>(inside) != region.nodes.size()) {
      it->second = true;
      break;
    }
  }
  return it->second;
}

std::optional<std::pair<const torch::jit::Value*, c10::IValue>> Binder::takeLateOutput() {
  auto late = std::move(late_);
  late_.reset();
  return late;
}

}  // namespace symtune::binding
