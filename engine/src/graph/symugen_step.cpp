// SyMuGen's step capture (Note [Step capture]): an evaluator over the inlined IR that records
// shapes, branches, loop trips and the autograd sequence numbers of every node, then the walk of
// the loss's autograd graph.

#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/dynamo/compiled_autograd.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <map>
#include <unordered_set>

#include "ir_values.h"
#include "symtune/cost_templates.h"
#include "symtune/node_context.h"
#include "symtune/symugen.h"

namespace symtune {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

namespace {

bool definedIn(const Value* v, const Block* block) {
  return v->node()->owningBlock() == block || v->node() == block->param_node();
}

// Calls f on every value `node` reads, itself or in its nested blocks (their returns included).
template <class F>
void forEachUse(const Node* node, F&& f) {
  for (const Value* in : node->inputs())
    f(in);
  for (const Block* b : node->blocks()) {
    for (const Node* inner : b->nodes())
      forEachUse(inner, f);
    for (const Value* out : b->outputs())
      f(out);
  }
}

// For every node, the values of its block that nothing after it reads: the evaluator drops them
// once the node has run, as TorchScript's interpreter does, so a run through the evaluator holds
// no more memory than the module's own forward. A block's returns stay (its owner reads them).
void collectLastUses(const Block* block,
                     std::unordered_map<const Node*, std::vector<const Value*>>& out) {
  std::unordered_map<const Value*, const Node*> last;
  for (const Node* node : block->nodes()) {
    forEachUse(node, [&](const Value* v) {
      if (definedIn(v, block))
        last[v] = node;
    });
    for (const Value* v : node->outputs())
      last.emplace(v, node);  // never read: dropped right away
    for (const Block* inner : node->blocks())
      collectLastUses(inner, out);
  }
  for (const Value* v : block->outputs())
    last.erase(v);
  for (const auto& [value, node] : last)
    out[node].push_back(value);
}

}  // namespace

class SyMuGen::Evaluator {
 public:
  // record: note every node's runtime values (shapes) into `out` on their first execution.
  Evaluator(SyMuGen& gen, Graph& out, bool record) : gen_(gen), g_(out), record_(record) {}

  c10::IValue run(const std::vector<c10::IValue>& inputs) {
    const auto& params = gen_.ir_->inputs();
    TORCH_CHECK(inputs.size() + 1 == params.size(), "SyMuGen: ", gen_.method_, " takes ",
                params.size() - 1, " inputs, got ", inputs.size());
    env_[params[0]] = gen_.module_._ivalue();
    for (size_t i = 0; i < inputs.size(); ++i)
      env_[params[i + 1]] = inputs[i];
    runBlock(gen_.ir_->block());
    return env_.at(gen_.ir_->outputs()[0]);
  }

  // Which forward node handed out each autograd sequence number.
  const SequenceOwners& owners() const { return owners_; }
  SequenceOwners takeOwners() { return std::move(owners_); }

  int64_t executed() const { return executed_; }
  bool ran(RegionId branch) const { return taken_.count(branch) > 0; }
  int64_t trips(RegionId loop) const {
    auto it = trips_.find(loop);
    return it == trips_.end() ? 0 : it->second;
  }

 private:
  std::vector<c10::IValue> runBlock(const Block* block) {
    for (const Node* node : block->nodes()) {
      runNode(node);
      auto dead = gen_.lastUses_.find(node);
      if (dead != gen_.lastUses_.end()) {
        for (const Value* v : dead->second)
          env_.erase(v);
      }
    }
    std::vector<c10::IValue> outs;
    for (const Value* v : block->outputs())
      outs.push_back(env_.at(v));
    return outs;
  }

  // After its owner has taken them: drops a block's returns that were computed inside it.
  void dropReturns(const Block* block) {
    for (const Value* v : block->outputs()) {
      if (definedIn(v, block))
        env_.erase(v);
    }
  }

  void bindBlockInputs(const Block* block, const std::vector<c10::IValue>& values) {
    for (size_t i = 0; i < values.size(); ++i)
      env_[block->inputs()[i]] = values[i];
  }

  void runNode(const Node* node) {
    const auto kind = node->kind();
    auto id = gen_.nodeIds_.find(node);
    const bool recorded = id != gen_.nodeIds_.end();
    ++executed_;
    if (kind == c10::prim::Constant) {
      env_[node->output()] = *torch::jit::toIValue(node->output());
    } else if (kind == c10::prim::GetAttr) {
      env_[node->output()] = env_.at(node->input(0)).toObject()->getAttr(node->s(c10::attr::name));
    } else if (kind == c10::prim::SetAttr) {
      env_.at(node->input(0))
          .toObject()
          ->setAttr(node->s(c10::attr::name), env_.at(node->input(1)));
    } else if (kind == c10::prim::ListConstruct) {
      // Lists and tuples are interpreter instructions, not operators: build them here.
      c10::impl::GenericList list(
          node->output()->type()->expectRef<c10::ListType>().getElementType());
      for (const Value* in : node->inputs())
        list.push_back(env_.at(in));
      env_[node->output()] = std::move(list);
    } else if (kind == c10::prim::TupleConstruct) {
      std::vector<c10::IValue> items;
      for (const Value* in : node->inputs())
        items.push_back(env_.at(in));
      env_[node->output()] = c10::ivalue::Tuple::create(std::move(items));
    } else if (kind == c10::prim::TupleUnpack || kind == c10::prim::ListUnpack) {
      const c10::IValue& whole = env_.at(node->input(0));
      const auto items =
          whole.isTuple() ? whole.toTupleRef().elements().vec() : whole.toListRef().vec();
      TORCH_CHECK(items.size() == node->outputs().size(), "SyMuGen: unpacking ", items.size(),
                  " values into ", node->outputs().size());
      for (size_t i = 0; i < items.size(); ++i)
        env_[node->outputs()[i]] = items[i];
    } else if (kind == c10::prim::If) {
      const bool cond = env_.at(node->input(0)).toBool();
      const Block* branch = node->blocks()[cond ? 0 : 1];
      markTaken(branch);
      const auto outs = runBlock(branch);
      dropReturns(branch);
      for (size_t i = 0; i < outs.size(); ++i)
        env_[node->outputs()[i]] = outs[i];
    } else if (kind == c10::prim::Loop) {
      runLoop(node);
    } else {
      TORCH_CHECK(kind != c10::prim::CallMethod && kind != c10::prim::CallFunction,
                  "SyMuGen: ", kind.toQualString(), " left after inlining is not supported");
      runOperator(node);
    }
    if (recorded && record_)
      recordValues(node, id->second);
  }

