// The cell sites' regions (Note [Cell sites] in symtune/binding/op_site.h): a GRU cell's gates
// written out, matched from the where (or the blend) back; a recurrent matmul and its bias add;
// attention; a residual add and its layer norm; a bias add, its dropout and the residual add; a
// batch norm, its ReLU and the convolution after them.

#include <algorithm>
#include <array>

#include "../graph/ir_values.h"
#include "ir_match.h"
#include "symtune/binding/op_site.h"

namespace symtune::binding {

using detail::constant;
using detail::identitySlice;
using detail::isTensor;
using detail::partialSlice;
using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

int CellRegion::indexOf(const Node* node) const {
  const auto it = std::find(nodes.begin(), nodes.end(), node);
  return it == nodes.end() ? -1 : static_cast<int>(it - nodes.begin());
}

namespace {

bool isOne(const Value* v) {
  const auto c = constant(v);
  return c.has_value() &&
         ((c->isInt() && c->toInt() == 1) || (c->isDouble() && c->toDouble() == 1.0));
}

// The node computing `v` when it is `kind` with `inputs` inputs and one output, else nullptr.
const Node* producer(const Value* v, c10::Symbol kind, size_t inputs) {
  const Node* n = v->node();
  return n->kind() == kind && n->inputs().size() == inputs && n->outputs().size() == 1 ? n
                                                                                       : nullptr;
}

// aten::add.Tensor(a, b, alpha=1) of two tensors.
const Node* tensorAdd(const Value* v) {
  const Node* n = producer(v, c10::aten::add, 3);
  return n != nullptr && isTensor(n->input(0)) && isTensor(n->input(1)) && isOne(n->input(2))
             ? n
             : nullptr;
}

// aten::mul.Tensor(a, b) of two tensors.
const Node* tensorMul(const Value* v) {
  const Node* n = producer(v, c10::aten::mul, 2);
  return n != nullptr && isTensor(n->input(0)) && isTensor(n->input(1)) ? n : nullptr;
}

// What the matcher of a GRU cell collects.
struct CellMatch {
  std::vector<const Node*> nodes;
  bool add(const Node* n) {
    if (n == nullptr)
      return false;
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end())
      nodes.push_back(n);
    return true;
  }
};

// `v` = 1 - z, as aten::rsub(z, 1, 1) or as TorchScript writes it: aten::add(aten::neg(z), 1, 1).
const Value* oneMinus(const Value* v, CellMatch& m) {
  if (const Node* rsub = producer(v, c10::aten::rsub, 3)) {
    if (isTensor(rsub->input(0)) && isOne(rsub->input(1)) && isOne(rsub->input(2))) {
      m.add(rsub);
      return rsub->input(0);
    }
    return nullptr;
  }
  const Node* add = producer(v, c10::aten::add, 3);
  if (add == nullptr || !isTensor(add->input(0)) || !isOne(add->input(1)) || !isOne(add->input(2)))
    return nullptr;
  const Node* neg = producer(add->input(0), c10::aten::neg, 1);
  if (neg == nullptr)
    return nullptr;
  m.add(add);
  m.add(neg);
  return neg->input(0);
}

// A gate slice: a partial slice with constant step 1 (the bounds are checked when it runs), its
// identity slices down to the projection it reads added to the match. The projection.
const Value* gateSlice(const Value* v, CellMatch& m, const Node** slice) {
  const Node* n = v->node();
  if (!partialSlice(n))
    return nullptr;
  *slice = n;
  m.add(n);
  const Value* root = n->input(0);
  while (identitySlice(root->node())) {
    m.add(root->node());
    root = root->node()->input(0);
  }
  return root;
}

// sigmoid(a + b) of a slice of each projection: the slices, in-projection's first.
bool sigmoidGate(const Value* v, const Value* in, const Value* hidden, CellMatch& m,
                 const Node** inSlice, const Node** hiddenSlice) {
  const Node* sigmoid = producer(v, c10::aten::sigmoid, 1);
  const Node* add = sigmoid != nullptr ? tensorAdd(sigmoid->input(0)) : nullptr;
  if (add == nullptr)
    return false;
  m.add(sigmoid);
  m.add(add);
  const Node *a = nullptr, *b = nullptr;
  const Value* rootA = gateSlice(add->input(0), m, &a);
  const Value* rootB = gateSlice(add->input(1), m, &b);
  if (rootA == in && rootB == hidden) {
    *inSlice = a;
    *hiddenSlice = b;
    return true;
  }
  if (rootA == hidden && rootB == in) {
    *inSlice = b;
    *hiddenSlice = a;
    return true;
  }
  return false;
}

// The index of `v` in the region's inputs (their count when it is none of them).
size_t inputSlot(const CellRegion& region, const Value* v) {
  return static_cast<size_t>(std::find(region.inputs.begin(), region.inputs.end(), v) -
                             region.inputs.begin());
}

// `nodes` as the region whose result `last` computes: one block's nodes, each with one result
// that nothing outside the region reads but the last's (and `alsoOut`'s, only after `last`); its
// outside inputs and slots filled.
std::shared_ptr<CellRegion> regionOf(const std::vector<const Node*>& nodes, const Node* last,
                                     const char* pattern, const Value* alsoOut = nullptr) {
  // A last node that a GELU alone reads is a bias-GELU pair's first (findOpSite): the pair's site
  // would hand the region's result on as the GELU's, the GELU left out. The pair goes on as a
  // site; the region is none. Until 2026-12-07 only the bias matmul checked it, and
  // gelu(r + dropout(x @ w + b)) bound to bias-dropout-add lost its GELU.
  if (biasGeluFollower(last) != nullptr)
    return nullptr;
  const Block* block = last->owningBlock();
  for (const Node* node : nodes) {
    if (node->owningBlock() != block || node->outputs().size() != 1)
      return nullptr;
    if (node == last)
      continue;
    for (const torch::jit::Use& use : node->output()->uses()) {
      const bool inside = std::find(nodes.begin(), nodes.end(), use.user) != nodes.end();
      if (!inside && (node->output() != alsoOut || !last->isBefore(use.user)))
        return nullptr;
    }
  }
  auto region = std::make_shared<CellRegion>();
  region->pattern = pattern;
  region->alsoOut = alsoOut;
  region->nodes = nodes;
  std::sort(region->nodes.begin(), region->nodes.end(),
            [](const Node* a, const Node* b) { return a->isBefore(b); });
  if (region->last() != last)
    return nullptr;
  region->viewedAfter = detail::viewed(last->output(0));
  // A branch or loop between them draws where a node of its blocks does: until 2026-12-07 only
  // the block's own nodes were asked, and a dropout in an if between the bias add and the
  // region's dropout went unseen, the winner drawing its numbers again.
  for (const Node* n = region->first()->next(); n != last && !region->drawsBetween; n = n->next())
    region->drawsBetween = region->indexOf(n) < 0 && symtune::detail::mayDraw(n);
  for (const Node* node : region->nodes) {
    std::vector<int> slots;
    for (const Value* v : node->inputs()) {
      if (region->indexOf(v->node()) >= 0) {
        slots.push_back(-1);
        continue;
      }
      auto it = std::find(region->inputs.begin(), region->inputs.end(), v);
      if (it == region->inputs.end())
        it = region->inputs.insert(region->inputs.end(), v);
      slots.push_back(static_cast<int>(it - region->inputs.begin()));
    }
    region->slots.push_back(std::move(slots));
  }
  return region;
}

}  // namespace

