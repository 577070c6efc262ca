// DynaCompiler's loop-carried rows sites (Note [Loop-carried rows] in symtune/binding/op_site.h):
// a loop that reads rows of a carried tensor and then rewrites some of them is one site of all
// those nodes; `rows-in-place` keeps one buffer for it and one for its gradient, and computes
// what the ATen ops do, forward and backward.

#include "doctest_torch.h"

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "forced_binder.h"
#include "symtune/binding/binder.h"
#include "symtune/graph/symugen.h"
#include "tensor_compare.h"

namespace {

using symtune::binding::Binder;
using symtune::binding::BinderOptions;

symtune::MachineFingerprint here() {
  return symtune::binding::currentMachine(torch::kCPU);
}

// The tree network's loop: per level, read the children's rows, compose, write the parents'.
torch::jit::Module levels() {
  torch::jit::Module m("Levels");
  m.define(R"(
def forward(self, h0: Tensor, w: Tensor, left: Tensor, right: Tensor, order: Tensor,
            sizes: List[int]):
    h = h0 * 1.0
    start = 0
    for size in sizes:
        ids = order[start:start + size]
        a = h.index_select(0, left.index_select(0, ids))
        b = h.index_select(0, right.index_select(0, ids))
        h = h.index_copy(0, ids, torch.tanh(torch.matmul(torch.cat([a, b], 1), w)))
        start += size
    return h * h
)");
  return m;
}

// levels() written with a while loop: TorchScript bounds its trips by INT64_MAX.
torch::jit::Module whileLevels() {
  torch::jit::Module m("WhileLevels");
  m.define(R"(
def forward(self, h0: Tensor, w: Tensor, left: Tensor, right: Tensor, order: Tensor,
            sizes: List[int]):
    h = h0 * 1.0
    start = 0
    k = 0
    while k < len(sizes):
        ids = order[start:start + sizes[k]]
        a = h.index_select(0, left.index_select(0, ids))
        b = h.index_select(0, right.index_select(0, ids))
        h = h.index_copy(0, ids, torch.tanh(torch.matmul(torch.cat([a, b], 1), w)))
        start += sizes[k]
        k += 1
    return h * h
)");
  return m;
}

// A batch for levels(): `trees` complete binary trees of `depth` levels of inner nodes; leaves
// first, then each level's parents. `shared` makes every parent of a level read the same two
// rows (a row read many times, by both reads).
struct Trees {
  torch::Tensor h0, w, left, right, order;
  std::vector<int64_t> sizes;
};

Trees trees(int64_t count, int64_t depth, int64_t width, bool shared, bool entryGrad = true) {
  torch::manual_seed(count * 31 + depth);
  Trees t;
  std::vector<int64_t> left, right, order;
  int64_t nodes = count << depth;  // leaves
  std::vector<int64_t> below(static_cast<size_t>(nodes));
  for (int64_t i = 0; i < nodes; ++i)
    below[static_cast<size_t>(i)] = i;
  const int64_t leaves = nodes;
  for (int64_t level = 0; level < depth; ++level) {
    std::vector<int64_t> parents;
    for (size_t i = 0; i + 1 < below.size(); i += 2) {
      const int64_t id = nodes++;
      parents.push_back(id);
      order.push_back(id);
      left.push_back(shared ? below[0] : below[i]);
      right.push_back(shared ? below[0] : below[i + 1]);
    }
    t.sizes.push_back(static_cast<int64_t>(parents.size()));
    below = parents;
  }
  // Ids index left/right by node: pad those tables to every node.
  std::vector<int64_t> l(static_cast<size_t>(nodes), 0), r(static_cast<size_t>(nodes), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    l[static_cast<size_t>(order[k])] = left[k];
    r[static_cast<size_t>(order[k])] = right[k];
  }
  t.h0 = torch::randn({nodes, width});
  t.h0.index_fill_(0, torch::arange(leaves, nodes), 0.0);
  t.h0.requires_grad_(entryGrad);
  t.w = (torch::randn({2 * width, width}) / std::sqrt(2.0 * width)).requires_grad_(true);
  t.left = torch::tensor(l);
  t.right = torch::tensor(r);
  t.order = torch::tensor(order);
  return t;
}

struct Run {
  torch::Tensor out, gh0, gw;
};

Run step(symtune::SyMuGen& gen, symtune::OpBinder* binder, const Trees& t) {
  auto h0 = t.h0.detach().clone().requires_grad_(t.h0.requires_grad());
  auto w = t.w.detach().clone().requires_grad_(true);
  symtune::ForwardOptions options;
  options.binder = binder;
  Run r;
  r.out = gen.forward({h0, w, t.left, t.right, t.order, c10::List<int64_t>(t.sizes)}, options)
              .output.toTensor();
  r.out.backward(torch::linspace(-1, 1, r.out.numel()).view_as(r.out));
  r.gh0 = h0.grad();
  r.gw = w.grad();
  return r;
}

// A binder whose table binds every bucket `measured` measured to `winner`.
std::unique_ptr<Binder> forcedBinder(symtune::SyMuGen& gen, const Binder& measured,
                                     const std::string& winner) {
  return symtune::test::forcedBinder(gen.staticGraph(), measured.table(), winner);
}

}  // namespace

