// Full activation checkpointing in SyMuGen's evaluator (Note [Checkpointed spans]).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <unordered_set>

#include "evaluator.h"

namespace symtune {

// Note [Checkpointed spans]
// Inlining puts each call of a top-level block (segmentBlocks()) into one contiguous run of
// nodes of the block that made the call. prepareCheckpointSpans() finds those runs by the module
// path of each node's call stack, with the values each reads from before it and the values read
// after it (Note [Segments]). The evaluator runs the spans of the blocks a SegmentPlan recomputes
// through CheckpointFunction. Its forward runs the span with grad mode off — the span's activations
// are freed as soon as their last use has run — and keeps only the span's tensor inputs. Its
// backward runs the span again with grad mode on and back-propagates the incoming gradients through
// it (reentrant, like torch.utils.checkpoint with use_reentrant=True): the parameters' gradients
// accumulate as in any backward and the inputs' gradients are returned. Control flow in a span
// reads the same values when recomputed, so it takes the same branches and trip counts.
// Spans run without checkpointing when it would be wrong: an output whose tensors are nested (a
// tuple inside a tuple, an Optional), a span that writes to one of its inputs (an in-place ReLU
// block, appending to a caller's list, prim::SetAttr on a module it was given), and — decided at
// run time — list or tuple inputs holding tensors that require grad.
// A random op inside a span draws the same numbers when recomputed (Note [Checkpoint RNG]).
// Limitation: an op that updates state it does not take as an input (batch norm's running
// statistics, read through the module) updates it once more, as with PyTorch's checkpointing.

// Note [Loop-body spans]
// A loop's trips keep their activations until the backward reaches them, so a long loop (the
// tagger's time steps) holds as many trips' activations as it runs, and a top-level block around it
// can only be checkpointed whole. A loop body is cut into runs of nodes between the nodes that
// write to a value from outside them (`outs.append(h)`: recomputing an append would append twice),
// its leading views of outside tensors left out (`gi_all[:, t]`: the span reads the view, whose
// gradient is its own size); each run that computes a tensor op is a span of its own, named after
// the loop ("rnn loop #23": the loop's node in the static graph, after its module path), and a plan
// that names the loop recomputes all of them: every trip then keeps only each run's inputs (the
// carried state, the tensors read from outside, not copied) and runs the trip's run again when the
// backward reaches it. Loops whose bodies hold a top-level block's span (a block called in a loop)
// are not cut: that block is the unit there; nor are loops around a loop that is cut (the inner
// loop is the unit).

// Note [Checkpoint RNG]
// A span's forward keeps the random state it began with — the default CPU generator's, and the
// default CUDA generator's of every device its inputs are on — and its recompute runs from that
// state, then puts back the state it found: a dropout inside a span (aten::dropout,
// symtune::bias_dropout_add) draws the same mask both times, so the gradients are those of the
// forward that ran, and the generators continue as if there had been no recompute
// (torch.utils.checkpoint's preserve_rng_state). A span none of whose nodes draws (no random op
// of aten's, no op of another namespace, which might draw without saying) keeps no state: a
// generator's state is a few kilobytes, per execution of the span — per trip of a loop-body
// span.

namespace {

constexpr int kNoBlock = -1;
constexpr int kAnyBlock = -2;  // constants: belong to whichever span surrounds them

// Every value defined inside `node` (its outputs and, recursively, its blocks' values).
void collectDefined(const Node* node, std::unordered_set<const Value*>& out) {
  for (const Value* v : node->outputs())
    out.insert(v);
  for (const Block* b : node->blocks()) {
    for (const Value* v : b->inputs())
      out.insert(v);
    for (const Node* inner : b->nodes())
      collectDefined(inner, out);
  }
}

bool containsTensor(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType)
    return true;
  for (const auto& inner : type->containedTypes()) {
    if (containsTensor(inner))
      return true;
  }
  return false;
}

bool allTensorTypes(c10::ArrayRef<c10::TypePtr> types) {
  for (const auto& t : types) {
    if (t->kind() != c10::TypeKind::TensorType)
      return false;
  }
  return true;
}

// Whether a span output of this type can pass through CheckpointFunction with its gradient: a
// Tensor, a tuple or list of Tensors, or a value holding no tensor at all (an int, a bool).
bool passable(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType || !containsTensor(type))
    return true;
  if (auto tuple = type->cast<c10::TupleType>())
    return allTensorTypes(tuple->elements());
  if (auto list = type->cast<c10::ListType>())
    return list->getElementType()->kind() == c10::TypeKind::TensorType;
  return false;
}

