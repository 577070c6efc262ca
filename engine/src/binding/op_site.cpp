#include "symtune/binding/op_site.h"

#include "ir_match.h"

#include <algorithm>
#include <limits>
#include <unordered_set>
#include <vector>

#include <c10/core/GradMode.h>
#include <torch/csrc/jit/ir/constants.h>

namespace symtune::binding {

namespace detail {

using torch::jit::Node;
using torch::jit::Value;

std::optional<c10::IValue> constant(const Value* v) {
  return torch::jit::toIValue(v);
}

bool isNoneOrInt(const Value* v, int64_t expected) {
  const auto c = constant(v);
  return c.has_value() && (c->isNone() || (c->isInt() && c->toInt() == expected));
}

bool isTensor(const Value* v) {
  return v->type()->isSubtypeOf(*c10::TensorType::get());
}

bool identitySlice(const Node* node) {
  // aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None,
  //                    SymInt step=1)
  if (node->kind() != c10::aten::slice || node->inputs().size() != 5 ||
      node->outputs().size() != 1 || !isTensor(node->input(0)))
    return false;
  const auto end = constant(node->input(3));
  const bool fullEnd =
      end.has_value() &&
      (end->isNone() || (end->isInt() && end->toInt() == std::numeric_limits<int64_t>::max()));
  return constant(node->input(1)).has_value() && isNoneOrInt(node->input(2), 0) && fullEnd &&
         isNoneOrInt(node->input(4), 1) && !constant(node->input(4))->isNone();
}

bool viewed(const torch::jit::Value* v) {
  // Ops whose results are laid out afresh (or are no tensors): what reads them reads none of v's
  // strides. Every other node is taken to pass its inputs' layout on to each of its results (an
  // elementwise op, a pooling, a concatenation keep a channels-last input channels-last).
  static const std::unordered_set<c10::Symbol> fresh{
      c10::aten::contiguous,
      c10::aten::size,
      c10::aten::dim,
      c10::aten::mean,
      c10::aten::sum,
      c10::aten::amax,
      c10::aten::flatten,
      c10::aten::matmul,
      c10::aten::linear,
      c10::aten::addmm,
      c10::aten::mm,
      c10::aten::item,
      c10::aten::len,
      c10::Symbol::fromQualString("aten::numel"),
      c10::Symbol::fromQualString("aten::is_contiguous")};
  std::vector<const torch::jit::Value*> todo{v};
  std::unordered_set<const torch::jit::Value*> seen{v};
  const auto reach = [&](const torch::jit::Value* next) {
    if (seen.insert(next).second)
      todo.push_back(next);
  };
  while (!todo.empty()) {
    const torch::jit::Value* at = todo.back();
    todo.pop_back();
    for (const torch::jit::Use& use : at->uses()) {
      const Node* user = use.user;
      if (user->kind() == c10::aten::view && use.offset == 0)
        return true;
      if (fresh.count(user->kind()) != 0)
        continue;
      if (user->kind() == c10::prim::Return) {
        // A block's result: the if's or the loop's output it becomes, and in a loop's body the
        // value the next trip begins with (its first result is whether to go on).
        const Node* owner = user->owningBlock()->owningNode();
        if (owner == nullptr)
          continue;  // the graph's own output
        const bool loop = owner->kind() == c10::prim::Loop;
        const size_t k = use.offset - (loop ? 1 : 0);
        if (loop && use.offset == 0)
          continue;
        if (k < owner->outputs().size())
          reach(owner->output(k));
        if (loop && use.offset < user->owningBlock()->inputs().size())
          reach(user->owningBlock()->inputs()[use.offset]);
        continue;
      }
      if (user->kind() == c10::prim::Loop && use.offset >= 2) {
        // A carried value: the body's and the loop's (trip count and condition come first).
        const size_t k = use.offset - 2;
        if (k < user->outputs().size())
          reach(user->output(k));
        if (k + 1 < user->blocks()[0]->inputs().size())
          reach(user->blocks()[0]->inputs()[k + 1]);
        continue;
      }
      for (const torch::jit::Value* out : user->outputs())
        reach(out);
    }
  }
  return false;
}

// A slice of part of a tensor: constant dimension, constant step 1, not the whole dimension.
bool partialSlice(const Node* node) {
  if (node->kind() != c10::aten::slice || node->inputs().size() != 5 ||
      node->outputs().size() != 1 || !isTensor(node->input(0)) || identitySlice(node))
    return false;
  const auto dim = constant(node->input(1));
  const auto step = constant(node->input(4));
  return dim && dim->isInt() && step && step->isInt() && step->toInt() == 1;
}

}  // namespace detail

namespace {

using detail::constant;
using detail::identitySlice;
using detail::isTensor;
using detail::partialSlice;
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

// Whether `node` lies in `block` or in a block nested in it.
bool inside(const Node* node, const Block* block) {
  for (const Block* b = node->owningBlock(); b != nullptr;) {
    if (b == block)
      return true;
    const Node* owner = b->owningNode();
    b = owner != nullptr ? owner->owningBlock() : nullptr;
  }
  return false;
}

// The tensor a slice reads, seen through identity slices.
const Value* sliceRoot(const Value* v) {
  while (identitySlice(v->node()))
    v = v->node()->input(0);
  return v;
}

// The partial slices along `dim` of `v` and of identity slices of it.
void collectPartialSlices(const Value* v, int64_t dim, std::vector<const Node*>& out) {
  for (const torch::jit::Use& use : v->uses()) {
    const Node* user = use.user;
    if (use.offset != 0)
      continue;
    if (identitySlice(user))
      collectPartialSlices(user->output(), dim, out);
    else if (partialSlice(user) && constant(user->input(1))->toInt() == dim)
      out.push_back(user);
  }
}

// Whether something may write `v` in place: an op whose schema writes the argument it is given,
// followed through views of it (outputs that alias an input), the lists it is put in, and the
// ifs and loops it flows out of or is carried by. A use the IR does not let us follow (a call)
// counts as a write. A view from split_with_sizes must not be written in place while gradients
// are on, so split-once would make such a model fail.
bool writtenInPlace(const Value* v, int depth = 0) {
  if (depth > 32)
    return true;
  const auto follow = [depth](const Value* next) { return writtenInPlace(next, depth + 1); };
  for (const torch::jit::Use& use : v->uses()) {
    const Node* user = use.user;
    const auto kind = user->kind();
    if (kind == c10::prim::ListConstruct || kind == c10::prim::TupleConstruct) {
      if (follow(user->output()))
        return true;
      continue;
    }
    if (kind == c10::prim::Return) {
      const Node* owner = user->owningBlock()->owningNode();
      if (owner == nullptr)
        continue;  // the graph's output
      if (owner->kind() == c10::prim::If && follow(owner->output(use.offset)))
        return true;
      if (owner->kind() == c10::prim::Loop && use.offset >= 1 &&
          (follow(owner->output(use.offset - 1)) ||
           follow(owner->blocks()[0]->inputs()[use.offset])))
        return true;
      if (owner->kind() != c10::prim::If && owner->kind() != c10::prim::Loop)
        return true;
      continue;
    }
    if (kind == c10::prim::Loop) {
      if (use.offset >= 2 && (follow(user->output(use.offset - 2)) ||
                              follow(user->blocks()[0]->inputs()[use.offset - 1])))
        return true;
      continue;
    }
    if (kind == c10::prim::If || kind == c10::prim::ListUnpack || kind == c10::prim::TupleUnpack)
      continue;  // a condition; what a list or tuple holds is followed where it was made
    const c10::FunctionSchema* schema = user->maybeSchema();
    if (schema == nullptr)
      return true;  // a call, or an op without a schema: not followed
    const auto& arguments = schema->arguments();
    if (use.offset < arguments.size()) {
      const auto* alias = arguments[use.offset].alias_info();
      if (alias != nullptr && alias->isWrite())
        return true;
    }
    for (size_t i = 0; i < schema->returns().size() && i < user->outputs().size(); ++i) {
      const auto* alias = schema->returns()[i].alias_info();
      if (alias != nullptr && !alias->isWrite() && follow(user->output(i)))
        return true;
    }
  }
  return false;
}

// The loop whose counter `v` is, if it is one.
const Node* counterOf(const Value* v) {
  const Node* param = v->node();
  if (param->kind() != c10::prim::Param || v->offset() != 0)
    return nullptr;
  const Block* body = param->owningBlock();
  const Node* loop = body != nullptr ? body->owningNode() : nullptr;
  return loop != nullptr && loop->kind() == c10::prim::Loop ? loop : nullptr;
}

// Where the result of `writer` goes, if it is the body's next value for `slot`: directly, or as
// the output of an if in the body one branch of which returns it and the other the carried value
// unchanged. The if, or the writer itself; nullptr when its result goes anywhere else.
const Node* writeTarget(const Node* writer, const Value* carried, const Block* body, size_t slot) {
  const auto& uses = writer->output()->uses();
  if (uses.size() != 1)
    return nullptr;
  const torch::jit::Use& use = uses.front();
  if (writer->owningBlock() == body)
    return use.user == body->return_node() && use.offset == slot ? writer : nullptr;
  // In a branch of an if of the body: the branch returns it, the other branch the carried value.
  const Block* branch = writer->owningBlock();
  const Node* branching = branch->owningNode();
  if (branching == nullptr || branching->kind() != c10::prim::If ||
      branching->owningBlock() != body || use.user != branch->return_node())
    return nullptr;
  const size_t k = use.offset;
  const Block* other =
      branching->blocks()[0] == branch ? branching->blocks()[1] : branching->blocks()[0];
  if (other->outputs().size() <= k || other->outputs()[k] != carried)
    return nullptr;
  const auto& out = branching->outputs()[k]->uses();
  return out.size() == 1 && out.front().user == body->return_node() && out.front().offset == slot
             ? branching
             : nullptr;
}

// The loop-carried rows group of `carried`, a value `node` reads, or nullptr (Note [Loop-carried
// rows]): a loop body's tensor input whose uses are index_selects of it in the body, then one
// write of it — an index_copy, or an index_add with alpha 1 (accumulated rows), in the body or in
// a branch of an if of the body whose other branch passes the value on — whose result has no use
// but being the body's value for the next trip; every one of them along one constant dimension,
// the reads before the write (and none with a write inside an if).
std::shared_ptr<CarriedRows> findCarriedRows(const Value* carried) {
  const Node* param = carried->node();
  if (param->kind() != c10::prim::Param || carried->offset() == 0 || !isTensor(carried))
    return nullptr;
  const Block* body = param->owningBlock();
  const Node* loop = body != nullptr ? body->owningNode() : nullptr;
  if (loop == nullptr || loop->kind() != c10::prim::Loop)
    return nullptr;
  const size_t slot = carried->offset();  // body inputs (i, carried...), outputs (cond, carried...)
  if (slot >= body->outputs().size())
    return nullptr;
  auto group = std::make_shared<CarriedRows>();
  group->loop = loop;
  group->carried = carried;
  std::optional<int64_t> dim;
  const auto sameDim = [&dim](const Value* v) {
    const auto c = constant(v);
    if (!c.has_value() || !c->isInt())
      return false;
    if (!dim)
      dim = c->toInt();
    return *dim == c->toInt();
  };
  const Node* target = nullptr;  // the writer, or the if around it
  for (const torch::jit::Use& use : carried->uses()) {
    const Node* user = use.user;
    if (user->kind() == c10::prim::Return && user->owningBlock() != body)
      continue;  // a branch passing the value on: checked with the write
    if (use.offset != 0 || user->outputs().size() != 1 || !sameDim(user->input(1)))
      return nullptr;
    // aten::index_select(Tensor self, int dim, Tensor index)
    if (user->kind() == c10::aten::index_select && user->inputs().size() == 3 &&
        user->owningBlock() == body && isTensor(user->input(2))) {
      group->readers.push_back(user);
      continue;
    }
    // aten::index_copy(Tensor self, int dim, Tensor index, Tensor source)
    // aten::index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1)
    const bool copy = user->kind() == c10::aten::index_copy && user->inputs().size() == 4;
    const bool add =
        user->kind() == c10::aten::index_add && user->inputs().size() == 5 &&
        constant(user->input(4)).has_value() &&
        ((constant(user->input(4))->isInt() && constant(user->input(4))->toInt() == 1) ||
         (constant(user->input(4))->isDouble() && constant(user->input(4))->toDouble() == 1.0));
    if ((!copy && !add) || group->writer != nullptr || !isTensor(user->input(2)) ||
        !isTensor(user->input(3)))
      return nullptr;
    target = writeTarget(user, carried, body, slot);
    if (target == nullptr)
      return nullptr;
    group->writer = user;
    group->accumulate = add;
  }
  if (group->writer == nullptr)
    return nullptr;
  // Every use of the value accounted for: the branch that passes it on is the if's other one.
  for (const torch::jit::Use& use : carried->uses()) {
    if (use.user->kind() == c10::prim::Return && use.user->owningBlock() != body &&
        (target == group->writer || use.user->owningBlock()->owningNode() != target))
      return nullptr;
  }
  for (const Node* reader : group->readers) {
    if (target != group->writer || !reader->isBefore(group->writer))
      return nullptr;
  }
  std::sort(group->readers.begin(), group->readers.end(),
            [](const Node* a, const Node* b) { return a->isBefore(b); });
  group->dim = *dim;
  return group;
}

// The innermost loop around `node` that `value` is defined outside of, or nullptr.
const Node* invariantLoop(const Value* value, const Node* node) {
  for (const Block* b = node->owningBlock(); b != nullptr;) {
    const Node* owner = b->owningNode();
    if (owner == nullptr)
      return nullptr;
    if (owner->kind() == c10::prim::Loop && b == owner->blocks()[0] && !inside(value->node(), b))
      return owner;
    b = owner->owningBlock();
  }
  return nullptr;
}

// The loop-invariant rows group of `value` in `loop` (Note [Loop-carried rows]): every use of the
// tensor inside the loop's body, at any depth, an aten::index_select of it along one constant
// dimension, and nothing in the body writing a tensor in place.
std::shared_ptr<CarriedRows> findInvariantRows(const Value* value, const Node* loop) {
  const Block* body = loop->blocks()[0];
  if (!isTensor(value) || mutatesTensors(body))
    return nullptr;
  auto group = std::make_shared<CarriedRows>();
  group->loop = loop;
  group->carried = value;
  std::optional<int64_t> dim;
  for (const torch::jit::Use& use : value->uses()) {
    const Node* user = use.user;
    if (!inside(user, body))
      continue;
    const auto d = user->inputs().size() == 3 ? constant(user->input(1)) : std::nullopt;
    if (user->kind() != c10::aten::index_select || use.offset != 0 || !d || !d->isInt() ||
        (dim && *dim != d->toInt()) || !isTensor(user->input(2)))
      return nullptr;
    dim = d->toInt();
    group->readers.push_back(user);
  }
  if (group->readers.empty())
    return nullptr;
  std::sort(group->readers.begin(), group->readers.end(),
            [](const Node* a, const Node* b) { return a->isBefore(b); });
  group->dim = *dim;
  return group;
}

}  // namespace

std::string siteName(const Node* node, NodeId id, const Graph& graph) {
  std::string name = "#" + std::to_string(id.value()) + " " + node->kind().toQualString();
  if (id.valid() && static_cast<size_t>(id.value()) < graph.nodes().size()) {
    const std::string& path = graph.node(id).modulePath;
    if (!path.empty())
      name += " " + path;
  }
  return name;
}

bool mutatesTensors(const Block* block) {
  for (const Node* node : block->nodes()) {
    if (node->kind() == c10::prim::SetAttr)
      return true;
    for (const Block* inner : node->blocks()) {
      if (mutatesTensors(inner))
        return true;
    }
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr || !schema->is_mutable())
      continue;
    for (const auto& arg : schema->arguments()) {
      const auto* alias = arg.alias_info();
      if (alias != nullptr && alias->isWrite() && arg.type()->isSubtypeOf(*c10::TensorType::get()))
        return true;
    }
  }
  return false;
}

