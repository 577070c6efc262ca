#include <algorithm>
#include <cmath>
#include <optional>

#include <ATen/ATen.h>

#include "batched_projection.h"
#include "carried_rows.h"
#include "conv_block_candidates.h"
#include "ir_match.h"
#include "residual_candidates.h"
#include "script_segment.h"
#include "symtune/binding/candidate.h"
#include "symtune/kernels/batch_norm_relu.h"
#include "symtune/kernels/bias_gelu.h"
#include "symtune/kernels/gru_cell.h"
#include "symtune/kernels/softmax_cross_entropy.h"

namespace symtune::binding {

namespace {

class AtenOp final : public Candidate {
 public:
  std::string name() const override { return kAten; }
  std::string description() const override { return "the ATen op as the IR writes it"; }
  bool applies(const OpSite&) const override { return true; }
  void run(const OpSite&, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    op(stack);
  }
};

// An identity slice returns its input: no view, no autograd node, and no full-size zero fill in
// backward.
class Alias final : public Candidate {
 public:
  std::string name() const override { return "alias"; }
  std::string description() const override {
    return "a full-range slice is its input: no view, no SliceBackward0";
  }
  bool applies(const OpSite& site) const override { return site.pattern == kIdentitySlice; }
  void run(const OpSite&, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: self, dim, start, end, step
    if (!tensorDim(stack[stack.size() - 5].toTensor(), stack[stack.size() - 4].toInt())) {
      op(stack);  // ATen says what is wrong
      return;
    }
    stack.resize(stack.size() - 4);
  }
};

// A loop-indexed select reads slice i of a tensor that does not change in the loop: unbind the
// tensor on the loop's first trip and hand out part i. The backward is one UnbindBackward0 (a
// stack of the parts' gradients) instead of a zero-filled full-size gradient per trip.
class UnbindOnce final : public Candidate {
 public:
  std::string name() const override { return "unbind-once"; }
  std::string description() const override {
    return "unbind the loop-invariant tensor on the loop's first trip and read part i";
  }
  bool applies(const OpSite& site) const override { return site.pattern == kLoopIndexedSelect; }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames& loops) const override {
    // stack: self, dim, index
    const size_t base = stack.size() - 3;
    c10::IValue& slot = loops.slot(site.loop, site.node);
    if (slot.isNone()) {
      const at::Tensor& self = stack[base].toTensor();
      const auto dim = tensorDim(self, stack[base + 1].toInt());
      if (!dim) {
        op(stack);  // ATen says what is wrong
        return;
      }
      slot = c10::IValue(self.unbind(*dim));
    }
    const c10::List<at::Tensor> parts = slot.toTensorList();
    const int64_t index = stack[base + 2].toInt();
    if (index < 0 || index >= static_cast<int64_t>(parts.size())) {
      op(stack);
      return;
    }
    at::Tensor part = parts.get(static_cast<size_t>(index));
    stack.resize(base);
    stack.emplace_back(std::move(part));
  }
};

// A partial slice read from one split of its tensor shared with the other slices of its group
// (SliceGroup): split at the ranges the group's slices read, once per value of the tensor. The
// backward is one SplitWithSizesBackward0 (a concatenation of the parts' gradients, zeros for a
// part nothing read) instead of a zero-filled full-size gradient per slice.
class SplitOnce final : public Candidate {
 public:
  std::string name() const override { return "split-once"; }
  std::string description() const override {
    return "one split of the tensor at its slices' ranges, shared by them";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kPartialSlice && site.group != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: self, dim, start, end, step (1)
    const size_t base = stack.size() - 5;
    const at::Tensor& self = stack[base].toTensor();
    const auto dim = tensorDim(self, stack[base + 1].toInt());
    if (!dim) {
      op(stack);  // ATen says what is wrong
      return;
    }
    const auto range = sliceRange(stack[base + 2], stack[base + 3], self.size(*dim));
    for (const auto& [r, part] : site.group->partsOf(self, *dim)) {
      if (r == range) {
        at::Tensor out = part;
        stack.resize(base);
        stack.emplace_back(std::move(out));
        return;
      }
    }
    op(stack);  // a range the split does not have
  }
};

// A bias-GELU site (a linear layer's bias add and its GELU) as symtune::bias_gelu of kernels/:
// one pass forward, and one backward that recomputes the sum instead of keeping it. Not bit for
// bit the ATen pair: the kernel's erf and tanh are its own float math (Note [Inline float math]
// in kernels/), and the bias gradient is summed in another order.
class BiasGelu final : public Candidate {
 public:
  std::string name() const override { return "bias-gelu"; }
  std::string description() const override {
    return "symtune::bias_gelu (kernels/): the bias add and the GELU in one pass each way";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kBiasGelu && (site.approximate == "none" || site.approximate == "tanh");
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: self, other, alpha (1); `op` runs the add and the gelu
    const size_t base = stack.size() - 3;
    const at::Tensor& x = stack[base].toTensor();
    const at::Tensor& bias = stack[base + 1].toTensor();
    const bool fits = x.defined() && bias.defined() && x.dim() >= 1 && bias.dim() == 1 &&
                      bias.size(0) == x.size(-1) && x.numel() > 0 &&
                      x.scalar_type() == bias.scalar_type() &&
                      (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) &&
                      x.device() == bias.device();
    if (!fits) {
      op(stack);  // broadcasting the kernel does not do, other dtypes: the ATen pair
      return;
    }
    at::Tensor out = kernels::biasGelu(x, bias, site.approximate);
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  // The kernel's GELU agrees with ATen's to a few float ulps; the bias gradient's sum in another
  // order adds rounding that grows with the rows summed.
  double tolerance() const override { return 1e-5; }
};

// The tensor at `i` of a stack; undefined when it holds something else.
at::Tensor tensorAt(const torch::jit::Stack& stack, size_t i) {
  return stack[i].isTensor() ? stack[i].toTensor() : at::Tensor();
}

// A training-mode batch norm and its ReLU as symtune::batch_norm_relu of kernels/: per channel,
// the statistics, then one pass writing the activation; backward, one pass reducing the masked
// gradient and one writing the input's (Note [Batch norm ReLU] in kernels/). Not bit for bit:
// its sums run in another order (in double).
class BatchNormRelu final : public Candidate {
 public:
  std::string name() const override { return "bn-relu"; }
  std::string description() const override {
    return "symtune::batch_norm_relu (kernels/): training batch norm and ReLU in one pass each "
           "way after the statistics";
  }
  bool applies(const OpSite& site) const override { return site.pattern == kBatchNormRelu; }
  void run(const OpSite&, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn;
    // `op` runs the batch norm and the relu
    const size_t base = stack.size() - 9;
    if (!fits(stack)) {
      op(stack);
      return;
    }
    at::Tensor out = kernels::batchNormRelu(tensorAt(stack, base), tensorAt(stack, base + 1),
                                            tensorAt(stack, base + 2), tensorAt(stack, base + 3),
                                            tensorAt(stack, base + 4), stack[base + 6].toDouble(),
                                            stack[base + 7].toDouble());
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  bool runsAsWritten(const OpSite&, const torch::jit::Stack& stack) const override {
    return !fits(stack);
  }
  // Measured within 3e-7 of ATen's pair on the zoo's shapes; sums in another order.
  double tolerance() const override { return 1e-5; }
  bool cpuOnly() const override { return true; }

 private:
  // Whether the kernel takes the batch norm's inputs, the last 9 values of `stack`.
  static bool fits(const torch::jit::Stack& stack) {
    const size_t base = stack.size() - 9;
    const auto tensor = [&](size_t i) { return tensorAt(stack, base + i); };
    const at::Tensor x = tensor(0), weight = tensor(1), bias = tensor(2);
    const at::Tensor mean = tensor(3), var = tensor(4);
    const auto vector = [&x](const at::Tensor& t) {
      return t.defined() && t.dim() == 1 && t.size(0) == x.size(1) &&
             t.scalar_type() == x.scalar_type() && t.device() == x.device() && t.is_contiguous();
    };
    // The kernel is the CPU's, in training mode (evaluation, with the running statistics, is
    // ATen's), on contiguous or channels-last activations (others would be made contiguous: a
    // change of format the rest of the model would pay for).
    return stack[base + 5].isBool() && stack[base + 5].toBool() && x.defined() && x.dim() >= 2 &&
           x.device().is_cpu() &&
           (x.is_contiguous() || x.is_contiguous(at::MemoryFormat::ChannelsLast)) &&
           (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) &&
           x.numel() > x.size(1) && vector(weight) && vector(bias) &&
           mean.defined() == var.defined() && (!mean.defined() || (vector(mean) && vector(var)));
  }
};

// A GRU cell's gates and mask as symtune::gru_cell of kernels/ (Note [GRU cell] in kernels/): one
// pass forward, one back, instead of a dozen ops and their autograd nodes per time step. Not bit
// for bit: the kernel's sigmoid and tanh are its own float math.
class GruCell final : public Candidate {
 public:
  std::string name() const override { return "gru-cell"; }
  std::string description() const override {
    return "symtune::gru_cell (kernels/): a GRU cell's gates and length mask in one pass each way";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kGruCell && site.cell != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: the region's inputs; `op` runs its nodes as written
    const CellRegion& cell = *site.cell;
    const size_t base = stack.size() - cell.inputs.size();
    const auto tensor = [&](size_t i) { return tensorAt(stack, base + i); };
    const at::Tensor in = tensor(cell.gatesIn), hidden = tensor(cell.gatesHidden);
    const at::Tensor state = tensor(cell.state);
    const at::Tensor keep = cell.keep >= 0 ? tensor(static_cast<size_t>(cell.keep)) : at::Tensor();
    if (!fits(cell, stack, base, in, hidden, state, keep)) {
      op(stack);  // shapes, dtypes or devices the kernel does not take: as written
      return;
    }
    at::Tensor out = kernels::gruCell(in, hidden, state, keep);
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  // Its sigmoid and tanh agree with ATen's to a few float ulps.
  double tolerance() const override { return 1e-5; }

 private:
  // [B, 3H] projections and a [B, H] state on one device (CPU or CUDA) in one floating dtype; a [B,
  // 1] bool mask (where's broadcasting of [B] would run along H); each gate slice the third of its
  // projection that torch.nn.GRUCell's order gives it.
  static bool fits(const CellRegion& cell, const torch::jit::Stack& stack, size_t base,
                   const at::Tensor& in, const at::Tensor& hidden, const at::Tensor& state,
                   const at::Tensor& keep) {
    if (!in.defined() || !hidden.defined() || !state.defined() || state.dim() != 2 ||
        (!state.device().is_cpu() && !state.device().is_cuda()) ||
        (state.scalar_type() != at::kFloat && state.scalar_type() != at::kDouble))
      return false;
    const int64_t B = state.size(0), H = state.size(1);
    for (const at::Tensor* gates : {&in, &hidden}) {
      if (gates->dim() != 2 || gates->size(0) != B || gates->size(1) != 3 * H ||
          gates->scalar_type() != state.scalar_type() || gates->device() != state.device())
        return false;
    }
    if (cell.keep >= 0 &&
        (!keep.defined() || keep.scalar_type() != at::kBool || keep.dim() != 2 ||
         keep.size(0) != B || keep.size(1) != 1 || keep.device() != state.device()))
      return false;
    for (size_t k = 0; k < cell.slices.size(); ++k) {
      const CellRegion::Slice& slice = cell.slices[k];
      const at::Tensor& source = k < 3 ? in : hidden;
      const c10::IValue& dim = stack[base + slice.dim];
      if (!dim.isInt() || tensorDim(source, dim.toInt()) != std::optional<int64_t>(1))
        return false;
      const auto range = sliceRange(stack[base + slice.start], stack[base + slice.end], 3 * H);
      const int64_t gate = static_cast<int64_t>(k % 3);
      if (range != std::make_pair(gate * H, (gate + 1) * H))
        return false;
    }
    return true;
  }
};

// A matmul and its bias add as one at::addmm (the input's leading dimensions folded into rows):
// the bias added in the GEMM's output pass, and one autograd node instead of two. Not bit for
// bit: the GEMM adds the bias to its unrounded sums.
class Addmm final : public Candidate {
 public:
  std::string name() const override { return "addmm"; }
  std::string description() const override {
    return "at::addmm: the matmul and its bias add in one GEMM";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kBiasMatmul && site.cell != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: the region's inputs (the matmul's input and weight, the bias, alpha); `op` runs the
    // matmul and the add
    const CellRegion& cell = *site.cell;
    const size_t base = stack.size() - cell.inputs.size();
    const auto tensor = [&](size_t i) { return tensorAt(stack, base + i); };
    const at::Tensor x = tensor(cell.input), w = tensor(cell.weight), b = tensor(cell.bias);
    const bool fits = addmmFits(x, w, b);
    if (!fits) {
      op(stack);  // broadcasting, batched weights, vectors: the two ATen ops
      return;
    }
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(1);
    at::Tensor out = at::addmm(b, x.reshape({-1, x.size(-1)}), w).view(sizes);
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  // The GEMM adds the bias before rounding; the bias gradient's sum may run in another order.
  double tolerance() const override { return 1e-6; }
};

// The number at `i` of a stack (an int or a double), if it holds one.
std::optional<double> numberAt(const torch::jit::Stack& stack, size_t i) {
  if (stack[i].isDouble())
    return stack[i].toDouble();
  if (stack[i].isInt())
    return static_cast<double>(stack[i].toInt());
  return std::nullopt;
}

// Whether `t` broadcasts to `shape` (numpy rules, `t` not larger).
bool broadcastsTo(const at::Tensor& t, c10::IntArrayRef shape) {
  if (t.dim() > static_cast<int64_t>(shape.size()))
    return false;
  for (int64_t d = 1; d <= t.dim(); ++d) {
    const int64_t size = t.size(-d), want = shape[shape.size() - static_cast<size_t>(d)];
    if (size != 1 && size != want)
      return false;
  }
  return true;
}

// An attention region as at::scaled_dot_product_attention: the scaled scores, their bias and mask
// (one additive mask), the softmax and the weighted sum in one ATen op, which picks its kernel
// (on a GPU flash or memory-efficient attention, which never write the [L, S] scores to memory).
// Not bit for bit: the fused kernels sum in blocks, and the masked scores are `fill` added to the
// scaled scores instead of `fill` itself. Both vanish in the softmax only when the fill swamps
// the scores (-inf, or at most kDominantFill), so a fill above that runs as written (a
// masked_fill with 0 had no effect here). A row the mask covers whole is the one place they
// differ then: as written every score is the fill and the softmax is uniform (NaN for -inf),
// the additive mask leaves softmax(scores); such rows are given the mean of the values (NaN).
class Sdpa final : public Candidate {
 public:
  // The largest fill taken: exp(-1e4) is 0 in every floating dtype, far below any score's share
  // (fp16's own masks use -1e4 or its lowest, -65504).
  static constexpr double kDominantFill = -1e4;

