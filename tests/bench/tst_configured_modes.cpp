// symtune-bench's modes named by their configuration and its configuration grid
// (bench/configured_modes.cpp).

#include "doctest_torch.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "harness.h"

using symtune::bench::configuredMode;

namespace {

// The threads knob's values: the powers of two up to the machine's hardware threads, and that
// number.
size_t threadValues() {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  size_t threads = 0;
  for (unsigned t = 1; t <= hardware; t *= 2)
    ++threads;
  return threads + ((hardware & (hardware - 1)) != 0);
}

// The grid's test run: the ci preset, one warm-up step, under 0.6 of the plain peak, on two
// threads.
symtune::bench::RunConfig gridConfig() {
  at::set_num_threads(2);
  symtune::bench::RunConfig config;
  config.preset = "ci";
  config.warmup = 1;
  config.grid = 0.6;
  return config;
}

}  // namespace

TEST_CASE("a configured mode's name says how its session runs") {
  const symtune::bench::Mode* mode = configuredMode("remat:0.5+micro:2+threads:1");
  REQUIRE(mode != nullptr);
  CHECK(mode == configuredMode("remat:0.5+micro:2+threads:1"));  // made once
  symtune::Session s;
  mode->configure(s);
  CHECK(s.remat.enabled);
  CHECK(s.remat.budgetFraction.value_or(0) == 0.5);
  CHECK(s.control.enabled);
  CHECK(s.control.microbatches == 2);
  CHECK_FALSE(s.control.splitOnOverrun);
  REQUIRE(mode->enter);
  at::set_num_threads(2);
  mode->enter();
  CHECK(at::get_num_threads() == 1);
  mode->leave();
  CHECK(at::get_num_threads() == 2);
  CHECK(mode->description ==
        "remat's planner: the cheapest units recomputed, per batch, to keep the step under 0.5 "
        "of its plain peak (predicted), enforced; 2 micro-batches, their gradients added up; 1 "
        "intra-op threads");

  symtune::Session mb;
  const symtune::bench::Mode* bytes = configuredMode("remat_mb:12.5+split");
  REQUIRE(bytes != nullptr);
  bytes->configure(mb);
  CHECK(mb.remat.budgetMb.value_or(0) == 12.5);
  CHECK(mb.control.enabled);
  CHECK(mb.control.splitOnOverrun);
  CHECK(configuredMode("micro:4") != nullptr);
  symtune::Session controlled;
  configuredMode("remat_mb:3+online+split")->configure(controlled);
  CHECK(controlled.control.mode == "online");
  CHECK(controlled.control.splitOnOverrun);
  CHECK(controlled.control.conservative == 0);  // the session's default
  symtune::Session free;
  const symtune::bench::Mode* freely = configuredMode("online+conservative:0");
  REQUIRE(freely != nullptr);
  freely->configure(free);
  CHECK(free.control.mode == "online");
  CHECK(free.control.conservative == 0);
  CHECK(freely->description ==
        "the online controller choosing each step's configuration; exploring freely");
  symtune::Session kept;
  configuredMode("online+conservative:0.97")->configure(kept);
  CHECK(kept.control.conservative == 0.97);
  CHECK(controlled.control.explore == "around_leader");  // the session's default
  symtune::Session outward;
  configuredMode("remat_mb:3+online+split+outward")->configure(outward);
  CHECK(outward.control.explore == "outward");
  CHECK(configuredMode("bind+remat:0.6") != nullptr);
  // A memory slack for the binder, with a budget or without.
  symtune::Session lean;
  configuredMode("bind+lean:0.25")->configure(lean);
  CHECK(lean.binding.enabled);
  CHECK(lean.binding.memorySlack == 0.25);
  CHECK_FALSE(lean.remat.enabled);
  CHECK(configuredMode("bind+lean:0.25+remat:0.5") != nullptr);
  // The binding_explore knob, with the binder.
  symtune::Session tableOnly;
  const symtune::bench::Mode* exploit = configuredMode("bind+lean:0.25+explore:0");
  REQUIRE(exploit != nullptr);
  exploit->configure(tableOnly);
  CHECK(tableOnly.control.enabled);
  CHECK(tableOnly.control.bindingExplore == false);
  CHECK(configuredMode("bind+remat_mb:10+explore:0") != nullptr);  // the mode's binder's
  // Bound, with micro-batches or a thread count alone.
  symtune::Session boundSplit;
  const symtune::bench::Mode* split = configuredMode("bind+micro:2+threads:2");
  REQUIRE(split != nullptr);
  split->configure(boundSplit);
  CHECK(boundSplit.binding.enabled);
  CHECK(boundSplit.binding.memorySlack == 0);
  CHECK(boundSplit.control.microbatches == 2);
  CHECK(configuredMode("bind+threads:1") != nullptr);

  for (const char* wrong :
       {"bind", "split", "remat:1.5", "remat:0.5+remat_mb:3", "micro:0", "micro:2.5", "threads:x",
        "remat:0.5+jit", "conservative:0.5", "online+conservative:1", "remat:0.5+outward",
        "outward:1", "lean:0.2", "bind+lean:1", "bind+lean", "remat:0.5+explore:0",
        "bind+remat:0.5+explore:2", ""}) {
    INFO(std::string(wrong));
    CHECK(configuredMode(wrong) == nullptr);
  }
}

