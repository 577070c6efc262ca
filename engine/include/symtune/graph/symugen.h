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
// A recorded step runs the inlined forward IR through SyMuGen's own evaluator, one IR node at a
// time, with each node's ATen operation. That is what makes the capture exact: every value's shape
// is seen, every prim::If knows the branch it took and every prim::Loop its trip count, and the
// autograd sequence numbers handed out while a node ran (at::sequence_number) are exactly those of
// the autograd nodes it created — the link from a backward node to its forward op is by sequence
// number, never by name. The executors (executor.h) run the evaluator whenever a step needs ops
// tied to nodes: a capture, per-node telemetry, or a segment plan.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/script.h>

#include "symtune/core/graph.h"
#include "symtune/telemetry/node_context.h"

namespace torch::nn {
class Module;
}

namespace symtune {

class OpBinder;

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
  double bytes = 0;  // read plus written
  // Saved for backward: the storages the templates' saved operands lie in, each once, the
  // parameters left out, and what the ops allocate for themselves
  // (symtune/remat/memory_predictor.h).
  double savedBytes = 0;
  int64_t opsWithoutCost = 0;  // tensor op executions without a template (or shapes it needs)
  // Per unit a SegmentPlan can recompute (SyMuGen::recomputableUnits()): the same sums over the
  // ops that ran inside it (a loop's ops count for the block around it too). Its saved bytes are
  // what recomputing it would free (Note [Counting a run's saved bytes]): the bytes its ops save
  // of tensors it makes itself and does not hand on, less the inputs it would keep that no op
  // saves.
  struct Unit {
    double flops = 0, bytes = 0, savedBytes = 0;
    // How many times a span of it began: a block's calls, a loop body's spans over its trips, a
    // run's trips. A recomputed block's backward brings back one call's activations at a time.
    int64_t executions = 0;
    // A block's or a loop's, per execution of its span (a block's calls, in order): the FLOPs
    // and bytes of its ops, and its saved bytes — what each execution's ops saved, scaled so that
    // they add up to savedBytes (the charges for the inputs a recomputed unit keeps, and the
    // credits for its outputs, are counted per unit, not per execution).
    std::vector<double> flopsByCall, bytesByCall, savedByCall;
  };
  std::map<std::string, Unit> units;
};

// Note [Segments]
// A segment is one call of a top-level block (SyMuGen::segmentBlocks()): the contiguous run of
// nodes of the inlined IR that the call became. Segments are the unit an execution plan decides
// on: whether a segment keeps its activations for backward or keeps none and runs again during
// backward (Note [Checkpointed spans]) — the remat planner's choice under a memory budget — and,
// as the plan grows, which settings the controller picked for the batch. Which implementation
// each op site runs is the binder's (ForwardOptions::binder, Note [Op sites]), segment or not. A
// segment the plan does not name runs as the IR says.
//
// Note [A block's first calls]
// A top-level block called several times in a step (Transformer-XL's decoder, once a segment) is
// recomputed either on every call ("decoder") or on its first k calls only ("decoder [first 2
// calls]", firstCallsName()): those keep no activations, the calls after them keep theirs, and
// the units inside the block (its loops and runs) act on the calls that are not recomputed. The
// first calls are the ones to recompute: their backward comes last, after the calls that kept
// their activations have freed them, so the activations a recomputed call brings back do not add
// to what the others keep.
struct SegmentPlan {
  // Top-level blocks whose calls keep no activations and are recomputed in backward (all of
  // them, or the first k: Note [A block's first calls]), loops whose bodies' runs are, trip by
  // trip (SyMuGen::loopSpans()), and runs of ops inside a block or a loop body
  // (SyMuGen::opRuns()).
  std::set<std::string> recompute;

  bool empty() const { return recompute.empty(); }

  // "block [first k calls]" (k >= 1; "[first 1 call]").
  static std::string firstCallsName(const std::string& block, int64_t calls);
  // The block and k of a name firstCallsName() made; nothing for any other name.
  static std::optional<std::pair<std::string, int64_t>> splitFirstCalls(const std::string& name);
  // Whether the plan recomputes any call of `unit` (itself or its first calls).
  bool recomputesAny(const std::string& unit) const;
};

struct ForwardOptions {
  const SegmentPlan* plan = nullptr;  // none: every segment runs as the IR says
  // Records the step into `*record`: a copy of the static graph with every node's runtime shapes
  // (first execution), the branches taken, loop trip counts and the operator templates' costs on
  // those shapes. joinBackward() then adds the autograd graph (Note [Step capture]).
  Graph* record = nullptr;
  // Sum every op's template cost (cost_templates.h) into EvaluatorRun::cost: slower, for
  // benchmarks' FLOP counts.
  bool countCost = false;
  // Runs the op sites it binds (Note [Op sites]); none: every op runs as the IR says.
  OpBinder* binder = nullptr;
  // With countCost, and without grad, a plan, a record or a binder: runs on the meta device,
  // shapes only, at the cost of each op's dispatch (Note [Shapes only] in
  // engine/src/graph/evaluator.h). Throws c10::Error where the forward needs a value (an `if` on
  // a tensor, an op whose output's shape depends on its input's values); the output is meta.
  bool shapesOnly = false;
};

