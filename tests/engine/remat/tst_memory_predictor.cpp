// The memory predictor (Note [Memory predictor] in symtune/remat/memory_predictor.h): nothing
// before a step is seen; one step, or steps of one size, scale by the ratio; a line through
// steps of several sizes, fitted by least squares, predicts the sizes between and beyond; the
// window forgets the oldest steps; a falling fit gives way to the ratio; bad input is refused; a
// second term for the largest recomputed block once the steps tell it apart.
// And on a model: the templates' saved bytes of a forward grow with the batch, and the predictor
// fed a few steps of an MLP predicts the next batch size's measured peak.

#include "doctest_torch.h"

#include <cmath>

#include <torch/torch.h>

#include "symtune/graph/symugen.h"
#include "symtune/remat/memory_predictor.h"
#include "symtune/telemetry/memory_tracker.h"

namespace {

using symtune::remat::MemoryPredictor;

}  // namespace

TEST_CASE("the predictor scales by the ratio until it has a line, then follows the line") {
  MemoryPredictor p;
  CHECK_FALSE(p.predict(100).has_value());
  p.observe(100, 300);
  CHECK(*p.predict(200) == doctest::Approx(600));
  p.observe(100, 340);  // one size: the mean ratio
  CHECK(*p.predict(50) == doctest::Approx(160));
  p.observe(300, 720);  // peak = 100 + 2·saved through (100, 300) and (300, 700) — roughly
  p.observe(200, 500);
  const double at400 = *p.predict(400);
  const double at150 = *p.predict(150);
  CHECK(at400 > 850);
  CHECK(at400 < 950);
  CHECK(at150 > 380);
  CHECK(at150 < 420);
  CHECK(p.observations() == 4);
}

TEST_CASE("the window keeps the last steps; a falling fit gives way to the ratio") {
  MemoryPredictor p(2);
  p.observe(100, 1000);
  p.observe(100, 200);
  p.observe(200, 400);  // the first step is forgotten: the line through (100, 200), (200, 400)
  CHECK(p.observations() == 2);
  CHECK(*p.predict(300) == doctest::Approx(600));

  MemoryPredictor falling;
  falling.observe(100, 400);
  falling.observe(200, 300);  // more saved, less held: noise, not a law
  CHECK(*falling.predict(150) == doctest::Approx(350.0 / 150.0 * 150.0));

  CHECK_THROWS(MemoryPredictor(0));
  CHECK_THROWS(p.observe(-1, 10));
  CHECK_THROWS(p.observe(10, -1));
}

TEST_CASE("a line that would cross below zero goes through the origin") {
  MemoryPredictor p;
  p.observe(100, 50);
  p.observe(200, 250);  // the line through them: peak = 2·saved - 150, negative below 75
  const auto fit = *p.fit();
  CHECK(fit.intercept == 0);
  // Least squares through the origin: (100·50 + 200·250) / (100² + 200²).
  CHECK(fit.slope == doctest::Approx(55000.0 / 50000.0));
  CHECK(*p.predict(20) > 0);

  MemoryPredictor two;  // the same with a recomputed block's term
  two.observe(100, 50);
  two.observe(200, 250);
  two.observe(150, 200, 50);
  CHECK(two.fit()->intercept >= 0);
  CHECK(*two.predict(10, 10) > 0);
}

TEST_CASE("a recomputed block's term is fitted once the steps tell it apart, never negative") {
  MemoryPredictor p;
  p.observe(1000, 600);                  // plain: peak = 100 + 0.5·kept
  p.observe(100, 250, 800);              // everything recomputed: + 0.125·recomputed
  CHECK(p.fit()->recomputedSlope == 0);  // two steps: the kept bytes' line alone
  p.observe(500, 400, 400);
  p.observe(300, 275, 200);
  const auto fit = *p.fit();
  CHECK(fit.intercept == doctest::Approx(100));
  CHECK(fit.slope == doctest::Approx(0.5));
  CHECK(fit.recomputedSlope == doctest::Approx(0.125));
  CHECK(*p.predict(200, 600) == doctest::Approx(100 + 100 + 75));

  MemoryPredictor negative;  // a recomputed block that would lower the peak: noise, line alone
  negative.observe(1000, 600);
  negative.observe(100, 100, 800);  // exactly: 600 - 0.625 · recomputed
  negative.observe(500, 350, 400);
  CHECK(negative.fit()->recomputedSlope == 0);
  CHECK_THROWS(negative.observe(10, 10, -1));
}

TEST_CASE("on a model, the saved bytes follow the batch and the predictor the measured peak") {
  REQUIRE(symtune::CpuAllocationCounter::active());
  torch::manual_seed(3);
  torch::jit::Module m("Mlp");
  m.register_parameter("w1", (torch::randn({64, 256}) / 8).requires_grad_(), false);
  m.register_parameter("w2", (torch::randn({256, 256}) / 16).requires_grad_(), false);
  m.register_parameter("w3", (torch::randn({256, 10}) / 16).requires_grad_(), false);
  m.define(R"(
def forward(self, x: Tensor):
    h = torch.relu(torch.matmul(x, self.w1))
    h = torch.tanh(torch.matmul(h, self.w2))
    return torch.matmul(h, self.w3).sum()
)");
  symtune::SyMuGen gen(m, "mlp");
  const auto saved = [&](int64_t rows) {
    torch::NoGradGuard noGrad;
    symtune::ForwardOptions options;
    options.countCost = true;
    return gen.forward({torch::randn({rows, 64})}, options).cost.savedBytes;
  };
  // The activations' part grows with the rows (the weights' does not): linear in them.
  CHECK(saved(64) > 0);
  CHECK(saved(512) - saved(256) == doctest::Approx(2 * (saved(256) - saved(128))));

  const auto peak = [&](int64_t rows) {
    const auto x = torch::randn({rows, 64});
    for (const auto& p : m.parameters())
      p.mutable_grad() = torch::Tensor();
    symtune::CpuAllocationCounter::resetPeak();
    const int64_t start = symtune::CpuAllocationCounter::counters().current;
    gen.forward({x}).output.toTensor().backward();
    return static_cast<double>(symtune::CpuAllocationCounter::counters().peak - start);
  };
  MemoryPredictor p;
  for (const int64_t rows : {128, 512, 256, 1024})
    p.observe(saved(rows), peak(rows));
  const double measured = peak(768);
  const double predicted = *p.predict(saved(768));
  INFO("768 rows: measured ", measured, ", predicted ", predicted);
  CHECK(std::abs(predicted - measured) / measured < 0.10);
}
