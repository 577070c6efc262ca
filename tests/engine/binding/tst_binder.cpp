// DynaCompiler's binder (docs/binding.md): every candidate computes its site's function exactly as
// the ATen op does, forward and backward; a bound forward gives the unbound one's outputs and
// gradients; each (site, bucket) is measured once and then looked up; a table is reused on the
// same kind of machine and refused elsewhere; a candidate that disagrees or fails is refused and
// reported; buckets are powers of two; and every zoo model trains under binding as it does op by
// op. The cost model's tests are engine.binding.cost_model's.

#include "doctest_torch.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/ir/constants.h>

#include "forced_binder.h"
#include "steps_model.h"
#include "symtune/binding/binder.h"
#include "symtune/binding/shape_bucket.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/graph/symugen.h"
#include "symtune/runtime/trainer.h"
#include "tensor_compare.h"

namespace {

using symtune::binding::Binder;
using symtune::binding::BinderOptions;
using symtune::binding::OpSite;
using symtune::test::checkSame;
using symtune::test::forwardBackward;
using symtune::test::here;
using symtune::test::steps;

// Gates as in a GRU: each time step's tensor sliced into three parts (partial slices of one
// tensor along one dimension: a slice group), and a fourth slice reading the rest every other
// trip (so every other trip's split has a part nothing reads, and the others a slice the split
// does not have).
torch::jit::Module gates() {
  torch::jit::Module m("Gates");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor):
    outs: List[Tensor] = []
    h = x.size(2) // 4
    for t in range(x.size(1)):
        g = x[:, t] * w[t]
        a = torch.sigmoid(g[:, :h])
        b = torch.tanh(g[:, h:2 * h])
        c = g[:, 2 * h:3 * h]
        if t % 2 == 1:
            c = c + g[:, 3 * h:]
        outs.append(a * b + c)
    return torch.stack(outs, 1)
)");
  return m;
}

// gates() with one slice written in place: split-once's views may not be (PyTorch refuses an
// in-place change to one of several views a function returned, with gradients on).
torch::jit::Module gatesWrittenInPlace() {
  torch::jit::Module m("GatesWrittenInPlace");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor):
    outs: List[Tensor] = []
    h = x.size(2) // 4
    for t in range(x.size(1)):
        g = x[:, t] * w[t]
        a = torch.sigmoid(g[:, :h])
        c = g[:, 2 * h:3 * h]
        c.mul_(0.5)
        outs.append(a * g[:, h:2 * h] + c)
    return torch.stack(outs, 1)
)");
  return m;
}

// The stack a site's node receives, with `tensor` as its tensor input and `counter` as its
// loop counter; the rest are the node's constants.
torch::jit::Stack stackFor(const OpSite& site, const torch::Tensor& tensor, int64_t counter) {
  torch::jit::Stack stack;
  for (size_t i = 0; i < site.node->inputs().size(); ++i) {
    if (i == 0) {
      stack.emplace_back(tensor);
    } else if (site.loop != nullptr && i == site.counterInput) {
      stack.emplace_back(counter);
    } else {
      auto c = torch::jit::toIValue(site.node->input(i));
      REQUIRE(c.has_value());
      stack.push_back(*c);
    }
  }
  return stack;
}

// `candidate` on `site` over every trip (a loop-indexed site) or once: outputs and the input's
// gradient for fixed output gradients.
std::pair<std::vector<torch::Tensor>, torch::Tensor> replay(
    const symtune::binding::Candidate& candidate, const OpSite& site, const torch::Tensor& input,
    int64_t trips) {
  auto leaf = input.detach().requires_grad_(true);
  symtune::LoopFrames frames;
  if (site.loop != nullptr)
    frames.enter(site.loop, trips);
  auto op = site.node->getOperation();
  std::vector<torch::Tensor> outs;
  for (int64_t k = 0; k < (site.loop != nullptr ? trips : 1); ++k) {
    torch::jit::Stack stack = stackFor(site, leaf, k);
    candidate.run(site, op, stack, frames);
    REQUIRE(stack.size() == 1);
    outs.push_back(stack[0].toTensor());
  }
  torch::Tensor total = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < outs.size(); ++i)
    total = total + (outs[i].to(torch::kDouble) * (static_cast<double>(i) + 0.5)).sum();
  const torch::Tensor grad = torch::autograd::grad({total}, {leaf})[0];
  return {outs, grad};
}

