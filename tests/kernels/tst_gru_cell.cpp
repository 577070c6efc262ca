// symtune::gru_cell against the ATen composition a GRU written out runs (sigmoid, tanh, the
// (1 - z) n + z h blend, the length mask's where) computed in float64: the output and the
// gradients of both projections and the state through autograd — with and without a mask, H
// a multiple of the vector width and not, gates read as strided rows (a time step of [B, T, 3H]),
// in float and double, on the CPU and (where there is one) the GPU; finite differences in float64;
// bad arguments refused with one line.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <string>
#include <tuple>
#include <vector>

#include "cuda_rows.h"
#include "error_of.h"
#include "symtune/kernels/gru_cell.h"
#include "tensor_compare.h"

namespace {

struct Case {
  const char* name;
  int64_t rows, hidden;
  bool masked, strided;
};

struct Result {
  torch::Tensor out, gIn, gHidden, gState;
};

torch::Tensor composition(const torch::Tensor& in, const torch::Tensor& hid,
                          const torch::Tensor& state, const torch::Tensor& keep) {
  const int64_t H = state.size(1);
  const auto r = torch::sigmoid(in.slice(1, 0, H) + hid.slice(1, 0, H));
  const auto z = torch::sigmoid(in.slice(1, H, 2 * H) + hid.slice(1, H, 2 * H));
  const auto n = torch::tanh(in.slice(1, 2 * H) + r * hid.slice(1, 2 * H));
  const auto step = (1 - z) * n + z * state;
  return keep.defined() ? torch::where(keep, step, state) : step;
}

Result run(const Case& c, torch::Dtype dtype, bool fused, bool cuda = false) {
  torch::manual_seed(31);
  const int64_t B = c.rows, H = c.hidden, T = 3;
  // A time step of a [B, T, 3H] projection: rows 3 T H apart.
  auto inAll = torch::randn({B, T, 3 * H}, torch::kDouble) * 2;
  auto hid0 = torch::randn({B, 3 * H}, torch::kDouble) * 2;
  auto state0 = torch::randn({B, H}, torch::kDouble);
  const auto keep = c.masked ? (torch::arange(B) % 3 != 1).unsqueeze(1) : torch::Tensor();
  const auto grad = torch::randn({B, H}, torch::kDouble);
  // The reference in float64 on the CPU; the fused op in `dtype`, on the GPU for `cuda`.
  const auto opts = torch::TensorOptions()
                        .dtype(fused ? dtype : torch::kDouble)
                        .device(cuda ? torch::kCUDA : torch::kCPU);
  auto inLeaf =
      (c.strided ? inAll : inAll.select(1, 1).contiguous()).to(opts).detach().requires_grad_(true);
  const auto in = c.strided ? inLeaf.select(1, 1) : inLeaf;
  auto hid = hid0.to(opts).detach().requires_grad_(true);
  auto state = state0.to(opts).detach().requires_grad_(true);
  const auto mask = keep.defined() ? keep.to(opts.device()) : keep;
  Result r;
  r.out =
      fused ? symtune::kernels::gruCell(in, hid, state, mask) : composition(in, hid, state, mask);
  r.out.backward(grad.to(opts));
  r.out = r.out.cpu();
  r.gIn = (c.strided ? inLeaf.grad().select(1, 1) : inLeaf.grad()).cpu();
  r.gHidden = hid.grad().cpu();
  r.gState = state.grad().cpu();
  return r;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"32x256 masked, strided rows", 32, 256, true, true},
      {"32x256", 32, 256, false, false},
      {"5x7 masked (a partial vector only)", 5, 7, true, false},
      {"9x37 strided rows (vectors and a tail)", 9, 37, false, true},
      {"1x1", 1, 1, false, false},
  };
  return all;
}

void matchesTheComposition(bool cuda) {
  for (const auto& c : cases()) {
    for (const auto& [dtypeName, dtype, within] :
         std::vector<std::tuple<std::string, torch::Dtype, double>>{
             {"float32", torch::kFloat, 2e-6}, {"float64", torch::kDouble, 1e-12}}) {
      INFO((cuda ? "cuda " : "cpu "), c.name, " ", dtypeName);
      const Result want = run(c, dtype, false);
      const Result got = run(c, dtype, true, cuda);
      CHECK((got.out.scalar_type() == dtype));
      symtune::test::checkScaledError("output", got.out, want.out, within);
      symtune::test::checkScaledError("input gates' gradient", got.gIn, want.gIn, within);
      symtune::test::checkScaledError("hidden gates' gradient", got.gHidden, want.gHidden, within);
      symtune::test::checkScaledError("state gradient", got.gState, want.gState, within);
    }
  }
}

}  // namespace

TEST_CASE("gru_cell matches the GRU's gates written out, forward and backward") {
  matchesTheComposition(false);
}

TEST_CASE("gru_cell on CUDA matches the GRU's gates written out, forward and backward") {
  if (!symtune::test::cudaRowsRun())
    return;
  matchesTheComposition(true);
}

