// DynaCompiler's cell sites (Note [Cell sites] in symtune/binding/op_site.h): a GRU cell written
// out — six gate slices, two sigmoids, a tanh, the blend and the length mask's where — is one
// site of all its nodes, decided at its first node per time step and computed by kernels'
// gru_cell at its last; the nodes between leave nothing anyone reads. Forced either way it gives
// the unbound run's outputs and gradients (bit for bit as written, within the kernel's
// tolerance fused); a matmul and its bias add bound to one addmm likewise, or to addmm-batched
// (the weight's gradient over a loop's trips in one GEMM); the gate slices' bounds
// are checked when it runs; a value of the cell used outside it keeps it from being a site.

#include "doctest_torch.h"

#include <cmath>
#include <memory>
#include <set>
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

// A GRU over time steps whose cell reads as `cell` says (R, Z, N: the gates' lines; STEP: the
// next state's; OUT: what each step appends), filled into one source.
struct CellText {
  const char* r = "r = torch.sigmoid(gi[:, :hid] + gh[:, :hid])";
  const char* z = "z = torch.sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])";
  const char* n = "n = torch.tanh(gi[:, 2 * hid:] + r * gh[:, 2 * hid:])";
  const char* step = "h = torch.where((lengths > t).unsqueeze(1), (1 - z) * n + z * h, h)";
  const char* out = "outs.append(h)";
};

std::string gruSource(const CellText& cell) {
  std::string source = R"(
def forward(self, x: Tensor, lengths: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor, hid: int):
    gi_all = torch.matmul(x, w_ih) + b_ih
    h = torch.zeros([x.size(0), hid], dtype=x.dtype)
    outs: List[Tensor] = []
    for t in range(x.size(1)):
        gi = gi_all[:, t]
        gh = torch.matmul(h, w_hh) + b_hh
)";
  for (const char* line : {cell.r, cell.z, cell.n, cell.step, cell.out})
    source += std::string("        ") + line + "\n";
  return source + "    return torch.stack(outs, 1)\n";
}

// The tagger's GRU: the gates as torch.nn.GRUCell orders them, sentences past their length
// keeping their state.
CellText masked() {
  return {};
}

// No mask, the blend's terms, the products' factors and one gate's sum in the other order.
CellText bare() {
  CellText c;
  c.r = "r = torch.sigmoid(gh[:, :hid] + gi[:, :hid])";
  c.n = "n = torch.tanh(gi[:, 2 * hid:] + gh[:, 2 * hid:] * r)";
  c.step = "h = h * z + n * (1 - z)";
  return c;
}

// r and z read each other's thirds: the same nodes, but not the kernel's gate order.
CellText swapped() {
  CellText c;
  c.r = "r = torch.sigmoid(gi[:, hid:2 * hid] + gh[:, hid:2 * hid])";
  c.z = "z = torch.sigmoid(gi[:, :hid] + gh[:, :hid])";
  return c;
}

// The update gate also leaves the cell: the gates cannot be one site.
CellText leaking() {
  CellText c;
  c.out = "outs.append(h + z)";
  return c;
}

torch::jit::Module model(const CellText& cell) {
  torch::jit::Module m("Cell");
  m.define(gruSource(cell));
  return m;
}

struct Run {
  torch::Tensor out, gx, gih, ghh, gbi, gbh;
  int fusedCells = 0;  // gru_cell's autograd nodes behind the output
};

// How many autograd nodes behind `out` have `name` in their name.
int nodesNamed(const torch::Tensor& out, const std::string& name) {
  std::set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{out.grad_fn().get()};
  int count = 0;
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    if (node == nullptr || !seen.insert(node).second)
      continue;
    count += node->name().find(name) != std::string::npos ? 1 : 0;
    for (const auto& edge : node->next_edges())
      todo.push_back(edge.function.get());
  }
  return count;
}