// The sites of steps(), found by a binder that measures nothing.
std::vector<OpSite> sitesOf(symtune::SyMuGen& gen) {
  BinderOptions options;
  options.measure = false;
  Binder binder(gen.staticGraph(), here(), options);
  forwardBackward(gen, &binder, 2, 3);
  return binder.sites();
}

// A candidate for identity slices that computes something else (or fails): the binder must
// refuse it.
class Wrong final : public symtune::binding::Candidate {
 public:
  enum class Way { OffByOne, Failing, OneNaN };
  explicit Wrong(Way way) : way_(way) {}
  std::string name() const override {
    switch (way_) {
      case Way::OffByOne:
        return "off-by-one";
      case Way::Failing:
        return "failing";
      case Way::OneNaN:
        return "one-nan";
    }
    return "?";
  }
  std::string description() const override { return "a test's wrong candidate"; }
  bool applies(const OpSite& site) const override {
    return site.pattern == symtune::binding::kIdentitySlice;
  }
  void run(const OpSite&, torch::jit::Operation&, torch::jit::Stack& stack,
           symtune::LoopFrames&) const override {
    TORCH_CHECK(way_ != Way::Failing, "this candidate always fails");
    const torch::Tensor self = stack[stack.size() - 5].toTensor();
    stack.resize(stack.size() - 5);
    if (way_ == Way::OffByOne) {
      stack.emplace_back(self + 1);
      return;
    }
    // Exact but for one NaN: the largest difference, taken with std::max, once passed as 0.
    const torch::Tensor mask = torch::zeros_like(self, torch::kBool);
    mask.view(-1)[0] = true;
    stack.emplace_back(self.masked_fill(mask, std::nan("")));
  }
  double tolerance() const override { return 1e-6; }

 private:
  Way way_;
};

}  // namespace

TEST_CASE("the sites of a loop over time steps") {
  symtune::SyMuGen gen(steps(), "steps");
  const auto sites = sitesOf(gen);
  int slices = 0, selects = 0;
  for (const auto& s : sites) {
    INFO(s.name);
    CHECK(s.name.rfind("#", 0) == 0);
    if (s.pattern == symtune::binding::kIdentitySlice) {
      ++slices;
      CHECK(s.name.find("aten::slice") != std::string::npos);
      CHECK(s.loop == nullptr);
    } else {
      ++selects;
      CHECK(s.pattern == std::string(symtune::binding::kLoopIndexedSelect));
      CHECK(s.loop != nullptr);
      CHECK(s.counterInput == 2);
    }
  }
  CHECK(slices == 2);   // x[:, t] and xt[:, 0:4] on dimension 0; xt[:, 0:4] on 1 is no identity
  CHECK(selects == 2);  // x[:, t] and w[t]
}

TEST_CASE("every candidate computes its site as the ATen op does, forward and backward") {
  symtune::SyMuGen gen(steps(), "steps");
  const auto sites = sitesOf(gen);
  const std::vector<std::vector<int64_t>> shapes = {{3, 5, 8}, {1, 1, 4}, {4, 7, 16}, {2, 9}};
  const auto* aten = symtune::binding::findCandidate(symtune::binding::kAten);
  REQUIRE(aten != nullptr);
  int compared = 0;
  for (const auto& candidate : symtune::binding::builtinCandidates()) {
    for (const auto& site : sites) {
      if (candidate.get() == aten || !candidate->applies(site))
        continue;
      for (const auto& shape : shapes) {
        INFO(candidate->name(), " on ", site.name, " with ", c10::IntArrayRef(shape));
        torch::manual_seed(static_cast<uint64_t>(compared));
        const auto input = torch::randn(shape, torch::kDouble);
        // Every index of the selected dimension, as a loop over it would read them.
        const int64_t trips = site.loop != nullptr
                                  ? input.size(torch::jit::toIValue(site.node->input(1))->toInt())
                                  : 1;
        const auto [wantOut, wantGrad] = replay(*aten, site, input, trips);
        const auto [gotOut, gotGrad] = replay(*candidate, site, input, trips);
        REQUIRE(gotOut.size() == wantOut.size());
        for (size_t i = 0; i < gotOut.size(); ++i)
          CHECK(torch::equal(gotOut[i], wantOut[i]));
        CHECK(torch::equal(gotGrad, wantGrad));
        ++compared;
      }
    }
  }
  CHECK(compared == 16);  // alias on 2 sites, unbind-once on 2, 4 shapes each (no slice group)
}

