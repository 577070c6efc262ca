#pragma once
// SyMuGen's evaluator (Note [Step capture]): runs the inlined forward IR one node at a time, each
// with its ATen operation, recording shapes, branches, loop trips and the autograd sequence
// numbers each node handed out. Private to engine/src/graph/: symugen_step.cpp drives it for every
// forward, symugen_checkpoint.cpp for the segments a plan recomputes.

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <ATen/SequenceNumber.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir_values.h"
#include "symtune/core/cost_templates.h"
#include "symtune/graph/op_binder.h"
#include "symtune/graph/symugen.h"
#include "symtune/profiling/nvtx.h"
#include "symtune/telemetry/node_context.h"

namespace symtune {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// A contiguous run of one block's nodes that a top-level block's call was inlined into: what full
// checkpointing runs without keeping activations and runs again in backward.
struct SyMuGen::CheckpointSpan {
  std::string block;            // module path of the top-level block ("layer1.0")
  const Node* first = nullptr;  // first and last node of the span, in one block
  const Node* last = nullptr;
  std::vector<const Value*> inputs;   // values defined before the span that it reads
  std::vector<const Value*> outputs;  // values the span defines that are read after it
  // Whether a node of it may draw random numbers (Note [Checkpoint RNG]): only then does its
  // forward keep the generators' states.
  bool draws = true;
  // Whether it reads a tensor attribute (a parameter): one that does not, and whose inputs need
  // no gradient either (a mask, positions), runs as usual — checkpointed, its outputs would need
  // one.
  bool readsAttributes = true;
  // A run of ops's lighter variant (Note [Runs without their closing op] in symugen_runs.cpp): the
  // run but its closing op, which saves `dropped` (outputs only it reads); null where none.
  std::shared_ptr<const CheckpointSpan> lighter;
  // Of a lighter variant: the closing op, and the outputs that are freed once it has run and made
  // again before its backward.
  const Node* consumer = nullptr;
  std::vector<const Value*> dropped;
};

// A storage the counting forward has seen (Note [Seen storages]).
//
// Note [Seen storages]
// The counting forward tells storages apart by their StorageImpl: two tensors share bytes when
// they share one. Were a storage freed while the count runs, another could take its address, so
// every storage seen is held until it is counted — weakly: the StorageImpl object stays allocated
// (no other takes its address), its bytes are freed when the forward drops its last tensor, as a
// forward without grad frees them. Held strongly (until 2026-12-04) the counting forward kept what
// a training forward keeps: its peak was the plain step's, outside any budget, and on each new
// shape bucket a Transformer-XL run under a 111.3 MB budget read 130-209 MB.
class SeenStorage {
 public:
  SeenStorage() = default;
  SeenStorage(const c10::Storage& s)  // NOLINT(google-explicit-constructor): as a c10::Storage
      : weak_(s.getWeakStorageImpl()), impl_(s.unsafeGetStorageImpl()), nbytes_(s.nbytes()) {}
  c10::StorageImpl* unsafeGetStorageImpl() const { return impl_; }
  size_t nbytes() const { return nbytes_; }  // when it was seen