  void runLoop(const Node* node) {
    const Block* body = node->blocks()[0];
    const int64_t maxTrips = env_.at(node->input(0)).toInt();
    bool cond = env_.at(node->input(1)).toBool();
    std::vector<c10::IValue> carried;
    for (size_t i = 2; i < node->inputs().size(); ++i)
      carried.push_back(env_.at(node->input(i)));
    int64_t trips = 0;
    for (; trips < maxTrips && cond; ++trips) {
      std::vector<c10::IValue> args{c10::IValue(trips)};
      args.insert(args.end(), carried.begin(), carried.end());
      bindBlockInputs(body, args);
      auto outs = runBlock(body);
      cond = outs[0].toBool();
      carried.assign(outs.begin() + 1, outs.end());
    }
    dropReturns(body);
    trips_[gen_.blockRegions_.at(body)] += trips;
    for (size_t i = 0; i < carried.size(); ++i)
      env_[node->outputs()[i]] = carried[i];
  }

  void runOperator(const Node* node) {
    auto op = ops_.find(node);
    if (op == ops_.end())
      op = ops_.emplace(node, node->getOperation()).first;
    torch::jit::Stack stack;
    stack.reserve(node->inputs().size());
    for (const Value* in : node->inputs())
      stack.push_back(env_.at(in));
    auto id = gen_.nodeIds_.find(node);
    const NodeId nodeId = id != gen_.nodeIds_.end() ? id->second : NodeId();
    const uint64_t before = at::sequence_number::peek();
    {
      CurrentNodeScope scope(nodeId);  // OpTracer attributes the op's events to the node
      op->second(stack);
    }
    const uint64_t after = at::sequence_number::peek();
    TORCH_INTERNAL_ASSERT(stack.size() == node->outputs().size(),
                          "SyMuGen: ", node->kind().toQualString(), " left ", stack.size(),
                          " values for ", node->outputs().size(), " outputs");
    for (size_t i = 0; i < stack.size(); ++i)
      env_[node->outputs()[i]] = std::move(stack[i]);
    if (nodeId.valid())
      owners_.add(before, after, nodeId);
  }

  void markTaken(const Block* branch) { taken_.insert(gen_.blockRegions_.at(branch)); }

  // The first execution of a node gives its shapes (a loop body's later trips may differ).
  void recordValues(const Node* node, NodeId id) {
    if (!seen_.insert(id).second)
      return;
    GraphNode& n = g_.node(id);
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      n.inputs[i] = detail::describeRuntimeValue(node->inputs()[i], env_.at(node->inputs()[i]));
    }
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      n.outputs[i] = detail::describeRuntimeValue(node->outputs()[i], env_.at(node->outputs()[i]));
    }
  }

 private:
  SyMuGen& gen_;
  Graph& g_;
  bool record_;
  std::unordered_map<const Value*, c10::IValue> env_;
  std::unordered_map<const Node*, torch::jit::Operation> ops_;
  SequenceOwners owners_;
  std::unordered_set<NodeId> seen_;
  std::unordered_set<RegionId> taken_;           // branches that ran at least once
  std::unordered_map<RegionId, int64_t> trips_;  // loop body -> iterations in the step
  int64_t executed_ = 0;
};

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
  collectLastUses(ir_->block(), lastUses_);
  lastUsesReady_ = true;
}

EvaluatorRun SyMuGen::forward(const std::vector<c10::IValue>& inputs) {
  prepareEvaluator();
  Graph unused;  // nothing is recorded into it: forward() keeps no values
  Evaluator eval(*this, unused, /*record=*/false);
  EvaluatorRun run;
  run.output = eval.run(inputs);
  run.nodesExecuted = eval.executed();
  run.owners = eval.takeOwners();
  return run;
}

StepCapture SyMuGen::captureStep(const std::vector<c10::IValue>& inputs,
                                 const std::function<torch::Tensor(const c10::IValue&)>& lossFn) {
  prepareEvaluator();
  StepCapture step;
  step.graph = graph_;
  Graph& g = step.graph;
  Evaluator eval(*this, g, /*record=*/true);
  const c10::IValue output = eval.run(inputs);
  step.nodesExecuted = eval.executed();
  step.loss = lossFn(output);
  step.owners = eval.owners();

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
      const NodeId forward = eval.owners().ownerOf(static_cast<uint64_t>(g.node(id).sequenceNr));
      if (forward.valid()) {
        g.link(forward, id);
        g.node(id).modulePath = g.node(forward).modulePath;
        g.node(id).source = g.node(forward).source;
      }
    }
    return id;
  };
  if (step.loss.grad_fn())
    visit(step.loss.grad_fn());
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
  return step;
}

}  // namespace symtune