std::shared_ptr<CellRegion> findGruCell(const Node* last) {
  CellMatch m;
  const Value* keep = nullptr;
  const Value* state = nullptr;
  const Value* step = last->outputs().size() == 1 ? last->output() : nullptr;
  if (last->kind() == c10::aten::where) {
    // aten::where.self(Tensor condition, Tensor self, Tensor other)
    if (last->inputs().size() != 3 || !isTensor(last->input(0)) || !isTensor(last->input(1)) ||
        !isTensor(last->input(2)) || last->outputs().size() != 1)
      return nullptr;
    keep = last->input(0);
    step = last->input(1);
    state = last->input(2);
    m.add(last);
  }
  if (step == nullptr)
    return nullptr;
  // step = (1 - z) * n + z * state, the operands of either product and of the sum in any order.
  const Node* blendAdd = tensorAdd(step);
  if (blendAdd == nullptr)
    return nullptr;
  m.add(blendAdd);
  const Value *z = nullptr, *n = nullptr;
  bool matched = false;
  for (int order = 0; order < 2 && !matched; ++order) {
    const Node* keepPart = tensorMul(blendAdd->input(order));       // (1 - z) * n
    const Node* carryPart = tensorMul(blendAdd->input(1 - order));  // z * state
    if (keepPart == nullptr || carryPart == nullptr)
      continue;
    for (int k = 0; k < 2 && !matched; ++k) {
      CellMatch trial = m;
      const Value* zz = oneMinus(keepPart->input(k), trial);
      if (zz == nullptr)
        continue;
      for (int c = 0; c < 2 && !matched; ++c) {
        if (carryPart->input(c) != zz)
          continue;
        const Value* s = carryPart->input(1 - c);
        if (state != nullptr && s != state)
          continue;
        state = s;
        z = zz;
        n = keepPart->input(1 - k);
        trial.add(keepPart);
        trial.add(carryPart);
        m = trial;
        matched = true;
      }
    }
  }
  if (!matched)
    return nullptr;
  // n = tanh(in_n + r * hidden_n): which projection is which is read here.
  const Node* tanh = producer(n, c10::aten::tanh, 1);
  const Node* nAdd = tanh != nullptr ? tensorAdd(tanh->input(0)) : nullptr;
  if (nAdd == nullptr)
    return nullptr;
  m.add(tanh);
  m.add(nAdd);
  const Node *inN = nullptr, *hiddenN = nullptr;
  const Value *in = nullptr, *hidden = nullptr, *r = nullptr;
  for (int order = 0; order < 2 && in == nullptr; ++order) {
    const Node* product = tensorMul(nAdd->input(1 - order));
    if (product == nullptr || nAdd->input(order)->node()->kind() != c10::aten::slice)
      continue;
    for (int k = 0; k < 2; ++k) {
      if (product->input(1 - k)->node()->kind() != c10::aten::slice)
        continue;
      CellMatch trial = m;
      const Node *a = nullptr, *b = nullptr;
      const Value* inRoot = gateSlice(nAdd->input(order), trial, &a);
      const Value* hiddenRoot = gateSlice(product->input(1 - k), trial, &b);
      if (inRoot == nullptr || hiddenRoot == nullptr)
        continue;
      trial.add(product);
      m = trial;
      in = inRoot;
      hidden = hiddenRoot;
      r = product->input(k);
      inN = a;
      hiddenN = b;
      break;
    }
  }
  if (in == nullptr || !isTensor(in) || !isTensor(hidden) || !isTensor(state))
    return nullptr;
  const Node *inR = nullptr, *hiddenR = nullptr, *inZ = nullptr, *hiddenZ = nullptr;
  if (!sigmoidGate(r, in, hidden, m, &inR, &hiddenR) ||
      !sigmoidGate(z, in, hidden, m, &inZ, &hiddenZ))
    return nullptr;

  auto region = regionOf(m.nodes, last, kGruCell);
  if (region == nullptr)
    return nullptr;
  const auto slotOf = [&region](const Value* v) -> std::optional<size_t> {
    auto it = std::find(region->inputs.begin(), region->inputs.end(), v);
    if (it == region->inputs.end())
      return std::nullopt;
    return static_cast<size_t>(it - region->inputs.begin());
  };
  const auto gatesIn = slotOf(in), gatesHidden = slotOf(hidden), st = slotOf(state);
  if (!gatesIn || !gatesHidden || !st || *gatesIn == *gatesHidden)
    return nullptr;
  region->gatesIn = *gatesIn;
  region->gatesHidden = *gatesHidden;
  region->state = *st;
  if (keep != nullptr) {
    const auto k = slotOf(keep);
    if (!k)
      return nullptr;
    region->keep = static_cast<int>(*k);
  }
  for (const Node* slice : {inR, inZ, inN, hiddenR, hiddenZ, hiddenN}) {
    const auto dim = slotOf(slice->input(1)), start = slotOf(slice->input(2)),
               end = slotOf(slice->input(3));
    if (!dim || !start || !end)
      return nullptr;
    region->slices.push_back({*dim, *start, *end});
  }
  return region;
}