// Whether `node` (or a node nested in it) writes to one of `inputs` in place: recomputing the span
// would then start from the written value, or write to a leaf autograd refuses.
bool writesTo(const Node* node, const std::unordered_set<const Value*>& inputs) {
  if (node->kind() == c10::prim::SetAttr && inputs.count(node->input(0)))
    return true;
  if (const auto* schema = node->maybeSchema()) {
    for (size_t i = 0; i < node->inputs().size() && i < schema->arguments().size(); ++i) {
      const auto* alias = schema->arguments()[i].alias_info();
      if (alias && alias->isWrite() && inputs.count(node->input(i)))
        return true;
    }
  }
  for (const Block* b : node->blocks()) {
    for (const Node* inner : b->nodes()) {
      if (writesTo(inner, inputs))
        return true;
    }
  }
  return false;
}

}  // namespace

// A node that computes nothing: a view of a tensor, a shape query, a constant or list building.
bool detail::isViewOrShape(const Node* node) {
  static const std::unordered_set<c10::Symbol> kinds{
      c10::aten::select,        c10::aten::slice,
      c10::aten::view,          c10::aten::reshape,
      c10::aten::unsqueeze,     c10::aten::squeeze,
      c10::aten::transpose,     c10::aten::t,
      c10::aten::permute,       c10::aten::expand,
      c10::aten::narrow,        c10::aten::size,
      c10::aten::dim,           c10::aten::len,
      c10::aten::__getitem__,   c10::prim::Constant,
      c10::prim::ListConstruct, c10::prim::TupleConstruct,
      c10::prim::DictConstruct, c10::prim::NumToTensor};
  return kinds.count(node->kind()) != 0;
}

namespace {

bool holdsGradTensor(const c10::IValue& value) {
  if (value.isTensor())
    return value.toTensor().defined() && value.toTensor().requires_grad();
  if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) {
      if (holdsGradTensor(item))
        return true;
    }
  }
  if (value.isList()) {
    for (const auto& item : value.toListRef()) {
      if (holdsGradTensor(item))
        return true;
    }
  }
  return false;
}

bool allTensors(c10::ArrayRef<c10::IValue> items) {
  for (const auto& item : items) {
    if (!item.isTensor() || !item.toTensor().defined())
      return false;
  }
  return true;
}

// One execution of a span: what its backward needs to run it again.
struct SpanRun : torch::CustomClassHolder {
  SyMuGen* gen = nullptr;
  // The evaluator that met the span: the forward runs in it, so that a recorded step sees the
  // span's shapes, branches and trips; the recompute in backward runs in an evaluator of its own.
  SyMuGen::Evaluator* caller = nullptr;
  OpBinder* binder = nullptr;  // the caller's: the recomputation binds its sites the same way
  std::shared_ptr<const SyMuGen::CheckpointSpan> span;
  std::vector<c10::IValue> inputs;  // span inputs; tensors are taken from the function's inputs
  std::vector<int> tensorSlot;      // per span input: its index among the tensors, or -1

  // How the span's outputs map onto the function's flat tensor outputs.
  struct Output {
    enum Kind { Tensor, Tuple, List, Other } kind = Other;
    size_t first = 0, count = 0;  // tensors first .. first + count
    c10::IValue other;            // Other: the value itself (no gradient flows through it)
    c10::TypePtr elementType;     // List: the element type
    c10::TupleTypePtr tupleType;  // Tuple: a named tuple's type (its field names)
  };
  std::vector<Output> layout;

  std::vector<c10::IValue> run(const torch::autograd::variable_list& tensors) {
    std::vector<c10::IValue> in = inputs;
    for (size_t i = 0; i < in.size(); ++i) {
      if (tensorSlot[i] >= 0)
        in[i] = tensors[static_cast<size_t>(tensorSlot[i])];
    }
    if (caller != nullptr) {
      SyMuGen::Evaluator* first = caller;
      caller = nullptr;  // the backward must not reach an evaluator that has gone
      return first->runSpan(*span, in);
    }
    Graph unused;
    SyMuGen::Evaluator eval(*gen, unused, /*record=*/false);
    eval.setBinder(binder);
    return eval.runSpan(*span, in);
  }