bool loopInvariant(const Value* value, const Block* body) {
  const Node* node = value->node();
  if (!inside(node, body))
    return true;
  if (node->kind() == c10::prim::Param || !node->blocks().empty())
    return false;
  if (node->kind() != c10::prim::Constant && node->kind() != c10::prim::GetAttr) {
    const c10::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr || schema->is_mutable() || node->isNondeterministic())
      return false;
  }
  for (const Value* in : node->inputs()) {
    if (!loopInvariant(in, body))
      return false;
  }
  return true;
}

std::optional<int64_t> tensorDim(const at::Tensor& tensor, int64_t dim) {
  const int64_t rank = tensor.defined() ? tensor.dim() : 0;
  if (rank == 0 || dim < -rank || dim >= rank)
    return std::nullopt;
  return dim < 0 ? dim + rank : dim;
}

std::pair<int64_t, int64_t> sliceRange(const c10::IValue& start, const c10::IValue& end,
                                       int64_t size) {
  const auto clamp = [size](int64_t i) {
    if (i < 0)
      i += size;
    return std::min(std::max<int64_t>(i, 0), size);
  };
  const int64_t s = start.isNone() ? 0 : clamp(start.toInt());
  const int64_t e = end.isNone() ? size : clamp(end.toInt());
  return {s, std::max(s, e)};
}