TEST_CASE("a bound forward gives the unbound outputs and gradients") {
  symtune::SyMuGen gen(steps(), "steps");
  Binder binder(gen.staticGraph(), here());
  for (int64_t time : {5, 6, 12, 1}) {
    INFO("time steps: ", time);
    checkSame(forwardBackward(gen, &binder, 3, time), forwardBackward(gen, nullptr, 3, time));
  }
  CHECK(binder.sites().size() == 4);
  for (const auto& b : binder.table().bindings) {
    INFO(b.site, " [", b.bucket, "]");
    if (b.predicted)
      continue;  // bound by the cost model: nothing measured
    CHECK(b.candidates.size() == 2);
    for (const auto& c : b.candidates) {
      CHECK(c.refused.empty());
      CHECK(c.maxError == 0);
      CHECK(c.seconds() > 0);
    }
  }
}

TEST_CASE("partial slices of one tensor share one split, exactly as the slices compute") {
  symtune::SyMuGen gen(gates(), "gates");
  Binder binder(gen.staticGraph(), here());
  for (int64_t time : {1, 2, 5, 9}) {
    INFO("time steps: ", time);
    checkSame(forwardBackward(gen, &binder, 3, time, 16, 16),
              forwardBackward(gen, nullptr, 3, time, 16, 16));
  }
  int partial = 0;
  for (const auto& site : binder.sites()) {
    if (site.pattern != symtune::binding::kPartialSlice)
      continue;
    ++partial;
    REQUIRE(site.group != nullptr);
    CHECK(site.group->members.size() == 4);  // :h, h:2h, 2h:3h and 3h:, along dimension 1
  }
  CHECK(partial == 4);
  bool measured = false;
  for (const auto& b : binder.table().bindings) {
    if (b.pattern != symtune::binding::kPartialSlice || b.predicted)
      continue;
    measured = true;
    INFO(b.site);
    const auto* split = b.measurement("split-once");
    REQUIRE(split != nullptr);
    CHECK(split->refused.empty());
    CHECK(split->maxError == 0);
  }
  CHECK(measured);
}

TEST_CASE("slices of which one is written in place are left to ATen") {
  symtune::SyMuGen gen(gatesWrittenInPlace(), "gates_written_in_place");
  Binder binder(gen.staticGraph(), here());
  for (int i = 0; i < 3; ++i)  // bound to split-once, the second step failed
    checkSame(forwardBackward(gen, &binder, 3, 4, 16, 16),
              forwardBackward(gen, nullptr, 3, 4, 16, 16));
  for (const auto& site : binder.sites())
    CHECK(site.pattern != std::string(symtune::binding::kPartialSlice));
}

// Halves of a tensor the model reads as it is (a parameter's, here an input's): slices of one
// value across forwards, until an update writes it.
torch::jit::Module halves() {
  torch::jit::Module m("Halves");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor):
    return torch.matmul(x, w[:4].t()) + torch.matmul(x, w[4:].t())
)");
  return m;
}

