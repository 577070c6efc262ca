// DynaCompiler's residual-stream sites (symtune/binding/op_site.h). kAddLayerNorm: a residual add
// and the layer norm of its sum are one region that also computes the sum, which nodes after the
// norm read (the next residual add). Bound to `add-layer-norm` (kernels/' fused op) or to
// `torchscript`, or run as written, the model gives the unbound run's outputs and gradients — the
// sum's later readers included; a sum read between the add and the norm keeps the pair from
// being a site. kBiasDropoutAdd: a bias add, its dropout and the residual add are one region;
// `bias-dropout-add` drops with a mask of its own, which the measurement holds to the ATen ops on
// that mask, and in evaluation it is the two adds.

#include "doctest_torch.h"

#include <memory>
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

// forward(x, y, w, lw, lb) returning `body`'s value.
torch::jit::Module model(const std::string& body) {
  torch::jit::Module m("Residual");
  m.define("def forward(self, x: Tensor, y: Tensor, w: Tensor, lw: Tensor, lb: Tensor):\n" + body);
  return m;
}

// A pre-norm block: the sum normed, then read again by the next residual add.
const char* kBlock = R"(
    h = x + torch.matmul(y, w)
    z = torch.layer_norm(h, [x.size(-1)], lw, lb, 1e-5)
    return h + torch.matmul(z, w)
)";
// Transformer-XL's decoder: the layers a loop, the residual stream carried through it; the norm
// without weight and bias in the second half of each layer.
const char* kLayers = R"(
    h = x
    for l in range(3):
        h = h + torch.matmul(y, w) * float(l + 1)
        z = torch.layer_norm(h, [x.size(-1)], lw, lb, 1e-5)
        h = h + torch.gelu(torch.matmul(z, w))
        u = torch.layer_norm(h + y, [x.size(-1)])
        y = u * 0.5
    return h + y
)";
// The sum read before the norm (even for its size: a fused execution has no sum until the norm):
// no site.
const char* kReadBetween = R"(
    h = x + y
    s = h * 2.0
    z = torch.layer_norm(h, [x.size(-1)], lw, lb, 1e-5)
    return z + s
)";
const char* kSizeBetween = R"(
    h = x + y
    z = torch.layer_norm(h, [h.size(-1)], lw, lb, 1e-5)
    return z + h
)";
// A norm over the last two dimensions: the pattern, but not the kernel's; it runs as written.
const char* kTwoDims = R"(
    h = x + y
    z = torch.layer_norm(h, [x.size(-2), x.size(-1)])
    return z * h
)";

// A projection's bias, dropout and the residual add; in training and in evaluation.
const char* kDropout = R"(
    return y + torch.dropout(torch.matmul(x, w) + lb, 0.25, True)
)";
const char* kDropoutEval = R"(
    return torch.dropout(torch.matmul(x, w) + lb, 0.25, False) + y
)";

struct Run {
  std::vector<torch::Tensor> values;  // the output, then the gradients of x, y, w, lw, lb
};

Run step(symtune::SyMuGen& gen, symtune::OpBinder* binder, int64_t batch, int64_t rows,
         torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(batch * 31 + rows);
  const int64_t width = 16;
  const auto opts = torch::TensorOptions().dtype(dtype);
  std::vector<torch::Tensor> leaves{
      torch::randn({batch, rows, width}, opts), torch::randn({batch, rows, width}, opts),
      torch::randn({width, width}, opts) / 4.0, 1.0 + 0.1 * torch::randn({width}, opts),
      0.1 * torch::randn({width}, opts)};
  for (auto& t : leaves)
    t.requires_grad_(true);
  return {symtune::test::outputAndGradients(
      gen, binder, {leaves[0], leaves[1], leaves[2], leaves[3], leaves[4]}, leaves)};
}

void checkClose(const Run& got, const Run& want, double within) {
  symtune::test::checkEach(got.values, want.values, within,
                           "0: the output, then the gradients of x, y, w, lw, lb");
}

void checkEqual(const Run& got, const Run& want) {
  checkClose(got, want, 0);
}

std::vector<symtune::binding::OpSite> residualSites(
    symtune::SyMuGen& gen, const char* pattern = symtune::binding::kAddLayerNorm) {
  BinderOptions quiet;
  quiet.measure = false;
  Binder finder(gen.staticGraph(), here(), quiet);
  step(gen, &finder, 2, 3);
  return symtune::test::sitesOf(finder, pattern);
}