namespace {

// Whether autograd records what is made of `t` now: parts split from it carry gradients to it.
bool tracked(const at::Tensor& t) {
  return at::GradMode::is_enabled() && t.requires_grad();
}

// Whether `a` (noted at `version`, `aTracked`) and `b` are one value of a tensor: the same tensor,
// or views of the same memory with the same shape and strides (an identity slice run as the ATen
// op hands every reader its own view of the one tensor), not written since (`version`: views
// share their base's counter). Parts split from `a` serve `b` only if they carry gradients as
// parts of `b` would: both untracked, or both tracked back to one tensor (views of one base).
// Memory alone does not say it: a parameter split under no_grad (a validation forward) and the
// same parameter in a training forward, or a recompute's detached input and the forward's, share
// memory and version, and parts made for the first give the second no gradient.
// The group holds `a`, so its memory cannot have gone to another tensor.
bool sameValue(const at::Tensor& a, int64_t version, bool aTracked, const at::Tensor& b) {
  if (!a.defined() || !b.defined() || version != b._version() || aTracked != tracked(b))
    return false;
  if (a.is_same(b))
    return true;
  if (a.data_ptr() != b.data_ptr() || a.sizes() != b.sizes() || a.strides() != b.strides() ||
      a.dtype() != b.dtype() || a.device() != b.device())
    return false;
  return !aTracked || (a.is_view() && b.is_view() && a._base().is_same(b._base()));
}

}  // namespace