Run step(symtune::SyMuGen& gen, symtune::OpBinder* binder, int64_t batch, int64_t time, int64_t hid,
         torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(batch * 13 + time);
  const int64_t D = 5;
  const auto x = torch::randn({batch, time, D}).to(dtype).requires_grad_(true);
  const auto lengths = torch::randint(1, time + 1, {batch});
  const auto wih = (torch::randn({D, 3 * hid}) / std::sqrt(5.0)).to(dtype).requires_grad_(true);
  const auto whh = (torch::randn({hid, 3 * hid}) / std::sqrt(static_cast<double>(hid)))
                       .to(dtype)
                       .requires_grad_(true);
  const auto bih = (torch::randn({3 * hid}) * 0.1).to(dtype).requires_grad_(true);
  const auto bhh = (torch::randn({3 * hid}) * 0.1).to(dtype).requires_grad_(true);
  symtune::ForwardOptions options;
  options.binder = binder;
  Run r;
  r.out = gen.forward({x, lengths, wih, whh, bih, bhh, hid}, options).output.toTensor();
  r.fusedCells = nodesNamed(r.out, "GruCell");
  r.out.backward(torch::linspace(-1, 1, r.out.numel()).view_as(r.out).to(dtype));
  r.gx = x.grad();
  r.gih = wih.grad();
  r.ghh = whh.grad();
  r.gbi = bih.grad();
  r.gbh = bhh.grad();
  return r;
}

void checkClose(const Run& got, const Run& want, double within) {
  symtune::test::checkScaledError("output", got.out, want.out, within);
  symtune::test::checkScaledError("x gradient", got.gx, want.gx, within);
  symtune::test::checkScaledError("w_ih gradient", got.gih, want.gih, within);
  symtune::test::checkScaledError("w_hh gradient", got.ghh, want.ghh, within);
  symtune::test::checkScaledError("b_ih gradient", got.gbi, want.gbi, within);
  symtune::test::checkScaledError("b_hh gradient", got.gbh, want.gbh, within);
}

// The GRU cell sites a binder that measures nothing finds in a run of `gen`.
std::vector<symtune::binding::OpSite> cellSites(symtune::SyMuGen& gen) {
  BinderOptions quiet;
  quiet.measure = false;
  Binder finder(gen.staticGraph(), here(), quiet);
  step(gen, &finder, 3, 4, 6);
  std::vector<symtune::binding::OpSite> cells;
  for (const auto& site : finder.sites()) {
    if (site.pattern == std::string(symtune::binding::kGruCell))
      cells.push_back(site);
  }
  return cells;
}

// A binder that runs every cell bucket of a measured run with `winner` and measures nothing.
// The other sites run as written (what a measurement chose for them need not be bit for bit:
// the recurrent projection's `addmm-batched`).
std::unique_ptr<Binder> forced(symtune::SyMuGen& gen, const std::string& winner, int64_t batch,
                               int64_t time, int64_t hid, torch::Dtype dtype = torch::kFloat) {
  Binder measured(gen.staticGraph(), here());
  step(gen, &measured, batch, time, hid, dtype);
  symtune::BindingTable table = measured.table();
  for (auto& b : table.bindings)
    b.winner = symtune::binding::kAten;
  return symtune::test::forcedBinder(gen.staticGraph(), std::move(table), winner,
                                     symtune::binding::kGruCell);
}

}  // namespace

