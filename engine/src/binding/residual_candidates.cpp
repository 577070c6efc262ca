#include "residual_candidates.h"

#include <optional>

#include <ATen/ATen.h>

#include "symtune/binding/op_site.h"
#include "symtune/kernels/add_layer_norm.h"
#include "symtune/kernels/bias_dropout_add.h"

namespace symtune::binding {

namespace {

// A residual add and its layer norm as symtune::add_layer_norm of kernels/: one pass reads both
// operands and writes the sum and the norm, one pass back gives the sum's gradient (the norm's
// plus the one the sum's later readers send) and sums the weight's and bias's. Not bit for bit the
// ATen pair: the row statistics are summed in another order.
class AddLayerNorm final : public Candidate {
 public:
  std::string name() const override { return "add-layer-norm"; }
  std::string description() const override {
    return "symtune::add_layer_norm (kernels/): the residual add and its layer norm in one pass "
           "each way";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kAddLayerNorm && site.cell != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: the region's inputs; `op` runs the add and the norm as written, leaving the norm,
    // then the sum
    const CellRegion& cell = *site.cell;
    const size_t base = stack.size() - cell.inputs.size();
    const auto fused = operands(cell, stack, base);
    if (!fused) {
      op(stack);  // broadcasting, other dtypes, a norm over more than the last dimension
      return;
    }
    auto [out, sum] = kernels::addLayerNorm(fused->input, fused->residual, fused->weight,
                                            fused->bias, fused->eps);
    stack.resize(base);
    stack.emplace_back(std::move(out));
    stack.emplace_back(std::move(sum));
  }
  // The row statistics and the weight's and bias's gradients summed in another order than ATen's.
  double tolerance() const override { return 1e-5; }