void SliceGroup::observe(const at::Tensor& source, int64_t start, int64_t end) {
  if (!sameValue(observed_, observedVersion_, observedTracked_, source)) {
    if (observed_.defined())
      setRanges(std::move(observedRanges_));
    observed_ = source;
    observedVersion_ = source._version();
    observedTracked_ = tracked(source);
    observedRanges_.clear();
  }
  observedRanges_.emplace_back(start, end);
}

void SliceGroup::setRanges(std::vector<std::pair<int64_t, int64_t>> ranges) {
  ranges_ = std::move(ranges);
  checkedSize_ = -1;
  split_ = at::Tensor();  // the next instance splits at the new ranges
  splitVersion_ = -1;
  parts_.clear();
}

bool SliceGroup::splittable(int64_t size) const {
  if (checkedSize_ == size)
    return checked_;
  checkedSize_ = size;
  checked_ = false;
  if (ranges_.size() < 2)
    return false;
  auto sorted = ranges_;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].first >= sorted[i].second || sorted[i].second > size)
      return false;  // empty or outside
    if (i > 0 && sorted[i].first < sorted[i - 1].second)
      return false;  // overlapping (or read twice)
  }
  checked_ = true;
  return true;
}

const std::vector<std::pair<std::pair<int64_t, int64_t>, at::Tensor>>& SliceGroup::partsOf(
    const at::Tensor& source, int64_t dim) {
  if (sameValue(split_, splitVersion_, splitTracked_, source))
    return parts_;
  split_ = source;
  splitVersion_ = source._version();
  splitTracked_ = tracked(source);
  parts_.clear();
  const int64_t size = source.size(dim);
  if (!splittable(size))
    return parts_;
  auto sorted = ranges_;
  std::sort(sorted.begin(), sorted.end());
  // Pieces covering the whole dimension: the ranges, and the gaps between them.
  std::vector<int64_t> sizes;
  std::vector<std::pair<int64_t, int64_t>> pieces;
  int64_t at = 0;
  for (const auto& r : sorted) {
    if (r.first > at) {
      sizes.push_back(r.first - at);
      pieces.emplace_back(-1, -1);  // a gap no slice reads
    }
    sizes.push_back(r.second - r.first);
    pieces.push_back(r);
    at = r.second;
  }
  if (at < size) {
    sizes.push_back(size - at);
    pieces.emplace_back(-1, -1);
  }
  const std::vector<at::Tensor> split = source.split_with_sizes(sizes, dim);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].first >= 0)
      parts_.emplace_back(pieces[i], split[i]);
  }
  return parts_;
}

