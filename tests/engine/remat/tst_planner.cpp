// The remat planner (Note [Remat planner] in symtune/remat/planner.h): nothing when the step fits;
// the cheapest cover of what the peak exceeds the budget by; a block or its loops, never both, and
// down the tree to a loop's runs of ops;
// when no plan fits, the most it can free and the smallest budget any plan meets; against a brute
// force over small random models, a plan that always frees enough at no more than the cheapest
// cover of a need one rounding step larger.

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "symtune/exec/segment_executor.h"
#include "symtune/remat/planner.h"
#include "symtune/runtime/trainer.h"

namespace {

using symtune::remat::planUnderBudget;
using symtune::remat::RematPlan;
using symtune::remat::RematUnit;

bool has(const RematPlan& p, const std::string& name) {
  return p.segments.recompute.count(name) != 0;
}

// Whether `ancestor` is `u`'s parent, or its parent's, and so on.
bool liesIn(const std::vector<RematUnit>& units, const RematUnit& u, const std::string& ancestor) {
  for (std::string p = u.parent; !p.empty();) {
    if (p == ancestor)
      return true;
    const auto up =
        std::find_if(units.begin(), units.end(), [&](const RematUnit& x) { return x.name == p; });
    p = up != units.end() ? up->parent : "";
  }
  return false;
}

// No unit of the plan lies in another of it.
bool validSet(const std::vector<RematUnit>& units, const RematPlan& p) {
  for (const auto& u : units) {
    for (const auto& other : units) {
      if (has(p, u.name) && has(p, other.name) && liesIn(units, u, other.name))
        return false;
    }
  }
  return true;
}

// The least cost of a valid set (no unit with one it lies in) freeing at least `need`; infinity
// when none does.
double cheapestCover(const std::vector<RematUnit>& units, double need) {
  double best = INFINITY;
  const size_t n = units.size();
  for (size_t mask = 0; mask < (size_t{1} << n); ++mask) {
    double freed = 0, cost = 0;
    bool valid = true;
    for (size_t i = 0; i < n && valid; ++i) {
      if (!(mask & (size_t{1} << i)))
        continue;
      for (size_t k = 0; k < n; ++k) {
        if ((mask & (size_t{1} << k)) && liesIn(units, units[i], units[k].name))
          valid = false;
      }
      freed += units[i].freedBytes;
      cost += units[i].cost;
    }
    if (valid && freed >= need)
      best = std::min(best, cost);
  }
  return best;
}

}  // namespace

TEST_CASE("a step that fits recomputes nothing; otherwise the cheapest cover") {
  const std::vector<RematUnit> units{
      {"a", "", 60, 10}, {"b", "", 50, 3}, {"c", "", 30, 2}, {"idle", "", 0, 0}};
  const RematPlan fits = planUnderBudget(units, 100, 120);
  CHECK(fits.feasible);
  CHECK(fits.segments.empty());
  CHECK(fits.predictedPeak == 100);
  CHECK(fits.smallestFeasibleBudget == doctest::Approx(0));  // 140 could be freed

  const RematPlan p = planUnderBudget(units, 100, 25);  // 75 to free
  CHECK(p.feasible);
  CHECK(p.segments.recompute == std::set<std::string>{"b", "c"});  // 80 for 5, not a + c for 12
  CHECK(p.freedBytes == 80);
  CHECK(p.cost == 5);
  CHECK(p.predictedPeak == 20);
}

TEST_CASE("a block or its loops, never both; the loops when they are cheaper") {
  const std::vector<RematUnit> units{{"rnn", "", 100, 50},
                                     {"rnn loop #8", "rnn", 60, 5},
                                     {"rnn loop #9", "rnn", 50, 5},
                                     {"head", "", 20, 1}};
  const RematPlan loops = planUnderBudget(units, 200, 95);  // 105 to free
  CHECK(loops.segments.recompute == std::set<std::string>{"rnn loop #8", "rnn loop #9"});
  const RematPlan more = planUnderBudget(units, 200, 85);  // 115: the loops and the head
  CHECK(more.segments.recompute == std::set<std::string>{"rnn loop #8", "rnn loop #9", "head"});
  CHECK(more.cost == 11);
  const std::vector<RematUnit> dear{{"rnn", "", 100, 4}, {"rnn loop #8", "rnn", 90, 5}};
  const RematPlan block = planUnderBudget(dear, 200, 110);  // 90: the block is cheaper
  CHECK(block.segments.recompute == std::set<std::string>{"rnn"});
}