TEST_CASE("a loop reading and rewriting rows of a carried tensor is one site of its three nodes") {
  symtune::SyMuGen gen(levels(), "levels");
  Binder binder(gen.staticGraph(), here());
  const Trees t = trees(8, 4, 16, false);
  step(gen, &binder, t);
  // The int64 child tables, read with index_select in the loop, are loop-invariant rows sites
  // that no gradient reaches: left to ATen, never measured.
  std::vector<symtune::binding::OpSite> sites;
  int invariant = 0;
  for (const auto& site : binder.sites()) {
    if (site.pattern == std::string(symtune::binding::kInvariantRows))
      ++invariant;
    else
      sites.push_back(site);
  }
  CHECK(invariant == 2);
  REQUIRE(sites.size() == 3);
  for (const auto& site : sites) {
    INFO(site.name);
    CHECK(site.pattern == std::string(symtune::binding::kCarriedRows));
    REQUIRE(site.rows != nullptr);
    CHECK(site.rows == sites.front().rows);
    CHECK(site.loop == site.rows->loop);
  }
  CHECK(sites[0].node->kind() == c10::aten::index_select);
  CHECK(sites[1].node->kind() == c10::aten::index_select);
  CHECK(sites[2].node->kind() == c10::aten::index_copy);
  CHECK(sites.front().rows->writer == sites[2].node);
  CHECK(sites.front().rows->readers.size() == 2);
  // The first execution of the loop ran as written and was recorded; the second measures.
  CHECK(binder.measurements() == 0);
  CHECK(binder.boundExecutions() == 0);
  step(gen, &binder, t);
  CHECK(binder.measurements() == 1);
  REQUIRE(binder.table().bindings.size() == 1);
  const auto& b = binder.table().bindings.front();
  CHECK(b.site == sites.front().name);  // the group's first node decides for it
  // Its other nodes, for the studio's overlay.
  CHECK(b.nodes == std::vector<int32_t>{sites[1].id.value(), sites[2].id.value()});
  CHECK(b.pattern == std::string(symtune::binding::kCarriedRows));
  CHECK(b.bucket.find(" x<=4") != std::string::npos);
  REQUIRE(b.candidates.size() == 2);
  CHECK(b.candidates[1].name == "rows-in-place");
  CHECK(b.candidates[1].refused.empty());
  CHECK(b.candidates[1].maxError == 0);  // every row read once: the same sums
  // Then looked up: nothing more measured.
  step(gen, &binder, t);
  CHECK(binder.measurements() == 1);
}

TEST_CASE("rows-in-place gives the ATen loop's output and gradients") {
  symtune::SyMuGen gen(levels(), "levels");
  for (const bool shared : {false, true}) {
    for (const bool entryGrad : {true, false}) {
      INFO("shared rows ", shared, ", entry gradient ", entryGrad);
      const Trees t = trees(4, 3, 8, shared, entryGrad);
      Binder measuring(gen.staticGraph(), here());
      step(gen, &measuring, t);
      step(gen, &measuring, t);
      REQUIRE(measuring.table().bindings.size() == 1);
      const auto& measured = measuring.table().bindings.front();
      CHECK(measured.candidates.at(1).refused.empty());
      const auto bound = forcedBinder(gen, measuring, "rows-in-place");
      const auto reference = forcedBinder(gen, measuring, "aten");
      const Run plain = step(gen, nullptr, t);
      const Run ref = step(gen, reference.get(), t);
      const Run got = step(gen, bound.get(), t);
      CHECK(bound->boundExecutions() == 3 * 3);  // three levels, three nodes
      CHECK(reference->boundExecutions() == 0);
      CHECK(torch::equal(ref.out, plain.out));
      CHECK(torch::equal(ref.gw, plain.gw));
      CHECK(torch::equal(got.out, plain.out));  // the same rows copied
      const double tolerance = symtune::binding::findCandidate("rows-in-place")->tolerance();
      symtune::test::checkScaledError("w gradient", got.gw, plain.gw, tolerance);
      REQUIRE(got.gh0.defined() == entryGrad);
      if (entryGrad)
        symtune::test::checkScaledError("h0 gradient", got.gh0, plain.gh0, tolerance);
      if (!shared) {
        CHECK(torch::equal(got.gw, plain.gw));
        if (entryGrad)
          CHECK(torch::equal(got.gh0, plain.gh0));
      }
    }
  }
}