std::shared_ptr<CellRegion> findBiasMatmul(const Node* add) {
  // aten::add(aten::matmul(x, w), b, 1), or with the sum's operands the other way round
  if (tensorAdd(add->output()) != add)
    return nullptr;
  for (int k = 0; k < 2; ++k) {
    const Node* matmul = producer(add->input(k), c10::aten::matmul, 2);
    if (matmul == nullptr || add->input(1 - k)->node() == matmul || !isTensor(matmul->input(0)) ||
        !isTensor(matmul->input(1)))
      continue;
    // A recurrent projection only: the matmul reads the value its loop carries. On fresh rows per
    // trip (the tree's, the MoE's) the fused bias measured within the measurements' noise of the
    // two ops, and the bindings followed the noise.
    const Value* x = matmul->input(0);
    const Block* body = x->node()->kind() == c10::prim::Param ? x->node()->owningBlock() : nullptr;
    if (body == nullptr || x->offset() == 0 || body->owningNode() == nullptr ||
        body->owningNode()->kind() != c10::prim::Loop || matmul->owningBlock() != body)
      continue;
    auto region = regionOf({matmul, add}, add, kBiasMatmul);
    if (region == nullptr)
      continue;
    const auto slot = [&region](const Value* v) { return inputSlot(*region, v); };
    region->input = slot(matmul->input(0));
    region->weight = slot(matmul->input(1));
    region->bias = slot(add->input(1 - k));
    if (region->input == region->weight || region->bias == region->input ||
        region->bias == region->weight)
      return nullptr;
    return region;
  }
  return nullptr;
}