TEST_CASE("no plan fits: the most it can free, and the smallest budget any plan meets") {
  const std::vector<RematUnit> units{{"rnn", "", 100, 50},
                                     {"rnn loop #8", "rnn", 60, 5},
                                     {"rnn loop #9", "rnn", 50, 5},
                                     {"head", "", 20, 1}};
  const RematPlan p = planUnderBudget(units, 200, 50);
  CHECK_FALSE(p.feasible);
  CHECK(p.smallestFeasibleBudget == doctest::Approx(70));  // 200 - (110 + 20)
  CHECK(p.segments.recompute == std::set<std::string>{"rnn loop #8", "rnn loop #9", "head"});
  CHECK(p.predictedPeak == doctest::Approx(70));

  CHECK_THROWS(planUnderBudget(units, -1, 10));
  CHECK_THROWS(planUnderBudget({{"a", "", -1, 1}}, 10, 5));
  CHECK_THROWS(planUnderBudget({{"a", "missing", 1, 1}}, 10, 5));
  CHECK_THROWS(planUnderBudget({{"a", "", 1, 1}, {"a", "", 2, 1}}, 10, 5));
}

// Three units of a third of the need and a bit more count 170 of 512 parts each rounded down,
// 510 together: that cover was lost, and a unit 300 times dearer was chosen. A unit smaller than
// one part was never chosen at all (rounded up it is one part; many of them, which together fall
// short of the parts they count, are still not found).
TEST_CASE("covers that rounding each unit down loses are found") {
  const double need = 512e6;
  const std::vector<RematUnit> units{{"a1", "", 0.3337 * need, 1},
                                     {"a2", "", 0.3337 * need, 1},
                                     {"a3", "", 0.3337 * need, 1},
                                     {"d", "", 1.5 * need, 1000}};
  const RematPlan p = planUnderBudget(units, 2 * need, need);
  CHECK(p.feasible);
  CHECK(p.segments.recompute == std::set<std::string>{"a1", "a2", "a3"});
  CHECK(p.cost == 3);
  CHECK(p.freedBytes >= need);

  // A cover whose parts begun add up but whose bytes fall short is not taken.
  const std::vector<RematUnit> short3{{"b1", "", 0.3332 * need, 1},
                                      {"b2", "", 0.3332 * need, 1},
                                      {"b3", "", 0.3332 * need, 1},
                                      {"d", "", 1.5 * need, 1000}};
  const RematPlan q = planUnderBudget(short3, 2 * need, need);
  CHECK(q.segments.recompute == std::set<std::string>{"d"});
}

TEST_CASE("against a brute force: enough freed, at no more than a slightly larger need's cover") {
  std::mt19937 rng(20261201);
  std::uniform_real_distribution<double> bytes(0, 100), cost(0.1, 10);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<RematUnit> units;
    const int blocks = 2 + trial % 3;
    for (int b = 0; b < blocks; ++b) {
      const std::string name = "block" + std::to_string(b);
      units.push_back({name, "", bytes(rng), cost(rng)});
      for (int c = 0; c < trial % 3; ++c)
        units.push_back({name + " loop #" + std::to_string(c), name, bytes(rng) / 2, cost(rng)});
    }
    const double peak = 500, budget = 500 - bytes(rng) * 2;
    const RematPlan p = planUnderBudget(units, peak, budget);
    const double need = peak - budget;
    INFO("trial ", trial, ": need ", need, ", freed ", p.freedBytes, ", cost ", p.cost);
    for (const auto& u : units) {
      if (!u.parent.empty())
        CHECK_FALSE((has(p, u.name) && has(p, u.parent)));
    }
    const double exact = cheapestCover(units, need);
    if (std::isinf(exact)) {
      CHECK_FALSE(p.feasible);
      continue;
    }
    REQUIRE(p.feasible);
    CHECK(p.freedBytes >= need - 1e-9);
    const double roomy = cheapestCover(units, need * (1 + static_cast<double>(units.size()) / 512));
    if (!std::isinf(roomy))
      CHECK(p.cost <= roomy + 1e-9);
    CHECK(p.cost >= exact - 1e-9);
  }
}

