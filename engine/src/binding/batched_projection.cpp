// Note [Batched weight gradient]
// A recurrent projection (a matmul bias site: `torch.matmul(h, w) + b` of the value a loop
// carries) runs once per trip, and so does its backward: the input's gradient `g wᵀ`, which the
// trip before needs, and the weight's `hᵀ g` and the bias's `Σ g`, which nothing needs until the
// loop's backward is done — T small GEMMs (the tagger's: [256, 32] × [32, 768], a few MFLOP each,
// far from the GEMM's speed) where one over all trips' rows would do. "addmm-batched" makes, on a
// loop execution's first trip, one `Gather` node for the weight and the bias (kept in the loop's
// frame) whose outputs every trip's projection reads. A trip's backward returns its input's
// gradient and leaves (h, g) in the loop execution's stash, which folds every 16 trips into one
// GEMM over their stacked rows (and one sum for the bias); autograd runs Gather only after every
// trip's node that feeds it has run (its dependencies), and Gather's backward folds the rest and
// returns the sums. A trip whose backward never
// runs stashes nothing, so what Gather sums is what autograd would have; a second backward over a
// retained graph stashes afresh. Trips given another weight or bias than the first (not the case
// in a loop over one parameter) run their own addmm.

#include "batched_projection.h"

#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace symtune::binding {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What a loop execution's trips leave for Gather's backward: each trip's input rows and output
// gradient, folded into partial sums every kFoldTrips trips (so the stash holds at most that
// many trips' gradients, however long the loop).
constexpr size_t kFoldTrips = 16;

struct Stash : torch::CustomClassHolder {
  std::vector<at::Tensor> rows, grads;
  at::Tensor weightSum, biasSum;  // of the trips folded so far

  void add(const at::Tensor& x, const at::Tensor& g) {
    rows.push_back(x);
    grads.push_back(g);
    if (rows.size() >= kFoldTrips)
      fold();
  }
  void fold() {
    if (rows.empty())
      return;
    const at::Tensor r = at::cat(rows), g = at::cat(grads);
    const at::Tensor w = r.t().mm(g), b = g.sum(0);
    weightSum = weightSum.defined() ? weightSum.add_(w) : w;
    biasSum = biasSum.defined() ? biasSum.add_(b) : b;
    rows.clear();
    grads.clear();
  }
};

// A loop execution's Gather: the weight and bias it was made for, what it gives the trips, the
// stash (kept in the loop's frame).
struct LoopGather : torch::CustomClassHolder {
  at::Tensor weight, bias, gatheredWeight, gatheredBias;
  c10::intrusive_ptr<Stash> stash;
};

c10::intrusive_ptr<Stash> stashOf(AutogradContext* ctx) {
  auto* held = static_cast<Stash*>(ctx->saved_data.at("stash").toCapsule().get());
  return c10::intrusive_ptr<Stash>::unsafe_reclaim_from_nonowning(held);
}

// The weight and the bias as every trip reads them; backward: their gradients over the stash.
struct Gather : torch::autograd::Function<Gather> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& b,
                               c10::intrusive_ptr<Stash> stash) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["stash"] = c10::IValue::make_capsule(std::move(stash));
    return {w.view_as(w), b.view_as(b)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto stash = stashOf(ctx);
    at::Tensor gw = grads[0], gb = grads[1];
    stash->fold();
    if (stash->weightSum.defined()) {
      gw = gw.defined() ? gw + stash->weightSum : stash->weightSum;
      gb = gb.defined() ? gb + stash->biasSum : stash->biasSum;
      stash->weightSum = at::Tensor();
      stash->biasSum = at::Tensor();
    }
    return {gw, gb, at::Tensor()};
  }
};

// One trip: addmm(b, x, w) of Gather's outputs; backward: x's gradient now, (x, g) to the stash.
struct Projection : torch::autograd::Function<Projection> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b, c10::intrusive_ptr<Stash> stash) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["stash"] = c10::IValue::make_capsule(std::move(stash));
    return at::addmm(b, x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor g = grads[0];
    at::Tensor gx = ctx->needs_input_grad(0) ? g.mm(w.t()) : at::Tensor();
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      stashOf(ctx)->add(x, g);
    }
    return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class BatchedProjection final : public Candidate {
 public:
  std::string name() const override { return "addmm-batched"; }
  std::string description() const override {
    return "addmm per trip, the weight's and bias's gradients in one GEMM over the loop's trips";
  }
  bool applies(const OpSite& site) const override {
    return site.pattern == kBiasMatmul && site.cell != nullptr && site.loop != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames& loops) const override {
    // stack: the region's inputs (the matmul's input and weight, the bias, alpha)
    const CellRegion& cell = *site.cell;
    const size_t base = stack.size() - cell.inputs.size();
    const auto tensor = [&](size_t i) {
      return stack[base + i].isTensor() ? stack[base + i].toTensor() : at::Tensor();
    };
    const at::Tensor x = tensor(cell.input), w = tensor(cell.weight), b = tensor(cell.bias);
    const bool fits = addmmFits(x, w, b) && loops.maxTrips(site.loop) >= 0;
    if (!fits) {
      op(stack);  // as written
      return;
    }
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes.back() = w.size(1);
    const at::Tensor rows = x.reshape({-1, x.size(-1)});
    at::Tensor out;
    const bool grad = at::GradMode::is_enabled() && (w.requires_grad() || b.requires_grad());
    c10::IValue& slot = loops.slot(site.loop, site.node);
    if (grad && slot.isNone()) {
      // The loop execution's first trip: its Gather, for the weight and bias it was given.
      auto gather = c10::make_intrusive<LoopGather>();
      gather->weight = w;
      gather->bias = b;
      gather->stash = c10::make_intrusive<Stash>();
      const auto gathered = Gather::apply(w, b, gather->stash);
      gather->gatheredWeight = gathered[0];
      gather->gatheredBias = gathered[1];
      slot = c10::IValue::make_capsule(std::move(gather));
    }
    if (grad && slot.isCapsule()) {
      const auto* gather = static_cast<const LoopGather*>(slot.toCapsule().get());
      if (gather->weight.is_same(w) && gather->bias.is_same(b))
        out = Projection::apply(rows, gather->gatheredWeight, gather->gatheredBias, gather->stash);
    }
    if (!out.defined())
      out = at::addmm(b, rows, w);  // no gradient wanted, or another weight than the first trip's
    stack.resize(base);
    stack.emplace_back(out.view(sizes));
  }
  // The weight's gradient summed over the trips in one GEMM, in another order.
  double tolerance() const override { return 1e-5; }
};

}  // namespace

bool addmmFits(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  return x.defined() && w.defined() && b.defined() && x.dim() >= 2 && w.dim() == 2 &&
         b.dim() == 1 && x.size(-1) == w.size(0) && b.size(0) == w.size(1) &&
         x.scalar_type() == w.scalar_type() && b.scalar_type() == w.scalar_type() &&
         at::isFloatingType(w.scalar_type()) && x.device() == w.device() &&
         b.device() == w.device();
}

std::unique_ptr<Candidate> makeBatchedProjection() {
  return std::make_unique<BatchedProjection>();
}

}  // namespace symtune::binding
