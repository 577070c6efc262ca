#include "residual_candidates.h"

#include <optional>

#include <ATen/ATen.h>

#include "symtune/binding/op_site.h"
#include "symtune/kernels/add_layer_norm.h"

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
        (!x.device().is_cpu() && !x.device().is_cuda()) || !(o.eps > 0))
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

}  // namespace

std::unique_ptr<Candidate> makeAddLayerNorm() {
  return std::make_unique<AddLayerNorm>();
}

}  // namespace symtune::binding