TEST_CASE("runs of ops below loops: each unit, or its children's covers, down the tree") {
  // A block holding a loop, whose body's runs are the loop's children, and a run of its own.
  const std::vector<RematUnit> units{{"decoder", "", 100, 20},
                                     {"decoder loop #31", "decoder", 80, 40},
                                     {"decoder loop #31 run #40", "decoder loop #31", 30, 2},
                                     {"decoder loop #31 run #52", "decoder loop #31", 35, 6},
                                     {"decoder run #20", "decoder", 10, 9},
                                     {"head", "", 20, 10}};
  // 40 to free: the loop's two runs (65 for 8), not the loop (80 for 40), the block (100 for 20)
  // or a run with the block's own (40 for 11).
  const RematPlan runs = planUnderBudget(units, 200, 160);
  CHECK(runs.segments.recompute ==
        std::set<std::string>{"decoder loop #31 run #40", "decoder loop #31 run #52"});
  CHECK(runs.cost == 8);
  // 70: the loop's runs and the block's own (75 for 17), not the block (20).
  const RematPlan more = planUnderBudget(units, 200, 130);
  CHECK(more.segments.recompute == std::set<std::string>{"decoder loop #31 run #40",
                                                         "decoder loop #31 run #52",
                                                         "decoder run #20"});
  // 90: the block whole (100 for 20); its loop and its run free 90 for 49.
  const RematPlan block = planUnderBudget(units, 200, 110);
  CHECK(block.segments.recompute == std::set<std::string>{"decoder"});
  // 115: the block and the head; the smallest budget any plan meets is 200 - 120.
  const RematPlan all = planUnderBudget(units, 200, 85);
  CHECK(all.segments.recompute == std::set<std::string>{"decoder", "head"});
  CHECK(all.smallestFeasibleBudget == doctest::Approx(80));
  // Parents that go round in a circle are refused.
  CHECK_THROWS(planUnderBudget({{"a", "b", 1, 1}, {"b", "a", 1, 1}}, 10, 5));
}

TEST_CASE("against a brute force, three levels deep") {
  std::mt19937 rng(20261202);
  std::uniform_real_distribution<double> bytes(0, 100), cost(0.1, 10);
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<RematUnit> units;
    for (int b = 0; b < 2 + trial % 2; ++b) {
      const std::string block = "block" + std::to_string(b);
      units.push_back({block, "", bytes(rng), cost(rng)});
      const std::string loop = block + " loop #" + std::to_string(b);
      if (trial % 3 != 0)
        units.push_back({loop, block, bytes(rng) * 0.8, cost(rng)});
      for (int r = 0; r < 2; ++r) {
        const std::string in = trial % 3 != 0 && r == 0 ? loop : block;
        units.push_back({in + " run #" + std::to_string(r), in, bytes(rng) / 3, cost(rng) / 4});
      }
    }
    const double peak = 500, budget = 500 - bytes(rng) * 2;
    const RematPlan p = planUnderBudget(units, peak, budget);
    const double need = peak - budget;
    INFO("trial ", trial, ": need ", need, ", freed ", p.freedBytes, ", cost ", p.cost);
    const double exact = cheapestCover(units, need);
    if (std::isinf(exact)) {
      CHECK_FALSE(p.feasible);
      continue;
    }
    REQUIRE(p.feasible);
    CHECK(validSet(units, p));
    CHECK(p.freedBytes >= need - 1e-9);
    const double roomy = cheapestCover(units, need * (1 + static_cast<double>(units.size()) / 512));
    if (!std::isinf(roomy))
      CHECK(p.cost <= roomy + 1e-9);
    CHECK(p.cost >= exact - 1e-9);
  }
}

