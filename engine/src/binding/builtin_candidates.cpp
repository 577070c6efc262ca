#include <ATen/ATen.h>

#include "carried_rows.h"
#include "symtune/binding/candidate.h"
#include "symtune/kernels/batch_norm_relu.h"
#include "symtune/kernels/bias_gelu.h"

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
    const auto tensor = [&](size_t i) {
      return stack[base + i].isTensor() ? stack[base + i].toTensor() : at::Tensor();
    };
    const at::Tensor x = tensor(0), weight = tensor(1), bias = tensor(2);
    const at::Tensor mean = tensor(3), var = tensor(4);
    const auto vector = [&x](const at::Tensor& t) {
      return t.defined() && t.dim() == 1 && t.size(0) == x.size(1) &&
             t.scalar_type() == x.scalar_type() && t.device() == x.device() && t.is_contiguous();
    };
    // The kernel is the CPU's, on contiguous or channels-last activations (others would be
    // made contiguous: a change of format the rest of the model would pay for); evaluation
    // mode normalizes with the running statistics, as ATen does.
    const bool fits = stack[base + 5].isBool() && stack[base + 5].toBool() && x.defined() &&
                      x.dim() >= 2 && x.device().is_cpu() &&
                      (x.is_contiguous() || x.is_contiguous(at::MemoryFormat::ChannelsLast)) &&
                      (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) &&
                      x.numel() > x.size(1) && vector(weight) && vector(bias) &&
                      mean.defined() == var.defined() &&
                      (!mean.defined() || (vector(mean) && vector(var)));
    if (!fits) {
      op(stack);
      return;
    }
    at::Tensor out = kernels::batchNormRelu(x, weight, bias, mean, var, stack[base + 6].toDouble(),
                                            stack[base + 7].toDouble());
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  // Measured within 3e-7 of ATen's pair on the zoo's shapes; sums in another order.
  double tolerance() const override { return 1e-5; }
};

}  // namespace

const std::vector<std::unique_ptr<Candidate>>& builtinCandidates() {
  static const auto* all = [] {
    auto* list = new std::vector<std::unique_ptr<Candidate>>();
    list->push_back(std::make_unique<AtenOp>());
    list->push_back(std::make_unique<Alias>());
    list->push_back(std::make_unique<UnbindOnce>());
    list->push_back(std::make_unique<SplitOnce>());
    list->push_back(std::make_unique<BiasGelu>());
    list->push_back(std::make_unique<BatchNormRelu>());
    list->push_back(makeRowsInPlace());
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