TEST_CASE("a GRU cell written out is one site of every node from its gate slices to the where") {
  symtune::SyMuGen gen(model(masked()), "cell");
  const auto cells = cellSites(gen);
  REQUIRE(cells.size() == 1);
  const auto& site = cells.front();
  REQUIRE(site.cell != nullptr);
  const auto& region = *site.cell;
  CHECK(site.node == region.first());
  CHECK(region.last()->kind() == c10::aten::where);
  CHECK(region.first()->kind() == c10::aten::slice);
  // Six gate slices, each through the identity slice of `:` on the batch dimension; two gate
  // sums and sigmoids; n's product, sum and tanh; 1 - z as TorchScript writes it (neg, add);
  // the blend's two products and sum; the where.
  int slices = 0;
  for (const auto* node : region.nodes)
    slices += node->kind() == c10::aten::slice ? 1 : 0;
  CHECK(slices == 12);
  CHECK(region.nodes.size() == 25);
  CHECK(region.slices.size() == 6);
  CHECK(region.keep >= 0);
  // Its inputs: both projections, the state, the mask, the slices' bounds and constants.
  CHECK(region.inputs[region.gatesIn]->node()->kind() == c10::aten::select);
  CHECK(region.inputs[region.gatesHidden]->node()->kind() == c10::aten::add);
  CHECK(region.inputs[region.state]->node()->kind() == c10::prim::Param);
  CHECK(region.inputs[static_cast<size_t>(region.keep)]->node()->kind() == c10::aten::unsqueeze);
  CHECK(symtune::binding::findCandidate("gru-cell")->applies(site));
}

TEST_CASE("a GRU cell bound to gru-cell gives the unbound outputs and gradients") {
  symtune::SyMuGen gen(model(masked()), "cell");
  for (const auto& [batch, time, hid] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4, 6, 8}, {3, 5, 19}}) {
    INFO("batch ", batch, ", time ", time, ", hidden ", hid);
    const Run plain = step(gen, nullptr, batch, time, hid);
    auto fused = forced(gen, "gru-cell", batch, time, hid);
    const Run got = step(gen, fused.get(), batch, time, hid);
    checkClose(got, plain, 1e-5);
    CHECK(got.fusedCells == time);  // every time step's cell
    CHECK(plain.fusedCells == 0);
    CHECK(fused->measurements() == 0);
    // As written: every node runs (as its own site where it is one), bit for bit.
    auto written = forced(gen, "aten", batch, time, hid);
    const Run asWritten = step(gen, written.get(), batch, time, hid);
    CHECK(torch::equal(asWritten.out, plain.out));
    CHECK(torch::equal(asWritten.gih, plain.gih));
    CHECK(torch::equal(asWritten.ghh, plain.ghh));
    CHECK(asWritten.fusedCells == 0);
    // Through TorchScript's executor: the same ops, differentiated symbolically.
    auto script = forced(gen, "torchscript", batch, time, hid);
    for (int run = 0; run < 3; ++run)  // profiled, then specialized
      checkClose(step(gen, script.get(), batch, time, hid), plain, 1e-6);
    CHECK(script->boundExecutions() >= 3 * time);
    // Float64 through the kernel's double path.
    const Run plain64 = step(gen, nullptr, batch, time, hid, torch::kDouble);
    auto fused64 = forced(gen, "gru-cell", batch, time, hid, torch::kDouble);
    const Run got64 = step(gen, fused64.get(), batch, time, hid, torch::kDouble);
    checkClose(got64, plain64, 1e-12);
    CHECK(got64.fusedCells == time);
  }
}

TEST_CASE("a measured GRU cell keeps both candidates' times and is measured once per bucket") {
  symtune::SyMuGen gen(model(masked()), "cell");
  Binder binder(gen.staticGraph(), here());
  const Run plain = step(gen, nullptr, 4, 7, 8);
  checkClose(step(gen, &binder, 4, 7, 8), plain, 1e-5);
  const symtune::Binding* cell = nullptr;
  for (const auto& b : binder.table().bindings) {
    if (b.pattern == std::string(symtune::binding::kGruCell))
      cell = &b;
  }
  REQUIRE(cell != nullptr);
  CHECK_FALSE(cell->predicted);
  REQUIRE(cell->candidates.size() == 3);  // aten, gru-cell, torchscript
  for (const auto& c : cell->candidates) {
    INFO(c.name);
    CHECK(c.refused.empty());
    CHECK(c.maxError <= 1e-5);
    CHECK(c.forwardSeconds > 0);
    CHECK(c.backwardSeconds > 0);
  }
  CHECK(cell->nodes.size() == 24);  // the region's other nodes, for the studio's overlay
  // The same shapes again, and another length (the cell's bucket is its rows'): the one
  // measurement stands.
  checkClose(step(gen, &binder, 4, 7, 8), plain, 1e-5);
  checkClose(step(gen, &binder, 4, 3, 8), step(gen, nullptr, 4, 3, 8), 1e-5);
  int cells = 0;
  for (const auto& b : binder.table().bindings)
    cells += b.pattern == std::string(symtune::binding::kGruCell) ? 1 : 0;
  CHECK(cells == 1);
}