TEST_CASE("a while loop's rows site is bound like a for loop's, its trips unbounded in the key") {
  symtune::SyMuGen gen(whileLevels(), "while_levels");
  const Trees t = trees(4, 3, 8, false);
  Binder binder(gen.staticGraph(), here());
  for (int i = 0; i < 3; ++i)
    step(gen, &binder, t);  // the bucket's doubling once ran forever on INT64_MAX
  CHECK(binder.measurements() == 1);
  REQUIRE(binder.table().bindings.size() == 1);
  const auto& b = binder.table().bindings.front();
  CHECK(b.pattern == std::string(symtune::binding::kCarriedRows));
  CHECK_MESSAGE(b.bucket.find(" x?") != std::string::npos, b.bucket);
  const auto bound = forcedBinder(gen, binder, "rows-in-place");
  const Run plain = step(gen, nullptr, t);
  const Run got = step(gen, bound.get(), t);
  CHECK(bound->boundExecutions() == 3 * 3);
  CHECK(torch::equal(got.out, plain.out));
  CHECK(torch::equal(got.gw, plain.gw));
}

TEST_CASE("rows-in-place: no trips, no gradient, and the same forward twice") {
  symtune::SyMuGen gen(levels(), "levels");
  const Trees t = trees(4, 3, 8, false);
  Binder measuring(gen.staticGraph(), here());
  step(gen, &measuring, t);
  step(gen, &measuring, t);
  const auto bound = forcedBinder(gen, measuring, "rows-in-place");
  const Run plain = step(gen, nullptr, t);
  // Without grad mode the bucket differs: the table binds only the bucket with gradients.
  {
    torch::NoGradGuard noGrad;
    symtune::ForwardOptions options;
    options.binder = bound.get();
    const auto args =
        std::vector<c10::IValue>{t.h0, t.w, t.left, t.right, t.order, c10::List<int64_t>(t.sizes)};
    CHECK(torch::equal(gen.forward(args, options).output.toTensor(), plain.out.detach()));
  }
  // Twice in a row: each forward has its own buffers.
  const Run first = step(gen, bound.get(), t);
  const Run second = step(gen, bound.get(), t);
  CHECK(torch::equal(first.out, plain.out));
  CHECK(torch::equal(second.out, plain.out));
  CHECK(torch::equal(second.gw, plain.gw));
  // No levels: the loop never runs, the output is h0 * h0.
  Trees empty = t;
  empty.sizes.clear();
  const Run none = step(gen, bound.get(), empty);
  CHECK(torch::equal(none.out, (t.h0 * t.h0).detach()));
}

namespace {

// The patterns of the sites a binder finds in `source`, a forward(Tensor, Tensor ids, int n) run
// once on a [6, 3] tensor that needs a gradient.
std::set<std::string> patternsOf(const char* source) {
  torch::jit::Module m("Variant");
  m.define(source);
  symtune::SyMuGen gen(m, "variant");
  Binder binder(gen.staticGraph(), here());
  symtune::ForwardOptions options;
  options.binder = &binder;
  gen.forward({torch::randn({6, 3}, torch::requires_grad()), torch::tensor({1, 4}), int64_t{3}},
              options);
  std::set<std::string> patterns;
  for (const auto& site : binder.sites())
    patterns.insert(site.pattern);
  return patterns;
}

}  // namespace

TEST_CASE("not a loop-carried rows site: a read after the write, or another use of the tensor") {
  const char* variants[] = {
      // reads the carried tensor after the write
      R"(
def forward(self, h0: Tensor, ids: Tensor, n: int):
    h = h0 * 1.0
    for i in range(n):
        r = h.index_select(0, ids)
        h = h.index_copy(0, ids, r * 2.0)
        s = h.index_select(0, ids)
        h = h + s.sum()
    return h
)",
      // another use of the carried tensor in the body
      R"(
def forward(self, h0: Tensor, ids: Tensor, n: int):
    h = h0 * 1.0
    for i in range(n):
        r = h.index_select(0, ids) + h.sum()
        h = h.index_copy(0, ids, r)
    return h
)",
      // the write's result used in the body besides carrying it
      R"(
