// DynaCompiler's padded buckets (Note [Padded buckets] in symtune/binding/padding.h): the sites
// whose rows are independent — bias GELU, GRU cell, matmul bias, the loss — run on inputs padded
// to their bucket's rows and give the unpadded result, forward and backward, whichever candidate
// runs inside; the others are a cache key only. On a GPU the same sites run as CUDA graphs
// captured per padded shape (Note [Graphed sites] in symtune/binding/cuda_graph.h), and give the
// unpadded result too.

#include "doctest_torch.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda_rows.h"
#include "symtune/binding/binder.h"
#include "symtune/binding/cuda_graph.h"
#include "symtune/binding/padding.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/graph/symugen.h"
#include "tensor_compare.h"

namespace {

using symtune::binding::Binder;
using symtune::binding::BinderOptions;
using symtune::binding::Candidate;

// A GRU over time steps (the tagger's cell and its recurrent projection) whose states go through
// a linear layer and a GELU each step: a GRU cell, a matmul bias and a bias GELU, each with the
// batch as its rows.
torch::jit::Module model() {
  torch::jit::Module m("Padded");
  m.define(R"(
def forward(self, x: Tensor, lengths: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor, w_o: Tensor, b_o: Tensor, hid: int):
    gi_all = torch.matmul(x, w_ih) + b_ih
    h = torch.zeros([x.size(0), hid], dtype=x.dtype, device=x.device)
    outs: List[Tensor] = []
    for t in range(x.size(1)):
        gi = gi_all[:, t]
        gh = torch.matmul(h, w_hh) + b_hh
        r = torch.sigmoid(gi[:, :hid] + gh[:, :hid])
        z = torch.sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])
        n = torch.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])
        h = torch.where((lengths > t).unsqueeze(1), (1 - z) * n + z * h, h)
        outs.append(torch.gelu(torch.matmul(h, w_o) + b_o))
    return torch.stack(outs, 1)
)");
  return m;
}

constexpr int64_t kHidden = 6, kInput = 5, kTime = 4;

struct Run {
  std::vector<torch::Tensor> values;  // the output, then the gradients of x and the parameters
};

Run step(symtune::SyMuGen& gen, symtune::OpBinder* binder, int64_t batch,
         torch::Device device = torch::kCPU, bool differentiate = true) {
  torch::manual_seed(batch * 11);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  std::vector<torch::Tensor> leaves{
      torch::randn({batch, kTime, kInput}, opts),
      torch::randn({kInput, 3 * kHidden}, opts) / std::sqrt(double(kInput)),
      torch::randn({kHidden, 3 * kHidden}, opts) / std::sqrt(double(kHidden)),
      torch::randn({3 * kHidden}, opts) * 0.1,
      torch::randn({3 * kHidden}, opts) * 0.1,
      torch::randn({kHidden, kHidden}, opts) / std::sqrt(double(kHidden)),
      torch::randn({kHidden}, opts) * 0.1};
  for (auto& t : leaves)
    t = t.to(device).requires_grad_(differentiate);
  const auto lengths = torch::randint(1, kTime + 1, {batch}).to(device);
  symtune::ForwardOptions options;
  options.binder = binder;
  const auto out = gen.forward({leaves[0], lengths, leaves[1], leaves[2], leaves[3], leaves[4],
                                leaves[5], leaves[6], kHidden},
                               options)
                       .output.toTensor();
  Run r{{out.detach()}};
  if (!differentiate)
    return r;
  out.backward(torch::linspace(-1, 1, out.numel(), opts).view_as(out).to(device));
  for (const auto& t : leaves)
    r.values.push_back(t.grad());
  return r;
}

void checkClose(const Run& got, const Run& want, double within) {
  symtune::test::checkEach(got.values, want.values, within, "0: the output, then the gradients");
}