  std::string name() const override { return "sdpa"; }
  std::string description() const override {
    return "at::scaled_dot_product_attention: an attention pattern in one ATen op";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kAttention && site.cell != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: the region's inputs; `op` runs its nodes as written
    const CellRegion& cell = *site.cell;
    const size_t base = stack.size() - cell.inputs.size();
    const auto tensor = [&](int i) {
      return i >= 0 ? tensorAt(stack, base + static_cast<size_t>(i)) : at::Tensor();
    };
    const at::Tensor q = tensor(static_cast<int>(cell.query)),
                     v = tensor(static_cast<int>(cell.value));
    at::Tensor k = tensor(static_cast<int>(cell.key));
    const at::Tensor bias = tensor(cell.scoreBias), mask = tensor(cell.mask);
    std::optional<double> scale = 1.0;
    if (cell.scale >= 0) {
      scale = numberAt(stack, base + static_cast<size_t>(cell.scale));
      if (scale && cell.divides)
        scale = *scale != 0 ? std::optional<double>(1.0 / *scale) : std::nullopt;
    }
    const std::optional<double> fill =
        cell.fill >= 0 ? numberAt(stack, base + static_cast<size_t>(cell.fill)) : std::nullopt;
    if (!scale || !fits(cell, stack, base, q, k, v, bias, mask, fill)) {
      op(stack);  // shapes, dtypes or devices it does not take: as written
      return;
    }
    if (cell.keyDim0 < 0)
      k = k.transpose(-2, -1);  // the region's matmul read kᵀ
    at::Tensor attnMask = bias;
    if (mask.defined()) {
      attnMask =
          at::where(mask, c10::Scalar(*fill), bias.defined() ? bias : at::zeros({}, q.options()));
    }
    at::Tensor out = at::scaled_dot_product_attention(
        q, k, v, attnMask.defined() ? std::optional<at::Tensor>(attnMask) : std::nullopt, 0.0,
        false, scale);
    if (mask.defined()) {
      std::vector<int64_t> scores = q.sizes().vec();
      scores.back() = v.size(-2);
      const at::Tensor whole = mask.expand(scores).all(-1, /*keepdim=*/true);  // [..., L, 1]
      const at::Tensor uniform =
          std::isinf(*fill) ? at::full({}, NAN, v.options()) : v.mean(-2, /*keepdim=*/true);
      out = at::where(whole, uniform, out);
    }
    // The matmul as written gives a contiguous result; the CPU's flash attention may not, and a
    // view after the region needs those strides.
    if (cell.viewedAfter)
      out = out.contiguous();
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  // Measured within 4e-7 of the ops as written in float on the CPU.
  double tolerance() const override { return 1e-5; }

 private:
  // Query [..., L, E], key [..., S, E] (as the transpose reads it: the transpose swapping its last
  // two dimensions) or its transpose, value [..., S, Ev], the leading dimensions the same; one
  // floating dtype and device; the softmax over the last dimension; the bias (that dtype) and
  // the mask (bool, with a number to fill) broadcasting to [..., L, S].
  static bool fits(const CellRegion& cell, const torch::jit::Stack& stack, size_t base,
                   const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& bias, const at::Tensor& mask,
                   const std::optional<double>& fill) {
    if (!q.defined() || !k.defined() || !v.defined() || q.dim() < 2 || k.dim() != q.dim() ||
        v.dim() != q.dim() || !at::isFloatingType(q.scalar_type()) ||
        k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type() ||
        k.device() != q.device() || v.device() != q.device())
      return false;
    const int64_t n = q.dim();
    at::Tensor key = k;  // [..., S, E]
    if (cell.keyDim0 >= 0) {
      const c10::IValue &d0 = stack[base + static_cast<size_t>(cell.keyDim0)],
                        &d1 = stack[base + static_cast<size_t>(cell.keyDim1)];
      if (!d0.isInt() || !d1.isInt())
        return false;
      const auto a = tensorDim(k, d0.toInt()), b = tensorDim(k, d1.toInt());
      if (!a || !b || std::min(*a, *b) != n - 2 || std::max(*a, *b) != n - 1)
        return false;
    } else {
      key = k.transpose(-2, -1);
    }
    for (int64_t d = 0; d < n - 2; ++d) {
      if (key.size(d) != q.size(d) || v.size(d) != q.size(d))
        return false;
    }
    if (key.size(-1) != q.size(-1) || v.size(-2) != key.size(-2))
      return false;
    const c10::IValue& dim = stack[base + cell.softmaxDim];
    if (!dim.isInt() || tensorDim(q, dim.toInt()) != std::optional<int64_t>(n - 1))
      return false;
    std::vector<int64_t> scores = q.sizes().vec();
    scores.back() = key.size(-2);
    if (cell.scoreBias >= 0 && (!bias.defined() || bias.scalar_type() != q.scalar_type() ||
                                bias.device() != q.device() || !broadcastsTo(bias, scores)))
      return false;
    if (cell.mask >= 0 &&
        (!mask.defined() || mask.scalar_type() != at::kBool || mask.device() != q.device() ||
         !fill || !(*fill <= kDominantFill) || !broadcastsTo(mask, scores)))
      return false;
    return true;
  }
};

// The training loss as symtune::softmax_cross_entropy of kernels/: each row's log-sum-exp kept
// instead of the log-softmax tensor, the gradient written in one pass. Not bit for bit: the
// mean and the exponentials' sums run in another order.
class SoftmaxCrossEntropy final : public Candidate {
 public:
  std::string name() const override { return "softmax-cross-entropy"; }
  std::string description() const override {
    return "symtune::softmax_cross_entropy (kernels/): the loss without the log-softmax tensor";
  }
  bool applies(const OpSite& site) const override { return site.pattern == kSoftmaxCrossEntropy; }
  void run(const OpSite&, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: logits, target
    const at::Tensor& logits = stack[stack.size() - 2].toTensor();
    const at::Tensor& target = stack.back().toTensor();
    const bool fits = logits.defined() && target.defined() && logits.dim() == 2 &&
                      target.dim() == 1 && target.size(0) == logits.size(0) && logits.size(0) > 0 &&
                      target.scalar_type() == at::kLong &&
                      (logits.scalar_type() == at::kFloat || logits.scalar_type() == at::kDouble) &&
                      target.device() == logits.device() &&
                      (logits.device().is_cpu() || logits.device().is_cuda());
    if (!fits) {
      op(stack);  // other shapes (class dimensions past the second, soft targets): ATen's
      return;
    }
    at::Tensor loss = kernels::softmaxCrossEntropy(logits, target);
    stack.resize(stack.size() - 2);
    stack.emplace_back(std::move(loss));
  }
  // A mean over the rows summed in another order.
  double tolerance() const override { return 1e-5; }
};

}  // namespace

bool Candidate::runsAsWritten(const OpSite&, const torch::jit::Stack&) const {
  return false;
}

void Candidate::onOwnDraws(const OpSite&, torch::jit::Operation& op,
                           torch::jit::Stack& stack) const {
  op(stack);  // draws as the reference does: the reference itself
}

const std::vector<std::unique_ptr<Candidate>>& builtinCandidates() {
  static const auto* all = [] {
    auto* list = new std::vector<std::unique_ptr<Candidate>>();
    list->push_back(std::make_unique<AtenOp>());
    list->push_back(std::make_unique<Alias>());
    list->push_back(std::make_unique<UnbindOnce>());
    list->push_back(std::make_unique<SplitOnce>());
    list->push_back(std::make_unique<BiasGelu>());
    list->push_back(std::make_unique<BatchNormRelu>());
    list->push_back(makeBatchNormReluConv());
    list->push_back(makeConvBlockPair());
    list->push_back(makeConvBlockPairAgain());
    list->push_back(makeRowsInPlace());
    list->push_back(std::make_unique<GruCell>());
    list->push_back(std::make_unique<SoftmaxCrossEntropy>());
    list->push_back(std::make_unique<Addmm>());
    list->push_back(makeBatchedProjection());
    list->push_back(std::make_unique<Sdpa>());
    list->push_back(makeAddLayerNorm());
    list->push_back(makeBiasDropoutAdd());
    list->push_back(makeScriptSegment());
    return list;
  }();
  return *all;
}

const Candidate* findCandidate(const std::string& name) {
  for (const auto& c : builtinCandidates()) {
    if (c->name() == name)
      return c.get();
  }
  return nullptr;
}

}  // namespace symtune::binding