std::unique_ptr<Binder> forced(symtune::SyMuGen& gen, const std::string& winner, int64_t batch,
                               int64_t rows, torch::Dtype dtype = torch::kFloat,
                               const char* pattern = symtune::binding::kAddLayerNorm) {
  Binder measured(gen.staticGraph(), here());
  step(gen, &measured, batch, rows, dtype);
  return symtune::test::forcedBinder(gen.staticGraph(), measured.table(), winner, pattern);
}

}  // namespace

TEST_CASE("a residual add and its norm are one site that also computes the sum") {
  symtune::SyMuGen gen(model(kBlock), "block");
  const auto sites = residualSites(gen);
  REQUIRE(sites.size() == 1);
  const auto& region = *sites.front().cell;
  REQUIRE(region.nodes.size() == 2);
  CHECK(region.first()->kind() == c10::aten::add);
  CHECK(region.last()->kind() == c10::aten::layer_norm);
  CHECK(region.alsoOut == region.first()->output());
  CHECK(region.inputs[region.input]->debugName().rfind("x", 0) == 0);
  CHECK(region.residual != region.input);
  CHECK(region.weight != region.bias);
  CHECK(symtune::binding::findCandidate("add-layer-norm")->applies(sites.front()));

  symtune::SyMuGen layers(model(kLayers), "layers");
  const auto inLoop = residualSites(layers);
  REQUIRE(inLoop.size() == 2);  // both norms of the layer; the first's sum is read after it
  for (const auto& site : inLoop)
    CHECK(site.cell->alsoOut != nullptr);

  for (const char* body : {kReadBetween, kSizeBetween}) {
    INFO(std::string(body));
    symtune::SyMuGen between(model(body), "between");
    CHECK(residualSites(between).empty());
  }
}

TEST_CASE(
    "add + layer norm bound to add-layer-norm or torchscript gives the unbound outputs and "
    "gradients; as written, the same bits") {
  for (const char* body : {kBlock, kLayers}) {
    INFO(std::string(body));
    symtune::SyMuGen gen(model(body), "residual");
    for (const auto& [batch, rows] : std::vector<std::pair<int64_t, int64_t>>{{2, 4}, {3, 7}}) {
      INFO("batch ", batch, ", rows ", rows);
      const Run plain = step(gen, nullptr, batch, rows);
      auto fused = forced(gen, "add-layer-norm", batch, rows);
      checkClose(step(gen, fused.get(), batch, rows), plain, 1e-5);
      CHECK(fused->boundExecutions() > 0);
      CHECK(fused->measurements() == 0);
      auto script = forced(gen, "torchscript", batch, rows);
      for (int run = 0; run < 3; ++run)  // profiled, then specialized
        checkClose(step(gen, script.get(), batch, rows), plain, 1e-6);
      auto written = forced(gen, "aten", batch, rows);
      checkEqual(step(gen, written.get(), batch, rows), plain);
      CHECK(written->boundExecutions() == 0);
      const Run plain64 = step(gen, nullptr, batch, rows, torch::kDouble);
      auto fused64 = forced(gen, "add-layer-norm", batch, rows, torch::kDouble);
      checkClose(step(gen, fused64.get(), batch, rows, torch::kDouble), plain64, 1e-10);
    }
  }
}

TEST_CASE("a norm over more than the last dimension is left as written by add-layer-norm") {
  symtune::SyMuGen gen(model(kTwoDims), "two_dims");
  REQUIRE(residualSites(gen).size() == 1);  // the pattern; the candidate checks when it runs
  const Run plain = step(gen, nullptr, 2, 4);
  auto fused = forced(gen, "add-layer-norm", 2, 4);
  checkEqual(step(gen, fused.get(), 2, 4), plain);
}