// `inner`, noting the rows of the first input it is given (what the padding made of them).
class RowsSeen final : public Candidate {
 public:
  explicit RowsSeen(const Candidate* inner, std::string prefix = "")
      : inner_(inner), prefix_(std::move(prefix)) {}
  std::string name() const override { return prefix_ + inner_->name(); }
  std::string description() const override { return inner_->description(); }
  bool applies(const symtune::binding::OpSite& site) const override {
    return inner_->applies(site);
  }
  void run(const symtune::binding::OpSite& site, torch::jit::Operation& op,
           torch::jit::Stack& stack, symtune::LoopFrames& loops) const override {
    const auto padding = symtune::binding::rowPaddingOf(site);
    if (padding) {
      const size_t base = stack.size() - symtune::binding::siteArity(site);
      std::lock_guard<std::mutex> lock(mutex_);
      seen.push_back(stack[base + padding->inputs.front().index].toTensor().size(0));
    }
    inner_->run(site, op, stack, loops);
  }
  double tolerance() const override { return inner_->tolerance(); }
  mutable std::vector<int64_t> seen;

 private:
  const Candidate* inner_;
  std::string prefix_;
  mutable std::mutex mutex_;
};

// A binder that runs `pattern`'s sites with `winner` (one of `extra`), the rest as written, and
// measures nothing.
std::unique_ptr<Binder> forced(symtune::SyMuGen& gen, const symtune::MachineFingerprint& machine,
                               const std::vector<std::shared_ptr<const Candidate>>& extra,
                               const std::string& pattern, const std::string& winner,
                               torch::Device device = torch::kCPU) {
  BinderOptions options;
  options.extra = extra;
  Binder measured(gen.staticGraph(), machine, options);
  step(gen, &measured, 5, device);
  symtune::BindingTable table = measured.table();
  bool any = false;
  for (auto& b : table.bindings) {
    const bool ours = b.pattern == pattern;
    if (ours) {
      // Measured beside the others, it agreed with the reference.
      bool agreed = false;
      for (const auto& c : b.candidates)
        agreed = agreed || (c.name == winner && c.refused.empty());
      INFO(b.site, " in ", b.bucket);
      CHECK(agreed);
    }
    b.winner = ours ? winner : "aten";
    any = any || ours;
  }
  REQUIRE(any);
  options.measure = false;
  auto binder = std::make_unique<Binder>(gen.staticGraph(), machine, options);
  REQUIRE_FALSE(binder->adopt(std::move(table)).has_value());
  return binder;
}

// Each padded site's pattern with each candidate that computes it: its fused one, and as written.
struct PaddedCase {
  const char* pattern;
  const char* inner;
};

std::vector<PaddedCase> paddedCases() {
  namespace b = symtune::binding;
  return {{b::kGruCell, "gru-cell"}, {b::kGruCell, "aten"},       {b::kBiasMatmul, "addmm"},
          {b::kBiasMatmul, "aten"},  {b::kBiasGelu, "bias-gelu"}, {b::kBiasGelu, "aten"}};
}

}  // namespace

// A binder on a GPU leaves out what would only run ATen there (Binder::applicableTo).
TEST_CASE("a candidate that runs on CPU tensors only says so, and so do its wrappers") {
  namespace b = symtune::binding;
  const auto shared = [](const char* name) {
    const Candidate* c = b::findCandidate(name);
    REQUIRE(c != nullptr);
    return std::shared_ptr<const Candidate>(std::shared_ptr<void>(), c);
  };
  CHECK(shared("bn-relu")->cpuOnly());
  CHECK(b::makeCudaGraphed(shared("bn-relu"))->cpuOnly());
  CHECK(b::makePadded(shared("bn-relu"))->cpuOnly());
  for (const char* name : {b::kAten, "gru-cell", "bias-gelu", "softmax-cross-entropy"}) {
    INFO(name);
    CHECK_FALSE(shared(name)->cpuOnly());
    CHECK_FALSE(b::makeCudaGraphed(shared(name))->cpuOnly());
  }
}

TEST_CASE("the sites whose rows are independent pad; the others are a cache key only") {
  namespace b = symtune::binding;
  symtune::SyMuGen gen(model(), "padded");
  BinderOptions quiet;
  quiet.measure = false;
  Binder finder(gen.staticGraph(), b::currentMachine(torch::kCPU), quiet);
  step(gen, &finder, 3);
  std::set<std::string> padded, keyed;
  for (const auto& site : finder.sites())
    (b::rowPaddingOf(site) ? padded : keyed).insert(site.pattern);
  CHECK(padded == std::set<std::string>{b::kGruCell, b::kBiasMatmul, b::kBiasGelu});
  CHECK(keyed.count(b::kLoopIndexedSelect) == 1);  // gi_all[:, t]
  b::OpSite loss;
  loss.pattern = b::kSoftmaxCrossEntropy;
  loss.arity = 2;
  const auto lossPadding = b::rowPaddingOf(loss);
  REQUIRE(lossPadding.has_value());
  CHECK_FALSE(lossPadding->outputRows);  // a mean: nothing to cut
  b::OpSite norm;
  norm.pattern = b::kBatchNormRelu;  // statistics over the rows
  CHECK_FALSE(b::rowPaddingOf(norm).has_value());
}