  torch::autograd::variable_list flatten(const std::vector<c10::IValue>& outs, bool learn) {
    torch::autograd::variable_list flat;
    if (learn)
      layout.clear();
    for (const auto& value : outs) {
      Output o;
      o.first = flat.size();
      if (value.isTensor() && value.toTensor().defined()) {
        o.kind = Output::Tensor;
        flat.push_back(value.toTensor());
      } else if (value.isTuple() && allTensors(value.toTupleRef().elements())) {
        o.kind = Output::Tuple;
        if (const auto type = value.toTupleRef().type(); type->name())
          o.tupleType = type;
        for (const auto& item : value.toTupleRef().elements())
          flat.push_back(item.toTensor());
      } else if (value.isList() && allTensors(value.toListRef())) {
        o.kind = Output::List;
        o.elementType = value.toList().elementType();
        for (const auto& item : value.toListRef())
          flat.push_back(item.toTensor());
      } else {
        o.other = value;
      }
      o.count = flat.size() - o.first;
      if (learn)
        layout.push_back(std::move(o));
    }
    return flat;
  }

  std::vector<c10::IValue> unflatten(const torch::autograd::variable_list& flat) const {
    std::vector<c10::IValue> outs;
    for (const auto& o : layout) {
      const auto items = c10::ArrayRef<at::Tensor>(flat).slice(o.first, o.count);
      switch (o.kind) {
        case Output::Tensor:
          outs.emplace_back(items[0]);
          break;
        case Output::Tuple:
          outs.emplace_back(
              o.tupleType ? c10::ivalue::Tuple::createNamed(
                                std::vector<c10::IValue>(items.begin(), items.end()), o.tupleType)
                          : c10::ivalue::Tuple::create(
                                std::vector<c10::IValue>(items.begin(), items.end())));
          break;
        case Output::List: {
          c10::impl::GenericList list(o.elementType);
          for (const auto& t : items)
            list.push_back(t);
          outs.emplace_back(std::move(list));
          break;
        }
        case Output::Other:
          outs.push_back(o.other);
          break;
      }
    }
    return outs;
  }
};

// Generators and their states (Note [Checkpoint RNG]).
struct RngStates : torch::CustomClassHolder {
  std::vector<std::pair<at::Generator, at::Tensor>> states;

  // The CPU generator's state and the CUDA generators' of the devices `tensors` are on.
  static c10::intrusive_ptr<RngStates> take(at::TensorList tensors) {
    auto taken = c10::make_intrusive<RngStates>();
    taken->add(at::detail::getDefaultCPUGenerator());
    std::set<c10::DeviceIndex> devices;
    for (const auto& t : tensors) {
      if (t.defined() && t.is_cuda())
        devices.insert(t.get_device());
    }
    for (const c10::DeviceIndex d : devices)
      taken->add(at::globalContext().defaultGenerator(at::Device(at::kCUDA, d)));
    return taken;
  }

  // Sets every generator to its kept state; returns the states they had.
  c10::intrusive_ptr<RngStates> swapIn() const {
    auto previous = c10::make_intrusive<RngStates>();
    for (const auto& [generator, state] : states) {
      at::Generator g = generator;
      std::lock_guard<std::mutex> lock(g.mutex());
      previous->states.emplace_back(g, g.get_state());
      g.set_state(state);
    }
    return previous;
  }