def forward(self, h0: Tensor, ids: Tensor, n: int):
    h = h0 * 1.0
    t = h0
    for i in range(n):
        r = h.index_select(0, ids)
        h = h.index_copy(0, ids, r * 2.0)
        t = h * 1.0
    return h + t
)",
  };
  for (const char* source : variants) {
    INFO(source);
    CHECK(patternsOf(source).count(symtune::binding::kCarriedRows) == 0);
  }
}

TEST_CASE("bit-for-bit binding leaves loop-carried rows to ATen") {
  symtune::SyMuGen gen(levels(), "levels");
  BinderOptions exactOnly;
  exactOnly.exact = true;
  Binder exact(gen.staticGraph(), here(), exactOnly);
  const Trees t = trees(4, 3, 8, false);
  step(gen, &exact, t);
  step(gen, &exact, t);
  CHECK(exact.sites().empty());
  CHECK(exact.measurements() == 0);
}

namespace {

// The MoE's expert loop: each expert reads the rows of the tokens routed to it from a tensor
// defined before the loop (inside an `if`), and adds its result back out of place.
torch::jit::Module experts() {
  torch::jit::Module m("Experts");
  m.define(R"(
def forward(self, y0: Tensor, w: Tensor, first: Tensor, second: Tensor, n: int):
    y = y0 * 1.0
    out = torch.zeros_like(y)
    for e in range(n):
        rows = ((first == e) | (second == e)).nonzero().squeeze(1)
        if rows.numel() > 0:
            h = torch.tanh(torch.matmul(y.index_select(0, rows), w))
            out = out.index_add(0, rows, h)
    return out
)");
  return m;
}

struct Routed {
  torch::Tensor y0, w, first, second;
  int64_t experts = 4;
};

Routed routed(int64_t tokens, int64_t width, bool entryGrad) {
  torch::manual_seed(tokens + width);
  Routed r;
  r.y0 = torch::randn({tokens, width}).requires_grad_(entryGrad);
  r.w = (torch::randn({width, width}) / std::sqrt(double(width))).requires_grad_(true);
  r.first = torch::randint(0, r.experts, {tokens});
  r.second = (r.first + 1 + torch::randint(0, r.experts - 1, {tokens})) % r.experts;
  return r;
}

Run expertStep(symtune::SyMuGen& gen, symtune::OpBinder* binder, const Routed& r) {
  auto y0 = r.y0.detach().clone().requires_grad_(r.y0.requires_grad());
  auto w = r.w.detach().clone().requires_grad_(true);
  symtune::ForwardOptions options;
  options.binder = binder;
  Run out;
  out.out = gen.forward({y0, w, r.first, r.second, r.experts}, options).output.toTensor();
  out.out.backward(torch::linspace(-1, 1, out.out.numel()).view_as(out.out));
  out.gh0 = y0.grad();
  out.gw = w.grad();
  return out;
}

}  // namespace

TEST_CASE("a loop's index_select reads of a tensor defined before it are one site") {
  symtune::SyMuGen gen(experts(), "experts");
  for (const bool entryGrad : {true, false}) {
    INFO("entry gradient ", entryGrad);
    const Routed r = routed(64, 16, entryGrad);
    // The reads (the accumulation into `out` is the next test's).
    Binder measuring(gen.staticGraph(), here());
    expertStep(gen, &measuring, r);
    std::vector<symtune::binding::OpSite> sites;
    for (const auto& site : measuring.sites()) {
      if (site.pattern == std::string(symtune::binding::kInvariantRows))
        sites.push_back(site);
    }
    REQUIRE(sites.size() == 1);
    REQUIRE(sites.front().rows != nullptr);
    CHECK(sites.front().rows->writer == nullptr);
    CHECK(sites.front().rows->readers.size() == 1);
    CHECK(sites.front().loop == sites.front().rows->loop);
    CHECK(measuring.measurements() == 0);  // the first execution of the loop is recorded
    expertStep(gen, &measuring, r);
    const auto reads = measuring.table().ofSite(sites.front().name);
    if (!entryGrad) {
      // No gradient reaches the tensor: nothing to gain, the reads stay ATen's, unmeasured.
      CHECK(reads.empty());
      continue;
    }
    REQUIRE(reads.size() == 1);
    const auto& b = *reads.front();
    REQUIRE(b.candidates.size() == 2);
    CHECK(b.candidates[1].name == "rows-in-place");
    CHECK(b.candidates[1].refused.empty());

    const auto bound = forcedBinder(gen, measuring, "rows-in-place");
    const Run plain = expertStep(gen, nullptr, r);
    const Run got = expertStep(gen, bound.get(), r);
    CHECK(bound->boundExecutions() > 0);
    CHECK(torch::equal(got.out, plain.out));  // the same rows read
    const double tolerance = symtune::binding::findCandidate("rows-in-place")->tolerance();
    symtune::test::checkScaledError("w gradient", got.gw, plain.gw, tolerance);
    // A token routed to two experts has its row's gradient summed in another order.
    symtune::test::checkScaledError("y gradient", got.gh0, plain.gh0, tolerance);
  }
}