TEST_CASE("padding fills the new rows, cuts them off, and keeps the real rows' gradients") {
  namespace b = symtune::binding;
  b::RowPadding p;
  p.inputs = {{0, 0.0, 2}, {1, false, 2}, {2, static_cast<int64_t>(-100), 1}};
  p.broadcast = {{3, 1}};
  auto x = torch::randn({5, 3}, torch::kDouble).requires_grad_(true);
  const auto keep = torch::ones({5, 1}, torch::kBool);
  const auto target = torch::arange(5);
  const auto bias = torch::randn({3});
  torch::jit::Stack stack{x, keep, target, bias, c10::IValue(int64_t{7})};
  REQUIRE(b::paddedRows(stack, 5, p) == std::optional<int64_t>(5));
  b::padRows(stack, 5, p, 5, 8);
  const auto px = stack[0].toTensor();
  REQUIRE(px.sizes() == c10::IntArrayRef({8, 3}));
  CHECK(torch::equal(px.narrow(0, 0, 5), x));
  CHECK(torch::equal(px.narrow(0, 5, 3), torch::zeros({3, 3}, torch::kDouble)));
  CHECK(torch::equal(stack[1].toTensor().narrow(0, 5, 3), torch::zeros({3, 1}, torch::kBool)));
  CHECK(torch::equal(stack[2].toTensor().narrow(0, 5, 3), torch::full({3}, -100).to(torch::kLong)));
  CHECK(torch::equal(stack[3].toTensor(), bias));  // broadcast inputs stay as they are
  CHECK(stack[4].toInt() == 7);
  stack.resize(4);
  stack.back() = px * 2;  // an output with the padded rows
  b::cutRows(stack, p, 5);
  const auto out = stack.back().toTensor();
  REQUIRE(out.size(0) == 5);
  out.sum().backward();
  CHECK(torch::equal(x.grad(), torch::full({5, 3}, 2.0, torch::kDouble)));

  // Rows that disagree, too few dimensions, or a "bias" with rows: nothing is padded.
  torch::jit::Stack mismatched{torch::randn({5, 3}), torch::ones({4, 1}, torch::kBool),
                               torch::arange(5), bias, c10::IValue(int64_t{7})};
  CHECK_FALSE(b::paddedRows(mismatched, 5, p).has_value());
  torch::jit::Stack vector{torch::randn({5}), keep, target, bias, c10::IValue(int64_t{7})};
  CHECK_FALSE(b::paddedRows(vector, 5, p).has_value());
  torch::jit::Stack rowBias{torch::randn({5, 3}), keep, target, torch::randn({5, 3}),
                            c10::IValue(int64_t{7})};
  CHECK_FALSE(b::paddedRows(rowBias, 5, p).has_value());
}

TEST_CASE("each padded site gives the unpadded outputs and gradients, whichever candidate runs") {
  namespace b = symtune::binding;
  symtune::SyMuGen gen(model(), "padded");
  const auto machine = b::currentMachine(torch::kCPU);
  for (const PaddedCase& c : paddedCases()) {
    INFO(std::string(c.pattern), " with ", std::string(c.inner));
    auto seen = std::make_shared<RowsSeen>(b::findCandidate(c.inner));
    std::shared_ptr<const Candidate> padded = b::makePadded(seen);
    CHECK(padded->name() == std::string("padded:") + c.inner);
    auto binder = forced(gen, machine, {padded}, c.pattern, padded->name());
    for (const int64_t batch : {5, 7, 8, 6}) {  // bucket 8 (8: already there)
      INFO("batch ", batch);
      seen->seen.clear();
      checkClose(step(gen, binder.get(), batch), step(gen, nullptr, batch), 1e-10);
      REQUIRE_FALSE(seen->seen.empty());
      for (const int64_t rows : seen->seen)
        CHECK(rows == b::bucketDim(batch));
    }
    CHECK(binder->measurements() == 0);
  }
}