namespace {

// aten::mul or aten::div of a tensor by a number (the scores' scale).
const Node* numberScale(const Value* v) {
  for (const c10::Symbol kind : {c10::aten::mul, c10::aten::div}) {
    const Node* n = producer(v, kind, 2);
    if (n != nullptr && isTensor(n->input(0)) && !isTensor(n->input(1)))
      return n;
  }
  return nullptr;
}

// The attention region's nodes from the scores' matmul on, as findAttention matched them.
struct AttentionMatch {
  const Node* transpose = nullptr;  // of the key, when the matmul's operand is one
  const Node* scores = nullptr;     // matmul(q, kᵀ)
  const Node* scale = nullptr;
  const Node* bias = nullptr;  // add(scaled, bias)
  int biasOperand = 1;
  const Node* mask = nullptr;  // masked_fill(scores, mask, value)
  const Node* softmax = nullptr;
  const Node* out = nullptr;  // matmul(att, v)
};

std::shared_ptr<CellRegion> attentionRegion(const AttentionMatch& m, bool withTranspose) {
  std::vector<const Node*> nodes{m.scores, m.softmax, m.out};
  for (const Node* n : {withTranspose ? m.transpose : nullptr, m.scale, m.bias, m.mask}) {
    if (n != nullptr)
      nodes.push_back(n);
  }
  auto region = regionOf(nodes, m.out, kAttention);
  if (region == nullptr)
    return nullptr;
  const auto slot = [&region](const Value* v) { return static_cast<int>(inputSlot(*region, v)); };
  region->query = static_cast<size_t>(slot(m.scores->input(0)));
  if (withTranspose) {
    region->key = static_cast<size_t>(slot(m.transpose->input(0)));
    region->keyDim0 = slot(m.transpose->input(1));
    region->keyDim1 = slot(m.transpose->input(2));
  } else {
    region->key = static_cast<size_t>(slot(m.scores->input(1)));
  }
  region->value = static_cast<size_t>(slot(m.out->input(1)));
  if (m.scale != nullptr) {
    region->scale = slot(m.scale->input(1));
    region->divides = m.scale->kind() == c10::aten::div;
  }
  if (m.bias != nullptr)
    region->scoreBias = slot(m.bias->input(m.biasOperand));
  if (m.mask != nullptr) {
    region->mask = slot(m.mask->input(1));
    region->fill = slot(m.mask->input(2));
  }
  region->softmaxDim = static_cast<size_t>(slot(m.softmax->input(1)));
  return region;
}

}  // namespace