TEST_CASE("gru_cell: rows the mask drops pass the state on, and finite differences in float64") {
  torch::manual_seed(7);
  const int64_t B = 4, H = 3;
  const auto in = torch::randn({B, 3 * H}, torch::kDouble).requires_grad_(true);
  const auto hid = torch::randn({B, 3 * H}, torch::kDouble).requires_grad_(true);
  const auto state = torch::randn({B, H}, torch::kDouble).requires_grad_(true);
  const auto keep = torch::tensor({true, false, true, false});
  const auto out = symtune::kernels::gruCell(in, hid, state, keep);
  CHECK(torch::equal(out.index({1}), state.index({1})));
  CHECK(torch::equal(out.index({3}), state.index({3})));
  const auto k = torch::randn({B, H}, torch::kDouble);
  const auto loss = [&](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& s) {
    return (symtune::kernels::gruCell(a, b, s, keep) * k).sum();
  };
  const auto analytic = torch::autograd::grad({loss(in, hid, state)}, {in, hid, state});
  CHECK(torch::equal(analytic[0].index({1}), torch::zeros({3 * H}, torch::kDouble)));
  CHECK(torch::equal(analytic[2].index({1}), k.index({1})));
  const std::vector<torch::Tensor> values = {in, hid, state};
  const char* names[] = {"input gates", "hidden gates", "state"};
  for (size_t which = 0; which < values.size(); ++which) {
    auto numeric = torch::zeros_like(values[which]);
    const double h = 1e-6;
    for (int64_t i = 0; i < values[which].numel(); ++i) {
      std::vector<torch::Tensor> plus, minus;
      for (const auto& v : values) {
        plus.push_back(v.detach().clone());
        minus.push_back(v.detach().clone());
      }
      plus[which].view(-1)[i] += h;
      minus[which].view(-1)[i] -= h;
      numeric.view(-1)[i] =
          (loss(plus[0], plus[1], plus[2]) - loss(minus[0], minus[1], minus[2])).item<double>() /
          (2 * h);
    }
    INFO(names[which]);
    symtune::test::checkScaledError("finite differences", analytic[which], numeric, 1e-6);
  }
}

TEST_CASE("gru_cell refuses what it does not compute, in one line") {
  const auto gates = torch::randn({4, 6});
  const auto state = torch::randn({4, 2});
  using symtune::test::errorOf;
  CHECK(errorOf([&] {
          symtune::kernels::gruCell(gates, gates, torch::randn({4, 3}));
        }).find("the gates must be [4, 9] for a state of [4, 3], got [4, 6]") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::gruCell(gates, gates, torch::randn({8}));
        }).find("the hidden state must be [B, H]") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::gruCell(gates.to(torch::kInt), gates.to(torch::kInt),
                                    state.to(torch::kInt));
        }).find("float or double") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::gruCell(gates, gates, state, torch::ones({4}));
        }).find("keep must be a bool [4] or [4, 1]") != std::string::npos);
  CHECK(errorOf([&] {
          symtune::kernels::gruCell(gates.to(torch::kDouble), gates, state);
        }).find("the gates must be Float on cpu") != std::string::npos);
}

// Until 2026-12-07 the mask was kept by reference for the backward: a caller that reuses one mask
// buffer across time steps (`keep.copy_(lengths > t)`) rewrote what the earlier steps' backwards
// read, and their gradients came out silently wrong. The backward reads the mask as it was.
TEST_CASE(
    "gru_cell: a mask rewritten in place after the forward leaves its gradients as they were") {
  torch::manual_seed(41);
  const int64_t B = 4, H = 5;
  const auto in0 = torch::randn({B, 3 * H}, torch::kDouble);
  const auto hid0 = torch::randn({B, 3 * H}, torch::kDouble);
  const auto state0 = torch::randn({B, H}, torch::kDouble);
  const auto upstream = torch::randn({B, H}, torch::kDouble);
  auto gradients = [&](bool rewrite) {
    auto in = in0.clone().requires_grad_(true), hid = hid0.clone().requires_grad_(true);
    auto state = state0.clone().requires_grad_(true);
    auto keep = torch::tensor({true, false, true, false});
    const auto out = symtune::kernels::gruCell(in, hid, state, keep);
    if (rewrite)
      keep.fill_(true);  // the next step's mask, in the same buffer
    out.backward(upstream);
    return std::vector<torch::Tensor>{in.grad(), hid.grad(), state.grad()};
  };
  const auto kept = gradients(false), rewritten = gradients(true);
  const char* names[] = {"input gates", "hidden gates", "state"};
  for (size_t i = 0; i < kept.size(); ++i) {
    INFO(names[i]);
    CHECK(torch::equal(rewritten[i], kept[i]));
  }
  // The dropped rows pass the upstream gradient to the state, untouched.
  CHECK(torch::equal(kept[2].index({1}), upstream.index({1})));
}
