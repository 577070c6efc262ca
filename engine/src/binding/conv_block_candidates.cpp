#include "conv_block_candidates.h"

#include <optional>

#include <ATen/ATen.h>

#include "symtune/binding/op_site.h"
#include "symtune/kernels/batch_norm_relu_conv.h"

namespace symtune::binding {

namespace {

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
    // stack: the region's inputs; `op` runs the three nodes as written
    const size_t base = stack.size() - site.cell->inputs.size();
    const auto block = operands(*site.cell, stack, base);
    if (!block) {
      op(stack);  // evaluation mode, other layouts, dtypes or devices: as written
      return;
    }
    at::Tensor out = kernels::batchNormReluConv2d(
        block->input, block->weight, block->bias, block->runningMean, block->runningVar,
        block->momentum, block->eps, block->convWeight, block->convBias, block->stride,
        block->padding, block->dilation, block->groups);
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  // The zoo's blocks agree within 3e-6 of the largest gradient (ATen's own channels-last batch
  // norm sums in float: kernels.md); the margin is for that.
  double tolerance() const override { return 1e-5; }
  bool cpuOnly() const override { return true; }

 private:
  struct Operands {
    at::Tensor input, weight, bias, runningMean, runningVar, convWeight, convBias;
    double momentum = 0, eps = 0;
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups = 1;
  };
  // What the kernel takes: a training batch norm with weight and bias (its running statistics
  // both or neither) of a 4-d CPU activation, float or double, contiguous or channels-last, and
  // a convolution of it with integer strides, padding and dilation.
  static std::optional<Operands> operands(const CellRegion& cell, const torch::jit::Stack& stack,
                                          size_t base) {
    // The value node `k` of the region (0: the batch norm, 2: the convolution) reads as `input`.
    const auto at = [&](size_t k, size_t input) -> const c10::IValue* {
      const int slot = cell.slots[k][input];
      return slot >= 0 ? &stack[base + static_cast<size_t>(slot)] : nullptr;
    };
    const auto tensor = [&](size_t k, size_t input) -> std::optional<at::Tensor> {
      const c10::IValue* v = at(k, input);
      if (v == nullptr || !(v->isTensor() || v->isNone()))
        return std::nullopt;
      return v->isTensor() ? v->toTensor() : at::Tensor();
    };
    const auto ints = [&](size_t k, size_t input) -> std::optional<std::vector<int64_t>> {
      const c10::IValue* v = at(k, input);
      if (v == nullptr || !v->isIntList())
        return std::nullopt;
      return v->toIntVector();
    };
    const c10::IValue *training = at(0, 5), *momentum = at(0, 6), *eps = at(0, 7),
                      *groups = at(2, 6);
    const auto x = tensor(0, 0), w = tensor(0, 1), b = tensor(0, 2), rm = tensor(0, 3),
               rv = tensor(0, 4), cw = tensor(2, 1), cb = tensor(2, 2);
    const auto stride = ints(2, 3), padding = ints(2, 4), dilation = ints(2, 5);
    if (!x || !w || !b || !rm || !rv || !cw || !cb || !stride || !padding || !dilation ||
        training == nullptr || !training->isBool() || !training->toBool() || momentum == nullptr ||
        !momentum->isDouble() || eps == nullptr || !eps->isDouble() || groups == nullptr ||
        !groups->isInt())
      return std::nullopt;
    Operands o{*x,
               *w,
               *b,
               *rm,
               *rv,
               *cw,
               *cb,
               momentum->toDouble(),
               eps->toDouble(),
               *stride,
               *padding,
               *dilation,
               groups->toInt()};
    const at::Tensor& in = o.input;
    if (!in.defined() || in.dim() != 4 || !in.device().is_cpu() ||
        (in.scalar_type() != at::kFloat && in.scalar_type() != at::kDouble) ||
        !(in.is_contiguous() || in.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
        in.size(0) * in.size(2) * in.size(3) < 2)
      return std::nullopt;
    const auto vector = [&in](const at::Tensor& t) {
      return t.defined() && t.dim() == 1 && t.size(0) == in.size(1) &&
             t.scalar_type() == in.scalar_type() && t.device() == in.device() && t.is_contiguous();
    };
    if (!vector(o.weight) || !vector(o.bias) || o.runningMean.defined() != o.runningVar.defined() ||
        (o.runningMean.defined() && (!vector(o.runningMean) || !vector(o.runningVar))))
      return std::nullopt;
    const at::Tensor& k = o.convWeight;
    if (!k.defined() || k.dim() != 4 || k.scalar_type() != in.scalar_type() ||
        k.device() != in.device() || o.groups < 1 || k.size(1) * o.groups != in.size(1) ||
        (o.convBias.defined() &&
         (o.convBias.dim() != 1 || o.convBias.size(0) != k.size(0) ||
          o.convBias.scalar_type() != in.scalar_type() || o.convBias.device() != in.device())))
      return std::nullopt;
    return o;
  }
};

}  // namespace

std::unique_ptr<Candidate> makeBatchNormReluConv() {
  return std::make_unique<BatchNormReluConv>();
}

}  // namespace symtune::binding
