#pragma once
// SyMuGen — the symbolic meta-model generator: captures a model as one symtune::Graph.
//
//   symtune::SyMuGen gen(module, "resnet");
//   const symtune::Graph& g = gen.staticGraph();           // IR, regions, module paths, sources
//   auto step = gen.captureStep({x}, [&](const c10::IValue& out) {
//     return torch::nn::functional::cross_entropy(out.toTensor(), y);
//   });
//   step.loss.backward();                                   // the step trains as usual
//   // step.graph: shapes of every op, branches taken, loop trips, autograd nodes linked
//
// Note [Step capture]
// A sampled step runs the inlined forward IR through SyMuGen's own evaluator, one IR node at a
// time, with each node's ATen operation. That is what makes the capture exact: every value's shape
// is seen, every prim::If knows the branch it took and every prim::Loop its trip count, and the
// autograd sequence numbers handed out while a node ran (at::sequence_number) are exactly those of
// the autograd nodes it created — the link from a backward node to its forward op is by sequence
// number, never by name. The evaluator runs sampled steps (captureStep) and, in per-node telemetry,
// every profiled step (forward); otherwise training runs the module as is.

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/script.h>

#include "symtune/graph.h"
#include "symtune/node_context.h"

namespace torch::nn {
class Module;
}

namespace symtune {

struct StepCapture {
  Graph graph;         // the static graph joined with the step: shapes, branches, autograd nodes
  torch::Tensor loss;  // live: call backward() on it to finish the step
  int64_t nodesExecuted = 0;  // forward IR node executions (loop bodies count each iteration)
  SequenceOwners owners;      // which node created which autograd functions
};

// The operator templates' cost of one forward, summed over every op execution (loop bodies on
// each trip, with that trip's shapes).
struct ForwardCost {
  double flops = 0;
  double bytes = 0;            // read plus written
  int64_t opsWithoutCost = 0;  // tensor op executions without a template (or shapes it needs)
};

// A forward run through the evaluator for per-node telemetry (no graph is built).
struct EvaluatorRun {
  c10::IValue output;
  SequenceOwners owners;  // which node created which autograd functions
  int64_t nodesExecuted = 0;
  int64_t checkpointed = 0;  // top-level block calls run under checkpointing
  ForwardCost cost;          // with ForwardOptions::countCost
};

struct ForwardOptions {
  // Full activation checkpointing (Note [Checkpointed spans]): every top-level block runs without
  // keeping its activations for backward, and runs again during backward to compute its
  // gradients. Only while grad mode is on.
  bool checkpoint = false;
  // Sum every op's template cost (cost_templates.h) into EvaluatorRun::cost: slower, for
  // benchmarks' FLOP counts.
  bool countCost = false;
};

class SyMuGen {
 public:
  // Captures the static graph of `module`'s `method` (and every method it calls, inlined).
  explicit SyMuGen(torch::jit::Module module, std::string name = {},
                   std::string method = "forward");
  ~SyMuGen();

  const Graph& staticGraph() const { return graph_; }

  // Runs one forward on `inputs` through the evaluator (Note [Step capture]), computes
  // loss = lossFn(output) and joins the loss's autograd graph with the forward graph.
  StepCapture captureStep(const std::vector<c10::IValue>& inputs,
                          const std::function<torch::Tensor(const c10::IValue&)>& lossFn);

  // Runs one forward on `inputs` through the evaluator, publishing each op's node to OpTracer
  // (node_context.h): the per-node telemetry path. The output trains like the module's own.
  EvaluatorRun forward(const std::vector<c10::IValue>& inputs, const ForwardOptions& options = {});

  // The module paths full checkpointing treats as top-level blocks: the root module's children,
  // with a chain (a "Sequential") standing for its members ("stem", "layer1.0", "layer1.1", ...).
  std::vector<std::string> checkpointBlocks() const;

  // A plain torch::nn::Module has no IR: its graph is the module tree, one node per module, with
  // its parameters as outputs.
  static Graph captureModuleTree(const torch::nn::Module& module, const std::string& name);

  // Internals of engine/src/graph/ (evaluator.h).
  class Evaluator;
  struct CheckpointSpan;

 private:
  void prepareEvaluator();
  void prepareCheckpointSpans();

  torch::jit::Module module_;
  std::string method_;
  std::shared_ptr<torch::jit::Graph> ir_;  // the inlined copy the static graph describes
  std::unordered_map<const torch::jit::Node*, NodeId> nodeIds_;
  std::unordered_map<const torch::jit::Block*, RegionId> blockRegions_;
  // The values each node reads last in its block (the evaluator drops them after the node).
  std::unordered_map<const torch::jit::Node*, std::vector<const torch::jit::Value*>> lastUses_;
  bool lastUsesReady_ = false;
  // Checkpointed spans by their first node (built on first use).
  std::unordered_map<const torch::jit::Node*, std::shared_ptr<const CheckpointSpan>> spans_;
  bool spansReady_ = false;
  Graph graph_;
};

// The dtype name used in graphs and cost templates ("float32", "int64", ...).
std::string dtypeName(c10::ScalarType type);

}  // namespace symtune
