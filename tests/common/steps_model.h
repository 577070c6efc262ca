#pragma once
// The binder tests' small model and what they do with it: a loop over time steps whose slices and
// selects are op sites (steps()), one forward and backward of it through a binder
// (forwardBackward), the same outputs and gradients bit for bit (checkSame), and this machine's
// fingerprint (here()). Shared by engine.binding.binder and engine.binding.cost_model.

#include <cstdint>

#include <torch/script.h>
#include "doctest_torch.h"

#include "symtune/binding/binder.h"
#include "symtune/graph/symugen.h"

namespace symtune::test {

// A loop over time steps reading x[:, t] (an identity slice, then a select by the loop's counter
// on a loop-invariant tensor), a full-range slice of that, and w[t].
inline torch::jit::Module steps() {
  torch::jit::Module m("Steps");
  m.define(R"(
def forward(self, x: Tensor, w: Tensor):
    outs: List[Tensor] = []
    for t in range(x.size(1)):
        xt = x[:, t]
        outs.append(torch.tanh(xt[:, 0:4] * w[t]))
    return torch.stack(outs, 1)
)");
  return m;
}

struct Run {
  torch::Tensor out, gx, gw;
};

// One forward and backward of `gen` on x [batch, time, 8], w [time, 4] (seeded), with `binder`
// (none: every op as the IR says).
inline Run forwardBackward(SyMuGen& gen, OpBinder* binder, int64_t batch, int64_t time,
                           int64_t width = 8, int64_t wWidth = 4) {
  torch::manual_seed(time * 31 + batch);
  auto x = torch::randn({batch, time, width}).requires_grad_(true);
  auto w = torch::randn({time, wWidth}).requires_grad_(true);
  ForwardOptions options;
  options.binder = binder;
  Run r;
  r.out = gen.forward({x, w}, options).output.toTensor();
  r.out.backward(torch::ones_like(r.out) * torch::linspace(-1, 1, r.out.numel()).view_as(r.out));
  r.gx = x.grad();
  r.gw = w.grad();
  return r;
}

inline void checkSame(const Run& got, const Run& want) {
  CHECK(torch::equal(got.out, want.out));
  CHECK(torch::equal(got.gx, want.gx));
  CHECK(torch::equal(got.gw, want.gw));
}

// This machine, as a binding table names it.
inline MachineFingerprint here() {
  return binding::currentMachine(torch::kCPU);
}

}  // namespace symtune::test