 private:
  c10::weak_intrusive_ptr<c10::StorageImpl> weak_{c10::intrusive_ptr<c10::StorageImpl>()};
  c10::StorageImpl* impl_ = nullptr;
  size_t nbytes_ = 0;
};

// What an op saves for its backward, read from its cost template's "saved for backward"
// expression: the operands it names whole (`bytes(in0) + bytes(out0)`) and the rest of the sum
// (`numel(in0)`: a dropout's mask, a cell's gates), which the op allocates itself.
struct SavedOperands {
  bool known = false;                          // a template that says what it saves
  std::vector<std::pair<bool, size_t>> whole;  // (an output?, its index)
  std::string rest;                            // "" when the sum is only whole operands
};
const SavedOperands& savedOperandsOf(const Node* node);  // symugen_runs.cpp

namespace detail {

// A node that computes nothing: a view of a tensor, a shape query, a constant or list building.
bool isViewOrShape(const Node* node);
// The span of `owner`'s nodes first..last named `name`, with what it reads from before it and what
// is read after it; null when checkpointing would get it wrong (symugen_checkpoint.cpp).
std::shared_ptr<SyMuGen::CheckpointSpan> makeSpan(const Block* owner, const Node* first,
                                                  const Node* last, std::string name);
// The runs of ops of every span in `spans` (Note [Op runs] in symugen_runs.cpp): by their first
// node into `runs`, their names in the order of the graph's nodes into `names`, and the span each
// lies in into `parents`.
void cutOpRuns(
    const std::unordered_map<const Node*, std::shared_ptr<const SyMuGen::CheckpointSpan>>& spans,
    const std::unordered_map<const Node*, NodeId>& nodeIds,
    std::unordered_map<const Node*, std::shared_ptr<const SyMuGen::CheckpointSpan>>& runs,
    std::vector<std::string>& names, std::map<std::string, std::string>& parents);

}  // namespace detail

namespace detail {

inline bool definedIn(const Value* v, const Block* block) {
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

// Note [A loop's initial values]
// A loop node reads the values it starts its carried values from, so their last reader is the
// loop, and the evaluator would hold them until the loop ends. A value the loop only hands in as
// an initial carried value (its body does not read it by name) is dead once the first trip has
// it: the evaluator drops it as the loop starts. The tree network's node table is such a value —
// the embedding of every node, which each level's index_copy replaces — and was held beside every
// table after it (0.77 MB of a 3.4 MB bound step on the `cpu` preset).
inline bool readInBody(const Node* loop, const Value* v) {
  bool read = false;
  for (const Block* body : loop->blocks()) {
    for (const Node* inner : body->nodes())
      forEachUse(inner, [&](const Value* used) { read = read || used == v; });
    for (const Value* out : body->outputs())
      read = read || out == v;
  }
  return read;
}

// For every node, the values of its block that nothing after it reads: the evaluator drops them
// once the node has run, as TorchScript's interpreter does, so a run through the evaluator holds
// no more memory than the module's own forward. A block's returns stay (its owner reads them).
// Of those, `loopEntries` gets per loop node the values it only starts its carried values from
// (Note [A loop's initial values]).
inline void collectLastUses(
    const Block* block, std::unordered_map<const Node*, std::vector<const Value*>>& out,
    std::unordered_map<const Node*, std::vector<const Value*>>& loopEntries) {
  std::unordered_map<const Value*, const Node*> last;
  for (const Node* node : block->nodes()) {
    forEachUse(node, [&](const Value* v) {
      if (definedIn(v, block))
        last[v] = node;
    });
    for (const Value* v : node->outputs())
      last.emplace(v, node);  // never read: dropped right away
    for (const Block* inner : node->blocks())
      collectLastUses(inner, out, loopEntries);
  }
  for (const Value* v : block->outputs())
    last.erase(v);
  for (const auto& [value, node] : last)
    out[node].push_back(value);
  for (const Node* node : block->nodes()) {
    if (node->kind() != c10::prim::Loop)
      continue;
    for (size_t i = 2; i < node->inputs().size(); ++i) {
      const Value* v = node->input(i);
      const auto found = last.find(v);
      auto& entries = loopEntries[node];
      if (found != last.end() && found->second == node && !readInBody(node, v) &&
          std::find(entries.begin(), entries.end(), v) == entries.end())
        entries.push_back(v);
    }
  }
}

}  // namespace detail

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
      env_[params[i + 1]] = shapesOnly_ ? onMeta(inputs[i]) : inputs[i];
    if (countCost_) {
      for (size_t i = 0; i < inputs.size(); ++i)
        storagesOf(valueOf(params[i + 1]), keptAnyway_);  // the caller holds the batch
    }
    try {
      runBlock(gen_.ir_->block());
    } catch (...) {
      exitAll();
      throw;
    }
    if (countCost_) {
      // What the forward returns lives on with the caller (its loss may save it).
      std::vector<SeenStorage> returned;
      storagesOf(valueOf(gen_.ir_->outputs()[0]), returned);
      for (const auto& s : returned)
        outputCredits_.erase(s.unsafeGetStorageImpl());
      chargeRunInputs();
    }
    return valueOf(gen_.ir_->outputs()[0]);
  }

  // Which forward node handed out each autograd sequence number.
  const SequenceOwners& owners() const { return owners_; }
  SequenceOwners takeOwners() { return std::move(owners_); }