TEST_CASE("the loss padded with ignored targets is the unpadded loss") {
  namespace b = symtune::binding;
  symtune::SyMuGen gen(model(), "padded");
  const auto machine = b::currentMachine(torch::kCPU);
  for (const char* inner : {"softmax-cross-entropy", "aten"}) {
    auto seen = std::make_shared<RowsSeen>(b::findCandidate(inner));
    BinderOptions options;
    options.extra = {b::makePadded(seen)};
    const std::string name = options.extra.front()->name();
    for (const int64_t rows : {37, 64}) {
      INFO(name, ", rows ", rows);
      torch::manual_seed(rows);
      const auto logits0 = torch::randn({rows, 9}, torch::kDouble) * 3;
      auto target = torch::randint(0, 9, {rows});
      target[2] = -100;  // ignored already: the mean leaves it out, as it does the padding
      Binder measured(gen.staticGraph(), machine, options);
      measured.loss(logits0.clone().requires_grad_(true), target).backward();
      symtune::BindingTable table = measured.table();
      REQUIRE(table.bindings.size() == 1);
      bool agreed = false;
      for (const auto& c : table.bindings.front().candidates)
        agreed = agreed || (c.name == name && c.refused.empty());
      CHECK(agreed);
      table.bindings.front().winner = name;
      BinderOptions quiet = options;
      quiet.measure = false;
      Binder forcedLoss(gen.staticGraph(), machine, quiet);
      REQUIRE_FALSE(forcedLoss.adopt(std::move(table)).has_value());
      seen->seen.clear();
      auto got = logits0.clone().requires_grad_(true);
      auto want = logits0.clone().requires_grad_(true);
      const auto gotLoss = forcedLoss.loss(got, target);
      const auto wantLoss = at::cross_entropy_loss(want, target);
      gotLoss.backward();
      wantLoss.backward();
      symtune::test::checkScaledError("loss", gotLoss, wantLoss, 1e-12);
      symtune::test::checkScaledError("logits gradient", got.grad(), want.grad(), 1e-12);
      REQUIRE(seen->seen.size() == 1);
      CHECK(seen->seen.front() == b::bucketDim(rows));
    }
  }
}