// A validation forward between an update and the next training forward (validate_every) split
// the weight under no_grad; the training forward took those parts, the same memory at the same
// version, and its backward gave the weight no gradient through them.
TEST_CASE("parts split without gradients are not reused by a forward that needs them") {
  symtune::SyMuGen gen(halves(), "halves");
  auto run = [&gen](symtune::OpBinder* binder) {
    torch::manual_seed(0);
    const torch::Tensor x = torch::randn({3, 4});
    torch::Tensor w = torch::randn({8, 4}).requires_grad_();
    symtune::ForwardOptions options;
    options.binder = binder;
    std::vector<torch::Tensor> grads;
    auto train = [&] {
      gen.forward({x, w}, options).output.toTensor().sum().backward();
      grads.push_back(w.grad().clone());
      w.mutable_grad() = torch::Tensor();
      torch::NoGradGuard update;
      w.add_(0.5);
    };
    auto validate = [&] {
      torch::NoGradGuard noGrad;
      gen.forward({x, w}, options);
    };
    for (int i = 0; i < 3; ++i) {
      train();
      validate();
    }
    train();
    return grads;
  };
  Binder measuring(gen.staticGraph(), here());
  run(&measuring);
  auto forced = symtune::test::forcedBinder(gen.staticGraph(), measuring.table(), "split-once",
                                            symtune::binding::kPartialSlice);
  const auto bound = run(forced.get());
  const auto plain = run(nullptr);
  REQUIRE(bound.size() == plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO("training step ", i);
    CHECK(torch::equal(bound[i], plain[i]));
  }
}

TEST_CASE("a slice group read through identity slices run as the ATen op still splits") {
  // Each member then reads its own view of the tensor (a full-range slice of it): one value all
  // the same, so the group learns its ranges and binds.
  symtune::SyMuGen gen(gates(), "gates");
  BinderOptions options;
  options.disable = {"alias"};
  Binder binder(gen.staticGraph(), here(), options);
  for (int64_t time : {2, 5, 9}) {
    INFO("time steps: ", time);
    checkSame(forwardBackward(gen, &binder, 3, time, 16, 16),
              forwardBackward(gen, nullptr, 3, time, 16, 16));
  }
  int decided = 0;
  for (const auto& b : binder.table().bindings)
    decided += b.pattern == symtune::binding::kPartialSlice ? 1 : 0;
  CHECK(decided >= 3);  // :h, h:2h and 2h:3h on every trip; 3h: on every other
}

TEST_CASE("a slice group splits at the ranges its last instance read") {
  using symtune::binding::SliceGroup;
  SliceGroup group;
  const auto a = torch::arange(12.0).view({2, 6});
  group.observe(a, 0, 2);
  group.observe(a, 2, 4);
  CHECK(group.ranges().empty());  // the first instance is still being observed
  const auto b = a + 1;
  group.observe(b, 0, 2);
  REQUIRE(group.ranges().size() == 2);
  CHECK(group.splittable(6));
  CHECK_FALSE(group.splittable(3));  // a range past the end
  const auto& parts = group.partsOf(b, 1);
  REQUIRE(parts.size() == 2);  // [4, 6) is a gap nothing read: split, not handed out
  CHECK(parts[0].first == std::make_pair<int64_t, int64_t>(0, 2));
  CHECK(torch::equal(parts[0].second, b.slice(1, 0, 2)));
  CHECK(torch::equal(parts[1].second, b.slice(1, 2, 4)));
  CHECK(&group.partsOf(b, 1) == &parts);  // once per instance
  group.setRanges({{0, 3}, {2, 5}});      // overlapping: no split
  CHECK_FALSE(group.splittable(6));
  group.setRanges({{0, 3}});  // one range: nothing to share
  CHECK_FALSE(group.splittable(6));
  CHECK(symtune::binding::sliceRange(c10::IValue(), c10::IValue(int64_t{-2}), 6) ==
        std::make_pair<int64_t, int64_t>(0, 4));
  CHECK(symtune::binding::sliceRange(c10::IValue(int64_t{4}), c10::IValue(int64_t{2}), 6) ==
        std::make_pair<int64_t, int64_t>(4, 4));
}

