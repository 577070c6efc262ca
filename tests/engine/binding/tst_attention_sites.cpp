// DynaCompiler's attention sites (kAttention in symtune/binding/op_site.h): attention written out —
// the key's transpose, the scores' matmul, an optional scale, bias and mask, the softmax and the
// weighted sum — is one region, bound to `sdpa` (at::scaled_dot_product_attention) or run as
// written. Forced either way it gives the unbound run's outputs and gradients; a softmax over
// another dimension runs as written; a value of the region read outside it, or a bias added
// before the scale, keeps it from being a site.

#include "doctest_torch.h"

#include <memory>
#include <string>
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

// forward(q, k, v, bias, future, scale) returning `body`'s value (`att`: the attention's result).
torch::jit::Module model(const std::string& body) {
  torch::jit::Module m("Attention");
  m.define(
      "def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, future: Tensor, "
      "scale: float):\n" +
      body);
  return m;
}

// Transformer-XL's layer: scaled, biased, masked.
const char* kFull = R"(
    scores = torch.matmul(q, k.transpose(2, 3)) * scale + bias
    att = torch.softmax(scores.masked_fill(future, -1e9), -1)
    return torch.matmul(att, v)
)";
// Masked with a fill that does not swamp the scores: sdpa's additive mask would leave them.
const char* kWeakFill = R"(
    scores = torch.matmul(q, k.transpose(2, 3)) * scale + bias
    att = torch.softmax(scores.masked_fill(future, 0.0), -1)
    return torch.matmul(att, v)
)";
// Divided by the scale, nothing added or masked.
const char* kDivided = R"(
    att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / scale, dim=-1)
    return torch.matmul(att, v)
)";
// The bias first in the sum, the key's transpose read outside too (so the region reads kᵀ), no
// scale.
const char* kKeyOutside = R"(
    kt = k.transpose(2, 3)
    att = torch.softmax(bias + torch.matmul(q, kt), -1)
    return torch.matmul(att, v) + kt.sum()
)";
// The softmax over the queries: the pattern, but not attention; sdpa leaves it as written.
const char* kOtherDim = R"(
    att = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scale, 2)
    return torch.matmul(att, v)
)";
// The weights read outside: no site.
const char* kLeaking = R"(
    att = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scale, -1)
    return torch.matmul(att, v) + att.sum()
)";
// The bias added before the scale: not softmax(q kᵀ * scale + bias); no site.
const char* kBiasFirst = R"(
    att = torch.softmax((torch.matmul(q, k.transpose(2, 3)) + bias) * scale, -1)
    return torch.matmul(att, v)
)";

struct Run {
  std::vector<torch::Tensor> values;  // the output, then the gradients of q, k, v and the bias
};

Run step(symtune::SyMuGen& gen, symtune::OpBinder* binder, int64_t batch, int64_t queries,
         int64_t keys, torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(batch * 31 + queries * 7 + keys);
  const int64_t heads = 3, width = 8;
  const auto opts = torch::TensorOptions().dtype(dtype);
  std::vector<torch::Tensor> leaves{torch::randn({batch, heads, queries, width}, opts),
                                    torch::randn({batch, heads, keys, width}, opts),
                                    torch::randn({batch, heads, keys, width}, opts),
                                    torch::randn({heads, queries, keys}, opts)};
  for (auto& t : leaves)
    t.requires_grad_(true);
  // Query i sits at key position keys - queries + i and sees the keys at or before it.
  const auto future =
      (torch::arange(queries) + (keys - queries)).unsqueeze(1) < torch::arange(keys).unsqueeze(0);
  return {symtune::test::outputAndGradients(
      gen, binder, {leaves[0], leaves[1], leaves[2], leaves[3], future, 0.35}, leaves)};
}

void checkClose(const Run& got, const Run& want, double within) {
  symtune::test::checkEach(got.values, want.values, within,
                           "0: the output, then the gradients of q, k, v, bias");
}

void checkEqual(const Run& got, const Run& want) {
  checkClose(got, want, 0);
}

std::vector<symtune::binding::OpSite> attentionSites(symtune::SyMuGen& gen) {
  BinderOptions quiet;
  quiet.measure = false;
  Binder finder(gen.staticGraph(), here(), quiet);
  step(gen, &finder, 2, 3, 5);
  return symtune::test::sitesOf(finder, symtune::binding::kAttention);
}

std::unique_ptr<Binder> forced(symtune::SyMuGen& gen, const std::string& winner, int64_t batch,
                               int64_t queries, int64_t keys, torch::Dtype dtype = torch::kFloat) {
  Binder measured(gen.staticGraph(), here());
  step(gen, &measured, batch, queries, keys, dtype);
  return symtune::test::forcedBinder(gen.staticGraph(), measured.table(), winner,
                                     symtune::binding::kAttention);
}

}  // namespace

