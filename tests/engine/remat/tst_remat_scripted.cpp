// Steps under a memory budget on models made with Python's torch.jit.script, as users make them
// (tests/fixtures/make_scripted_models.py): a batch norm keeping a cumulative average is counted
// once a step however often its block is recomputed, and a budget that only the plan recomputing
// every lighter run fits is met, not refused.

#include "doctest_torch.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "symtune/runtime/trainer.h"

namespace {

const std::filesystem::path kFixtures = SYMTUNE_FIXTURES_DIR;

// A session of the fixture `name`: [8, 3, 16, 16] images, 4 classes, unbound, two threads.
symtune::Session scripted(const std::string& name) {
  at::set_num_threads(2);
  symtune::Session s;
  s.name = name;
  s.model.file = kFixtures / (name + ".pt");
  s.model.inputs = {{{8, 3, 16, 16}, symtune::DType::Float32}};
  s.model.classes = 4;
  s.data.seed = 3;
  s.binding.enabled = false;
  return s;
}

std::map<std::string, torch::Tensor> buffersOf(symtune::Trainer& trainer) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& b : trainer.executor().scriptModule()->named_buffers())
    out.emplace(b.name, b.value.clone());
  return out;
}

// The peak of the second step of `s` (the first may settle what later steps reuse).
double secondPeak(const symtune::Session& s) {
  symtune::Trainer trainer(s);
  trainer.step();
  const symtune::StepResult r = trainer.step();
  REQUIRE(r.remat.has_value());
  return r.remat->peakBytes;
}

}  // namespace

// Note [Module state written once] (engine/src/graph/evaluator_recompute.cpp): the block's forward
// counts num_batches_tracked up in place; run again in backward it counted twice a step (6 after 3
// steps) and the running statistics' factor 1 / num_batches_tracked went wrong with it.
TEST_CASE("a cumulative batch norm's state after recomputed steps is the plain run's") {
  constexpr int kSteps = 3;
  symtune::Session plain = scripted("cumulative_norm_model");
  symtune::Trainer a(plain);
  for (int i = 0; i < kSteps; ++i)
    a.step();
  symtune::Session checkpointed = plain;
  checkpointed.remat.enabled = true;
  checkpointed.remat.strategy = "checkpoint";
  symtune::Trainer b(checkpointed);
  for (int i = 0; i < kSteps; ++i) {
    const symtune::StepResult r = b.step();
    REQUIRE(r.remat.has_value());
    CHECK(r.remat->plan.segments.recompute.size() >= 2);  // both blocks
  }
  const auto expected = buffersOf(a), got = buffersOf(b);
  REQUIRE(expected.size() == got.size());
  int counters = 0;
  for (const auto& [name, value] : expected) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    if (name.find("num_batches_tracked") != std::string::npos) {
      ++counters;
      CHECK(got.at(name).item<int64_t>() == kSteps);
    }
    CHECK(torch::allclose(got.at(name).to(torch::kDouble), value.to(torch::kDouble), 1e-6, 1e-7));
  }
  CHECK(counters == 2);
}

// The plans a step that runs out tries in turn are those that may hold least. Every lighter run
// was not among them: on two convolution blocks it holds less than the blocks recomputed, and a
// budget between the two was refused, naming the blocks' peak as the smallest that fits.
TEST_CASE("a budget only the lighter runs fit is met, not refused") {
  symtune::Session s = scripted("conv_blocks_model");
  s.remat.enabled = true;
  s.remat.strategy = "selective";
  const double lighter = secondPeak(s);
  s.remat.strategy = "checkpoint";
  const double blocks = secondPeak(s);
  INFO("every lighter run recomputed: ", lighter, " B; every block: ", blocks, " B");
  REQUIRE(lighter < 0.95 * blocks);  // what this case is about

  s.remat.strategy = "plan";
  s.remat.budgetMb = (lighter + 0.5 * (blocks - lighter)) / 1e6;
  symtune::Trainer trainer(s);
  for (int i = 0; i < 5; ++i) {
    INFO("step ", i);
    const symtune::StepResult r = trainer.step();  // threw RematInfeasible on the first
    REQUIRE(r.remat.has_value());
    REQUIRE(r.remat->plan.limitBytes.has_value());
    CHECK(r.remat->peakBytes <= static_cast<double>(*r.remat->plan.limitBytes));
  }
}