TEST_CASE("each site and bucket is measured once, then looked up") {
  symtune::SyMuGen gen(steps(), "steps");
  Binder binder(gen.staticGraph(), here());
  forwardBackward(gen, &binder, 3, 5);  // time 5: bucket <=8
  const int64_t first = binder.measurements();
  CHECK(first == 4);  // four sites, one bucket each
  CHECK(binder.table().bindings.size() == 4);
  forwardBackward(gen, &binder, 3, 6);  // same bucket
  forwardBackward(gen, &binder, 4, 7);  // batch 4: bucket <=4, as 3
  CHECK(binder.measurements() == first);
  // Time 12: bucket <=16, new for the three sites whose tensor has the time dimension (not for
  // xt[:, 0:4], whose input is one time step).
  forwardBackward(gen, &binder, 3, 12);
  CHECK(binder.measurements() + binder.predictions() == first + 3);
  forwardBackward(gen, &binder, 3, 16);
  CHECK(binder.measurements() + binder.predictions() == first + 3);
  // Without gradients (an evaluation), the buckets are others: no backward to measure.
  {
    torch::NoGradGuard noGrad;
    symtune::ForwardOptions options;
    options.binder = &binder;
    gen.forward({torch::randn({3, 5, 8}), torch::randn({5, 4})}, options);
  }
  bool nograd = false;
  for (const auto& b : binder.table().bindings)
    nograd = nograd || b.bucket.find("nograd") != std::string::npos;
  CHECK(nograd);
}

TEST_CASE("while not exploring nothing is measured; exploring again measures what was put off") {
  symtune::SyMuGen gen(steps(), "steps");
  BinderOptions noPrediction;
  noPrediction.predict = false;
  Binder binder(gen.staticGraph(), here(), noPrediction);
  CHECK(binder.exploring());
  binder.setExploring(false);
  checkSame(forwardBackward(gen, &binder, 3, 5), forwardBackward(gen, nullptr, 3, 5));
  CHECK(binder.measurements() == 0);
  CHECK(binder.boundExecutions() == 0);  // the ATen ops throughout
  forwardBackward(gen, &binder, 3, 6);
  CHECK(binder.measurements() == 0);
  binder.setExploring(true);
  forwardBackward(gen, &binder, 3, 6);  // the same bucket, decided again: measured now
  const int64_t measured = binder.measurements();
  CHECK(measured == 4);
  // What is in the table binds whether exploring or not.
  binder.setExploring(false);
  forwardBackward(gen, &binder, 3, 5);
  binder.setExploring(true);
  forwardBackward(gen, &binder, 3, 7);
  CHECK(binder.measurements() == measured);
}

TEST_CASE("a saved table is reused on the same kind of machine and refused on another") {
  symtune::SyMuGen gen(steps(), "steps");
  Binder first(gen.staticGraph(), here());
  forwardBackward(gen, &first, 3, 5);
  const std::string saved = first.table().toJson();

  Binder second(gen.staticGraph(), here());
  CHECK_FALSE(second.adopt(symtune::BindingTable::fromJson(saved, "saved")).has_value());
  checkSame(forwardBackward(gen, &second, 3, 5), forwardBackward(gen, nullptr, 3, 5));
  CHECK(second.measurements() == 0);
  CHECK(second.predictions() == 0);

  symtune::MachineFingerprint elsewhere = here();
  elsewhere.threads += 7;
  Binder third(gen.staticGraph(), elsewhere);
  const auto why = third.adopt(symtune::BindingTable::fromJson(saved, "saved"));
  REQUIRE(why.has_value());
  CHECK(why->find("another kind of machine") != std::string::npos);
  forwardBackward(gen, &third, 3, 5);
  CHECK(third.measurements() == 4);

  // Another model's table is refused too.
  torch::jit::Module other("Other");
  other.define("def forward(self, x: Tensor, w: Tensor):\n    return x[:, 0] * w[0]\n");
  symtune::SyMuGen otherGen(other, "steps");
  Binder fourth(otherGen.staticGraph(), here());
  const auto otherWhy = fourth.adopt(symtune::BindingTable::fromJson(saved, "saved"));
  REQUIRE(otherWhy.has_value());
  CHECK(otherWhy->find("another model") != std::string::npos);
}