TEST_CASE("the grid: every configuration of the model's space under the budget") {
  symtune::bench::RunConfig config = gridConfig();
  double budget = 0;
  const std::vector<std::string> grid =
      symtune::bench::gridModes("dynamic_tagger", config, &budget);
  CHECK(budget > 0);
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = threadValues();
  // micro-batches 1..16 (the ci tagger's 16 sentences), the threads, remat 0.3..0.6
  REQUIRE(grid.size() == 5 * threads * 4 + 1);
  CHECK(grid.back().find("+online+split") != std::string::npos);  // the controller's mode
  for (const auto& name : grid) {
    INFO(name);
    CHECK(configuredMode(name) != nullptr);
    CHECK(name.rfind("remat_mb:", 0) == 0);
  }
  CHECK(std::find(
            grid.begin(), grid.end(),
            "remat_mb:" +
                [&] {
                  char text[32];
                  std::snprintf(text, sizeof text, "%.3f", budget / 1e6);
                  return std::string(text);
                }() +
                "+threads:" + std::to_string(hardware)) !=
        grid.end());  // the session's own configuration, on a run of the machine's threads

  // auto_tune beside it: a quarter of the grid's evaluations, its choice one of the grid's modes.
  config.steps = 2;
  const auto tune =
      symtune::bench::tuneBesideGrid("dynamic_tagger", config, grid.size() - 1, budget);
  INFO(tune.dump());
  REQUIRE(tune.contains("mode"));
  CHECK(std::find(grid.begin(), grid.end(), tune["mode"].get<std::string>()) != grid.end());
  CHECK(tune["evaluations_allowed"].get<size_t>() == (grid.size() - 1) / 4);
  CHECK(tune["evaluations"].get<size_t>() <= (grid.size() - 1) / 4);
  CHECK(tune["steps"].get<int64_t>() <= tune["evaluations_allowed"].get<int64_t>() * 3);

  // A resnet's batch cannot be split (batch norm): its grid varies threads and the budget only.
  const auto resnet = symtune::bench::gridModes("dynamic_resnet", config, &budget);
  CHECK(resnet.size() == threads * 4 + 1);
  for (const auto& name : resnet)
    CHECK(name.find("micro") == std::string::npos);
}

