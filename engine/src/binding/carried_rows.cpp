// The `rows-in-place` candidate of loop-carried rows sites (Note [Loop-carried rows] in
// symtune/binding/op_site.h): one buffer for the tensor a loop reads and rewrites rows of, and one
// for its gradient.
//
// Note [Row buffer autograd]
// Three autograd functions share a RowGradient (the gradient buffer and the row gradients not yet
// added to it), and each write of the loop starts a new version of the buffer:
//   EnterRows(h0) -> B            the loop's initial value copied once into the buffer B (a
//                                 tensor the loop only reads is B itself, as a view);
//   ReadRows(B, index)            index_select of the buffer's current version v;
//   WriteRows(B, index, rows) -> B  index_copy_ (or index_add_) in place (B marked dirty):
//                                 version v + 1.
// The functions keep undefined gradients undefined (no zero tensors the size of B), and return
// none for B: the buffer's gradient is G, and moves through the versions in reverse. A write that
// made version v + 1 runs its backward after everything that read version v + 1 (they take its
// output as input), so by then G is the gradient of version v + 1 once the row gradients those
// reads noted are added in (and the loop's result's gradient, for the last write). The write takes
// its rows' gradient out of G and zeroes those rows (an accumulating write reads them and leaves
// G as it is: what it added to passes its gradient on), so G becomes what version v's readers add
// to; EnterRows adds the reads of the initial value and hands G to h0. The reads' notes are kept
// per version, so the order in which the engine runs reads and writes does not matter. A backward
// that keeps the graph and does not reach h0 (its gradient not asked for, h0 needing one) leaves
// the notes of version 0 behind for the next backward; the binder's replays and a training step's
// backward always reach it.

#include <algorithm>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include "carried_rows.h"

namespace symtune::binding {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Note [Row loops]
// The gradient buffer's row operations are the backward's work, and ATen's are slow for them on
// the CPU: index_add_ along dimension 0 adds row by row, one TensorIterator add each (30 us for
// 64 rows of 128 floats; the tree's level loop does it twice a level), and index_fill_ zeroes
// element by element (11 us for the same rows). On a contiguous float or double CPU buffer
// indexed along dimension 0 these are plain loops over the rows instead: addRows adds in index
// order as index_add_ does (so the sums are the same bit for bit), takeRows copies the rows out
// and then zeroes them (a row indexed twice is taken whole twice, as index_select then
// index_fill_ would). Anything else goes to ATen.
bool plainRows(const at::Tensor& g, int64_t dim, const at::Tensor& index) {
  return dim == 0 && g.dim() >= 1 && g.device().is_cpu() && g.is_contiguous() &&
         (g.scalar_type() == at::kFloat || g.scalar_type() == at::kDouble) &&
         index.device().is_cpu() && index.scalar_type() == at::kLong && index.dim() <= 1;
}

// The rows of g's first dimension `index` names, checked as ATen checks them.
template <typename F>
void forEachRow(const at::Tensor& g, const at::Tensor& index, const F& f) {
  const at::Tensor idx = index.contiguous();
  const int64_t* rows = idx.const_data_ptr<int64_t>();
  const int64_t size = g.size(0);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    TORCH_CHECK(rows[i] >= 0 && rows[i] < size, "rows-in-place: index ", rows[i],
                " is out of range for a dimension of size ", size);
    f(i, rows[i]);
  }
}

// g.index_add_(dim, index, grad).
void addRows(at::Tensor& g, int64_t dim, const at::Tensor& index, const at::Tensor& grad) {
  const int64_t width = g.dim() > 0 && g.size(0) > 0 ? g.numel() / g.size(0) : 0;
  if (!plainRows(g, dim, index) || grad.scalar_type() != g.scalar_type() ||
      !grad.device().is_cpu() || grad.numel() != index.numel() * width) {
    g.index_add_(dim, index, grad);
    return;
  }
  const at::Tensor src = grad.contiguous();
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "rows-in-place add", [&] {
    scalar_t* out = g.data_ptr<scalar_t>();
    const scalar_t* in = src.const_data_ptr<scalar_t>();
    forEachRow(g, index, [&](int64_t i, int64_t row) {
      scalar_t* dst = out + row * width;
      const scalar_t* from = in + i * width;
      for (int64_t j = 0; j < width; ++j)
        dst[j] += from[j];
    });
  });
}