TEST_CASE(
    "CUDA-graph candidates: inputs off the GPU run the inner candidate; on a GPU, captured "
    "per padded shape, they give the unpadded result") {
  namespace b = symtune::binding;
  symtune::SyMuGen gen(model(), "padded");
  if (!b::cudaGraphsBuilt()) {
    MESSAGE("CUDA rows skipped: this build has no CUDA kernels (SYMTUNE_WITH_CUDA=OFF)");
    return;
  }
  // On the CPU: the inner candidate as it is, no padding.
  auto onCpu = std::make_shared<RowsSeen>(b::findCandidate("gru-cell"));
  std::shared_ptr<const Candidate> onCpuGraphed = b::makeCudaGraphed(onCpu);
  REQUIRE(onCpuGraphed != nullptr);
  CHECK(onCpuGraphed->name() == "cuda-graph:gru-cell");
  {
    auto binder = forced(gen, b::currentMachine(torch::kCPU), {onCpuGraphed}, b::kGruCell,
                         onCpuGraphed->name());
    onCpu->seen.clear();
    checkClose(step(gen, binder.get(), 5), step(gen, nullptr, 5), 1e-10);
    REQUIRE_FALSE(onCpu->seen.empty());
    CHECK(onCpu->seen.front() == 5);
  }
  // A CPU machine's binder has no graphed candidates of its own.
  Binder cpu(gen.staticGraph(), b::currentMachine(torch::kCPU));
  step(gen, &cpu, 3);
  REQUIRE_FALSE(cpu.table().bindings.empty());
  for (const auto& binding : cpu.table().bindings) {
    for (const auto& c : binding.candidates)
      CHECK(c.name.rfind(b::kCudaGraphPrefix, 0) == std::string::npos);
  }

  if (!symtune::test::cudaRowsRun())
    return;
  const torch::Device gpu(torch::kCUDA, 0);
  const auto machine = b::currentMachine(gpu);
  REQUIRE_FALSE(machine.gpu.empty());
  CHECK(b::currentMachine(torch::Device(torch::kCUDA)).gpu == machine.gpu);  // "cuda": device 0
  // A GPU machine's binder measures the graphed candidates beside the others; they agree.
  Binder measured(gen.staticGraph(), machine);
  checkClose(step(gen, &measured, 5, gpu), step(gen, nullptr, 5, gpu), 1e-5);
  bool measuredGraphs = false;
  for (const auto& binding : measured.table().bindings) {
    for (const auto& c : binding.candidates) {
      if (c.name.rfind(b::kCudaGraphPrefix, 0) != 0)
        continue;
      INFO(binding.site, " ", c.name, ": ", c.refused);
      CHECK(c.refused.empty());
      measuredGraphs = true;
    }
  }
  CHECK(measuredGraphs);
  for (const PaddedCase& c : paddedCases()) {
    INFO(std::string(c.pattern), " with ", std::string(c.inner));
    auto seen = std::make_shared<RowsSeen>(b::findCandidate(c.inner), "seen-");
    std::shared_ptr<const Candidate> graphed = b::makeCudaGraphed(seen);
    auto binder = forced(gen, machine, {graphed}, c.pattern, graphed->name(), gpu);
    seen->seen.clear();
    const int64_t before = binder->boundExecutions();
    for (const int64_t batch : {5, 7, 8, 5, 6}) {  // one bucket: 8 rows
      INFO("batch ", batch);
      checkClose(step(gen, binder.get(), batch, gpu), step(gen, nullptr, batch, gpu), 1e-10);
    }
    // The inner candidate ran only to capture (two warm-ups, then each way once, per shape; at
    // most two shapes: the state with and without a gradient): the rest replayed graphs.
    CHECK(binder->boundExecutions() - before >= 5 * kTime);
    CHECK(seen->seen.size() <= 8);
    for (const int64_t rows : seen->seen)
      CHECK(rows == 8);
    // Without gradients: the forward graph alone, captured for its own key.
    checkClose(step(gen, binder.get(), 7, gpu, false), step(gen, nullptr, 7, gpu, false), 1e-10);
  }

  // The loss, its targets padded with the ignore index.
  auto lossSeen = std::make_shared<RowsSeen>(b::findCandidate("softmax-cross-entropy"), "seen-");
  BinderOptions options;
  options.extra = {b::makeCudaGraphed(lossSeen)};
  const std::string name = options.extra.front()->name();
  Binder lossMeasured(gen.staticGraph(), machine, options);
  torch::manual_seed(5);
  const auto logits0 = torch::randn({37, 9}, torch::dtype(torch::kDouble).device(gpu)) * 3;
  lossMeasured.loss(logits0.clone().requires_grad_(true), torch::randint(0, 9, {37}).to(gpu))
      .backward();
  symtune::BindingTable table = lossMeasured.table();
  REQUIRE(table.bindings.size() == 1);
  table.bindings.front().winner = name;
  options.measure = false;
  Binder lossForced(gen.staticGraph(), machine, options);
  REQUIRE_FALSE(lossForced.adopt(std::move(table)).has_value());
  lossSeen->seen.clear();
  for (const int64_t rows : {37, 50, 64, 40}) {
    INFO("rows ", rows);
    torch::manual_seed(rows);
    const auto l0 = torch::randn({rows, 9}, torch::dtype(torch::kDouble).device(gpu)) * 3;
    auto target = torch::randint(0, 9, {rows}).to(gpu);
    target[1] = -100;
    auto got = l0.clone().requires_grad_(true), want = l0.clone().requires_grad_(true);
    const auto gotLoss = lossForced.loss(got, target);
    const auto wantLoss = at::cross_entropy_loss(want, target);
    gotLoss.backward();
    wantLoss.backward();
    symtune::test::checkScaledError("loss", gotLoss.cpu(), wantLoss.cpu(), 1e-12);
    symtune::test::checkScaledError("logits gradient", got.grad().cpu(), want.grad().cpu(), 1e-12);
  }
  CHECK(lossSeen->seen.size() <= 4);  // one shape: [64, 9]
}