TEST_CASE("attention written out is one site from the key's transpose to the weighted sum") {
  symtune::SyMuGen gen(model(kFull), "attention");
  const auto sites = attentionSites(gen);
  REQUIRE(sites.size() == 1);
  const auto& region = *sites.front().cell;
  CHECK(region.first()->kind() == c10::aten::transpose);
  CHECK(region.last()->kind() == c10::aten::matmul);
  CHECK(region.nodes.size() == 7);  // transpose, matmul, mul, add, masked_fill, softmax, matmul
  CHECK(region.inputs[region.query]->debugName().rfind("q", 0) == 0);
  CHECK(region.inputs[region.key]->debugName().rfind("k", 0) == 0);
  CHECK(region.inputs[region.value]->debugName().rfind("v", 0) == 0);
  CHECK(region.keyDim0 >= 0);
  CHECK(region.scale >= 0);
  CHECK_FALSE(region.divides);
  CHECK(region.scoreBias >= 0);
  CHECK(region.mask >= 0);
  CHECK(region.fill >= 0);
  CHECK(symtune::binding::findCandidate("sdpa")->applies(sites.front()));

  symtune::SyMuGen divided(model(kDivided), "divided");
  const auto d = attentionSites(divided);
  REQUIRE(d.size() == 1);
  CHECK(d.front().cell->divides);
  CHECK(d.front().cell->scoreBias == -1);
  CHECK(d.front().cell->mask == -1);

  symtune::SyMuGen outside(model(kKeyOutside), "outside");
  const auto o = attentionSites(outside);
  REQUIRE(o.size() == 1);
  CHECK(o.front().cell->keyDim0 == -1);  // kᵀ read elsewhere: the region reads it as it is
  CHECK(o.front().cell->scale == -1);
  CHECK(o.front().cell->nodes.size() == 4);

  for (const char* body : {kLeaking, kBiasFirst}) {
    INFO(std::string(body));
    symtune::SyMuGen none(model(body), "none");
    CHECK(attentionSites(none).empty());
  }
}

TEST_CASE(
    "attention bound to sdpa gives the unbound outputs and gradients; as written, the same "
    "bits") {
  for (const char* body : {kFull, kDivided, kKeyOutside}) {
    INFO(std::string(body));
    symtune::SyMuGen gen(model(body), "attention");
    for (const auto& [batch, queries, keys] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{2, 4, 4}, {3, 5, 9}}) {
      INFO("batch ", batch, ", queries ", queries, ", keys ", keys);
      const Run plain = step(gen, nullptr, batch, queries, keys);
      auto fused = forced(gen, "sdpa", batch, queries, keys);
      checkClose(step(gen, fused.get(), batch, queries, keys), plain, 1e-5);
      CHECK(fused->boundExecutions() == 1);
      CHECK(fused->measurements() == 0);
      auto script = forced(gen, "torchscript", batch, queries, keys);
      for (int run = 0; run < 3; ++run)  // profiled, then specialized
        checkClose(step(gen, script.get(), batch, queries, keys), plain, 1e-6);
      auto written = forced(gen, "aten", batch, queries, keys);
      checkEqual(step(gen, written.get(), batch, queries, keys), plain);
      CHECK(written->boundExecutions() == 0);
      const Run plain64 = step(gen, nullptr, batch, queries, keys, torch::kDouble);
      auto fused64 = forced(gen, "sdpa", batch, queries, keys, torch::kDouble);
      checkClose(step(gen, fused64.get(), batch, queries, keys, torch::kDouble), plain64, 1e-10);
    }
  }
}

// sdpa adds the fill to the scaled scores where the model sets them to it. A fill of 0 made the
// mask no mask at all; a row masked whole (a query before every key) came out softmax(scores)
// where the model's is uniform.
TEST_CASE("sdpa leaves a weak fill as written, and a row masked whole is uniform") {
  symtune::SyMuGen weak(model(kWeakFill), "weak_fill");
  REQUIRE(attentionSites(weak).size() == 1);
  const Run plain = step(weak, nullptr, 2, 4, 6);
  auto fused = forced(weak, "sdpa", 2, 4, 6);
  checkEqual(step(weak, fused.get(), 2, 4, 6), plain);

  symtune::SyMuGen full(model(kFull), "attention");
  // Queries 0 and 1 sit before the first key: their rows are masked whole.
  const Run masked = step(full, nullptr, 2, 5, 3);
  auto sdpa = forced(full, "sdpa", 2, 5, 3);
  checkClose(step(full, sdpa.get(), 2, 5, 3), masked, 1e-5);
}

TEST_CASE("a softmax over another dimension is left as written by sdpa") {
  symtune::SyMuGen gen(model(kOtherDim), "other_dim");
  REQUIRE(attentionSites(gen).size() == 1);  // the pattern; sdpa checks the dimension when it runs
  const Run plain = step(gen, nullptr, 2, 4, 4);
  auto fused = forced(gen, "sdpa", 2, 4, 4);
  checkEqual(step(gen, fused.get(), 2, 4, 4), plain);
}

TEST_CASE(
    "a measured attention site keeps both candidates' times and is measured once per "
    "bucket") {
  symtune::SyMuGen gen(model(kFull), "attention");
  Binder binder(gen.staticGraph(), here());
  checkClose(step(gen, &binder, 2, 4, 6), step(gen, nullptr, 2, 4, 6), 1e-5);
  const auto bindings = binder.table().bindings;
  REQUIRE(bindings.size() == 1);
  CHECK(bindings.front().pattern == std::string(symtune::binding::kAttention));
  REQUIRE(bindings.front().candidates.size() == 3);  // aten, sdpa, torchscript
  for (const auto& c : bindings.front().candidates) {
    INFO(c.name);
    CHECK(c.refused.empty());
    CHECK(c.maxError <= 1e-5);
    CHECK(c.forwardSeconds > 0);
    CHECK(c.backwardSeconds > 0);
  }
  CHECK(bindings.front().nodes.size() == 6);
  // Other values in the bucket: the one measurement stands.
  checkClose(step(gen, &binder, 2, 4, 7), step(gen, nullptr, 2, 4, 7), 1e-5);
  CHECK(binder.measurements() == 1);
}