TEST_CASE("a candidate that disagrees or fails is refused and reported") {
  symtune::SyMuGen gen(steps(), "steps");
  BinderOptions options;
  options.extra = {std::make_shared<Wrong>(Wrong::Way::OffByOne),
                   std::make_shared<Wrong>(Wrong::Way::Failing),
                   std::make_shared<Wrong>(Wrong::Way::OneNaN)};
  Binder binder(gen.staticGraph(), here(), options);
  checkSame(forwardBackward(gen, &binder, 3, 5), forwardBackward(gen, nullptr, 3, 5));
  int slices = 0;
  for (const auto& b : binder.table().bindings) {
    if (b.pattern != symtune::binding::kIdentitySlice)
      continue;
    ++slices;
    INFO(b.site);
    CHECK(b.winner != "off-by-one");
    CHECK(b.winner != "failing");
    CHECK(b.winner != "one-nan");
    const auto* wrong = b.measurement("off-by-one");
    REQUIRE(wrong != nullptr);
    CHECK(wrong->refused.find("differs from aten by") != std::string::npos);
    CHECK(wrong->maxError > 1e-6);
    // Where: its outputs, every value (it adds 1 to each): "...: outputs, N of N values".
    const size_t at = wrong->refused.find(": outputs, ");
    REQUIRE(at != std::string::npos);
    long long beyond = -1, total = -2;
    CHECK(std::sscanf(wrong->refused.c_str() + at, ": outputs, %lld of %lld values", &beyond,
                      &total) == 2);
    CHECK(beyond > 0);
    CHECK(beyond == total);
    const auto* failing = b.measurement("failing");
    REQUIRE(failing != nullptr);
    CHECK(failing->refused == "failed: this candidate always fails");
    const auto* nan = b.measurement("one-nan");
    REQUIRE(nan != nullptr);
    CHECK_MESSAGE(nan->refused.find("differs from aten by inf") == 0, nan->refused);
  }
  CHECK(slices == 2);
}

TEST_CASE("disabled candidates are never bound; unknown names are refused") {
  symtune::SyMuGen gen(steps(), "steps");
  BinderOptions options;
  options.disable = {"alias", "unbind-once", "split-once"};
  Binder binder(gen.staticGraph(), here(), options);
  forwardBackward(gen, &binder, 3, 5);
  CHECK(binder.sites().empty());  // only the reference applies anywhere
  CHECK(binder.measurements() == 0);

  BinderOptions typo;
  typo.disable = {"alais"};
  CHECK_THROWS_WITH_AS(Binder(gen.staticGraph(), here(), typo),
                       doctest::Contains("no candidate is called \"alais\""), c10::Error);
}

TEST_CASE("buckets: powers of two, at most ceil(log2(max/min)) + 1 per dynamic dimension") {
  using symtune::binding::bucketDim;
  CHECK(bucketDim(0) == 0);
  CHECK(bucketDim(1) == 1);
  CHECK(bucketDim(2) == 2);
  CHECK(bucketDim(3) == 4);
  CHECK(bucketDim(5) == 8);
  CHECK(bucketDim(64) == 64);
  CHECK(bucketDim(65) == 128);
  for (int64_t lo : {1, 3, 16, 17}) {
    for (int64_t hi : std::initializer_list<int64_t>{lo, lo + 1, 2 * lo, 96, 1000}) {
      if (hi < lo)
        continue;
      std::set<int64_t> seen;
      for (int64_t d = lo; d <= hi; ++d)
        seen.insert(bucketDim(d));
      const auto bound = static_cast<size_t>(std::ceil(std::log2(double(hi) / double(lo)))) + 1;
      INFO(lo, "..", hi);
      CHECK(seen.size() <= bound);
    }
  }
  torch::jit::Stack stack{torch::zeros({32, 50, 768}).requires_grad_(true), int64_t{1}, int64_t{3}};
  CHECK(symtune::binding::bucketKey(stack, 3, 50) == "float32 [<=32,<=64,<=1024] x<=64");
  CHECK(symtune::binding::bucketKey(stack, 3, -1) == "float32 [<=32,<=64,<=1024]");
  torch::jit::Stack plain{torch::zeros({2, 1}, torch::kDouble), int64_t{0}};
  CHECK(symtune::binding::bucketKey(plain, 2, -1) == "float64 [2,1] nograd");
  // A bucket's size: its shapes' elements at most, summed, times the trips.
  using symtune::binding::bucketVolume;
  CHECK(bucketVolume("float32 [<=32,<=64,<=1024] x<=64") == 32.0 * 64 * 1024 * 64);
  CHECK(bucketVolume("float64 [2,1] [] [<=4] nograd") == 2.0 + 1 + 4);
  CHECK(bucketVolume("float32 [undefined] [<=8]") == 8.0);
  CHECK_FALSE(bucketVolume("made up 1").has_value());
}