TEST_CASE("a loop adding rows into a carried tensor inside an if is one accumulated rows site") {
  symtune::SyMuGen gen(experts(), "experts");
  const Routed r = routed(64, 16, true);
  Binder measuring(gen.staticGraph(), here());
  expertStep(gen, &measuring, r);
  const symtune::binding::OpSite* add = nullptr;
  const auto sites = measuring.sites();
  for (const auto& site : sites) {
    if (site.pattern == std::string(symtune::binding::kCarriedRows))
      add = &site;
  }
  REQUIRE(add != nullptr);
  REQUIRE(add->rows != nullptr);
  CHECK(add->rows->accumulate);
  CHECK(add->rows->writer->kind() == c10::aten::index_add);
  CHECK(add->rows->writer->owningBlock()->owningNode()->kind() == c10::prim::If);
  CHECK(add->rows->readers.empty());
  expertStep(gen, &measuring, r);  // measured on the first execution's record
  const auto measured = measuring.table().ofSite(add->name);
  REQUIRE(measured.size() == 1);
  REQUIRE(measured.front()->candidates.size() == 2);
  CHECK(measured.front()->candidates[1].refused.empty());
  CHECK(measured.front()->candidates[1].maxError == 0);  // the same sums, bit for bit

  // Bound: the rows added in place into one buffer, forward and backward as the ATen loop.
  const auto bound = forcedBinder(gen, measuring, "rows-in-place");
  const Run plain = expertStep(gen, nullptr, r);
  const Run got = expertStep(gen, bound.get(), r);
  CHECK(bound->boundExecutions() > 0);
  CHECK(torch::equal(got.out, plain.out));
  const double tolerance = symtune::binding::findCandidate("rows-in-place")->tolerance();
  symtune::test::checkScaledError("w gradient", got.gw, plain.gw, tolerance);
  symtune::test::checkScaledError("y gradient", got.gh0, plain.gh0, tolerance);
}

TEST_CASE("not an accumulated rows site: the sum used, another branch, or another alpha") {
  const char* variants[] = {
      R"(
def forward(self, y: Tensor, ids: Tensor, n: int):
    out = torch.zeros_like(y)
    for i in range(n):
        if ids.numel() > i:
            out = out.index_add(0, ids, y.index_select(0, ids))
        else:
            out = out * 2.0
    return out
)",
      R"(
def forward(self, y: Tensor, ids: Tensor, n: int):
    out = torch.zeros_like(y)
    for i in range(n):
        out = out.index_add(0, ids, y.index_select(0, ids), alpha=2.0)
    return out
)",
      R"(
def forward(self, y: Tensor, ids: Tensor, n: int):
    out = torch.zeros_like(y)
    s = torch.zeros([1])
    for i in range(n):
        s = s + out.sum()
        out = out.index_add(0, ids, y.index_select(0, ids))
    return out + s
)",
  };
  for (const char* source : variants) {
    INFO(source);
    CHECK(patternsOf(source).count(symtune::binding::kCarriedRows) == 0);
  }
  // Added directly in the loop's body, it is one.
  CHECK(patternsOf(R"(
def forward(self, y: Tensor, ids: Tensor, n: int):
    out = torch.zeros_like(y)
    for i in range(n):
        out = out.index_add(0, ids, y.index_select(0, ids))
    return out
)")
            .count(symtune::binding::kCarriedRows) == 1);
}

TEST_CASE("not a loop-invariant rows site: another use in the loop, or a write in place") {
  const char* variants[] = {
      R"(
def forward(self, y: Tensor, ids: Tensor, n: int):
    out = torch.zeros_like(y)
    for i in range(n):
        out = out + y.index_select(0, ids).sum() + y.mean()
    return out
)",
      R"(
def forward(self, y: Tensor, ids: Tensor, n: int):
    out = torch.zeros_like(y)
    for i in range(n):
        r = y.index_select(0, ids)
        out.add_(r.sum())
    return out
)",
  };
  for (const char* source : variants) {
    INFO(source);
    CHECK(patternsOf(source).count(symtune::binding::kInvariantRows) == 0);
  }
}