TEST_CASE("a GRU cell without a mask, its terms in another order, is a site too") {
  symtune::SyMuGen gen(model(bare()), "bare");
  const auto cells = cellSites(gen);
  REQUIRE(cells.size() == 1);
  CHECK(cells.front().cell->keep == -1);
  CHECK(cells.front().cell->last()->kind() == c10::aten::add);
  const Run plain = step(gen, nullptr, 5, 4, 7);
  auto fused = forced(gen, "gru-cell", 5, 4, 7);
  const Run got = step(gen, fused.get(), 5, 4, 7);
  checkClose(got, plain, 1e-5);
  CHECK(got.fusedCells == 4);
}

TEST_CASE("not a GRU cell for the kernel: gates in another order run as written; a leaking gate") {
  // The slices' bounds are read when the cell runs: r and z swapped is a site whose fused
  // candidate finds the bounds are not its own and runs the nodes as written.
  symtune::SyMuGen reordered(model(swapped()), "swapped");
  REQUIRE(cellSites(reordered).size() == 1);
  const Run plain = step(reordered, nullptr, 3, 5, 6);
  auto fused = forced(reordered, "gru-cell", 3, 5, 6);
  const Run got = step(reordered, fused.get(), 3, 5, 6);
  CHECK(got.fusedCells == 0);
  CHECK(torch::equal(got.out, plain.out));
  CHECK(torch::equal(got.gih, plain.gih));
  // z used outside the cell: no site, and the run as written.
  symtune::SyMuGen leaky(model(leaking()), "leaking");
  CHECK(cellSites(leaky).empty());
  Binder binder(leaky.staticGraph(), here());
  // (within the recurrent projection's tolerance: its measurement may bind `addmm-batched`)
  checkClose(step(leaky, &binder, 3, 5, 6), step(leaky, nullptr, 3, 5, 6), 1e-5);
  for (const auto& site : binder.sites())
    CHECK(site.pattern != std::string(symtune::binding::kGruCell));
}

TEST_CASE("bit-for-bit binding leaves a GRU cell to its nodes") {
  symtune::SyMuGen gen(model(masked()), "cell");
  BinderOptions exactOnly;
  exactOnly.exact = true;
  Binder exact(gen.staticGraph(), here(), exactOnly);
  const Run got = step(gen, &exact, 4, 5, 8);
  const Run plain = step(gen, nullptr, 4, 5, 8);
  CHECK(torch::equal(got.out, plain.out));
  CHECK(torch::equal(got.ghh, plain.ghh));
  for (const auto& site : exact.sites())
    CHECK(site.pattern != std::string(symtune::binding::kGruCell));
}

namespace {

// Recurrent matmuls and their bias adds, the sum's operands either way round; the last loop's
// add's other operand is a matrix (no bias: the region falls back to its two ATen ops when it
// runs). The projection of x before the loops reads no carried value: no site.
torch::jit::Module biasMatmuls() {
  torch::jit::Module m("BiasMatmuls");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor, b: Tensor, m: Tensor):
    h = torch.matmul(x, w) + b
    for i in range(3):
        h = torch.tanh(torch.matmul(h, w) + b)
    for i in range(2):
        h = b + torch.matmul(h, w)
    for i in range(2):
        h = torch.matmul(h, w) + m
    return h
)");
  return m;
}

struct MatmulRun {
  torch::Tensor out, gx, gw, gb;
};