const Node* biasGeluFollower(const Node* add) {
  // aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1)
  if (add->kind() != c10::aten::add || add->inputs().size() != 3 || add->outputs().size() != 1 ||
      !isTensor(add->input(0)) || !isTensor(add->input(1)))
    return nullptr;
  const auto alpha = constant(add->input(2));
  if (!alpha.has_value() ||
      !((alpha->isInt() && alpha->toInt() == 1) || (alpha->isDouble() && alpha->toDouble() == 1.0)))
    return nullptr;
  const auto& uses = add->output()->uses();
  if (uses.size() != 1)
    return nullptr;
  // aten::gelu(Tensor self, *, str approximate="none")
  const Node* gelu = uses.front().user;
  if (gelu->kind() != c10::aten::gelu || gelu->inputs().size() != 2 || uses.front().offset != 0 ||
      gelu->owningBlock() != add->owningBlock())
    return nullptr;
  const auto approximate = constant(gelu->input(1));
  if (!approximate.has_value() || !approximate->isString())
    return nullptr;
  return gelu;
}

const Node* biasGeluProducer(const Node* gelu) {
  if (gelu->kind() != c10::aten::gelu || gelu->inputs().size() != 2)
    return nullptr;
  const Node* add = gelu->input(0)->node();
  return biasGeluFollower(add) == gelu ? add : nullptr;
}