std::shared_ptr<CellRegion> findAttention(const Node* last) {
  AttentionMatch m;
  if (last->outputs().size() != 1)
    return nullptr;
  m.out = producer(last->output(), c10::aten::matmul, 2);
  if (m.out == nullptr || !isTensor(m.out->input(1)))
    return nullptr;
  // softmax(scores, dim, dtype=None)
  m.softmax = producer(m.out->input(0), c10::aten::softmax, 3);
  if (m.softmax == nullptr)
    return nullptr;
  const auto dtype = constant(m.softmax->input(2));
  if (!dtype || !dtype->isNone())
    return nullptr;
  const Value* scores = m.softmax->input(0);
  if (const Node* fill = producer(scores, c10::aten::masked_fill, 3)) {
    if (!isTensor(fill->input(1)) || isTensor(fill->input(2)))
      return nullptr;
    m.mask = fill;
    scores = fill->input(0);
  }
  // The bias is added after the scale: softmax(q kᵀ * scale + bias), the scaled product either
  // operand of the add.
  if (const Node* add = tensorAdd(scores)) {
    for (int k = 0; k < 2 && m.bias == nullptr; ++k) {
      const Value* v = add->input(k);
      const Node* scale = numberScale(v);
      if (producer(scale != nullptr ? scale->input(0) : v, c10::aten::matmul, 2) != nullptr) {
        m.bias = add;
        m.biasOperand = 1 - k;
        scores = v;
      }
    }
    if (m.bias == nullptr)
      return nullptr;
  }
  if ((m.scale = numberScale(scores)) != nullptr)
    scores = m.scale->input(0);
  m.scores = producer(scores, c10::aten::matmul, 2);
  if (m.scores == nullptr || !isTensor(m.scores->input(0)) || !isTensor(m.scores->input(1)))
    return nullptr;
  m.transpose = producer(m.scores->input(1), c10::aten::transpose, 3);
  if (m.transpose != nullptr) {
    if (auto region = attentionRegion(m, true))
      return region;
  }
  // The key transposed outside (or its transpose read elsewhere too): the matmul's operand is
  // kᵀ, transposed back when it runs.
  return attentionRegion(m, false);
}

std::shared_ptr<CellRegion> findAddLayerNorm(const Node* norm) {
  // aten::layer_norm(aten::add(a, b, 1), normalized_shape, weight, bias, eps, cudnn_enable)
  if (norm->kind() != c10::aten::layer_norm || norm->inputs().size() != 6 ||
      norm->outputs().size() != 1)
    return nullptr;
  const Node* add = tensorAdd(norm->input(0));
  if (add == nullptr || add->owningBlock() != norm->owningBlock())
    return nullptr;
  // The norm reads the sum once, as its input; anything else reads it after the norm (regionOf).
  for (size_t i = 1; i < norm->inputs().size(); ++i) {
    if (norm->input(i) == add->output())
      return nullptr;
  }
  auto region = regionOf({add, norm}, norm, kAddLayerNorm, add->output());
  if (region == nullptr)
    return nullptr;
  const auto slot = [&region](const Value* v) { return inputSlot(*region, v); };
  region->input = slot(add->input(0));
  region->residual = slot(add->input(1));
  region->normShape = slot(norm->input(1));
  region->weight = slot(norm->input(2));
  region->bias = slot(norm->input(3));
  region->eps = slot(norm->input(4));
  return region;
}