// g.index_select(dim, index), then those rows of g zeroed.
at::Tensor takeRows(at::Tensor& g, int64_t dim, const at::Tensor& index) {
  if (!plainRows(g, dim, index)) {
    at::Tensor rows = g.index_select(dim, index);
    g.index_fill_(dim, index, 0);
    return rows;
  }
  std::vector<int64_t> sizes = g.sizes().vec();
  sizes[0] = index.numel();
  at::Tensor taken = at::empty(sizes, g.options());
  const int64_t width = g.size(0) > 0 ? g.numel() / g.size(0) : 0;
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "rows-in-place take", [&] {
    scalar_t* buffer = g.data_ptr<scalar_t>();
    scalar_t* out = taken.data_ptr<scalar_t>();
    forEachRow(g, index, [&](int64_t i, int64_t row) {
      std::copy(buffer + row * width, buffer + (row + 1) * width, out + i * width);
    });
    forEachRow(g, index, [&](int64_t, int64_t row) {
      std::fill(buffer + row * width, buffer + (row + 1) * width, scalar_t(0));
    });
  });
  return taken;
}

// The gradient side of one execution of the loop, shared by its autograd nodes.
struct RowGradient : torch::CustomClassHolder {
  int64_t dim = 0;
  std::vector<int64_t> sizes;  // the buffer's
  at::TensorOptions options;
  bool entryGrad = false;  // whether EnterRows has a backward (the loop's initial value needs one)
  at::Tensor buffer;       // G: allocated on the first backward that needs it
  std::map<int64_t, std::vector<std::pair<at::Tensor, at::Tensor>>>
      notes;  // version: (index, grad)

  at::Tensor& ensure() {
    if (!buffer.defined())
      buffer = at::zeros(sizes, options);
    return buffer;
  }
  void add(const at::Tensor& grad) {
    if (!grad.defined())
      return;
    if (buffer.defined())
      buffer.add_(grad);
    else
      buffer = grad.clone(at::MemoryFormat::Contiguous);
  }
  // Adds the row gradients noted by the reads of `version`.
  void settle(int64_t version) {
    auto it = notes.find(version);
    if (it == notes.end())
      return;
    at::Tensor& g = ensure();
    for (const auto& [index, grad] : it->second)
      addRows(g, dim, index, grad);
    notes.erase(it);
  }
};

c10::intrusive_ptr<RowGradient> gradientOf(AutogradContext* ctx) {
  auto* held = static_cast<RowGradient*>(ctx->saved_data.at("gradient").toCapsule().get());
  return c10::intrusive_ptr<RowGradient>::unsafe_reclaim_from_nonowning(held);
}

struct EnterRows : torch::autograd::Function<EnterRows> {
  // `copy`: the buffer is a copy of the entry, which the loop's writes change; otherwise (reads
  // only) the entry itself.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& entry,
                            c10::intrusive_ptr<RowGradient> gradient, bool copy) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["gradient"] = c10::IValue::make_capsule(std::move(gradient));
    return copy ? entry.clone(at::MemoryFormat::Contiguous) : entry.view_as(entry);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto gradient = gradientOf(ctx);
    gradient->add(grads[0]);
    gradient->settle(0);
    at::Tensor g = std::move(gradient->ensure());
    gradient->buffer = at::Tensor();
    return {g, at::Tensor(), at::Tensor()};
  }
};