 private:
  struct Operands {
    at::Tensor input, residual, weight, bias;
    double eps = 0;
  };
  // What the kernel takes: two tensors of one shape, dtype (float or double) and device (CPU or
  // CUDA); a norm over the last dimension; a weight and bias that are vectors of it, or None.
  static std::optional<Operands> operands(const CellRegion& cell, const torch::jit::Stack& stack,
                                          size_t base) {
    const c10::IValue& a = stack[base + cell.input];
    const c10::IValue& b = stack[base + cell.residual];
    const c10::IValue& shape = stack[base + cell.normShape];
    const c10::IValue& eps = stack[base + cell.eps];
    if (!a.isTensor() || !b.isTensor() || !shape.isIntList() || !eps.isDouble())
      return std::nullopt;
    Operands o{a.toTensor(), b.toTensor(), {}, {}, eps.toDouble()};
    const at::Tensor& x = o.input;
    if (!x.defined() || !o.residual.defined() || x.dim() < 1 || x.numel() == 0 ||
        o.residual.sizes() != x.sizes() || o.residual.scalar_type() != x.scalar_type() ||
        o.residual.device() != x.device() ||
        (x.scalar_type() != at::kFloat && x.scalar_type() != at::kDouble) ||
        (!x.device().is_cpu() && !x.device().is_cuda()) || !(o.eps >= 0))
      return std::nullopt;
    const auto normalized = shape.toIntVector();
    if (normalized.size() != 1 || normalized.front() != x.size(-1))
      return std::nullopt;
    for (const auto& [slot, into] :
         {std::pair{cell.weight, &o.weight}, std::pair{cell.bias, &o.bias}}) {
      const c10::IValue& v = stack[base + slot];
      if (v.isNone())
        continue;
      if (!v.isTensor())
        return std::nullopt;
      const at::Tensor& t = v.toTensor();
      if (t.defined() && (t.dim() != 1 || t.size(0) != x.size(-1) ||
                          t.scalar_type() != x.scalar_type() || t.device() != x.device()))
        return std::nullopt;
      *into = t;
    }
    return o;
  }
};

// A bias add, its dropout and the residual add as symtune::bias_dropout_add of kernels/: one pass
// forward keeping only a seed (the mask is a hash of each element's index and the seed, drawn
// from the default CPU generator), one pass back regenerating the mask. Its masks are not
// ATen's, so no execution of it matches the reference's: it is compared with the same ATen ops
// on its own mask (onOwnDraws), drawn again from the same generator state — which checks the
// bias, the scale, the residual and the backward, and that the mask is the one the forward used.
// The mask's statistics (each element kept with probability 1 - p, independently) are the
// kernel's own tests' (tests/kernels/tst_bias_dropout_add.cpp).
class BiasDropoutAdd final : public Candidate {
 public:
  std::string name() const override { return "bias-dropout-add"; }
  std::string description() const override {
    return "symtune::bias_dropout_add (kernels/): the bias add, the dropout and the residual add "
           "in one pass each way, its own mask";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kBiasDropoutAdd && site.cell != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames&) const override {
    // stack: the region's inputs; `op` runs the three nodes as written
    const size_t base = stack.size() - site.cell->inputs.size();
    const auto fused = operands(*site.cell, stack, base);
    if (!fused) {
      op(stack);  // shapes the kernel does not take, other dtypes: as written, ATen's mask
      return;
    }
    at::Tensor out =
        kernels::biasDropoutAdd(fused->input, fused->bias, fused->residual, fused->p, fused->train);
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  double tolerance() const override { return 1e-5; }
  bool ownDraws() const override { return true; }
  void onOwnDraws(const OpSite& site, torch::jit::Operation& op,
                  torch::jit::Stack& stack) const override {
    const size_t base = stack.size() - site.cell->inputs.size();
    const auto fused = operands(*site.cell, stack, base);
    if (!fused) {
      op(stack);  // what run does then
      return;
    }
    // The kernel's mask for this generator state, scaled: its dropout of ones (one draw, as run's).
    at::Tensor scaledMask;
    {
      at::NoGradGuard constant;
      scaledMask = kernels::biasDropoutAdd(at::ones_like(fused->input), at::Tensor(),
                                           at::zeros_like(fused->input), fused->p, fused->train);
    }
    const at::Tensor biased = fused->bias.defined() ? fused->input + fused->bias : fused->input;
    at::Tensor out = fused->residual + biased * scaledMask;
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }

 private:
  struct Operands {
    at::Tensor input, bias, residual;
    double p = 0;
    bool train = true;
  };
  // What the kernel takes: an input and a residual of one shape, the bias none, a vector of the
  // input's last dimension or the input's shape; one dtype (float or double) and device (CPU or
  // CUDA); p in [0, 1).
  static std::optional<Operands> operands(const CellRegion& cell, const torch::jit::Stack& stack,
                                          size_t base) {
    const c10::IValue& x = stack[base + cell.input];
    const c10::IValue& b = stack[base + cell.bias];
    const c10::IValue& r = stack[base + cell.residual];
    const c10::IValue& p = stack[base + cell.dropoutP];
    const c10::IValue& train = stack[base + cell.train];
    if (!x.isTensor() || !b.isTensor() || !r.isTensor() || !p.isDouble() || !train.isBool())
      return std::nullopt;
    Operands o{x.toTensor(), b.toTensor(), r.toTensor(), p.toDouble(), train.toBool()};
    const at::Tensor& in = o.input;
    const bool vector =
        o.bias.defined() && in.dim() >= 1 && o.bias.dim() == 1 && o.bias.size(0) == in.size(-1);
    if (!in.defined() || !o.bias.defined() || !o.residual.defined() || in.numel() == 0 ||
        (!vector && o.bias.sizes() != in.sizes()) || o.residual.sizes() != in.sizes() ||
        (in.scalar_type() != at::kFloat && in.scalar_type() != at::kDouble) ||
        (!in.device().is_cpu() && !in.device().is_cuda()) || !(o.p >= 0 && o.p < 1))
      return std::nullopt;
    for (const at::Tensor* t : {&o.bias, &o.residual}) {
      if (t->scalar_type() != in.scalar_type() || t->device() != in.device())
        return std::nullopt;
    }
    return o;
  }
};

}  // namespace

std::unique_ptr<Candidate> makeAddLayerNorm() {
  return std::make_unique<AddLayerNorm>();
}

std::unique_ptr<Candidate> makeBiasDropoutAdd() {
  return std::make_unique<BiasDropoutAdd>();
}

}  // namespace symtune::binding