 private:
  void add(at::Generator g) {
    std::lock_guard<std::mutex> lock(g.mutex());
    states.emplace_back(g, g.get_state());
  }
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `tensors`: the span's tensor inputs, then a grad-requiring placeholder so that the outputs
  // require grad even when no input does (the span's parameters are not inputs).
  // (A TensorList, not a vector: only a TensorList's tensors count as the function's inputs.)
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs,
                                                c10::intrusive_ptr<SpanRun> run) {
    torch::autograd::variable_list tensors = inputs.vec();
    tensors.pop_back();
    ctx->save_for_backward(tensors);
    if (run->span->draws)
      ctx->saved_data["rng"] = c10::IValue::make_capsule(RngStates::take(tensors));
    auto outs = run->flatten(run->run(tensors), /*learn=*/true);
    ctx->saved_data["run"] = c10::IValue::make_capsule(run);
    return outs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto run = c10::static_intrusive_pointer_cast<SpanRun>(ctx->saved_data["run"].toCapsule());
    torch::autograd::variable_list inputs;
    for (const auto& t : ctx->get_saved_variables())
      inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
    torch::autograd::variable_list outs;
    {
      at::AutoGradMode grad(true);
      const auto kept = ctx->saved_data.find("rng");
      const auto found =
          kept != ctx->saved_data.end()
              ? c10::static_intrusive_pointer_cast<RngStates>(kept->second.toCapsule())->swapIn()
              : c10::make_intrusive<RngStates>();
      try {
        outs = run->flatten(run->run(inputs), /*learn=*/false);
      } catch (...) {
        found->swapIn();
        throw;
      }
      found->swapIn();
    }
    torch::autograd::variable_list roots, rootGrads;
    for (size_t i = 0; i < outs.size() && i < grads.size(); ++i) {
      if (outs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outs[i]);
        rootGrads.push_back(grads[i]);
      }
    }
    if (!roots.empty())
      torch::autograd::backward(roots, rootGrads);
    torch::autograd::variable_list result;
    for (const auto& in : inputs)
      result.push_back(in.requires_grad() ? in.grad() : at::Tensor());
    result.emplace_back();  // the placeholder
    result.emplace_back();  // `run`, not a tensor
    return result;
  }
};

}  // namespace

// The span of `owner`'s nodes first..last named `name`, with what it reads from before it and
// what is read after it; null when checkpointing would get it wrong: an output whose tensors are
// nested (a tuple holding a tuple, an Optional) would lose its gradient, and a span that writes to
// its own input (an in-place ReLU block) cannot be recomputed from it.
std::shared_ptr<SyMuGen::CheckpointSpan> detail::makeSpan(const Block* owner, const Node* first,
                                                          const Node* last, std::string name) {
  auto span = std::make_shared<SyMuGen::CheckpointSpan>();
  span->block = std::move(name);
  span->first = first;
  span->last = last;
  std::unordered_set<const Value*> defined, seen;
  for (const Node* n = first;; n = n->next()) {
    collectDefined(n, defined);
    if (n == last)
      break;
  }
  for (const Node* n = first;; n = n->next()) {
    detail::forEachUse(n, [&](const Value* v) {
      if (!defined.count(v) && seen.insert(v).second)
        span->inputs.push_back(v);
    });
    if (n == last)
      break;
  }
  std::unordered_set<const Value*> readAfter;
  for (const Node* n = last->next(); n != owner->return_node(); n = n->next())
    detail::forEachUse(n, [&](const Value* v) { readAfter.insert(v); });
  for (const Value* v : owner->outputs())
    readAfter.insert(v);
  for (const Node* n = first;; n = n->next()) {
    for (const Value* v : n->outputs()) {
      if (readAfter.count(v))
        span->outputs.push_back(v);
    }
    if (n == last)
      break;
  }
  for (const Value* v : span->outputs) {
    if (!passable(v->type()))
      return nullptr;
  }
  const std::unordered_set<const Value*> inputs(span->inputs.begin(), span->inputs.end());
  for (const Node* n = first;; n = n->next()) {
    if (writesTo(n, inputs))
      return nullptr;
    if (n == last)
      break;
  }
  span->draws = false;
  span->readsAttributes = false;
  std::function<void(const Node*)> drawsIn = [&](const Node* n) {
    // aten's and prim's random ops say so; another namespace's op (symtune::bias_dropout_add)
    // may draw without saying.
    const bool known = n->kind().is_aten() || n->kind().is_prim();
    span->draws = span->draws || n->isNondeterministic() || (!known && n->maybeSchema());
    span->readsAttributes = span->readsAttributes || (n->kind() == c10::prim::GetAttr &&
                                                      containsTensor(n->output()->type()));
    for (const Block* b : n->blocks()) {
      for (const Node* inner : b->nodes())
        drawsIn(inner);
    }
  };
  for (const Node* n = first;; n = n->next()) {
    drawsIn(n);
    if (n == last)
      break;
  }
  return span;
}