struct ReadRows : torch::autograd::Function<ReadRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& buffer, const at::Tensor& index,
                            c10::intrusive_ptr<RowGradient> gradient, int64_t version) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["index"] = index;
    ctx->saved_data["version"] = version;
    const int64_t dim = gradient->dim;
    ctx->saved_data["gradient"] = c10::IValue::make_capsule(std::move(gradient));
    return at::index_select(buffer, dim, index);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (grads[0].defined()) {
      gradientOf(ctx)->notes[ctx->saved_data.at("version").toInt()].emplace_back(
          ctx->saved_data.at("index").toTensor(), grads[0]);
    }
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// `accumulate`: index_add_ (the rows added to what is there; their gradient is G's rows, and G
// goes on unchanged to the version before), else index_copy_.
struct WriteRows : torch::autograd::Function<WriteRows> {
  static at::Tensor forward(AutogradContext* ctx, at::Tensor buffer, const at::Tensor& index,
                            const at::Tensor& rows, c10::intrusive_ptr<RowGradient> gradient,
                            int64_t version, bool first, bool accumulate) {
    ctx->set_materialize_grads(false);
    ctx->saved_data["index"] = index;
    ctx->saved_data["version"] = version;
    ctx->saved_data["first"] = first;
    ctx->saved_data["accumulate"] = accumulate;
    const int64_t dim = gradient->dim;
    ctx->saved_data["gradient"] = c10::IValue::make_capsule(std::move(gradient));
    if (accumulate)
      buffer.index_add_(dim, index, rows);
    else
      buffer.index_copy_(dim, index, rows);
    ctx->mark_dirty({buffer});
    return buffer;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto gradient = gradientOf(ctx);
    gradient->add(grads[0]);
    gradient->settle(ctx->saved_data.at("version").toInt());
    const at::Tensor index = ctx->saved_data.at("index").toTensor();
    at::Tensor& g = gradient->ensure();
    at::Tensor rows = ctx->saved_data.at("accumulate").toBool()
                          ? g.index_select(gradient->dim, index)
                          : takeRows(g, gradient->dim, index);
    // The first write's input is the entry's copy; when the entry needs no gradient nothing
    // below it takes G.
    if (ctx->saved_data.at("first").toBool() && !gradient->entryGrad)
      gradient->buffer = at::Tensor();
    return {at::Tensor(), at::Tensor(), rows,        at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// One execution of the loop: the buffer, its version, and the value it was entered from (the
// loop's initial value, which the first trip's nodes are given).
struct RowBuffer : torch::CustomClassHolder {
  at::Tensor buffer;
  // Compared only during the first trip, while the loop holds the value.
  const at::TensorImpl* entry = nullptr;
  int64_t entryVersion = 0;
  int64_t version = 0;  // writes so far
  c10::intrusive_ptr<RowGradient> gradient;

  // The buffer when `self` is its current value; undefined when it is something else.
  at::Tensor resolve(const at::Tensor& self) const {
    if (self.is_same(buffer))
      return buffer;
    if (version == 0 && self.unsafeGetTensorImpl() == entry && self._version() == entryVersion)
      return buffer;
    return at::Tensor();
  }
};

bool indexFits(const at::Tensor& index) {
  return index.defined() && index.scalar_type() == at::kLong && index.dim() <= 1;
}

class RowsInPlace final : public Candidate {
 public:
  std::string name() const override { return "rows-in-place"; }
  std::string description() const override {
    return "one buffer for a loop's tensor, rows written in place; its reads' row gradients "
           "gathered into one gradient buffer";
  }
  bool applies(const OpSite& site) const override {
    return (site.pattern == kCarriedRows || site.pattern == kInvariantRows) && site.rows != nullptr;
  }
  void run(const OpSite& site, torch::jit::Operation& op, torch::jit::Stack& stack,
           LoopFrames& loops) const override {
    // stack: self, dim, index (reads); and source (index_copy); and alpha, 1 (index_add)
    const bool write = site.node == site.rows->writer;
    const size_t base = stack.size() - (write ? (site.rows->accumulate ? 5 : 4) : 3);
    const at::Tensor& self = stack[base].toTensor();
    const auto dim = tensorDim(self, stack[base + 1].toInt());
    const at::Tensor& index = stack[base + 2].toTensor();
    c10::IValue& slot = loops.slot(site.loop, site.rows->bufferKey());
    if (slot.isNone()) {
      if (!dim || !self.is_floating_point()) {
        op(stack);  // ATen says what is wrong (or there is no gradient to gather)
        return;
      }
      auto gradient = c10::make_intrusive<RowGradient>();
      gradient->dim = *dim;
      gradient->sizes = self.sizes().vec();
      gradient->options = self.options();
      gradient->entryGrad = self.requires_grad() && at::GradMode::is_enabled();
      auto rows = c10::make_intrusive<RowBuffer>();
      rows->entry = self.unsafeGetTensorImpl();
      rows->entryVersion = self._version();
      rows->gradient = gradient;
      rows->buffer = EnterRows::apply(self, gradient, /*copy=*/site.rows->writer != nullptr);
      slot = c10::IValue::make_capsule(rows);
    }
    auto* rows = static_cast<RowBuffer*>(slot.toCapsule().get());
    at::Tensor buffer = rows->resolve(self);
    if (!buffer.defined() || !dim || *dim != rows->gradient->dim || !indexFits(index)) {
      op(stack);  // not the buffer (cannot happen within the pattern), or ATen's error
      return;
    }
    at::Tensor out;
    if (write) {
      const at::Tensor& source = stack[base + 3].toTensor();
      const bool first = rows->version == 0;
      out = WriteRows::apply(buffer, index, source, rows->gradient, rows->version + 1, first,
                             site.rows->accumulate);
      ++rows->version;
    } else {
      out = ReadRows::apply(buffer, index, rows->gradient, rows->version);
    }
    stack.resize(base);
    stack.emplace_back(std::move(out));
  }
  // A row read more than once has its gradients summed in another order than autograd's.
  double tolerance() const override { return 1e-6; }
};

}  // namespace

std::unique_ptr<Candidate> makeRowsInPlace() {
  return std::make_unique<RowsInPlace>();
}

}  // namespace symtune::binding