TEST_CASE("a model's units priced from a counted forward, planned, and run as planned") {
  symtune::Session session;
  session.name = "tagger";
  session.model.zoo = "dynamic_tagger";
  session.model.preset = "ci";
  session.binding.enabled = false;
  symtune::Trainer plain(session), planned(session);
  plain.setExecutor(std::make_unique<symtune::SegmentExecutor>(*plain.executor().scriptModule()));
  auto owned = std::make_unique<symtune::SegmentExecutor>(*planned.executor().scriptModule());
  symtune::SegmentExecutor& executor = *owned;
  planned.setExecutor(std::move(owned));

  symtune::ForwardCost cost;
  {
    torch::NoGradGuard noGrad;
    symtune::ForwardOptions options;
    options.countCost = true;
    cost = executor.symugen()->forward(planned.batch(0).inputs, options).cost;
  }
  const auto units = symtune::remat::rematUnits(*executor.symugen(), cost, 1.0, 1e-11, 1e-10);
  const RematUnit* rnn = nullptr;
  const RematUnit* loop = nullptr;
  for (const auto& u : units) {
    if (u.name == "rnn")
      rnn = &u;
    if (u.name.rfind("rnn loop #", 0) == 0 && u.name.find(" run ") == std::string::npos)
      loop = &u;
  }
  REQUIRE(rnn != nullptr);
  REQUIRE(loop != nullptr);
  CHECK(loop->parent == "rnn");
  CHECK(loop->freedBytes > 0);
  CHECK(rnn->freedBytes >= loop->freedBytes);  // the block's ops include its loop's
  CHECK(loop->cost > 0);
  double total = 0;
  for (const auto& u : units)
    total += u.parent.empty() ? u.freedBytes : 0;
  // Every op lies in a block; what the blocks keep at their edges (the embeddings the GRU saves,
  // its states the head saves) none of them frees.
  CHECK(total > 0);
  CHECK(total <= cost.savedBytes);

  // A budget the loop alone meets: the plan (the loop, its block or runs of ops) runs as the
  // plain step.
  const RematPlan plan = symtune::remat::planUnderBudget(units, total, total - loop->freedBytes);
  REQUIRE(plan.feasible);
  REQUIRE_FALSE(plan.segments.empty());
  executor.setPlan(plan.segments);
  for (int i = 0; i < 2; ++i) {
    const double a = plain.step().loss, b = planned.step().loss;
    CHECK(std::abs(a - b) <= 1e-5 * std::abs(a));
  }
  CHECK(executor.lastRecomputed() > 0);
}

// A block called in a loop (Transformer-XL's decoder, once a segment): its calls are counted, and
// what it brings back in its backward is one call's saved bytes at a time.
TEST_CASE("a block called in a loop counts its calls") {
  symtune::Session session;
  session.name = "txl";
  session.model.zoo = "transformer_xl";
  session.model.preset = "ci";
  session.binding.enabled = false;
  symtune::Trainer trainer(session);
  symtune::SegmentExecutor executor(*trainer.executor().scriptModule());
  const auto inputs = trainer.batch(0).inputs;
  symtune::ForwardCost cost;
  {
    torch::NoGradGuard noGrad;
    symtune::ForwardOptions options;
    options.countCost = true;
    cost = executor.symugen()->forward(inputs, options).cost;
  }
  const int64_t segments = inputs.at(0).toTensor().size(1) / inputs.at(1).toInt();
  REQUIRE(segments > 1);
  CHECK(cost.units.at("decoder").executions == segments);
  const auto units = symtune::remat::rematUnits(*executor.symugen(), cost, 1.0, 1e-11, 1e-10);
  const auto decoder = std::find_if(units.begin(), units.end(),
                                    [](const RematUnit& u) { return u.name == "decoder"; });
  REQUIRE(decoder != units.end());
  CHECK(decoder->executions == segments);
  for (const auto& u : units)
    CHECK(u.executions >= 1);

  // Each call's share (Note [A block's first calls]), adding up to the block's; the first call,
  // with no memory of segments before it to attend to, frees less than the last.
  const auto& counted = cost.units.at("decoder");
  REQUIRE(counted.savedByCall.size() == static_cast<size_t>(segments));
  REQUIRE(decoder->freedByCall.size() == static_cast<size_t>(segments));
  REQUIRE(decoder->costByCall.size() == static_cast<size_t>(segments));
  double freed = 0, price = 0, flops = 0;
  for (int64_t i = 0; i < segments; ++i) {
    freed += decoder->freedByCall[static_cast<size_t>(i)];
    price += decoder->costByCall[static_cast<size_t>(i)];
    flops += counted.flopsByCall.at(static_cast<size_t>(i));
  }
  CHECK(freed == doctest::Approx(decoder->freedBytes).epsilon(1e-9));
  CHECK(price == doctest::Approx(decoder->cost).epsilon(1e-9));
  CHECK(flops == doctest::Approx(counted.flops).epsilon(1e-9));
  CHECK(decoder->freedByCall.front() < decoder->freedByCall.back());
  const auto firstTwo =
      symtune::remat::shareOf(units, symtune::SegmentPlan::firstCallsName("decoder", 2));
  REQUIRE(firstTwo.has_value());
  CHECK(firstTwo->freedBytes ==
        doctest::Approx(decoder->freedByCall[0] + decoder->freedByCall[1]).epsilon(1e-9));
  // Units that are not top-level blocks have no calls to choose among.
  for (const auto& u : units) {
    if (u.name != "decoder")
      CHECK(u.freedByCall.empty());
  }
}

