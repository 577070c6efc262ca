#include "symtune/binding/padding.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "symtune/binding/shape_bucket.h"

namespace symtune::binding {

std::optional<RowPadding> rowPaddingOf(const OpSite& site) {
  RowPadding p;
  if (site.pattern == kBiasGelu) {
    p.inputs = {{0, 0.0, 2}};  // x + b: x's rows; the bias broadcasts over them
    p.broadcast = {{1, 1}};
    return p;
  }
  if (site.pattern == kGruCell && site.cell != nullptr) {
    const CellRegion& cell = *site.cell;
    p.inputs = {{cell.gatesIn, 0.0, 2}, {cell.gatesHidden, 0.0, 2}, {cell.state, 0.0, 2}};
    if (cell.keep >= 0)
      p.inputs.push_back({static_cast<size_t>(cell.keep), false, 2});
    return p;
  }
  if (site.pattern == kBiasMatmul && site.cell != nullptr) {
    const CellRegion& cell = *site.cell;
    p.inputs = {{cell.input, 0.0, 2}};
    p.broadcast = {{cell.weight, 2}, {cell.bias, 1}};
    return p;
  }
  if (site.pattern == kSoftmaxCrossEntropy) {
    // The trainer's loss: cross_entropy's default ignore index, which the mean leaves out.
    p.inputs = {{0, 0.0, 2}, {1, static_cast<int64_t>(-100), 1}};
    p.outputRows = false;
    return p;
  }
  return std::nullopt;
}

std::optional<int64_t> paddedRows(const torch::jit::Stack& stack, size_t arity,
                                  const RowPadding& padding) {
  if (stack.size() < arity || padding.inputs.empty())
    return std::nullopt;
  const size_t base = stack.size() - arity;
  std::optional<int64_t> rows;
  for (const auto& in : padding.inputs) {
    if (in.index >= arity || !stack[base + in.index].isTensor())
      return std::nullopt;
    const at::Tensor& t = stack[base + in.index].toTensor();
    if (!t.defined() || t.dim() < in.minDim || (rows && t.size(0) != *rows))
      return std::nullopt;
    rows = t.size(0);
  }
  for (const auto& b : padding.broadcast) {
    if (b.index >= arity)
      return std::nullopt;
    const c10::IValue& v = stack[base + b.index];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().dim() > b.maxDim)
      return std::nullopt;
  }
  return rows;
}

void padRows(torch::jit::Stack& stack, size_t arity, const RowPadding& padding, int64_t rows,
             int64_t to) {
  TORCH_CHECK(to >= rows, "padRows: cannot pad ", rows, " rows to ", to);
  if (to == rows)
    return;
  const size_t base = stack.size() - arity;
  for (const auto& in : padding.inputs) {
    const at::Tensor t = stack[base + in.index].toTensor();
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[0] = to - rows;
    const at::Tensor fill =
        at::full(sizes, in.fill, t.options().requires_grad(false).memory_format(std::nullopt));
    stack[base + in.index] = at::cat({t, fill}, 0);
  }
}

void cutRows(torch::jit::Stack& stack, const RowPadding& padding, int64_t rows) {
  if (!padding.outputRows)
    return;
  const at::Tensor out = stack.back().toTensor();
  stack.back() = out.narrow(0, 0, rows);
}

namespace {

class Padded final : public Candidate {
 public:
  explicit Padded(std::shared_ptr<const Candidate> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "padded:" + inner_->name(); }
  std::string description() const override {
    return inner_->description() + ", on inputs padded to the bucket's rows";
  }
  bool applies(const OpSite& site) const override {
    return inner_->applies(site) && rowPaddingOf(site).has_value();
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames& loops) const override {
    const auto padding = rowPaddingOf(site);
    const size_t arity = siteArity(site);
    const auto rows = padding ? paddedRows(stack, arity, *padding) : std::nullopt;
    if (!rows || bucketDim(*rows) == *rows) {
      inner_->run(site, op, stack, loops);
      return;
    }
    padRows(stack, arity, *padding, *rows, bucketDim(*rows));
    inner_->run(site, op, stack, loops);
    cutRows(stack, *padding, *rows);
  }
  // Reductions over more rows (zeros among them) may round differently.
  double tolerance() const override { return std::max(inner_->tolerance(), 1e-6); }
  bool cpuOnly() const override { return inner_->cpuOnly(); }

 private:
  std::shared_ptr<const Candidate> inner_;
};

}  // namespace

std::unique_ptr<Candidate> makePadded(std::shared_ptr<const Candidate> inner) {
  return std::make_unique<Padded>(std::move(inner));
}

}  // namespace symtune::binding
