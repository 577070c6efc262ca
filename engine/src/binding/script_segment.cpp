// Note [Script segments]
// A region site (a GRU cell, a matmul bias, attention, add + layer norm: Note [Cell sites] in
// symtune/binding/op_site.h) is a segment of its block with no control flow in it, whose values
// nothing outside reads but the last's (and its alsoOut's: a second output of the segment).
// "torchscript" copies its nodes into a graph of their own — the region's inputs its inputs,
// those that are constants in the model's graph constants in it, so the optimizer sees them — and
// runs it with a torch::jit::GraphExecutor, TorchScript's profiling executor: after a profiling
// run it specializes the graph to the shapes and requires-grad flags it saw, differentiates it
// symbolically (one autograd node for the segment) and, where LibTorch fuses on the device (on a
// GPU; on the CPU only when the process turned CPU fusion on), compiles its elementwise ops into
// one kernel. One executor per site, made on the site's first execution by this candidate, which
// also runs it twice more (the profiling run and the one that optimizes) so that measurements
// time the optimized segment.

#include "script_segment.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

namespace symtune::binding {

namespace {

class ScriptSegment final : public Candidate {
 public:
  std::string name() const override { return "torchscript"; }
  std::string description() const override {
    return "the region's nodes as a graph of their own, run by TorchScript's executor";
  }
  // Not where a node draws random numbers: its warm-up runs draw too, and the executor may draw
  // in another order than the ops (a dropout's mask would not be the reference's).
  bool applies(const OpSite& site) const override {
    return site.cell != nullptr &&
           std::none_of(site.cell->nodes.begin(), site.cell->nodes.end(),
                        [](const torch::jit::Node* n) { return n->isNondeterministic(); });
  }
  void run(const OpSite& site, torch::jit::Operation&, torch::jit::Stack& stack,
           LoopFrames&) const override {
    Segment& segment = segmentOf(site);
    const size_t base = stack.size() - site.cell->inputs.size();
    torch::jit::Stack inputs;
    std::vector<size_t> updated;  // indices into `inputs` of what the region updates in place
    for (size_t i = 0; i < segment.passed.size(); ++i) {
      if (!segment.passed[i])
        continue;
      if (std::find(site.updated.begin(), site.updated.end(), i) != site.updated.end())
        updated.push_back(inputs.size());
      inputs.push_back(std::move(stack[base + i]));
    }
    stack.resize(base);
    if (!segment.warm) {
      // The executor profiles its first run and optimizes on its second: both done here, on the
      // first execution, so that a measurement times the optimized segment. On copies of what the
      // region updates in place (a batch norm's running statistics): a binding taken from a saved
      // table runs here first on the model's own, which the warm-up would update twice more.
      for (int run = 0; run < 2; ++run) {
        torch::jit::Stack warmUp = inputs;
        for (size_t i : updated) {
          if (warmUp[i].isTensor() && warmUp[i].toTensor().defined())
            warmUp[i] = warmUp[i].toTensor().clone();
        }
        segment.executor->run(warmUp);
      }
      segment.warm = true;
    }
    segment.executor->run(inputs);
    for (auto& out : inputs)  // the result, then the region's alsoOut where it has one
      stack.push_back(std::move(out));
  }
  // The executor's symbolic gradients may sum in another order than the ops' own backward.
  double tolerance() const override { return 1e-6; }

 private:
  struct Segment {
    std::weak_ptr<const CellRegion> region;  // gone: its binder is, and the address may be reused
    std::vector<bool> passed;  // per region input: a graph input (else a constant in the graph)
    std::unique_ptr<torch::jit::GraphExecutor> executor;
    bool warm = false;
  };

  Segment& segmentOf(const OpSite& site) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const CellRegion& region = *site.cell;
    auto it = segments_.find(&region);
    if (it != segments_.end() && !it->second.region.expired())
      return it->second;
    for (auto old = segments_.begin(); old != segments_.end();)  // those of binders gone
      old = old->second.region.expired() ? segments_.erase(old) : std::next(old);
    auto graph = std::make_shared<torch::jit::Graph>();
    std::unordered_map<const torch::jit::Value*, torch::jit::Value*> env;
    Segment segment;
    segment.region = site.cell;
    for (const torch::jit::Value* v : region.inputs) {
      if (v->node()->kind() == c10::prim::Constant) {
        env[v] = graph->insertConstant(*torch::jit::toIValue(v));
        segment.passed.push_back(false);
      } else {
        torch::jit::Value* in = graph->addInput();
        in->setType(v->type());
        env[v] = in;
        segment.passed.push_back(true);
      }
    }
    for (const torch::jit::Node* node : region.nodes) {
      torch::jit::Node* copy = graph->createClone(
          const_cast<torch::jit::Node*>(node), [&env](torch::jit::Value* v) { return env.at(v); });
      graph->insertNode(copy);
      for (size_t i = 0; i < node->outputs().size(); ++i)
        env[node->output(i)] = copy->output(i);
    }
    graph->registerOutput(env.at(region.last()->output()));
    if (region.alsoOut != nullptr)
      graph->registerOutput(env.at(region.alsoOut));
    segment.executor =
        std::make_unique<torch::jit::GraphExecutor>(graph, "symtune_segment_" + site.name);
    return segments_.emplace(&region, std::move(segment)).first->second;
  }

  mutable std::mutex mutex_;
  mutable std::unordered_map<const CellRegion*, Segment> segments_;
};

}  // namespace

std::unique_ptr<Candidate> makeScriptSegment() {
  return std::make_unique<ScriptSegment>();
}

}  // namespace symtune::binding