std::vector<std::string> SyMuGen::segmentBlocks() const {
  std::vector<std::string> blocks;
  for (const auto& child : module_.named_children()) {
    const auto type = child.value.type()->name();
    if (type && type->name().rfind("Sequential", 0) == 0) {
      for (const auto& member : child.value.named_children())
        blocks.push_back(child.name + "." + member.name);
    } else {
      blocks.push_back(child.name);
    }
  }
  return blocks;
}

void SyMuGen::prepareCheckpointSpans() {
  if (spansReady_)
    return;
  spansReady_ = true;
  std::vector<std::string> blocks = segmentBlocks();
  auto blockOf = [&](const Node* node) {
    if (node->kind() == c10::prim::Constant)
      return kAnyBlock;
    const std::string path = detail::modulePathOf(node);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (path == blocks[i] || path.rfind(blocks[i] + ".", 0) == 0)
        return static_cast<int>(i);
    }
    return kNoBlock;
  };
  auto addSpan = [&](const Block* owner, const Node* first, const Node* last, int block) {
    if (auto span = detail::makeSpan(owner, first, last, blocks[static_cast<size_t>(block)]))
      spans_[first] = std::move(span);
  };
  auto addLoopSpan = [&](const Block* body, const Node* first, const Node* last,
                         const std::string& name) {
    // Leading views and shape queries stay outside: a view of a tensor from outside the loop
    // (`gi_all[:, t]`) is then the span's input and gets the gradient of its own size, where the
    // whole tensor as the input would get a zero-filled gradient of its whole size every trip.
    while (first != last && detail::isViewOrShape(first))
      first = first->next();
    bool computes = false;
    for (const Node* n = first;; n = n->next()) {
      computes = computes ||
                 (n->kind().is_aten() && !detail::isViewOrShape(n) && n->outputs().size() > 0 &&
                  n->output(0)->type()->kind() == c10::TypeKind::TensorType);
      if (n == last)
        break;
    }
    if (!computes || spans_.count(first) != 0)
      return;
    blocks.push_back(name);  // addSpan names the span after blocks[block]
    addSpan(body, first, last, static_cast<int>(blocks.size() - 1));
    if (spans_.count(first) != 0 &&
        std::find(loopSpans_.begin(), loopSpans_.end(), name) == loopSpans_.end())
      loopSpans_.push_back(name);
  };
  // Spans within each block; the blocks of nodes outside any span are searched too (a block
  // called in a loop body).
  std::function<void(const Block*)> scan = [&](const Block* b) {
    const Node* first = nullptr;
    const Node* last = nullptr;
    int current = kNoBlock;
    for (const Node* node : b->nodes()) {
      const int block = blockOf(node);
      if (block == kAnyBlock)
        continue;
      if (block != current) {
        if (current >= 0)
          addSpan(b, first, last, current);
        current = block;
        first = node;
      }
      last = node;
      if (block == kNoBlock) {
        for (const Block* inner : node->blocks())
          scan(inner);
      }
    }
    if (current >= 0)
      addSpan(b, first, last, current);
  };
  scan(ir_->block());

  // Loop bodies (Note [Loop-body spans]), at any depth, where no top-level span lies in them.
  std::function<bool(const Block*)> holdsSpan = [&](const Block* b) {
    for (const Node* n : b->nodes()) {
      if (spans_.count(n) != 0)
        return true;
      for (const Block* inner : n->blocks()) {
        if (holdsSpan(inner))
          return true;
      }
    }
    return false;
  };
  std::vector<const Node*> loops;
  std::function<void(const Block*)> findLoops = [&](const Block* b) {
    for (const Node* n : b->nodes()) {
      if (n->kind() == c10::prim::Loop)
        loops.push_back(n);
      for (const Block* inner : n->blocks())
        findLoops(inner);
    }
  };
  findLoops(ir_->block());
  // Inner loops first: an outer loop whose body then holds an inner loop's spans is not cut (the
  // inner loop is the unit there), so no op counts for two loops a plan could take apart.
  for (size_t k = loops.size(); k-- > 0;) {
    const Node* loop = loops[k];
    const Block* body = loop->blocks()[0];
    if (holdsSpan(body))
      continue;
    // Named by its node in the static graph; a loop the graph does not show, by its place among
    // the loops ("loop k3").
    const auto id = nodeIds_.find(loop);
    const std::string path = detail::modulePathOf(loop);
    const std::string name = (path.empty() ? "" : path + " ") +
                             (id != nodeIds_.end() ? "loop #" + std::to_string(id->second.value())
                                                   : "loop k" + std::to_string(k));
    const int parent = blockOf(loop);
    loopParents_[name] = parent >= 0 ? blocks[static_cast<size_t>(parent)] : "";
    const Node* first = nullptr;
    const Node* last = nullptr;
    for (const Node* n : body->nodes()) {
      std::unordered_set<const Value*> inside, outside;
      collectDefined(n, inside);
      detail::forEachUse(n, [&](const Value* v) {
        if (!inside.count(v))
          outside.insert(v);
      });
      if (writesTo(n, outside)) {
        if (first != nullptr)
          addLoopSpan(body, first, last, name);
        first = last = nullptr;
        continue;
      }
      if (first == nullptr)
        first = n;
      last = n;
    }
    if (first != nullptr)
      addLoopSpan(body, first, last, name);
  }

  detail::cutOpRuns(spans_, nodeIds_, runSpans_, opRuns_, runParents_);
}

