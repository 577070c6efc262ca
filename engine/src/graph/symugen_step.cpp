// SyMuGen's step capture (Note [Step capture]): an evaluator over the inlined IR that records
// shapes, branches, loop trips and the autograd sequence numbers of every node, then the walk of
// the loss's autograd graph.

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <map>
#include <unordered_set>

#include "evaluator.h"
#include "ir_values.h"
#include "symtune/core/cost_templates.h"

namespace symtune {

namespace {

ValueInfo describeGradient(const torch::autograd::InputMetadata& meta) {
  ValueInfo v;
  if (meta.was_default_constructed()) {
    v.type = "NoneType";
    return v;
  }
  v.type = "Tensor";
  if (!meta.is_nested_tensor()) {
    std::vector<int64_t> shape;
    for (const auto& d : meta.shape_as_dim_vector())
      shape.push_back(d.guard_int(__FILE__, __LINE__));
    v.shape = std::move(shape);
  }
  v.dtype = dtypeName(c10::typeMetaToScalarType(meta.dtype()));
  return v;
}

// The tensors autograd saved for `fn`'s backward. Autograd nodes expose them generically only to
// compiled autograd, through Node::compiled_args, which collects every SavedVariable (unpacked)
// into the compiler call's tensor arguments; nodes that do not implement it (custom C++ functions)
// give nothing.
std::vector<ValueInfo> savedTensorsOf(const std::shared_ptr<torch::autograd::Node>& fn) {
  using namespace torch::dynamo::autograd;
  std::vector<ValueInfo> saved;
  try {
    AutogradCompilerCall compiler(SizeInput::STATIC);
    NodeCall call(0, fn);
    CompiledNodeArgs args(compiler, call);
    fn->compiled_args(args);
    for (const auto& t : compiler.tensor_args.inputs) {
      ValueInfo v;
      v.type = "Tensor";
      v.shape = t.sizes().vec();
      v.dtype = dtypeName(t.scalar_type());
      saved.push_back(std::move(v));
    }
  } catch (const c10::Error&) {
    saved.clear();
  }
  return saved;
}

}  // namespace

void SyMuGen::prepareEvaluator() {
  if (lastUsesReady_)
    return;
  detail::collectLastUses(ir_->block(), lastUses_, loopEntries_);
  lastUsesReady_ = true;
}

EvaluatorRun SyMuGen::forward(const std::vector<c10::IValue>& inputs,
                              const ForwardOptions& options) {
  TORCH_CHECK(
      !options.shapesOnly ||
          (options.countCost && options.record == nullptr && options.binder == nullptr &&
           (options.plan == nullptr || options.plan->empty()) && !at::GradMode::is_enabled()),
      "SyMuGen: a forward on shapes alone counts costs, without grad, a plan, a record "
      "or a binder");
  prepareEvaluator();
  if ((options.plan != nullptr && !options.plan->empty()) || options.countCost)
    prepareCheckpointSpans();  // a counted forward sums each span's unit too
  Graph unused;
  Graph& g = options.record != nullptr ? *options.record : unused;
  if (options.record != nullptr)
    g = graph_;
  Evaluator eval(*this, g, /*record=*/options.record != nullptr);
  eval.setPlan(options.plan);
  eval.setCountCost(options.countCost);
  eval.setShapesOnly(options.shapesOnly);
  eval.setBinder(options.binder);
  EvaluatorRun run;
  run.output = eval.run(inputs);
  run.nodesExecuted = eval.executed();
  run.recomputed = eval.recomputed();
  run.cost = eval.cost();
  run.branches = eval.branchesRun();
  if (options.record != nullptr) {
    // Branches and loops of the step.
    for (size_t i = 0; i < g.regions().size(); ++i) {
      GraphRegion& r = g.region(RegionId(static_cast<int32_t>(i)));
      if (r.kind == RegionKind::IfThen || r.kind == RegionKind::IfElse) {
        r.taken = eval.ran(r.id);
      } else if (r.kind == RegionKind::Loop) {
        r.tripCount = eval.trips(r.id);
      }
    }
    // Costs on the step's shapes.
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      GraphNode& n = g.node(NodeId(static_cast<int32_t>(i)));
      const OpCost cost = evaluateCost(n.kind, n.inputs, n.outputs);
      if (!cost.known)
        continue;
      n.features.flops = cost.flops;
      n.features.bytesRead = cost.bytesRead;
      n.features.bytesWritten = cost.bytesWritten;
      n.features.savedBytes = cost.savedBytes;
    }
  }
  run.owners = eval.takeOwners();
  return run;
}

