// Where SyMuGen's checkpointed spans lie: the top-level blocks' calls, loop bodies, runs of ops
// (Note [Checkpointed spans] in symugen_checkpoint.cpp, which runs them).

#include <algorithm>
#include <functional>
#include <unordered_set>
#include <vector>

#include "evaluator.h"

namespace symtune {

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
// Tensor, a tuple or list of Tensors, a value holding no tensor at all (an int, a bool), or a
// submodule.
bool passable(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType || !containsTensor(type))
    return true;
  // A submodule (a GetAttr of the module that a later op reads its parameters through) passes as
  // itself: gradients reach its parameters through the ops that read them.
  if (const auto cls = type->cast<c10::ClassType>(); cls != nullptr && cls->is_module())
    return true;
  if (auto tuple = type->cast<c10::TupleType>())
    return allTensorTypes(tuple->elements());
  if (auto list = type->cast<c10::ListType>())
    return list->getElementType()->kind() == c10::TypeKind::TensorType;
  return false;
}

// Whether a value of this type may share a tensor's memory: a tensor, or a list, tuple or optional
// holding one. Not an object (a module: its attributes are read through GetAttr, and a batch
// norm's counter written so is Note [Recomputed batch norms]'s).
bool mayHoldTensorData(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType)
    return true;
  if (type->cast<c10::ClassType>() != nullptr)
    return false;
  for (const auto& inner : type->containedTypes()) {
    if (mayHoldTensorData(inner))
      return true;
  }
  return false;
}