const Node* batchNormReluFollower(const Node* batchNorm) {
  // aten::batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean,
  //                  Tensor? running_var, bool training, float momentum, float eps,
  //                  bool cudnn_enabled)
  if (batchNorm->kind() != c10::aten::batch_norm || batchNorm->inputs().size() != 9 ||
      batchNorm->outputs().size() != 1 || !isTensor(batchNorm->input(0)))
    return nullptr;
  const auto& uses = batchNorm->output()->uses();
  if (uses.size() != 1)
    return nullptr;
  // aten::relu(Tensor self)
  const Node* relu = uses.front().user;
  if (relu->kind() != c10::aten::relu || relu->inputs().size() != 1 ||
      relu->owningBlock() != batchNorm->owningBlock())
    return nullptr;
  return relu;
}

const Node* pairProducer(const Node* node) {
  if (const Node* add = biasGeluProducer(node))
    return add;
  if (node->kind() != c10::aten::relu || node->inputs().size() != 1)
    return nullptr;
  const Node* batchNorm = node->input(0)->node();
  return batchNormReluFollower(batchNorm) == node ? batchNorm : nullptr;
}

size_t siteArity(const OpSite& site) {
  if (site.cell != nullptr)
    return site.cell->inputs.size();
  return site.node != nullptr ? site.node->inputs().size() : site.arity;
}