  int64_t executed() const { return executed_; }
  bool ran(RegionId branch) const { return taken_.count(branch) > 0; }
  // The branches that ran, in id order: the step's branch pattern.
  std::vector<RegionId> branchesRun() const {
    std::vector<RegionId> ids(taken_.begin(), taken_.end());
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  int64_t trips(RegionId loop) const {
    auto it = trips_.find(loop);
    return it == trips_.end() ? 0 : it->second;
  }

  // Runs a span's nodes on `inputs` (one per span input) and returns its outputs. Recording,
  // counting and attribution go on as for any other node (the forward of a recomputed segment).
  std::vector<c10::IValue> runSpan(const CheckpointSpan& span,
                                   const std::vector<c10::IValue>& inputs) {
    for (size_t i = 0; i < inputs.size(); ++i)
      env_[span.inputs[i]] = inputs[i];
    for (const Node* node = span.first;; node = node->next()) {
      runNode(node);
      dropDead(node);
      if (node == span.last)
        break;
    }
    std::vector<c10::IValue> outs;
    for (const Value* v : span.outputs)
      outs.push_back(valueOf(v));
    return outs;
  }

  // Which segments keep no activations (ForwardOptions::plan); null: none.
  void setPlan(const SegmentPlan* plan) {
    plan_ = plan != nullptr && !plan->empty() ? plan : nullptr;
    firstCalls_.clear();
    if (plan_ != nullptr) {
      for (const auto& name : plan_->recompute) {
        if (auto split = SegmentPlan::splitFirstCalls(name))
          firstCalls_[split->first] = {split->second, 0};
      }
    }
  }
  int64_t recomputed() const { return recomputed_; }
  // Hands the op sites it binds to `binder` (ForwardOptions::binder); null: none.
  void setBinder(OpBinder* binder) { binder_ = binder; }
  // The loops running around what it runs (a recomputed run's: their trips, which its sites'
  // buckets name; Note [Runs recomputed bound] in symtune/binding/binder.h).
  void setLoops(LoopFrames loops) { loops_ = std::move(loops); }
  OpBinder* binder() const { return binder_; }
  // Sums every op's template cost (ForwardOptions::countCost).
  void setCountCost(bool on) { countCost_ = on; }
  // Runs on the shapes alone (ForwardOptions::shapesOnly, Note [Shapes only]).
  void setShapesOnly(bool on) { shapesOnly_ = on; }
  // A recomputation in backward: batch norms leave their running statistics as the forward left
  // them (Note [Recomputed batch norms]).
  void setRecomputing(bool on) { recomputing_ = on; }
  const ForwardCost& cost() const { return cost_; }

 private:
  // The value `v` holds now. Every read comes after the value's definition and before the node
  // that reads it last (detail::collectLastUses): a miss is a bug of the evaluator, not of the
  // model.
  const c10::IValue& valueOf(const Value* v) const {
    const auto it = env_.find(v);
    TORCH_INTERNAL_ASSERT(it != env_.end(), "SyMuGen's evaluator read %", v->debugName(),
                          " (an output of ", v->node()->kind().toQualString(),
                          ") before it was computed or after its last reader dropped it");
    return it->second;
  }

  std::vector<c10::IValue> runBlock(const Block* block) {
    const size_t unitsOpen = units_.size();
    std::vector<const Node*> unitEnds;  // the last nodes of the units this block has open
    for (const Node* node = block->nodes().front(); node != block->return_node();
         node = node->next()) {
      const auto span = gen_.spans_.find(node);
      const bool starts = span != gen_.spans_.end();
      const auto run = gen_.runSpans_.find(node);
      const bool runStarts = run != gen_.runSpans_.end();
      if (countCost_ && starts) {
        units_.push_back(&span->second->block);
        unitEnds.push_back(span->second->last);
        openRun(*span->second, /*whole=*/true);  // what it frees, as a run's
      }
      if (plan_ != nullptr && starts && recomputesCall(span->second->block) &&
          runCheckpointed(span->second)) {
        node = span->second->last;
      } else if (plan_ != nullptr && runStarts && plan_->recompute.count(run->second->block) > 0 &&
                 runCheckpointed(run->second)) {
        node = run->second->last;
      } else if (plan_ != nullptr && runStarts && run->second->lighter != nullptr &&
                 plan_->recompute.count(run->second->lighter->block) > 0 &&
                 runCheckpointed(run->second->lighter)) {
        node = run->second->lighter->last;
      } else {
        if (countCost_ && runStarts) {
          openRun(*run->second);  // its ops run here, one by one
          if (run->second->lighter != nullptr)
            openRun(*run->second->lighter);
        }
        runNode(node);
        if (!pendingDrops_.empty())
          releaseDropped(node);
        dropDead(node);
      }
      for (size_t i = openRuns_.size(); i-- > 0;) {
        if (openRuns_[i].span->last == node)
          closeRun(i);
      }
      while (!unitEnds.empty() && unitEnds.back() == node) {
        unitEnds.pop_back();
        units_.pop_back();
      }
    }
    units_.resize(unitsOpen);
    std::vector<c10::IValue> outs;
    for (const Value* v : block->outputs())
      outs.push_back(valueOf(v));
    return outs;
  }

  // Whether the plan recomputes this call of `block`: every call, or one of its first k (Note [A
  // block's first calls]; the calls are counted as they start, in the order the counted forward
  // counts them).
  bool recomputesCall(const std::string& block) {
    if (plan_->recompute.count(block) > 0)
      return true;
    const auto first = firstCalls_.find(block);
    return first != firstCalls_.end() && first->second.second++ < first->second.first;
  }

  // After its owner has taken them: drops a block's returns that were computed inside it.
  void dropReturns(const Block* block) {
    for (const Value* v : block->outputs()) {
      if (detail::definedIn(v, block))
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
      if (shapesOnly_)
        env_[node->output()] = onMeta(env_[node->output()]);
    } else if (kind == c10::prim::GetAttr) {
      env_[node->output()] = valueOf(node->input(0)).toObject()->getAttr(node->s(c10::attr::name));
      if (shapesOnly_)
        env_[node->output()] = onMeta(env_[node->output()]);
    } else if (kind == c10::prim::SetAttr) {
      const auto object = valueOf(node->input(0)).toObject();
      // An object this forward made is its own (a `with` block's context manager): only a
      // module's attributes outlive the forward.
      TORCH_CHECK(!shapesOnly_ || made_.count(object.get()) > 0,
                  "SyMuGen: a forward on shapes alone cannot set the attribute ",
                  node->s(c10::attr::name), " (Note [Shapes only])");
      object->setAttr(node->s(c10::attr::name), valueOf(node->input(1)));
    } else if (kind == c10::prim::CreateObject) {
      const auto type = node->output()->type()->expect<c10::ClassType>();
      auto object = c10::ivalue::Object::create(c10::StrongTypePtr(type->compilation_unit(), type),
                                                type->numAttributes());
      made_.insert(object.get());
      env_[node->output()] = std::move(object);
    } else if (kind == c10::prim::Enter || kind == c10::prim::Exit) {
      runWith(node);
    } else if (kind == c10::prim::ListConstruct) {
      // Lists, tuples and dicts are interpreter instructions, not operators: build them here.
      c10::impl::GenericList list(
          node->output()->type()->expectRef<c10::ListType>().getElementType());
      for (const Value* in : node->inputs())
        list.push_back(valueOf(in));
      env_[node->output()] = std::move(list);
    } else if (kind == c10::prim::TupleConstruct) {
      std::vector<c10::IValue> items;
      for (const Value* in : node->inputs())
        items.push_back(valueOf(in));
      // A named tuple keeps its type: its fields are names the caller may read it by.
      const auto type = node->output()->type()->cast<c10::TupleType>();
      env_[node->output()] = type != nullptr && type->name()
                                 ? c10::ivalue::Tuple::createNamed(std::move(items), type)
                                 : c10::ivalue::Tuple::create(std::move(items));
    } else if (kind == c10::prim::DictConstruct) {
      const auto& type = node->output()->type()->expectRef<c10::DictType>();
      c10::impl::GenericDict dict(type.getKeyType(), type.getValueType());
      for (size_t i = 0; i + 1 < node->inputs().size(); i += 2)
        dict.insert_or_assign(valueOf(node->input(i)), valueOf(node->input(i + 1)));
      env_[node->output()] = std::move(dict);
    } else if (kind == c10::prim::TupleUnpack || kind == c10::prim::ListUnpack) {
      const c10::IValue& whole = valueOf(node->input(0));
      const auto items =
          whole.isTuple() ? whole.toTupleRef().elements().vec() : whole.toListRef().vec();
      TORCH_CHECK(items.size() == node->outputs().size(), "SyMuGen: unpacking ", items.size(),
                  " values into ", node->outputs().size());
      for (size_t i = 0; i < items.size(); ++i)
        env_[node->outputs()[i]] = items[i];
    } else if (kind == c10::prim::If) {
      const bool cond = valueOf(node->input(0)).toBool();
      const Block* branch = node->blocks()[cond ? 0 : 1];
      markTaken(branch);
      const auto outs = runBlock(branch);
      dropReturns(branch);
      for (size_t i = 0; i < outs.size(); ++i)
        env_[node->outputs()[i]] = outs[i];
    } else if (kind == c10::prim::Loop) {
      runLoop(node);
    } else if (kind == c10::Symbol::fromQualString("aten::warn")) {
      // TorchScript's interpreter runs it as an instruction of its own: its operator only says so.
      TORCH_WARN(valueOf(node->input(0)).toStringRef());
    } else {
      TORCH_CHECK(kind != c10::prim::CallMethod && kind != c10::prim::CallFunction,
                  "SyMuGen: ", kind.toQualString(), " left after inlining is not supported");
      runOperator(node);
    }
    if (recorded && record_)
      recordValues(node, id->second);
  }

  // Note [With blocks]
  // `with torch.no_grad(): ...` is, in the inlined IR, a context manager made in forward
  // (prim::CreateObject, its __init__ inlined), prim::Enter on it, the block's nodes, and
  // prim::Exit: TorchScript's interpreter calls the object's __enter__ at the Enter and its
  // __exit__(None, None, None) at the Exit, methods it runs as functions of their own. So does the
  // evaluator; a forward that throws in between exits what it entered, innermost first, so the
  // grad mode a no_grad block set does not outlive the failed step. Spans (makeSpan) and bound
  // sites (Binder::binds) stay out of `with` blocks (detail::enclosingWith): a span recomputed in
  // backward, or a fused pattern run at one of its nodes, would run its ops under another mode.
  //
  // runWith: a prim::Enter or prim::Exit; exitAll: after a failure inside with blocks, exits
  // them, innermost first (evaluator_with.cpp).
  void runWith(const Node* node);
  void exitAll() noexcept;

  void runLoop(const Node* node) {
    const Block* body = node->blocks()[0];
    const int64_t maxTrips = valueOf(node->input(0)).toInt();
    bool cond = valueOf(node->input(1)).toBool();
    std::vector<c10::IValue> carried;
    for (size_t i = 2; i < node->inputs().size(); ++i)
      carried.push_back(valueOf(node->input(i)));
    // The first trip has them (Note [A loop's initial values]); a recording forward notes the
    // loop's inputs after it, on its first execution.
    const auto entries = gen_.loopEntries_.find(node);
    const auto id = gen_.nodeIds_.find(node);
    const bool noting = record_ && id != gen_.nodeIds_.end() && seen_.count(id->second) == 0;
    if (entries != gen_.loopEntries_.end() && !noting) {
      for (const Value* v : entries->second)
        env_.erase(v);
    }
    if (binder_ != nullptr)
      loops_.enter(node, maxTrips);
    int64_t trips = 0;
    for (; trips < maxTrips && cond; ++trips) {
      std::vector<c10::IValue> args{c10::IValue(trips)};
      args.insert(args.end(), carried.begin(), carried.end());
      bindBlockInputs(body, args);
      auto outs = runBlock(body);
      cond = outs[0].toBool();
      carried.assign(outs.begin() + 1, outs.end());
    }
    if (binder_ != nullptr)
      loops_.leave(node);
    dropReturns(body);
    trips_[gen_.blockRegions_.at(body)] += trips;
    for (size_t i = 0; i < carried.size(); ++i)
      env_[node->outputs()[i]] = carried[i];
  }

  void runOperator(const Node* node) {
    torch::jit::Stack stack;
    stack.reserve(node->inputs().size());
    for (const Value* in : node->inputs())
      stack.push_back(valueOf(in));
    auto id = gen_.nodeIds_.find(node);
    const NodeId nodeId = id != gen_.nodeIds_.end() ? id->second : NodeId();
    std::vector<c10::IValue> inputs;
    if (countCost_)
      inputs = stack;
    // Note [Recomputed batch norms]
    // A batch norm in training mode normalises by the batch's statistics and moves its running
    // statistics towards them, in place. Run again in backward it would move them twice a step.
    // With momentum 0 the update leaves them as they are and the output is the same (it reads
    // the batch's statistics, not the running ones), so a recomputed span changes nothing the
    // forward did not.
    if (recomputing_ && isBatchNorm(node) && stack.size() > 6 && stack[5].isBool() &&
        stack[5].toBool())
      stack[6] = c10::IValue(0.0);
    // Note [Module state written once] in evaluator_recompute.cpp.
    if (recomputing_ && writesModuleState(node)) {
      env_[node->outputs()[0]] = std::move(stack[0]);
      return;
    }
    const uint64_t before = at::sequence_number::peek();
    {
      CurrentNodeScope scope(nodeId);  // OpTracer attributes the op's events to the node
      std::optional<nvtx::Range> range;
      if (nvtx::enabled() && nodeId.valid())
        range.emplace(nvtxLabel(nodeId));
      if (binder_ != nullptr && bound(node, nodeId)) {
        binder_->run(node, stack, loops_);
        if (auto late = binder_->takeLateOutput())
          env_[late->first] = std::move(late->second);
      } else {
        // A vararg operator (prim::Print, aten::format: a print or an f-string in forward) takes
        // its input count on top of its inputs, as TorchScript's interpreter pushes it; without
        // it the step failed with an internal assert ("expected int").
        const torch::jit::Operator* op = node->maybeOperator();
        if (op != nullptr && op->schema().is_vararg())
          stack.emplace_back(static_cast<int64_t>(node->inputs().size()));
        if (shapesOnly_)
          runOnShapes(node, stack);
        else
          operation(node)(stack);
      }
    }
    const uint64_t after = at::sequence_number::peek();
    TORCH_INTERNAL_ASSERT(stack.size() == node->outputs().size(),
                          "SyMuGen: ", node->kind().toQualString(), " left ", stack.size(),
                          " values for ", node->outputs().size(), " outputs");
    for (size_t i = 0; i < stack.size(); ++i)
      env_[node->outputs()[i]] = std::move(stack[i]);
    if (nodeId.valid())
      owners_.add(before, after, nodeId);
    if (countCost_)
      countCost(node, inputs);
  }

  static bool isBatchNorm(const Node* node) { return node->kind() == c10::aten::batch_norm; }

  // Whether `node` writes a module's tensor attribute in place, its one output its input (Note
  // [Module state written once]).
  static bool writesModuleState(const Node* node);

  // Runs `node` on shapes alone (Note [Shapes only]; evaluator_shapes.cpp).
  void runOnShapes(const Node* node, torch::jit::Stack& stack);
  // Whether ops of `kind` were found without a meta kernel (the build's, the same for every
  // forward); with `found`, notes that they are.
  static bool lacksMeta(c10::Symbol kind, bool found = false);
  // The ops LibTorch's C++ build has no meta kernel for (PyTorch registers theirs from Python)
  // whose output is a new tensor shaped as their input (norms, activations, dropout), or as a
  // gather of it (index_select, embedding): the output made on the meta device from the inputs'
  // shapes, as the op would make it. False for any other op.
  static bool shapedWithoutMeta(const Node* node, torch::jit::Stack& stack);
  // Other ops without a meta kernel whose outputs' shapes follow from their inputs' shapes and
  // scalars alone, not their values: on shapes alone they run on zero-filled tensors of their
  // inputs' shapes (their outputs new tensors: in place, an output would not share its input's
  // storage).
  static bool onZerosWithoutMeta(const Node* node);

  // Note [Shapes only]
  // A counted forward (ForwardOptions::countCost) needs only the shapes of what each op saves,
  // not the values: run on the meta device, every op computes its outputs' shapes and nothing
  // else, and costs its dispatch. The batch, the module's tensor attributes (its parameters and
  // buffers) and the graph's tensor constants go to the meta device as they are read; a meta
  // copy of a parameter or buffer counts as one (its storage is left out of the saved bytes).
  // LibTorch's C++ build lacks the meta kernels PyTorch registers from Python (layer norm,
  // convolution, ReLU, embedding, index_select among them): the norms, activations and gathers
  // make their output from their inputs' shapes (shapedWithoutMeta); convolutions and a
  // three-way `where` run on zero-filled tensors of their inputs' shapes (onZerosWithoutMeta), at
  // their real cost.
  // What needs a value refuses, and the forward throws: an `if` on a tensor (`bool(x)`, `.item()`:
  // the ResNet's gates, which read its activations), an op whose output's shape depends on its
  // input's values (`nonzero`: a MoE's tokens per expert, early exit's confident samples), any
  // other op without a meta kernel, an attribute set (it would leave a meta tensor in the module).
  // The caller then counts on the real batch.
  // `value` with its tensors (in lists and tuples too) on the meta device, each copied once.
  c10::IValue onMeta(const c10::IValue& value);

  // The node's ATen operation, made once per SyMuGen (Note [Step capture]): every forward runs
  // the same nodes.
  torch::jit::Operation& operation(const Node* node) {
    auto& ops = gen_.operations_;
    auto op = ops.find(node);
    if (op == ops.end())
      op = ops.emplace(node, node->getOperation()).first;
    return op->second;
  }

  // Whether the binder runs `node` (asked once per forward and node).
  bool bound(const Node* node, NodeId id) {
    auto it = bound_.find(node);
    if (it == bound_.end())
      it = bound_.emplace(node, binder_->binds(node, id)).first;
    return it->second;
  }

  // "#12 aten::conv2d layer1.0.conv1": the node's range in an Nsight Systems capture.
  std::string nvtxLabel(NodeId id) const {
    const GraphNode& n = gen_.staticGraph().node(id);
    std::string label = "#" + std::to_string(id.value()) + " " + n.kind;
    if (!n.modulePath.empty())
      label += " " + n.modulePath;
    return label;
  }

  // Adds the node's template cost on this execution's values to the run's totals.
  void countCost(const Node* node, const std::vector<c10::IValue>& inputs);

  // Note [Counting a run's saved bytes]
  // What recomputing a run of ops frees is what its ops save for backward of the tensors the run
  // makes itself and does not hand on: not its inputs (kept for the recompute), not its outputs
  // (read after it, and saved by their readers when they need them), not the parameters. The
  // run's ops report the operands their templates save (SavedOperands); at the run's end the
  // storages of those that are none of those are counted, each once, in bytes (a tensor two ops
  // save is freed once), with the rest of each template's sum (what the op allocates itself).
  // Blocks and loop bodies (each trip a span) are counted the same way, and the forward's total
  // too: every storage its ops save, each once, but the parameters, and the rest of each sum.
  // So every unit and the total are in one measure — bytes of memory, not the templates' sum,
  // which counts a tensor as often as ops save it (a convolution's input its ReLU saves too) —
  // and the predictor's one slope from the total's bytes to the peak holds for each unit's.
  // And what it keeps that nothing kept before is charged to it: an input that no op of the
  // forward saves (the scores a scale reads, which die with the plain forward's next op) is held
  // until the run's backward when the run is recomputed. At the forward's end, each run's inputs
  // whose storage no op saved (and that are not the batch) are taken off what it frees, each
  // storage once per run (a loop's run reads the same tensor from outside every trip), which may
  // leave nothing. Every storage seen is held, weakly, until it is counted (Note [Seen storages]).
  // And it is credited what it saves of its own outputs when no op after it saves them (a block's
  // last ReLU keeps its output, which the next op, an add, does not): recomputed, the output lives
  // only as long as its readers.
  struct OpenRun {
    const CheckpointSpan* span = nullptr;
    std::vector<SeenStorage> kept;    // inputs, parameters, outputs
    std::vector<SeenStorage> inputs;  // its inputs' (also in `kept`)
    std::vector<SeenStorage> saved;   // what its ops save
    double own = 0;                   // the templates' rest
    bool whole = false;  // a block's or a loop body's span: its FLOPs count through units_
    size_t call = 0;     // which execution of its unit it is (ForwardCost::Unit::savedByCall)
  };

  static void storagesOf(const c10::IValue& value, std::vector<SeenStorage>& out) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (t.defined() && t.has_storage())
        out.push_back(t.storage());
    } else if (value.isTuple()) {
      for (const auto& item : value.toTupleRef().elements())
        storagesOf(item, out);
    } else if (value.isList()) {
      for (const auto& item : value.toListRef())
        storagesOf(item, out);
    }
  }

  void openRun(const CheckpointSpan& span, bool whole = false);

  // The storages of the module's parameters and buffers (found once per forward).
  const std::vector<SeenStorage>& parameterStorages() {
    if (parameterStorages_.empty()) {
      for (const auto& p : gen_.module_.parameters())
        storagesOf(p, parameterStorages_);
      for (const auto& b : gen_.module_.buffers())
        storagesOf(b, parameterStorages_);
    }
    return parameterStorages_;
  }

  void countRunSaved(OpenRun& run, const Node* node, const std::vector<c10::IValue>& inputs,
                     const std::vector<ValueInfo>& in, const std::vector<ValueInfo>& out,
                     const OpCost& cost);

  // A lighter run's dropped outputs free what its closing op saves of them (Note [Runs without
  // their closing op]): counted when that op runs, each storage once.
  void countDropped(const Node* node, const std::vector<c10::IValue>& inputs);

  // Every op's saved operands, for chargeRunInputs and the forward's total.
  void noteSaved(const Node* node, const std::vector<c10::IValue>& inputs,
                 const std::vector<ValueInfo>& in, const std::vector<ValueInfo>& out,
                 const OpCost& cost);

  // The forward's saved bytes: each storage its ops save once, but the parameters, and the
  // templates' rest.
  double totalSaved();

  void chargeRunInputs();

  void closeRun(size_t index);

  void dropDead(const Node* node) {
    auto dead = gen_.lastUses_.find(node);
    if (dead != gen_.lastUses_.end()) {
      for (const Value* v : dead->second)
        env_.erase(v);
    }
  }

  // Runs `span` through a checkpoint function (symugen_checkpoint.cpp) and binds its outputs.
  // False when the span cannot be checkpointed here (no grad mode, a list input holding tensors
  // that require grad) or need not be (it reads no parameter and no input that needs a
  // gradient): the caller then runs it as usual.
  bool runCheckpointed(const std::shared_ptr<const CheckpointSpan>& span);
  // After `node` has run: frees the dropped outputs of the lighter runs it closes and arranges
  // their return before its backward (symugen_checkpoint.cpp).
  void releaseDropped(const Node* node);

  void markTaken(const Block* branch) { taken_.insert(gen_.blockRegions_.at(branch)); }

  // The first execution of a node gives its shapes (a loop body's later trips may differ).
  void recordValues(const Node* node, NodeId id) {
    if (!seen_.insert(id).second)
      return;
    GraphNode& n = g_.node(id);
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      n.inputs[i] = detail::describeRuntimeValue(node->inputs()[i], valueOf(node->inputs()[i]));
    }
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      n.outputs[i] = detail::describeRuntimeValue(node->outputs()[i], valueOf(node->outputs()[i]));
    }
  }

 private:
  SyMuGen& gen_;
  Graph& g_;
  bool record_;
  std::unordered_map<const Value*, c10::IValue> env_;
  // Objects this forward made (prim::CreateObject), and those it has entered and not exited, the
  // innermost last (Note [With blocks]).
  std::unordered_set<const c10::ivalue::Object*> made_;
  std::vector<c10::intrusive_ptr<c10::ivalue::Object>> entered_;
  SequenceOwners owners_;
  std::unordered_set<NodeId> seen_;
  std::unordered_set<RegionId> taken_;           // branches that ran at least once
  std::unordered_map<RegionId, int64_t> trips_;  // loop body -> iterations in the step
  int64_t executed_ = 0;
  const SegmentPlan* plan_ = nullptr;
  // Blocks the plan recomputes on their first calls only: k, and the calls started so far.
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> firstCalls_;
  int64_t recomputed_ = 0;
  bool countCost_ = false;
  bool recomputing_ = false;
  bool shapesOnly_ = false;
  // The meta copies of the tensors read so far (Note [Shapes only]), by the tensor copied.
  std::unordered_map<const c10::TensorImpl*, at::Tensor> metaCopies_;
  std::vector<const std::string*> units_;  // the units open around the running node (countCost_)
  // The runs of ops open around it (countCost_): a run, and its lighter variant with it.
  std::vector<OpenRun> openRuns_;
  struct DroppedToCount {
    const Node* consumer = nullptr;
    const std::string* unit = nullptr;
    std::vector<SeenStorage> storages;
  };
  std::vector<DroppedToCount> droppedToCount_;
  // Lighter runs checkpointed in this forward whose closing op has not run yet.
  std::vector<std::pair<const Node*, std::function<void(const std::vector<at::Tensor>&)>>>
      pendingDrops_;
  std::vector<SeenStorage> parameterStorages_;  // parameterStorages()
  // The batch and what the forward's ops save (kept whatever the plan), the templates' rest, and
  // each run execution's inputs (Note [Counting a run's saved bytes]).
  std::vector<SeenStorage> keptAnyway_, savedAll_;
  double savedOwn_ = 0;
  // Outputs of unit executions their own ops save and no op has saved since, with the units.
  struct OutputCredit {
    SeenStorage storage;
    std::set<const std::string*> units;
  };
  std::unordered_map<const c10::StorageImpl*, OutputCredit> outputCredits_;
  std::vector<std::pair<const std::string*, std::vector<SeenStorage>>> runInputs_;
  ForwardCost cost_;
  OpBinder* binder_ = nullptr;
  std::unordered_map<const Node*, bool> bound_;  // binder_->binds(), per node
  LoopFrames loops_;
};

}  // namespace symtune