TEST_CASE("a bound grid: its modes bound with the memory slack, binding_explore among its knobs") {
  symtune::bench::RunConfig config = gridConfig();
  config.gridBind = 0.1;
  double budget = 0;
  const std::vector<std::string> grid = symtune::bench::gridModes("early_exit", config, &budget);
  CHECK(budget > 0);
  const size_t threads = threadValues();
  // Batch norm keeps the batch whole: threads × remat 0.3..0.6 × binding_explore 0 and 1.
  REQUIRE(grid.size() == threads * 4 * 2 + 1);
  CHECK(std::set<std::string>(grid.begin(), grid.end()).size() == grid.size());  // no two alike
  size_t tableOnly = 0;
  for (const auto& name : grid) {
    INFO(name);
    CHECK(configuredMode(name) != nullptr);
    CHECK(name.rfind("bind+lean:0.1+remat_mb:", 0) == 0);
    tableOnly += name.find("+explore:0") != std::string::npos;
  }
  CHECK(tableOnly == threads * 4);
  CHECK(grid.back().find("+online+split") != std::string::npos);
}

// Note [One table for the run's bound modes] in harness.h.
TEST_CASE("a shared binding table: every bound mode binds by the one of its memory slack") {
  symtune::bench::RunConfig config;
  at::set_num_threads(2);
  config.preset = "ci";
  config.warmup = 1;
  config.steps = 2;
  config.modes = {"script", "bind", "bind+lean:0.1", "bind+lean:0.1+remat_mb:100+threads:1"};
  config.sharedTables = std::make_shared<symtune::bench::SharedTables>();
  const nlohmann::ordered_json run =
      symtune::bench::runModel("early_exit", config, symtune::bench::Probes{1, 1});

  // One table per memory slack, measured once by a trainer of the harness's own.
  const auto& tables = run["shared_tables"];
  REQUIRE(tables.size() == 2);
  std::set<double> slacks;
  for (const auto& t : tables) {
    slacks.insert(t["memory_slack"].get<double>());
    CHECK(t["steps"] == 3);
    CHECK(t["measurements"].get<int64_t>() > 0);
    CHECK(t["bindings"].get<size_t>() > 0);
  }
  CHECK(slacks == std::set<double>{0, 0.1});
  const std::string path = config.sharedTables->of("early_exit", 0.1, config).path;
  CHECK(std::filesystem::exists(path));
  CHECK(symtune::BindingTable::load(path).memorySlack == 0.1);

  // Its modes measure nothing: every bucket they meet is in it.
  for (const auto& m : run["modes"]) {
    const std::string name = m["mode"].get<std::string>();
    INFO(name);
    REQUIRE_FALSE(m.contains("infeasible"));
    if (name == "script") {
      CHECK_FALSE(m.contains("binding_table"));
      continue;
    }
    CHECK(m["binding_table"] == "the run's shared table");
    for (const auto& n : m["binding"]["measurements_per_step"])
      CHECK(n == 0);
  }

  // Its files go with it.
  config.sharedTables.reset();
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a configuration the model refuses stops its mode before its first step, not the run") {
  symtune::bench::RunConfig config;
  config.preset = "ci";
  config.warmup = 1;
  config.steps = 1;
  // Early exit normalises over the batch: two micro-batches would each have their own statistics.
  config.modes = {"script", "micro:2", "threads:1"};
  const nlohmann::ordered_json run =
      symtune::bench::runModel("early_exit", config, symtune::bench::Probes{1, 1});
  REQUIRE(run["modes"].size() == 3);
  const auto& refused = run["modes"][1];
  CHECK(refused["mode"] == "micro:2");
  CHECK(refused["steps_run"] == 0);
  CHECK(refused["refused"].get<std::string>().find("batch norm") != std::string::npos);
  CHECK_FALSE(refused.contains("samples_per_s"));
  for (const size_t ran : {0, 2})
    CHECK(run["modes"][ran]["samples_per_s"]["median"].get<double>() > 0);
  CHECK(symtune::bench::table({{"models", {run}}}).find("micro:2        refused: ") !=
        std::string::npos);

  config.baseline = "micro:2";  // the baseline's refusal is the run's
  CHECK_THROWS_AS(symtune::bench::runModel("early_exit", config, symtune::bench::Probes{1, 1}),
                  symtune::SetupError);
}