MatmulRun matmulStep(symtune::SyMuGen& gen, symtune::OpBinder* binder,
                     const std::vector<int64_t>& shape) {
  torch::manual_seed(static_cast<uint64_t>(shape.front() * 5 + shape.back()));
  const int64_t width = shape.back();
  auto x = torch::randn(shape).requires_grad_(true);
  auto w =
      (torch::randn({width, width}) / std::sqrt(static_cast<double>(width))).requires_grad_(true);
  auto b = torch::randn({width}).requires_grad_(true);
  std::vector<int64_t> rows = shape;
  const auto matrix = torch::randn(rows);
  symtune::ForwardOptions options;
  options.binder = binder;
  MatmulRun r;
  r.out = gen.forward({x, w, b, matrix}, options).output.toTensor();
  r.out.backward(torch::linspace(-1, 1, r.out.numel()).view_as(r.out));
  r.gx = x.grad();
  r.gw = w.grad();
  r.gb = b.grad();
  return r;
}

// The bias matmuls of `gen` measured on `shape`, then forced to `winner`: the run's outputs and
// gradients within the candidate's tolerance of the unbound run's. The forced run.
MatmulRun checkForced(symtune::SyMuGen& gen, const std::vector<int64_t>& shape,
                      const std::string& winner) {
  Binder probe(gen.staticGraph(), here());
  matmulStep(gen, &probe, shape);
  auto forced = symtune::test::forcedBinder(gen.staticGraph(), probe.table(), winner,
                                            symtune::binding::kBiasMatmul);
  const MatmulRun want = matmulStep(gen, nullptr, shape);
  const MatmulRun got = matmulStep(gen, forced.get(), shape);
  const double tolerance = symtune::binding::findCandidate(winner)->tolerance();
  symtune::test::checkScaledError("output", got.out, want.out, tolerance);
  symtune::test::checkScaledError("x gradient", got.gx, want.gx, tolerance);
  symtune::test::checkScaledError("w gradient", got.gw, want.gw, tolerance);
  symtune::test::checkScaledError("b gradient", got.gb, want.gb, tolerance);
  CHECK(forced->boundExecutions() >= 2);
  return got;
}

}  // namespace

TEST_CASE("a recurrent matmul and its bias add are one site, bound to one addmm") {
  symtune::SyMuGen gen(biasMatmuls(), "bias_matmuls");
  Binder measured(gen.staticGraph(), here());
  const MatmulRun plain = matmulStep(gen, nullptr, {6, 8});
  matmulStep(gen, &measured, {6, 8});
  std::vector<symtune::binding::OpSite> sites;
  for (const auto& site : measured.sites()) {
    if (site.pattern == std::string(symtune::binding::kBiasMatmul))
      sites.push_back(site);
  }
  REQUIRE(sites.size() == 3);
  for (const auto& site : sites) {
    REQUIRE(site.cell != nullptr);
    CHECK(site.cell->nodes.size() == 2);
    CHECK(site.cell->first()->kind() == c10::aten::matmul);
    CHECK(site.cell->last()->kind() == c10::aten::add);
    CHECK(site.cell->inputs[site.cell->weight]->debugName().rfind("w", 0) == 0);
  }
  // Forced to addmm: within its tolerance of the unbound run, on 2-d and 3-d inputs (rows
  // folded); the matrix "bias" runs as written.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{6, 8}, {2, 3, 8}}) {
    INFO(c10::IntArrayRef(shape));
    checkForced(gen, shape, "addmm");
  }
  // Bit-for-bit binding leaves them to ATen.
  BinderOptions exactOnly;
  exactOnly.exact = true;
  Binder exact(gen.staticGraph(), here(), exactOnly);
  const MatmulRun e = matmulStep(gen, &exact, {6, 8});
  CHECK(torch::equal(e.out, plain.out));
  for (const auto& site : exact.sites())
    CHECK(site.pattern != std::string(symtune::binding::kBiasMatmul));
}