TEST_CASE(
    "a measured add + layer norm site keeps every candidate's times, measured once a bucket") {
  symtune::SyMuGen gen(model(kBlock), "block");
  Binder binder(gen.staticGraph(), here());
  checkClose(step(gen, &binder, 2, 6), step(gen, nullptr, 2, 6), 1e-5);
  const auto bindings = binder.table().bindings;
  REQUIRE(bindings.size() == 1);
  CHECK(bindings.front().pattern == std::string(symtune::binding::kAddLayerNorm));
  REQUIRE(bindings.front().candidates.size() == 3);  // aten, add-layer-norm, torchscript
  for (const auto& c : bindings.front().candidates) {
    INFO(c.name);
    CHECK(c.refused.empty());
    CHECK(c.maxError <= 1e-5);
    CHECK(c.forwardSeconds > 0);
    CHECK(c.backwardSeconds > 0);
  }
  // Other values in the bucket: the one measurement stands, whichever won.
  checkClose(step(gen, &binder, 2, 7), step(gen, nullptr, 2, 7), 1e-5);
  CHECK(binder.measurements() == 1);
}

TEST_CASE("a bias add, its dropout and the residual add are one site") {
  using symtune::binding::kBiasDropoutAdd;
  for (const char* body : {kDropout, kDropoutEval}) {
    INFO(std::string(body));
    symtune::SyMuGen gen(model(body), "dropout");
    const auto sites = residualSites(gen, kBiasDropoutAdd);
    REQUIRE(sites.size() == 1);
    const auto& region = *sites.front().cell;
    REQUIRE(region.nodes.size() == 3);
    CHECK(region.nodes[1]->kind() == c10::aten::dropout);
    CHECK(region.alsoOut == nullptr);
    CHECK(region.inputs[region.bias]->debugName().rfind("lb", 0) == 0);
    CHECK(region.inputs[region.residual]->debugName().rfind("y", 0) == 0);
    CHECK(symtune::binding::findCandidate("bias-dropout-add")->applies(sites.front()));
  }
}

TEST_CASE(
    "bias-dropout-add drops with its own mask: each output the residual or the residual plus the "
    "scaled sum, its gradients on the same mask, measured against the ATen ops on its mask") {
  using symtune::binding::kBiasDropoutAdd;
  symtune::SyMuGen gen(model(kDropout), "dropout");
  const int64_t batch = 4, rows = 25;  // 1600 elements
  const Run plain = step(gen, nullptr, batch, rows);
  auto written = forced(gen, "aten", batch, rows, torch::kFloat, kBiasDropoutAdd);
  checkEqual(step(gen, written.get(), batch, rows), plain);  // ATen's draws, the same seed

  auto fused = forced(gen, "bias-dropout-add", batch, rows, torch::kFloat, kBiasDropoutAdd);
  const Run got = step(gen, fused.get(), batch, rows);
  CHECK(fused->boundExecutions() == 1);
  checkEqual(step(gen, fused.get(), batch, rows), got);  // reproducible from the seed
  // The inputs step() made, made again.
  torch::manual_seed(batch * 31 + rows);
  const auto x = torch::randn({batch, rows, 16}), y = torch::randn({batch, rows, 16});
  const auto w = torch::randn({16, 16}) / 4.0;
  torch::randn({16});
  const auto lb = 0.1 * torch::randn({16});
  const auto sum = torch::matmul(x, w) + lb;
  const auto dropped = got.values[0] - y;
  const auto kept = dropped != 0;
  const double keptShare = kept.to(torch::kDouble).mean().item<double>();
  INFO("kept ", keptShare);
  CHECK(keptShare > 0.65);  // 1 - p = 0.75; the share's deviation is 0.011
  CHECK(keptShare < 0.85);
  symtune::test::checkScaledError("kept values", dropped, torch::where(kept, sum / 0.75, 0), 1e-5);
  // Output gradient g: y's is g; lb's the kept g / (1 - p) summed over rows.
  const auto g = torch::linspace(-1, 1, dropped.numel()).view_as(dropped);
  symtune::test::checkScaledError("y gradient", got.values[2], g, 0);
  symtune::test::checkScaledError("bias gradient", got.values[5],
                                  torch::where(kept, g / 0.75, 0).sum(torch::IntArrayRef{0, 1}),
                                  1e-5);

  // Measured: held to the ATen ops on its own mask, not refused.
  Binder binder(gen.staticGraph(), here());
  step(gen, &binder, batch, rows);
  const auto bindings = binder.table().bindings;
  REQUIRE(bindings.size() == 1);
  bool seen = false;
  for (const auto& c : bindings.front().candidates) {
    INFO(c.name, ": ", c.refused);
    CHECK(c.refused.empty());
    CHECK(c.maxError <= 1e-5);
    seen = seen || c.name == "bias-dropout-add";
  }
  CHECK(seen);
  // torchscript's warm-up runs would draw masks of their own: not a candidate where a node draws.
  CHECK(bindings.front().candidates.size() == 2);
}

