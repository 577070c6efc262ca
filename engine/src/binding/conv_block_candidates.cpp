#include "conv_block_candidates.h"

#include <optional>

#include <ATen/ATen.h>

#include "ir_match.h"
#include "symtune/binding/op_site.h"
#include "symtune/kernels/batch_norm_relu_conv.h"
#include "symtune/kernels/conv_block_pair.h"

namespace symtune::binding {

namespace {

// A region's values as its nodes read them, from the stack its candidate is given.
struct RegionArgs {
  const CellRegion& cell;
  const torch::jit::Stack& stack;
  size_t base;

  // What node `k` of the region reads as its input `input`; nullptr for a region node's result.
  const c10::IValue* at(size_t k, size_t input) const {
    const int slot = cell.slots[k][input];
    return slot >= 0 ? &stack[base + static_cast<size_t>(slot)] : nullptr;
  }
  // A tensor or None (an undefined tensor); nullopt for anything else.
  std::optional<at::Tensor> tensor(size_t k, size_t input) const {
    const c10::IValue* v = at(k, input);
    if (v == nullptr || !(v->isTensor() || v->isNone()))
      return std::nullopt;
    return v->isTensor() ? v->toTensor() : at::Tensor();
  }
  std::optional<std::vector<int64_t>> ints(size_t k, size_t input) const {
    const c10::IValue* v = at(k, input);
    if (v == nullptr || !v->isIntList())
      return std::nullopt;
    return v->toIntVector();
  }
};

// aten::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
// cudnn_enabled) at node `k`, in training mode.
struct TrainingNorm {
  at::Tensor weight, bias, runningMean, runningVar;
  double momentum = 0, eps = 0;
};
std::optional<TrainingNorm> trainingNorm(const RegionArgs& a, size_t k) {
  const c10::IValue *training = a.at(k, 5), *momentum = a.at(k, 6), *eps = a.at(k, 7);
  const auto w = a.tensor(k, 1), b = a.tensor(k, 2), rm = a.tensor(k, 3), rv = a.tensor(k, 4);
  if (!w || !b || !rm || !rv || training == nullptr || !training->isBool() || !training->toBool() ||
      momentum == nullptr || !momentum->isDouble() || eps == nullptr || !eps->isDouble())
    return std::nullopt;
  return TrainingNorm{*w, *b, *rm, *rv, momentum->toDouble(), eps->toDouble()};
}

// aten::conv2d(input, weight, bias, stride, padding, dilation, groups) at node `k`.
struct Convolution {
  at::Tensor weight, bias;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
};
std::optional<Convolution> convolution(const RegionArgs& a, size_t k) {
  const c10::IValue* groups = a.at(k, 6);
  const auto w = a.tensor(k, 1), b = a.tensor(k, 2);
  const auto stride = a.ints(k, 3), padding = a.ints(k, 4), dilation = a.ints(k, 5);
  if (!w || !b || !stride || !padding || !dilation || groups == nullptr || !groups->isInt())
    return std::nullopt;
  return Convolution{*w, *b, *stride, *padding, *dilation, groups->toInt()};
}

// What the kernels take: a 4-d CPU activation, float or double, contiguous or channels-last, with
// more than one value per channel.
bool fitsActivation(const at::Tensor& in) {
  return in.defined() && in.dim() == 4 && in.device().is_cpu() &&
         (in.scalar_type() == at::kFloat || in.scalar_type() == at::kDouble) &&
         (in.is_contiguous() || in.is_contiguous(at::MemoryFormat::ChannelsLast)) &&
         in.size(0) * in.size(2) * in.size(3) >= 2;
}

// A batch norm over `channels` of `like`'s dtype and device, with weight and bias (its running
// statistics both or neither).
bool fitsNorm(const TrainingNorm& n, int64_t channels, const at::Tensor& like) {
  const auto vector = [&](const at::Tensor& t) {
    return t.defined() && t.dim() == 1 && t.size(0) == channels &&
           t.scalar_type() == like.scalar_type() && t.device() == like.device() &&
           t.is_contiguous();
  };
  return vector(n.weight) && vector(n.bias) && n.runningMean.defined() == n.runningVar.defined() &&
         (!n.runningMean.defined() || (vector(n.runningMean) && vector(n.runningVar)));
}

// A convolution of `channels` of `like`'s dtype and device.
bool fitsConvolution(const Convolution& c, int64_t channels, const at::Tensor& like) {
  const at::Tensor& k = c.weight;
  return k.defined() && k.dim() == 4 && k.scalar_type() == like.scalar_type() &&
         k.device() == like.device() && c.groups >= 1 && k.size(1) * c.groups == channels &&
         c.stride.size() == 2 && c.padding.size() == 2 && c.dilation.size() == 2 &&
         (!c.bias.defined() ||
          (c.bias.dim() == 1 && c.bias.size(0) == k.size(0) &&
           c.bias.scalar_type() == like.scalar_type() && c.bias.device() == like.device()));
}

at::Tensor leanBlock(const at::Tensor& input, const TrainingNorm& n, const Convolution& c) {
  return kernels::batchNormReluConv2d(input, n.weight, n.bias, n.runningMean, n.runningVar,
                                      n.momentum, n.eps, c.weight, c.bias, c.stride, c.padding,
                                      c.dilation, c.groups);
}

// A training batch norm, its ReLU and the convolution reading it as symtune::kernels::
// batchNormReluConv2d (Note [Lean convolution block] in kernels/): the forward as
// symtune::batch_norm_relu's then the convolution; for the backward it keeps the batch norm's
// input and statistics only, where the three ops keep that input and the ReLU's output, makes
// the ReLU's output again, and writes the batch norm's backward over the gradient in place. The
// binder picks it by time, like any candidate; what it saves is memory (docs/binding.md,
// "Candidates"). Not bit for bit: the batch norm's input gradient is two passes of its own
// around ATen's per-channel sums.
class BatchNormReluConv final : public Candidate {
 public:
  std::string name() const override { return "bn-relu-conv"; }
  std::string description() const override {
    return "symtune::kernels::batchNormReluConv2d: batch norm, ReLU and the next convolution, "
           "keeping the batch norm's input alone and its backward in place";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kBatchNormReluConv && site.cell != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: the region's inputs (node 0 the batch norm, 2 the convolution); `op` runs the three
    // nodes as written
    const auto block = fitting(site, stack);
    if (!block) {
      op(stack);  // evaluation mode, other layouts, dtypes or devices: as written
      return;
    }
    at::Tensor out = leanBlock(block->input, block->norm, block->conv);
    stack.resize(stack.size() - site.cell->inputs.size());
    stack.emplace_back(std::move(out));
  }
  bool runsAsWritten(const OpSite& site, const torch::jit::Stack& stack) const override {
    return !fitting(site, stack);
  }
  // The zoo's blocks agree within 3e-6 of the largest gradient (ATen's own channels-last batch
  // norm sums in float: kernels.md); the margin is for that.
  double tolerance() const override { return 1e-5; }
  bool cpuOnly() const override { return true; }