namespace {

// A recurrent projection whose first trip's result reaches nothing (its backward never runs):
// the later trips' weight gradients must still arrive.
// A projection over 40 trips: the stash folds its gradients twice before the loop's end.
torch::jit::Module longLoop() {
  torch::jit::Module m("LongLoop");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor, b: Tensor, m: Tensor):
    h = x
    for i in range(40):
        h = torch.tanh(torch.matmul(h, w) + b) * 0.9
    return h
)");
  return m;
}

torch::jit::Module skippedFirstTrip() {
  torch::jit::Module m("SkippedFirstTrip");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor, b: Tensor, m: Tensor):
    h = x
    for i in range(4):
        p = torch.matmul(h, w) + b
        if i > 0:
            h = torch.tanh(p)
    return h
)");
  return m;
}

}  // namespace

TEST_CASE("addmm-batched sums a loop's weight and bias gradients in one GEMM, as autograd would") {
  for (const bool skipFirst : {false, true}) {
    symtune::SyMuGen gen(skipFirst ? skippedFirstTrip() : biasMatmuls(), "bias_matmuls");
    for (const auto& shape : std::vector<std::vector<int64_t>>{{6, 8}, {2, 3, 8}}) {
      INFO(c10::IntArrayRef(shape), skipFirst ? ", first trip's result unused" : "");
      Binder probe(gen.staticGraph(), here());
      matmulStep(gen, &probe, shape);
      // Measured over a loop's trips, it agreed with the ops as written.
      bool measured = false;
      for (const auto& b : probe.table().bindings) {
        for (const auto& c : b.candidates) {
          if (c.name == "addmm-batched") {
            CHECK(c.refused.empty());
            measured = true;
          }
        }
      }
      CHECK(measured);
      const MatmulRun got = checkForced(gen, shape, "addmm-batched");
      // One Gather per loop execution with a vector bias, one projection per trip.
      CHECK(nodesNamed(got.out, "Gather") == (skipFirst ? 1 : 2));
      CHECK(nodesNamed(got.out, "Projection") == (skipFirst ? 3 : 5));
    }
  }
  // Forty trips: two folds of sixteen and the rest in Gather's backward.
  {
    symtune::SyMuGen gen(longLoop(), "long_loop");
    const MatmulRun got = checkForced(gen, {6, 8}, "addmm-batched");
    CHECK(nodesNamed(got.out, "Gather") == 1);
    CHECK(nodesNamed(got.out, "Projection") == 40);
  }
  // A graph kept for a second backward stashes afresh: twice the gradients, as autograd gives.
  symtune::SyMuGen gen(biasMatmuls(), "bias_matmuls");
  Binder probe(gen.staticGraph(), here());
  matmulStep(gen, &probe, {6, 8});
  auto forced = symtune::test::forcedBinder(gen.staticGraph(), probe.table(), "addmm-batched",
                                            symtune::binding::kBiasMatmul);
  std::vector<torch::Tensor> grads;
  for (symtune::OpBinder* binder :
       {static_cast<symtune::OpBinder*>(nullptr), static_cast<symtune::OpBinder*>(forced.get())}) {
    torch::manual_seed(3);
    auto x = torch::randn({6, 8}).requires_grad_(true);
    auto w = (torch::randn({8, 8}) / std::sqrt(8.0)).requires_grad_(true);
    auto b = torch::randn({8}).requires_grad_(true);
    symtune::ForwardOptions options;
    options.binder = binder;
    const auto out = gen.forward({x, w, b, torch::randn({6, 8})}, options).output.toTensor();
    out.sum().backward({}, /*retain_graph=*/true);
    out.sum().backward();
    grads.push_back(w.grad());
    grads.push_back(b.grad());
  }
  symtune::test::checkScaledError("w gradient, twice", grads[2], grads[0], 1e-5);
  symtune::test::checkScaledError("b gradient, twice", grads[3], grads[1], 1e-5);
}