const std::vector<std::string>& SyMuGen::opRuns() {
  prepareCheckpointSpans();
  return opRuns_;
}

const std::vector<std::string>& SyMuGen::loopSpans() {
  prepareCheckpointSpans();
  return loopSpans_;
}

std::vector<SyMuGen::RecomputableUnit> SyMuGen::recomputableUnits() {
  std::vector<RecomputableUnit> units;
  for (auto& block : segmentBlocks())
    units.push_back({std::move(block), ""});
  for (const auto& loop : loopSpans())
    units.push_back({loop, loopParents_.at(loop)});
  for (const auto& run : opRuns())
    units.push_back({run, runParents_.at(run)});
  return units;
}

std::map<std::string, std::vector<NodeId>> SyMuGen::unitNodes() {
  prepareCheckpointSpans();
  std::map<std::string, std::vector<NodeId>> nodes;
  std::function<void(const Node*, std::vector<NodeId>&)> collect = [&](const Node* n,
                                                                       std::vector<NodeId>& out) {
    if (const auto id = nodeIds_.find(n); id != nodeIds_.end())
      out.push_back(id->second);
    for (const Block* b : n->blocks()) {
      for (const Node* inner : b->nodes())
        collect(inner, out);
    }
  };
  for (const auto* spans : {&spans_, &runSpans_}) {
    for (const auto& [first, span] : *spans) {
      std::vector<NodeId>& out = nodes[span->block];
      for (const Node* n = span->first;; n = n->next()) {
        collect(n, out);
        if (n == span->last)
          break;
      }
    }
  }
  for (auto& [name, ids] : nodes) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return nodes;
}

bool SyMuGen::Evaluator::runCheckpointed(const std::shared_ptr<const CheckpointSpan>& spanRef) {
  if (!at::GradMode::is_enabled())
    return false;
  const CheckpointSpan& span = *spanRef;
  auto run = c10::make_intrusive<SpanRun>();
  run->gen = &gen_;
  run->caller = this;
  run->binder = binder_;
  run->span = spanRef;
  torch::autograd::variable_list tensors;
  for (const Value* v : span.inputs) {
    const c10::IValue& value = valueOf(v);
    if (value.isTensor() && value.toTensor().defined()) {
      run->tensorSlot.push_back(static_cast<int>(tensors.size()));
      run->inputs.emplace_back();
      tensors.push_back(value.toTensor());
    } else {
      if (holdsGradTensor(value))
        return false;  // gradients could not flow back through it
      run->tensorSlot.push_back(-1);
      run->inputs.push_back(value);
    }
  }
  // A span that reads no parameter and no input that needs a gradient runs as usual: through
  // the function its outputs would need one.
  if (!span.readsAttributes && std::none_of(tensors.begin(), tensors.end(),
                                            [](const at::Tensor& t) { return t.requires_grad(); }))
    return false;
  tensors.push_back(torch::empty({0}, torch::requires_grad()));
  const auto outs = CheckpointFunction::apply(at::TensorList(tensors), run);
  const auto values = run->unflatten(outs);
  for (size_t i = 0; i < values.size(); ++i)
    env_[span.outputs[i]] = values[i];
  for (const Node* node = span.first;; node = node->next()) {
    dropDead(node);  // the span's inputs whose last reader was in it
    if (node == span.last)
      break;
  }
  ++recomputed_;
  return true;
}

}  // namespace symtune