// Adds to `aliases` the values `node` (and the nodes nested in it) makes that may share memory
// with one already in it: a view (select, slice, view, transpose: an output its schema marks as
// aliasing an argument), an element of a list or tuple, a block's value. Conservative: a node
// without a schema that reads an alias gives aliases.
void addAliases(const Node* node, std::unordered_set<const Value*>& aliases) {
  const auto* schema = node->maybeSchema();
  bool reads = false;
  for (size_t i = 0; i < node->inputs().size() && !reads; ++i) {
    if (!aliases.count(node->input(i)))
      continue;
    reads = schema == nullptr ||
            (i < schema->arguments().size() && schema->arguments()[i].alias_info() != nullptr);
  }
  if (reads) {
    for (const Block* b : node->blocks()) {
      for (const Value* v : b->inputs()) {
        if (mayHoldTensorData(v->type()))
          aliases.insert(v);
      }
    }
  }
  bool fromBlocks = false;
  for (const Block* b : node->blocks()) {
    for (const Node* inner : b->nodes())
      addAliases(inner, aliases);
    for (const Value* v : b->outputs())
      fromBlocks = fromBlocks || aliases.count(v) != 0;
  }
  if (!reads && !fromBlocks)
    return;
  for (size_t o = 0; o < node->outputs().size(); ++o) {
    const Value* out = node->output(o);
    const bool aliasing = schema == nullptr || fromBlocks ||
                          (o < schema->returns().size() && schema->returns()[o].alias_info());
    if (aliasing && mayHoldTensorData(out->type()))
      aliases.insert(out);
  }
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

// Whether what runs after the span first..last of `owner` may write to one of its `inputs` in
// place (`h.mul_(2)` once the span read h): the recompute in backward would start from the
// written value. Until 2026-12-07 such a span was recomputed and the backward failed ("modified
// by an inplace operation"). Looked for in the rest of its block and of the blocks around it,
// through the views made of the inputs and the tensors they are views of (`x = h[0:5]` before the
// span: `h.mul_(2)` writes x). Not in a loop body's nodes before the span, which its next
// iteration runs after it: looking there too changed what the tagger's loop may recompute, and
// engine.remat.bound_budget's binder slack no longer widened under a tight budget. A write there
// that reaches the span's input is left to autograd's version check.
bool writtenAfter(const Block* owner, const Node* first, const Node* last,
                  const std::vector<const Value*>& inputs) {
  std::unordered_set<const Value*> outside;
  for (const Value* v : inputs) {
    if (mayHoldTensorData(v->type()))
      outside.insert(v);
  }
  // The tensors a view before `anchor` in `block` was made of (conservative: a node without a
  // schema gives all its inputs).
  const auto addBases = [&](const Block* block, const Node* anchor) {
    for (const Node* n = anchor->prev(); n != block->param_node(); n = n->prev()) {
      bool makesOne = false;
      for (const Value* out : n->outputs())
        makesOne = makesOne || outside.count(out) != 0;
      if (!makesOne)
        continue;
      const auto* schema = n->maybeSchema();
      for (size_t i = 0; i < n->inputs().size(); ++i) {
        const Value* in = n->input(i);
        if (mayHoldTensorData(in->type()) &&
            (schema == nullptr ||
             (i < schema->arguments().size() && schema->arguments()[i].alias_info() != nullptr)))
          outside.insert(in);
      }
    }
  };
  // Whether a node of `block` from `from` on writes to one.
  const auto writes = [&](const Block* block, const Node* from) {
    for (const Node* n : block->nodes())
      addAliases(n, outside);
    for (const Node* n = from; n != block->return_node(); n = n->next()) {
      if (writesTo(n, outside))
        return true;
    }
    return false;
  };
  addBases(owner, first);
  if (writes(owner, last->next()))
    return true;
  for (const Node* at = owner->owningNode(); at != nullptr; at = at->owningBlock()->owningNode()) {
    addBases(at->owningBlock(), at);
    if (writes(at->owningBlock(), at->next()))
      return true;
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

// The span of `owner`'s nodes first..last named `name`, with what it reads from before it and
// what is read after it; null when checkpointing would get it wrong: an output whose tensors are
// nested (a tuple holding a tuple, an Optional) would lose its gradient, and a span that writes to
// its own input (an in-place ReLU block) cannot be recomputed from it.
std::shared_ptr<SyMuGen::CheckpointSpan> detail::makeSpan(const Block* owner, const Node* first,
                                                          const Node* last, std::string name) {
  // Not in a `with` block nor holding one's ends (Note [With blocks] in evaluator.h): recomputed
  // in backward it would run under backward's grad mode, not the block's.
  if (detail::enclosingWith(first) != nullptr)
    return nullptr;
  std::function<bool(const Node*)> withEnd = [&](const Node* n) {
    if (n->kind() == c10::prim::Enter || n->kind() == c10::prim::Exit)
      return true;
    for (const Block* b : n->blocks()) {
      for (const Node* inner : b->nodes()) {
        if (withEnd(inner))
          return true;
      }
    }
    return false;
  };
  for (const Node* n = first;; n = n->next()) {
    if (withEnd(n))
      return nullptr;
    if (n == last)
      break;
  }
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
  // Its inputs and what may share their memory: `x[:, 0] += 1` writes to the input through a
  // select made in the span, which the recompute would write again (the gradients came out
  // wrong).
  std::unordered_set<const Value*> inputs;
  for (const Value* v : span->inputs) {
    inputs.insert(v);
  }
  std::unordered_set<const Value*> aliases;
  for (const Value* v : span->inputs) {
    if (mayHoldTensorData(v->type()))
      aliases.insert(v);
  }
  for (const Node* n = first;; n = n->next()) {
    addAliases(n, aliases);
    if (n == last)
      break;
  }
  inputs.insert(aliases.begin(), aliases.end());
  for (const Node* n = first;; n = n->next()) {
    if (writesTo(n, inputs))
      return nullptr;
    if (n == last)
      break;
  }
  if (writtenAfter(owner, first, last, span->inputs))
    return nullptr;
  span->draws = false;
  span->readsAttributes = false;
  std::function<void(const Node*)> readsIn = [&](const Node* n) {
    span->readsAttributes = span->readsAttributes || (n->kind() == c10::prim::GetAttr &&
                                                      containsTensor(n->output()->type()));
    for (const Block* b : n->blocks()) {
      for (const Node* inner : b->nodes())
        readsIn(inner);
    }
  };
  for (const Node* n = first;; n = n->next()) {
    span->draws = span->draws || detail::mayDraw(n);
    readsIn(n);
    if (n == last)
      break;
  }
  return span;
}

std::string SegmentPlan::firstCallsName(const std::string& block, int64_t calls) {
  TORCH_CHECK(calls >= 1, "SegmentPlan: the first calls of \"", block, "\" are at least one, got ",
              calls);
  return block + " [first " + std::to_string(calls) + (calls == 1 ? " call]" : " calls]");
}

std::optional<std::pair<std::string, int64_t>> SegmentPlan::splitFirstCalls(
    const std::string& name) {
  const size_t open = name.rfind(" [first ");
  if (open == std::string::npos || name.back() != ']')
    return std::nullopt;
  const std::string count = name.substr(open + 8, name.size() - 1 - (open + 8));
  const size_t space = count.find(' ');
  if (space == std::string::npos || space == 0)
    return std::nullopt;
  int64_t calls = 0;
  for (size_t i = 0; i < space; ++i) {
    if (count[i] < '0' || count[i] > '9' || calls > (int64_t{1} << 40))
      return std::nullopt;
    calls = calls * 10 + (count[i] - '0');
  }
  const std::string word = count.substr(space + 1);
  if (calls < 1 || word != (calls == 1 ? "call" : "calls"))
    return std::nullopt;
  return std::make_pair(name.substr(0, open), calls);
}

bool SegmentPlan::recomputesAny(const std::string& unit) const {
  if (recompute.count(unit) > 0)
    return true;
  const auto after = recompute.lower_bound(unit + " [first ");
  if (after == recompute.end())
    return false;
  const auto split = splitFirstCalls(*after);
  return split && split->first == unit;
}

std::vector<std::string> SyMuGen::segmentBlocks() const {
  std::vector<std::string> blocks;
  for (const auto& child : module_.named_children()) {
    const auto type = child.value.type()->name();
    // A chain or a list: its members are called one by one (a ModuleList's in a loop that
    // TorchScript unrolls).
    if (type && (type->name().rfind("Sequential", 0) == 0 || type->name() == "ModuleList")) {
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
  const auto add = [&](const CheckpointSpan& span) {
    std::vector<NodeId>& out = nodes[span.block];
    for (const Node* n = span.first;; n = n->next()) {
      collect(n, out);
      if (n == span.last)
        break;
    }
  };
  for (const auto* spans : {&spans_, &runSpans_}) {
    for (const auto& [first, span] : *spans) {
      add(*span);
      if (span->lighter != nullptr)
        add(*span->lighter);
    }
  }
  for (auto& [name, ids] : nodes) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return nodes;
}

// A lighter run's outputs wait for its closing op (Note [Runs without their closing op]): the
// storages of the dropped ones that nothing else the step keeps shares (an input, a parameter,
// another output) are freed once that op has run, and the op's output gets the hook that fills
// them back.

}  // namespace symtune