TEST_CASE("every zoo model trains under binding as it does op by op, recomputed or not") {
  for (const char* model : {"dynamic_resnet", "transformer_xl", "dynamic_tagger", "moe_topk",
                            "early_exit", "tree_rnn"}) {
    INFO(std::string(model));
    symtune::Session s;
    s.name = "bind";
    s.model.zoo = model;
    s.model.preset = "ci";
    s.data.seed = 5;
    s.run.device = "cpu";
    s.binding.enabled = false;
    // Op by op; bound; bound with every segment recomputed in backward (the recomputation binds
    // its sites the same way).
    std::vector<std::unique_ptr<symtune::Trainer>> trainers;
    std::vector<std::shared_ptr<Binder>> binders;
    for (int variant = 0; variant < 3; ++variant) {
      trainers.push_back(std::make_unique<symtune::Trainer>(s));
      auto& t = *trainers.back();
      auto executor =
          std::make_unique<symtune::SegmentExecutor>(*t.executor().scriptModule(), s.name);
      if (variant > 0) {
        binders.push_back(std::make_shared<Binder>(executor->symugen()->staticGraph(), here()));
        executor->setBinder(binders.back());
      }
      if (variant == 2)
        executor->setPlan(executor->recomputeAll());
      t.setExecutor(std::move(executor));
    }
    for (int step = 0; step < 3; ++step) {
      const double plain = trainers[0]->step().loss;
      for (size_t k = 1; k < trainers.size(); ++k) {
        INFO("variant ", k, " step ", step);
        CHECK(trainers[k]->step().loss == doctest::Approx(plain).epsilon(1e-6));
      }
    }
    const auto a = trainers[0]->executor().namedParameters();
    for (size_t k = 1; k < trainers.size(); ++k) {
      const auto b = trainers[k]->executor().namedParameters();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i)
        symtune::test::checkScaledError(a[i].first.c_str(), b[i].second, a[i].second,
                                        symtune::binding::kImageFormatTolerance);
    }
    const std::string name = model;
    for (const auto& binder : binders) {
      if (name == "transformer_xl" || name == "dynamic_tagger" || name == "moe_topk" ||
          name == "tree_rnn")
        CHECK_FALSE(binder->sites().empty());  // indexing in loops, full-range slices
      if (name == "dynamic_tagger") {
        const auto sites = binder->sites();
        CHECK(std::any_of(sites.begin(), sites.end(), [](const auto& site) {
          return site.pattern == std::string(symtune::binding::kGruCell);
        }));
      }
      // One binding per site and bucket; a rows group is decided as one, and a loop-invariant
      // one that no gradient reaches (the tree's int64 child tables) without an entry; the sites
      // inside a cell site (the tagger's gate slices, the batch norm ReLU pairs that begin a
      // batch norm, ReLU and convolution region) only while it runs as written.
      std::set<const symtune::binding::CarriedRows*> groups;
      std::set<const torch::jit::Node*> inCells;
      for (const auto& site : binder->sites()) {
        if (site.cell != nullptr)
          inCells.insert(site.cell->nodes.begin(), site.cell->nodes.end());
      }
      size_t decided = 0;
      for (const auto& site : binder->sites()) {
        if (site.pattern == std::string(symtune::binding::kInvariantRows) ||
            (site.cell == nullptr && inCells.count(site.node) != 0))
          continue;
        if (site.rows == nullptr || groups.insert(site.rows.get()).second)
          ++decided;
      }
      CHECK(binder->table().bindings.size() >= decided);
    }
  }
}