std::shared_ptr<CellRegion> findBiasDropoutAdd(const Node* add) {
  // aten::add(aten::dropout(aten::add(x, b, 1), p, train), r, 1), or r first
  if (tensorAdd(add->output()) != add)
    return nullptr;
  for (int k = 0; k < 2; ++k) {
    const Node* dropout = producer(add->input(k), c10::aten::dropout, 3);
    const Node* biased = dropout != nullptr ? tensorAdd(dropout->input(0)) : nullptr;
    if (biased == nullptr || add->input(1 - k) == dropout->output())
      continue;
    auto region = regionOf({biased, dropout, add}, add, kBiasDropoutAdd);
    if (region == nullptr)
      continue;
    const auto slot = [&region](const Value* v) { return inputSlot(*region, v); };
    region->input = slot(biased->input(0));
    region->bias = slot(biased->input(1));
    region->residual = slot(add->input(1 - k));
    region->dropoutP = slot(dropout->input(1));
    region->train = slot(dropout->input(2));
    return region;
  }
  return nullptr;
}

std::shared_ptr<CellRegion> findBatchNormReluConv(const Node* conv) {
  // aten::conv2d(Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding,
  //              int[] dilation, int groups) of aten::relu(aten::batch_norm(9 inputs))
  if (conv->kind() != c10::aten::conv2d || conv->inputs().size() != 7 ||
      conv->outputs().size() != 1)
    return nullptr;
  const Node* relu = producer(conv->input(0), c10::aten::relu, 1);
  const Node* norm = relu != nullptr ? producer(relu->input(0), c10::aten::batch_norm, 9) : nullptr;
  if (norm == nullptr || !isTensor(norm->input(0)))
    return nullptr;
  // The convolution reads the ReLU's output once, as its input; nothing else reads the batch
  // norm's or the ReLU's (regionOf).
  for (size_t i = 1; i < conv->inputs().size(); ++i) {
    if (conv->input(i) == relu->output())
      return nullptr;
  }
  return regionOf({norm, relu, conv}, conv, kBatchNormReluConv);
}

std::shared_ptr<CellRegion> findConvBlockPair(const Node* relu) {
  // Each block: aten::relu(aten::batch_norm(aten::conv2d(input, weight, bias, stride, padding,
  // dilation, groups), 8 more inputs)); the second block's convolution reads the first's ReLU.
  const auto blockOf = [](const Node* r) -> std::array<const Node*, 3> {
    const Node* norm = producer(r->input(0), c10::aten::batch_norm, 9);
    const Node* conv = norm != nullptr ? producer(norm->input(0), c10::aten::conv2d, 7) : nullptr;
    if (conv == nullptr || !isTensor(conv->input(0)))
      return {nullptr, nullptr, nullptr};
    return {conv, norm, r};
  };
  if (relu->kind() != c10::aten::relu || relu->inputs().size() != 1)
    return nullptr;
  const auto second = blockOf(relu);
  if (second[0] == nullptr)
    return nullptr;
  const Node* firstRelu = producer(second[0]->input(0), c10::aten::relu, 1);
  const auto first = firstRelu != nullptr ? blockOf(firstRelu) : std::array<const Node*, 3>{};
  if (first[0] == nullptr)
    return nullptr;
  // Each value between is read once, as the next node's input (regionOf checks nothing outside
  // reads it; the batch norms' and convolutions' other inputs must not be region values either).
  for (const Node* node : {first[1], second[0], second[1]}) {
    for (size_t i = 1; i < node->inputs().size(); ++i) {
      if (node->input(i)->node() == node->input(0)->node())
        return nullptr;
    }
  }
  return regionOf({first[0], first[1], first[2], second[0], second[1], second[2]}, relu,
                  kConvBlockPair);
}

bool isConvBlockRegion(const std::string& pattern) {
  return pattern == kBatchNormReluConv || pattern == kConvBlockPair;
}

}  // namespace symtune::binding