 private:
  struct Block {
    at::Tensor input;
    TrainingNorm norm;
    Convolution conv;
  };
  // The block's values where the kernel takes them; nullopt where it runs as written.
  static std::optional<Block> fitting(const OpSite& site, const torch::jit::Stack& stack) {
    const RegionArgs args{*site.cell, stack, stack.size() - site.cell->inputs.size()};
    const auto input = args.tensor(0, 0);
    const auto norm = trainingNorm(args, 0);
    const auto conv = convolution(args, 2);
    if (!input || !norm || !conv || !fitsActivation(*input) ||
        !fitsNorm(*norm, input->size(1), *input) || !fitsConvolution(*conv, input->size(1), *input))
      return std::nullopt;
    return Block{*input, *norm, *conv};
  }
};

// Two convolution blocks in a row (kConvBlockPair; nodes 0-2 the first block's convolution, batch
// norm and ReLU, 3-5 the second's), as the lean block inside (`again` false) or as symtune::
// kernels::convBlockPairAgain (Note [A block pair run again] in kernels/). The second keeps the
// pair's input alone and pays two convolutions' forwards in the backward: bound where the binder
// weighs memory (Note [Memory slack] in measurement.cpp). Both run channels-last, an NCHW input
// copied once: oneDNN's backward of an NCHW convolution of early exit's shapes computes the
// input's gradient channels-last and converts it, holding three tensors of the input's size
// where one is the result; with the pairs on NCHW tensors early exit's step peaked there, at
// 10.9 MB, and channels-last at 9.8 (0.42 of `script`'s), the pair run again faster too.
class ConvBlockPair final : public Candidate {
 public:
  explicit ConvBlockPair(bool again) : again_(again) {}
  std::string name() const override { return again_ ? "conv-block-pair-again" : "conv-block-pair"; }
  std::string description() const override {
    return again_ ? "symtune::kernels::convBlockPairAgain: two convolution blocks keeping their "
                    "input alone, run again in the backward, channels-last"
                  : "two convolution blocks with the first's batch norm, ReLU and the second "
                    "convolution as symtune::kernels::batchNormReluConv2d, channels-last";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kConvBlockPair && site.cell != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    const auto pair = fitting(site, stack);
    if (!pair) {
      op(stack);  // as written
      return;
    }
    const Convolution &conv1 = pair->conv1, &conv2 = pair->conv2;
    const TrainingNorm &norm1 = pair->norm1, &norm2 = pair->norm2;
    at::Tensor out;
    // Channels-last inside (the class comment says why).
    const at::Tensor x = pair->input.contiguous(at::MemoryFormat::ChannelsLast);
    if (again_) {
      out = kernels::convBlockPairAgain(x, block(conv1, norm1), block(conv2, norm2));
    } else {
      const at::Tensor y1 = at::conv2d(x, conv1.weight, conv1.bias, conv1.stride, conv1.padding,
                                       conv1.dilation, conv1.groups);
      out = at::batch_norm(leanBlock(y1, norm1, conv2), norm2.weight, norm2.bias, norm2.runningMean,
                           norm2.runningVar, true, norm2.momentum, norm2.eps, false);
      out.relu_();  // the batch norm keeps its input, not its output
    }
    // The ATen ops give an NCHW input an NCHW output: a view after the pair (x.view(n, -1))
    // needs its strides.
    if (!pair->input.is_contiguous(at::MemoryFormat::ChannelsLast) && site.cell->viewedAfter)
      out = out.contiguous();
    stack.resize(stack.size() - site.cell->inputs.size());
    stack.emplace_back(std::move(out));
  }
  bool runsAsWritten(const OpSite& site, const torch::jit::Stack& stack) const override {
    return !fitting(site, stack);
  }
  double tolerance() const override { return 1e-5; }
  bool cpuOnly() const override { return true; }