// One forward run through the evaluator. Each op ran inside its node's scope (node_context.h), so
// OpTracer attributed it to the node.
struct EvaluatorRun {
  c10::IValue output;
  SequenceOwners owners;  // which node created which autograd functions
  int64_t nodesExecuted = 0;
  int64_t recomputed = 0;  // segment calls that kept no activations (SegmentPlan::recompute)
  ForwardCost cost;        // with ForwardOptions::countCost
  std::vector<RegionId> branches;  // the `if` branches that ran, in id order
};

class SyMuGen {
 public:
  // Captures the static graph of `module`'s `method` (and every method it calls, inlined).
  explicit SyMuGen(torch::jit::Module module, std::string name = {},
                   std::string method = "forward");
  ~SyMuGen();

  const Graph& staticGraph() const { return graph_; }

  // Runs one forward on `inputs` through the evaluator, one IR node at a time, each op inside its
  // node's scope (node_context.h), segments as `options.plan` says. The output trains like the
  // module's own.
  EvaluatorRun forward(const std::vector<c10::IValue>& inputs, const ForwardOptions& options = {});

  // Adds the autograd graph of `loss` to `step` (recorded by forward() with ForwardOptions::record)
  // and links each backward node to the forward node that created it (by sequence number, through
  // `owners`, the recording run's).
  void joinBackward(Graph& step, const torch::Tensor& loss, const SequenceOwners& owners) const;

  // forward() recording the step, then loss = lossFn(output), then joinBackward().
  StepCapture captureStep(const std::vector<c10::IValue>& inputs,
                          const std::function<torch::Tensor(const c10::IValue&)>& lossFn);

  // The top-level blocks whose calls are the segments (Note [Segments]): the root module's
  // children, with a chain (a Sequential) or a list (a ModuleList) standing for its members
  // ("stem", "layer1.0", "blocks.3", ...).
  std::vector<std::string> segmentBlocks() const;
  // The loops whose bodies a SegmentPlan can recompute trip by trip, by the names it knows them
  // by ("rnn loop #23"; Note [Loop-body spans] in engine/src/graph/symugen_spans.cpp).
  const std::vector<std::string>& loopSpans();
  // The runs of ops a SegmentPlan can recompute inside a block or a loop body, each ending at the
  // expensive op that closes it ("decoder loop #31 run #52"; Note [Op runs] in
  // engine/src/graph/symugen_runs.cpp).
  const std::vector<std::string>& opRuns();
  // What a SegmentPlan can name: the top-level blocks (parent "") and the loops, each with the
  // block it lies in ("" when none), and the runs of ops, each with the block or loop it lies in.
  struct RecomputableUnit {
    std::string name, parent;
  };
  std::vector<RecomputableUnit> recomputableUnits();
  // The nodes of the static graph each unit recomputes (a loop's: the ops of its body's spans,
  // not the views that lead them), by unit name; a unit whose ops the graph does not show has
  // none.
  std::map<std::string, std::vector<NodeId>> unitNodes();

  // The first node of the inlined IR that the evaluator cannot run, said for a note ("prim::tolist
  // (Tensor.tolist())"); nullopt when it runs them all (`with` blocks it does: Note [With blocks]
  // in engine/src/graph/evaluator.h). TorchScript's interpreter runs these
  // itself; a run whose model holds one keeps TorchScript's executor.
  std::optional<std::string> unrunnable() const;

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
  // Of those, per loop node, the values it only hands its body as initial carried values: the
  // evaluator drops them as the loop starts (Note [A loop's initial values]).
  std::unordered_map<const torch::jit::Node*, std::vector<const torch::jit::Value*>> loopEntries_;
  // Each operator node's ATen operation, made on its first execution (the evaluator's).
  std::unordered_map<const torch::jit::Node*, torch::jit::Operation> operations_;
  bool lastUsesReady_ = false;
  // Checkpointed spans by their first node (built on first use).
  std::unordered_map<const torch::jit::Node*, std::shared_ptr<const CheckpointSpan>> spans_;
  bool spansReady_ = false;
  std::vector<std::string> loopSpans_;
  std::map<std::string, std::string> loopParents_;  // loop span name -> its top-level block
  // Runs of ops (Note [Op runs]) by their first node, their names and what each lies in.
  std::unordered_map<const torch::jit::Node*, std::shared_ptr<const CheckpointSpan>> runSpans_;
  std::vector<std::string> opRuns_;
  std::map<std::string, std::string> runParents_;
  Graph graph_;
};

// The dtype name used in graphs and cost templates ("float32", "int64", ...).
std::string dtypeName(c10::ScalarType type);

}  // namespace symtune