bool evaluating(const OpSite& site, const torch::jit::Stack& stack) {
  if (site.modeInputs.empty())
    return false;
  const size_t base = stack.size() - site.node->inputs().size();
  return std::any_of(site.modeInputs.begin(), site.modeInputs.end(), [&](size_t i) {
    return stack[base + i].isBool() && !stack[base + i].toBool();
  });
}

std::optional<OpSite> findOpSite(const Node* node, NodeId id, const Graph& graph,
                                 SiteGroups& groups) {
  OpSite site;
  site.node = node;
  site.id = id;
  if ((node->kind() == c10::aten::index_select || node->kind() == c10::aten::index_copy ||
       node->kind() == c10::aten::index_add) &&
      !node->inputs().empty()) {
    const Value* tensor = node->input(0);
    // Carried through the loop whose body it is an input of, or read in a loop it is defined
    // outside of.
    const Block* owner =
        tensor->node()->kind() == c10::prim::Param ? tensor->node()->owningBlock() : nullptr;
    const bool carried = owner != nullptr && owner->owningNode() != nullptr &&
                         owner->owningNode()->kind() == c10::prim::Loop;
    const Node* loop = carried ? owner->owningNode() : invariantLoop(tensor, node);
    if (loop == nullptr)
      return std::nullopt;
    auto found = groups.rows.find({tensor, loop});
    if (found == groups.rows.end()) {
      std::shared_ptr<CarriedRows> group;
      if (carried)
        group = findCarriedRows(tensor);
      else if (node->kind() == c10::aten::index_select)
        group = findInvariantRows(tensor, loop);
      found = groups.rows.emplace(std::make_pair(tensor, loop), std::move(group)).first;
    }
    if (found->second == nullptr)
      return std::nullopt;
    site.pattern = found->second->writer != nullptr ? kCarriedRows : kInvariantRows;
    site.loop = found->second->loop;
    site.rows = found->second;
  } else if (identitySlice(node)) {
    site.pattern = kIdentitySlice;
  } else if (partialSlice(node)) {
    const int64_t dim = constant(node->input(1))->toInt();
    const Value* root = sliceRoot(node->input(0));
    auto& group = groups.slices[{root, dim}];
    if (group == nullptr) {
      group = std::make_shared<SliceGroup>();
      collectPartialSlices(root, dim, group->members);
      if (std::any_of(group->members.begin(), group->members.end(),
                      [](const Node* m) { return writtenInPlace(m->output()); }))
        group->members.clear();  // left to ATen: split-once's views may not be written
    }
    if (group->members.size() < 2)
      return std::nullopt;  // alone: a split would cost what the slice does
    site.pattern = kPartialSlice;
    site.group = group;
  } else if (node->kind() == c10::aten::select && node->inputs().size() == 3 &&
             isTensor(node->input(0)) && constant(node->input(1)).has_value()) {
    // aten::select.int(Tensor(a) self, int dim, SymInt index)
    const Node* loop = counterOf(node->input(2));
    if (loop == nullptr)
      return std::nullopt;
    const Block* body = loop->blocks()[0];
    if (!loopInvariant(node->input(0), body) || mutatesTensors(body))
      return std::nullopt;
    site.pattern = kLoopIndexedSelect;
    site.loop = loop;
    site.counterInput = 2;
  } else if (const Node* gelu = biasGeluFollower(node)) {
    site.pattern = kBiasGelu;
    site.follower = gelu;
    site.approximate = constant(gelu->input(1))->toStringRef();
  } else if (const Node* relu = batchNormReluFollower(node)) {
    site.pattern = kBatchNormRelu;
    site.follower = relu;
    site.updated = {3, 4};  // running_mean, running_var
    site.modeInputs = {5};  // training
  } else {
    return std::nullopt;
  }
  site.name = siteName(node, id, graph);
  return site;
}

}  // namespace symtune::binding