 private:
  static kernels::ConvBlock block(const Convolution& c, const TrainingNorm& n) {
    kernels::ConvBlock b;
    b.weight = c.weight;
    b.stride = c.stride;
    b.padding = c.padding;
    b.dilation = c.dilation;
    b.groups = c.groups;
    b.bnWeight = n.weight;
    b.bnBias = n.bias;
    b.runningMean = n.runningMean;
    b.runningVar = n.runningVar;
    b.momentum = n.momentum;
    b.eps = n.eps;
    return b;
  }
  struct Pair {
    at::Tensor input;
    Convolution conv1, conv2;
    TrainingNorm norm1, norm2;
  };
  // The pair's values where the kernels take them; nullopt where it runs as written.
  std::optional<Pair> fitting(const OpSite& site, const torch::jit::Stack& stack) const {
    const RegionArgs args{*site.cell, stack, stack.size() - site.cell->inputs.size()};
    const auto input = args.tensor(0, 0);
    const auto conv1 = convolution(args, 0), conv2 = convolution(args, 3);
    const auto norm1 = trainingNorm(args, 1), norm2 = trainingNorm(args, 4);
    if (!input || !conv1 || !conv2 || !norm1 || !norm2 || !fitsActivation(*input) ||
        !fitsConvolution(*conv1, input->size(1), *input) ||
        !fitsNorm(*norm1, conv1->weight.size(0), *input) ||
        !fitsConvolution(*conv2, conv1->weight.size(0), *input) ||
        !fitsNorm(*norm2, conv2->weight.size(0), *input) ||
        (again_ && (conv1->bias.defined() || conv2->bias.defined())))
      return std::nullopt;
    return Pair{*input, *conv1, *conv2, *norm1, *norm2};
  }
  bool again_;
};

}  // namespace

std::unique_ptr<Candidate> makeBatchNormReluConv() {
  return std::make_unique<BatchNormReluConv>();
}

std::unique_ptr<Candidate> makeConvBlockPair() {
  return std::make_unique<ConvBlockPair>(false);
}

std::unique_ptr<Candidate> makeConvBlockPairAgain() {
  return std::make_unique<ConvBlockPair>(true);
}

}  // namespace symtune::binding