StepCapture SyMuGen::captureStep(const std::vector<c10::IValue>& inputs,
                                 const std::function<torch::Tensor(const c10::IValue&)>& lossFn) {
  StepCapture step;
  ForwardOptions options;
  options.record = &step.graph;
  EvaluatorRun run = forward(inputs, options);
  step.nodesExecuted = run.nodesExecuted;
  step.loss = lossFn(run.output);
  step.owners = std::move(run.owners);
  joinBackward(step.graph, step.loss, step.owners);
  return step;
}

void SyMuGen::joinBackward(Graph& g, const torch::Tensor& loss,
                           const SequenceOwners& owners) const {
  // The autograd graph: breadth first from the loss, linked by sequence number.
  std::unordered_map<const void*, std::string> parameterNames;
  for (const auto& p : module_.named_parameters()) {
    parameterNames[p.value.unsafeGetTensorImpl()] = p.name;
  }
  std::unordered_map<const torch::autograd::Node*, NodeId> backwardIds;
  std::vector<std::shared_ptr<torch::autograd::Node>> queue;
  auto visit = [&](const std::shared_ptr<torch::autograd::Node>& fn) -> NodeId {
    auto it = backwardIds.find(fn.get());
    if (it != backwardIds.end())
      return it->second;
    GraphNode n;
    n.side = GraphSide::Backward;
    n.kind = fn->name();
    n.features.opClass = "autograd";
    for (uint32_t i = 0; i < fn->num_inputs(); ++i) {
      n.inputs.push_back(describeGradient(fn->input_metadata(i)));
    }
    n.saved = savedTensorsOf(fn);
    double savedBytes = 0;
    for (const auto& v : n.saved) {
      double elements = 1;
      for (auto d : *v.shape)
        elements *= static_cast<double>(d);
      savedBytes += elements * elementSize(v.dtype);
    }
    n.features.savedBytes = savedBytes;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(fn.get())) {
      auto name = parameterNames.find(acc->variable.unsafeGetTensorImpl());
      if (name != parameterNames.end())
        n.modulePath = name->second;
    } else {
      n.sequenceNr = static_cast<int64_t>(fn->sequence_nr());
    }
    const NodeId id = g.addNode(std::move(n));
    backwardIds[fn.get()] = id;
    queue.push_back(fn);
    if (g.node(id).sequenceNr >= 0) {
      const NodeId forward = owners.ownerOf(static_cast<uint64_t>(g.node(id).sequenceNr));
      if (forward.valid()) {
        g.link(forward, id);
        g.node(id).modulePath = g.node(forward).modulePath;
        g.node(id).source = g.node(forward).source;
      }
    }
    return id;
  };
  if (loss.grad_fn())
    visit(loss.grad_fn());
  for (size_t i = 0; i < queue.size(); ++i) {
    const auto fn = queue[i];  // a copy: visit() grows the queue
    const NodeId from = backwardIds.at(fn.get());
    const auto& edges = fn->next_edges();
    for (size_t e = 0; e < edges.size(); ++e) {
      if (!edges[e].function)
        continue;
      const NodeId to = visit(edges[e].function);
      g.addEdge(from, to, static_cast<int>(e), static_cast<int>(edges[e].input_nr));
    }
  }
}

}  // namespace symtune