TEST_CASE("a block called several times: its first calls are a choice of their own") {
  RematUnit decoder{"decoder", "", 100, 20};
  decoder.executions = 4;
  decoder.freedByCall = {10, 30, 30, 30};
  decoder.costByCall = {2, 6, 6, 6};
  const std::vector<RematUnit> units{
      decoder, {"decoder run #20", "decoder", 12, 3}, {"head", "", 20, 10}};
  const std::string two = symtune::SegmentPlan::firstCallsName("decoder", 2);
  const std::string three = symtune::SegmentPlan::firstCallsName("decoder", 3);
  CHECK(two == "decoder [first 2 calls]");
  CHECK(symtune::SegmentPlan::firstCallsName("decoder", 1) == "decoder [first 1 call]");
  // 35 to free: the first two calls (40 for 8), not the block (100 for 20) or the head with the
  // first call (30).
  const RematPlan some = planUnderBudget(units, 200, 165);
  CHECK(some.segments.recompute == std::set<std::string>{two});
  CHECK(some.freedBytes == 40);
  CHECK(some.cost == 8);
  // 65: the first three (70 for 14).
  const RematPlan more = planUnderBudget(units, 200, 135);
  CHECK(more.segments.recompute == std::set<std::string>{three});
  // 95: the block on every call (100 for 20); three calls and the head free 90.
  const RematPlan every = planUnderBudget(units, 200, 105);
  CHECK(every.segments.recompute == std::set<std::string>{"decoder"});
  // 110: the block and the head.
  CHECK(planUnderBudget(units, 200, 90).segments.recompute ==
        std::set<std::string>{"decoder", "head"});

  // What each choice brings back in its backward: a whole block its average call; its first
  // calls the largest of them, less what the calls after them kept (freed before it comes back).
  const auto whole = symtune::remat::shareOf(units, "decoder");
  REQUIRE(whole.has_value());
  CHECK(whole->comesBack == 25);
  const auto first3 = symtune::remat::shareOf(units, three);
  REQUIRE(first3.has_value());
  CHECK(first3->freedBytes == 70);
  CHECK(first3->cost == 14);
  CHECK(first3->comesBack == 0);  // 30 back, after the last call's 30 went
  RematUnit lopsided = decoder;
  lopsided.freedByCall = {60, 20, 10, 10};
  const auto first1 = symtune::remat::shareOf({lopsided}, "decoder [first 1 call]");
  REQUIRE(first1.has_value());
  CHECK(first1->comesBack == 20);  // 60 back where the last three calls kept 40
  // Names that are no unit's, or more calls than the block had.
  CHECK_FALSE(symtune::remat::shareOf(units, "decoder [first 5 calls]").has_value());
  CHECK_FALSE(symtune::remat::shareOf(units, "encoder").has_value());
  for (const char* name :
       {"decoder [first 0 calls]", "decoder [first 2 call]", "decoder [first x calls]",
        "decoder [first 2 calls", "decoder[first 2 calls]", "decoder [first  calls]"})
    CHECK_FALSE(symtune::SegmentPlan::splitFirstCalls(name).has_value());
  const auto split = symtune::SegmentPlan::splitFirstCalls("layer1.0 [first 12 calls]");
  REQUIRE(split.has_value());
  CHECK(split->first == "layer1.0");
  CHECK(split->second == 12);
  symtune::SegmentPlan plan;
  plan.recompute = {three, "head"};
  CHECK(plan.recomputesAny("decoder"));
  CHECK(plan.recomputesAny("head"));
  CHECK_FALSE(plan.recomputesAny("decoder run #20"));
  CHECK_FALSE(plan.recomputesAny("deco"));
}
