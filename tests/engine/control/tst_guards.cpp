// Guards and OptimizeRequired (Note [Guards] in symtune/control/guards.h), and the configuration
// space's grid (symtune/control/config_space.h).

#include "doctest_torch.h"

#include <string>
#include <vector>

#include <torch/torch.h>

#include "symtune/binding/shape_bucket.h"
#include "symtune/control/config_space.h"
#include "symtune/control/guards.h"
#include "symtune/runtime/meta_optimizer.h"

using symtune::RegionId;
using symtune::control::BatchFacts;
using symtune::control::Guards;

namespace {

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines) {
    if (line.find(text) != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a guard breaks once for what is new, and never for what was met") {
  Guards guards;
  CHECK(guards.admit({{"float32 [8,16]"}, "", "cpu"}).empty());  // the first batch assumes
  CHECK(guards.admit({{"float32 [8,16]"}, "", "cpu"}).empty());
  const auto bucket = guards.admit({{"float32 [8,<=64]"}, "", "cpu"});
  REQUIRE(bucket.size() == 1);
  CHECK(bucket[0] == "a new shape bucket: float32 [8,<=64] (1 met before)");
  CHECK(guards.admit({{"float32 [8,<=64]"}, "", "cpu"}).empty());
  CHECK(guards.admit({{"float32 [8,16]"}, "", "cpu"}).empty());  // met before: still assumed
  CHECK(guards.shapeBuckets().size() == 2);

  const auto budget = guards.admit({{"float32 [8,16]"}, "budget_mb 12", "cpu"});
  REQUIRE(budget.size() == 1);
  CHECK(budget[0] == "the memory budget changed from none to budget_mb 12");
  const auto both = guards.admit({{"float32 [4,16]"}, "budget_mb 12", "cuda:0"});
  CHECK(both.size() == 2);
  CHECK(mentions(both, "the device changed from cpu to cuda:0"));
  // A batch run as micro-batches: each micro-batch's bucket is met in its own right.
  const auto micro = guards.admit(
      {{"float32 [4,16]", "float32 [2,16]", "float32 [2,16]"}, "budget_mb 12", "cuda:0"});
  REQUIRE(micro.size() == 1);
  CHECK(micro[0] == "a new shape bucket: float32 [2,16] (3 met before)");

  CHECK(guards.admitBranches({RegionId(3)}).empty());  // the first pattern assumes
  CHECK(guards.admitBranches({RegionId(3)}).empty());
  const auto pattern = guards.admitBranches({RegionId(3), RegionId(7)}, [](RegionId id) {
    return "branch " + std::to_string(id.value());
  });
  REQUIRE(pattern.size() == 1);
  CHECK(pattern[0] == "a new branch pattern: branch 3, branch 7 ran (1 patterns met before)");
  CHECK(guards.admitBranches({RegionId(3), RegionId(7)}).empty());
  CHECK(guards.branchPatterns() == 2);
}

TEST_CASE("MetaOptimizer: a batch whose shapes jump mid-run raises OptimizeRequired once") {
  torch::manual_seed(0);
  torch::nn::Linear layer(4, 2);
  symtune::MetaOptimizer opt(
      std::make_unique<torch::optim::SGD>(layer->parameters(), torch::optim::SGDOptions(0.1)));
  int replans = 0;
  opt.setReplanner([&](const symtune::control::OptimizeRequired& r) {
    ++replans;
    CHECK(r.step == 5);
  });
  std::vector<int64_t> required;
  for (int64_t step = 0; step < 12; ++step) {
    const int64_t rows = step < 5 ? 8 : 40;  // from step 5 on, batches five times as long
    const torch::Tensor x = torch::randn({rows, 4});
    const std::vector<c10::IValue> inputs{x};
    const auto stats = opt.step(
        [&] {
          auto loss = layer->forward(x).pow(2).mean();
          loss.backward();
          return loss;
        },
        BatchFacts{{symtune::binding::inputsBucketKey(inputs)}, "", "cpu"});
    if (stats.optimizeRequired)
      required.push_back(stats.optimizeRequired->step);
  }
  CHECK(required == std::vector<int64_t>{5});
  CHECK(replans == 1);
  REQUIRE(opt.optimizeRequired().size() == 1);
  CHECK(opt.optimizeRequired()[0].reasons[0].find("a new shape bucket") == 0);
}

TEST_CASE("MetaOptimizer: raised, OptimizeRequired runs nothing, and the next call runs") {
  torch::manual_seed(0);
  torch::nn::Linear layer(4, 2);
  symtune::MetaOptimizerOptions options;
  options.raiseOptimizeRequired = true;
  symtune::MetaOptimizer opt(
      std::make_unique<torch::optim::SGD>(layer->parameters(), torch::optim::SGDOptions(0.1)),
      options);
  int closures = 0;
  const auto stepOn = [&](int64_t rows) {
    const torch::Tensor x = torch::ones({rows, 4});
    return opt.step(
        [&] {
          ++closures;
          auto loss = layer->forward(x).sum();
          loss.backward();
          return loss;
        },
        BatchFacts{{symtune::binding::inputsBucketKey({x})}, "", "cpu"});
  };
  stepOn(8);
  const torch::Tensor before = layer->weight.detach().clone();
  try {
    stepOn(100);
    FAIL("a new shape bucket did not raise");
  } catch (const symtune::control::OptimizeRequiredError& e) {
    CHECK(e.required().step == 1);
    CHECK(std::string(e.what()).find("OptimizeRequired at step 1: a new shape bucket") == 0);
  }
  CHECK(closures == 1);
  CHECK(opt.stepCount() == 1);
  CHECK(torch::equal(layer->weight.detach(), before));
  const auto stats = stepOn(100);  // the guards hold now
  CHECK_FALSE(stats.optimizeRequired.has_value());
  CHECK(closures == 2);
  CHECK(opt.stepCount() == 2);
}

TEST_CASE("MetaOptimizer: what a failed step broke is on record, not carried to the next") {
  torch::manual_seed(0);
  torch::nn::Linear layer(4, 2);
  symtune::MetaOptimizer opt(
      std::make_unique<torch::optim::SGD>(layer->parameters(), torch::optim::SGDOptions(0.1)));
  bool failGate = false;
  opt.setUpdateGate([&](const torch::Tensor&) {
    TORCH_CHECK(!failGate, "the gate failed");
    return true;
  });
  const auto stepOn = [&](int64_t rows) {
    const torch::Tensor x = torch::ones({rows, 4});
    return opt.step(
        [&] {
          auto loss = layer->forward(x).sum();
          loss.backward();
          return loss;
        },
        BatchFacts{{symtune::binding::inputsBucketKey({x})}, "", "cpu"});
  };
  stepOn(8);
  failGate = true;
  CHECK_THROWS_AS(stepOn(100), c10::Error);
  REQUIRE(opt.optimizeRequired().size() == 1);
  CHECK(opt.optimizeRequired()[0].step == 1);
  failGate = false;
  const auto stats = stepOn(100);  // the bucket was met: nothing new, nothing carried over
  CHECK_FALSE(stats.optimizeRequired.has_value());
  CHECK(opt.optimizeRequired().size() == 1);
}

TEST_CASE("the configuration space: its grid, its current point, and what lies outside it") {
  using symtune::control::ConfigSpace;
  using symtune::control::Configuration;
  using symtune::control::Knob;
  const ConfigSpace space({Knob{"microbatches", {1, 2, 4}, 1, ""},
                           Knob{"threads", {1, 2}, 2, "at most 2"},
                           Knob{"remat_budget", {0.3, 0.4, 0.5}, 0.5, "at most 0.5"}});
  const std::vector<Configuration> grid = space.grid();
  REQUIRE(grid.size() == 18);
  CHECK(grid.front().text() == "microbatches 1, threads 1, remat_budget 0.3");
  CHECK(grid[1].text() == "microbatches 1, threads 1, remat_budget 0.4");
  CHECK(grid.back().text() == "microbatches 4, threads 2, remat_budget 0.5");
  for (size_t i = 0; i < grid.size(); ++i) {
    CHECK_FALSE(space.outside(grid[i]).has_value());
    for (size_t j = i + 1; j < grid.size(); ++j)
      CHECK(grid[i] != grid[j]);
  }
  CHECK(space.current().text() == "microbatches 1, threads 2, remat_budget 0.5");

  Configuration c;
  c.microbatches = 3;
  CHECK(space.outside(c).value_or("") == "microbatches 3 is not one of 1, 2, 4");
  c.microbatches = 1;
  c.rematBudget = 0.6;
  CHECK(space.outside(c).value_or("") ==
        "remat_budget 0.6 is not one of 0.3, 0.4, 0.5 (at most 0.5)");
  c.rematBudget.reset();
  CHECK_FALSE(space.outside(c).has_value());  // the session's budget, the run's threads

  const ConfigSpace noRemat({Knob{"microbatches", {1}, 1, "batch norm"}});
  c.rematBudget = 0.5;
  CHECK(noRemat.outside(c).value_or("") == "remat_budget 0.5: this run has no such knob");
  CHECK(noRemat.grid().size() == 1);

  // binding_explore: 0 or 1, named in the text only when set.
  const ConfigSpace bound(
      {Knob{"microbatches", {1}, 1, ""}, Knob{"binding_explore", {0, 1}, 1, ""}});
  REQUIRE(bound.grid().size() == 2);
  CHECK(bound.grid().front().text() ==
        "microbatches 1, threads as begun, remat_budget as the session, binding_explore 0");
  CHECK(bound.grid().back().bindingExplore == std::optional<bool>(true));
  Configuration e;
  CHECK(symtune::control::valueOf(e, *bound.knob("binding_explore")) == 1);  // as the run has it
  symtune::control::setValue(e, "binding_explore", 0);
  CHECK(e.bindingExplore == std::optional<bool>(false));
  CHECK(symtune::control::valueOf(e, *bound.knob("binding_explore")) == 0);
  CHECK_FALSE(bound.outside(e).has_value());
  CHECK(noRemat.outside(e).value_or("") == "binding_explore 0: this run has no such knob");
}