TEST_CASE("in evaluation bias-dropout-add is the bias and residual adds") {
  symtune::SyMuGen gen(model(kDropoutEval), "dropout_eval");
  const Run plain = step(gen, nullptr, 3, 5);
  auto fused =
      forced(gen, "bias-dropout-add", 3, 5, torch::kFloat, symtune::binding::kBiasDropoutAdd);
  checkClose(step(gen, fused.get(), 3, 5), plain, 1e-6);
  CHECK(fused->boundExecutions() == 1);
}

// The residual add read by a GELU alone is the first node of a bias-GELU pair (the residual its
// "bias"): a dropout region ending there handed its result on as the GELU's, the GELU left out.
// The region is no site; the pair is, and the model computes the GELU however it is bound.
TEST_CASE("a residual add a GELU reads ends no dropout region: the bias-GELU pair has it") {
  const char* body = R"(
    return torch.gelu(y + torch.dropout(torch.matmul(x, w) + lb, 0.25, False))
)";
  symtune::SyMuGen gen(model(body), "dropout_gelu");
  CHECK(residualSites(gen, symtune::binding::kBiasDropoutAdd).empty());
  const Run plain = step(gen, nullptr, 3, 5);
  Binder binder(gen.staticGraph(), here());
  checkClose(step(gen, &binder, 3, 5), plain, 1e-5);  // measured
  checkClose(step(gen, &binder, 3, 5), plain, 1e-5);  // bound
  CHECK(binder.measurements() >= 1);                  // the pair's
}

// Note [A measured region draws as a bound one] (binder_cells.cpp): the step that measures a
// dropout region draws as a step that reads the table does, whichever candidate won — the
// region's output and every draw after it (a second dropout). Until 2026-12-07 the winner of the
// measuring step drew after the dropout as written, and both differed.
TEST_CASE("a step that measures a dropout region draws as one that reads the table") {
  const char* body = R"(
    h = y + torch.dropout(torch.matmul(x, w) + lb, 0.25, True)
    return torch.dropout(h, 0.5, True)
)";
  symtune::SyMuGen gen(model(body), "two_dropouts");
  int fused = 0;
  for (const int64_t rows : {25, 50, 100}) {
    Binder measuring(gen.staticGraph(), here());
    const Run measured = step(gen, &measuring, 4, rows);
    REQUIRE(measuring.table().bindings.size() == 1);
    const std::string winner = measuring.table().bindings.front().winner;
    INFO(rows, " rows: ", winner);
    fused += winner == "bias-dropout-add";
    BinderOptions quiet;
    quiet.measure = false;
    Binder reading(gen.staticGraph(), here(), quiet);
    REQUIRE_FALSE(reading.adopt(measuring.table()).has_value());
    checkEqual(step(gen, &reading, 4, rows), measured);
  }
  MESSAGE("bias-dropout-add won ", fused, " of 3 measurements");
}

// A node that draws between the region's first and last node keeps the measuring step's winner
// from going back to where the region began: it would draw that node's numbers again. A dropout
// in a branch there draws as much as one beside it; until 2026-12-07 only the block's own nodes
// were asked.
TEST_CASE("a dropout in a branch inside a dropout region's span draws between its nodes") {
  using symtune::binding::kBiasDropoutAdd;
  const char* nested = R"(
    s = torch.matmul(x, w) + lb
    if bool(x.sum() > -1e9):
        y = torch.dropout(y, 0.5, True)
    return y + torch.dropout(s, 0.25, True)
)";
  const char* calm = R"(
    s = torch.matmul(x, w) + lb
    if bool(x.sum() > -1e9):
        y = y * 2.0
    return y + torch.dropout(s, 0.25, True)
)";
  for (const auto& [body, draws] : {std::pair{nested, true}, std::pair{calm, false}}) {
    INFO(std::string(body));
    symtune::SyMuGen gen(model(body), "branch_between");
    const auto sites = residualSites(gen, kBiasDropoutAdd);
    REQUIRE(sites.size() == 1);
    CHECK(sites.front().cell->drawsBetween == draws);
  }
}
