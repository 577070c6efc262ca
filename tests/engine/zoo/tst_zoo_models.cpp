// The six benchmark models (resources/models/): each builds on its ci preset, keeps its control
// flow in the IR (no tracing), learns (the loss falls), runs through SyMuGen's evaluator with the
// module's own result, trains the same under full checkpointing, and gets data that is
// deterministic per batch yet changes shape or routing from batch to batch. A dropout inside a
// checkpointed block recomputes its mask on the CPU and, where a GPU is present, on CUDA.

#include "doctest_torch.h"

#include <torch/script.h>

#include <cmath>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda_rows.h"
#include "error_of.h"
#include "symtune/compat/torch_compat.h"
#include "symtune/core/zoo_catalog.h"
#include "symtune/exec/segment_executor.h"
#include "symtune/graph/symugen.h"
#include "symtune/rules/rule_registry.h"
#include "symtune/rules/rule_rewrite.h"
#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/memory_tracker.h"
#include "symtune/zoo/model_zoo.h"
#include "symtune/zoo/zoo_data.h"

namespace {

// Every test runs on two intra-op threads, as many as the CI machine has cores.
struct TwoThreads {
  TwoThreads() { at::set_num_threads(2); }
};

struct Expect {
  const char* model;
  int steps;         // training steps for the loss check
  double fallRatio;  // mean loss of the last 5 steps must be below this share of the first 5
  bool ifs, loops;   // control flow the inlined forward IR must hold
  double lr;
};

const Expect kModels[] = {
    {"dynamic_resnet", 50, 0.8, true, false, 3e-3}, {"transformer_xl", 60, 0.8, false, true, 2e-3},
    {"dynamic_tagger", 60, 0.8, false, true, 5e-3}, {"moe_topk", 60, 0.8, true, true, 3e-3},
    {"early_exit", 50, 0.8, true, false, 3e-3},     {"tree_rnn", 80, 0.9, false, true, 3e-3},
};

// Two trainers of one model trained alike: their parameters, and their buffers (batch norms'
// running statistics: a recomputed batch norm must not move them again), agree to rounding.
void checkSameParameters(symtune::Trainer& a, symtune::Trainer& b) {
  const auto p = a.executor().parameters(), q = b.executor().parameters();
  REQUIRE(p.size() == q.size());
  for (size_t i = 0; i < p.size(); ++i) {
    INFO("parameter ", i);
    CHECK(torch::allclose(p[i], q[i], 1e-4, 1e-6));
  }
  const auto* ma = a.executor().scriptModule();
  const auto* mb = b.executor().scriptModule();
  REQUIRE(ma != nullptr);
  REQUIRE(mb != nullptr);
  std::vector<at::Tensor> ba, bb;
  for (const auto& t : ma->buffers())
    ba.push_back(t);
  for (const auto& t : mb->buffers())
    bb.push_back(t);
  REQUIRE(ba.size() == bb.size());
  for (size_t i = 0; i < ba.size(); ++i) {
    INFO("buffer ", i);
    CHECK(torch::allclose(ba[i].to(torch::kDouble), bb[i].to(torch::kDouble), 1e-4, 1e-6));
  }
}

// One step of `t`: its loss, and its peak above what was live when it began.
std::pair<double, int64_t> stepWithPeak(symtune::Trainer& t) {
  symtune::CpuAllocationCounter::resetPeak();
  const int64_t before = symtune::CpuAllocationCounter::counters().current;
  const double loss = t.step().loss;
  return {loss, symtune::CpuAllocationCounter::counters().peak - before};
}

// Step `step` of two trainers of one model, `plain` and `planned` (a plan is the difference):
// their losses agree to 1e-5 relative; their peaks, plain first.
std::pair<int64_t, int64_t> samePeakedStep(symtune::Trainer& plain, symtune::Trainer& planned,
                                           int step) {
  const auto a = stepWithPeak(plain), b = stepWithPeak(planned);
  INFO("step ", step, ": ", a.first, " vs ", b.first, "; peaks ", a.second, " vs ", b.second);
  CHECK(std::abs(a.first - b.first) <= 1e-5 * std::abs(a.first));
  return {a.second, b.second};
}

symtune::Session sessionFor(const Expect& e) {
  symtune::Session s;
  s.name = e.model;
  s.model.zoo = e.model;
  s.model.preset = "ci";
  s.data.seed = 3;
  s.optimizer.lr = e.lr;
  s.run.steps = e.steps;
  // Bit-for-bit candidates only: the tests compare runs with and without binding to rounding.
  s.binding.exact = true;
  return s;
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double sum = 0;
  for (size_t i = from; i < to; ++i)
    sum += v[i];
  return sum / static_cast<double>(to - from);
}

// A batch's shape signature: every tensor input's sizes and every int / int list.
std::string signature(const symtune::Batch& b) {
  std::ostringstream s;
  for (const auto& in : b.inputs) {
    if (in.isTensor())
      s << in.toTensor().sizes();
    else
      s << in;
    s << ";";
  }
  return s.str();
}

// A scripted block in training mode: `source` its forward, parameters w of `weight`'s shape and,
// when `bias` is given, b of that size — random, from the current seed.
torch::jit::Module scriptedBlock(const char* name, const char* source, std::vector<int64_t> weight,
                                 int64_t bias = 0) {
  torch::jit::Module m(name);
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w", torch::randn(weight).requires_grad_(), false);
  if (bias > 0)
    m.register_parameter("b", torch::randn({bias}).requires_grad_(), false);
  m.define(source);
  return m;
}

// A data source that cannot be built with the sizes given, and what its error must say.
struct BadDataSource {
  const char* name;
  std::function<void()> build;
  const char* expected;
};

// Two blocks with a dropout each — aten::dropout, then symtune::bias_dropout_add — the same
// parameters on every call, on `device`.
torch::jit::Module dropoutModel(const torch::Device& device) {
  torch::manual_seed(5);
  auto make = [](const char* name, const char* source) {
    return scriptedBlock(name, source, {16, 16}, 16);
  };
  auto first = make("DropA",
                    "def forward(self, x: Tensor) -> Tensor:\n"
                    "    return torch.dropout(torch.relu(x.mm(self.w) + self.b), 0.5, True)\n");
  // symtune::bias_dropout_add by the built-in rewrite (TorchScript source compiled here does not
  // resolve torch.ops).
  auto second = make("DropB",
                     "def forward(self, x: Tensor) -> Tensor:\n"
                     "    return x + torch.dropout(x.mm(self.w) + self.b, 0.5, True)\n");
  const auto rule = *symtune::rules::Registry::global().get("fused_bias_dropout_add").rule;
  if (symtune::rules::applyRewrites(second, {rule}).front().sites != 1)
    throw std::runtime_error("fused_bias_dropout_add did not rewrite the block");
  torch::jit::Module root("DropRoot");
  root.register_attribute("training", c10::BoolType::get(), true);
  root.register_module("first", first);
  root.register_module("second", second);
  root.define(R"(
def forward(self, x: Tensor) -> Tensor:
    return self.second.forward(self.first.forward(x))
)");
  root.to(device);
  return root;
}

// What the generators the blocks draw from give next: the CPU's (symtune::bias_dropout_add takes
// its seed from it on any device) and `device`'s (aten::dropout's; on the CPU, the CPU's again).
std::pair<double, double> nextDraws(const torch::Device& device) {
  const double cpu = torch::rand({1}).item<double>();
  const double onDevice = torch::rand({1}, torch::TensorOptions().device(device)).item<double>();
  return {cpu, onDevice};
}

// Note [Checkpoint RNG]: a dropout inside a checkpointed block draws the same mask when the block
// is recomputed — aten::dropout and symtune::bias_dropout_add alike — so gradients equal the plain
// run's, and the generators continue as if nothing had been recomputed.
void checkpointedDropoutRecomputesTheSameMask(const torch::Device& device) {
  INFO(device.str());
  const auto x = torch::randn({8, 16}).to(device);
  auto plain = dropoutModel(device);
  torch::manual_seed(42);
  const auto plainOut = plain.forward({x}).toTensor();
  plainOut.sum().backward();
  const auto plainNext = nextDraws(device);
  auto checkpointed = dropoutModel(device);
  symtune::SegmentExecutor executor(checkpointed);
  executor.setPlan(executor.recomputeAll());
  torch::manual_seed(42);
  const auto checkpointedOut = executor.forward({x});
  checkpointedOut.sum().backward();
  const auto checkpointedNext = nextDraws(device);
  CHECK(executor.lastRecomputed() == int64_t{2});
  CHECK(torch::equal(checkpointedOut, plainOut));
  const auto p = plain.parameters(), q = checkpointed.parameters();
  auto pi = p.begin(), qi = q.begin();
  for (; pi != p.end(); ++pi, ++qi)
    CHECK(torch::allclose((*pi).grad(), (*qi).grad(), 1e-5, 1e-6));
  // The same state draws the same number: exact.
  CHECK(checkpointedNext.first == plainNext.first);
  CHECK(checkpointedNext.second == plainNext.second);
}

}  // namespace

TEST_CASE_FIXTURE(TwoThreads, "the catalogue lists the six models") {
  CHECK(symtune::zooCatalog().size() == std::size(kModels));
  for (const auto& e : kModels) {
    INFO(e.model);
    const auto* entry = symtune::findZooEntry(e.model);
    REQUIRE(entry != nullptr);
    CHECK((entry->presets == std::vector<std::string>{"ci", "cpu", "gpu"}));
  }
}

// A data source built with sizes it cannot use says which and what it got.
TEST_CASE_FIXTURE(TwoThreads, "data sources name the bad size") {
  const BadDataSource rows[] = {
      {"a three-token vocabulary",
       [] {
         symtune::MarkovText(3, 8, 2, {4, 8}, {0, 4}, 1);
       },
       "got vocabulary 3, batch size 8, segments 2"},
      {"an empty segment length range",
       [] {
         symtune::MarkovText(16, 8, 2, {8, 4}, {0, 4}, 1);
       },
       "MarkovText segment length must be a range [lo, hi] with 1 <= lo <= hi; got [8, 4]"},
      {"one class",
       [] {
         symtune::RandomTrees(1, 8, {2, 6}, 1);
       },
       "got classes 1, batch size 8"},
  };
  for (const BadDataSource& row : rows) {
    INFO(row.name);
    const std::string error = symtune::test::errorOf(row.build);
    INFO(error);
    CHECK(error.find(row.expected) != std::string::npos);
  }
}

TEST_CASE_FIXTURE(TwoThreads, "the IR keeps each model's control flow") {
  for (const Expect& e : kModels) {
    INFO(e.model);
    auto zoo = symtune::buildZooModel(e.model, {"ci", 0, std::nullopt});
    symtune::SyMuGen gen(zoo.module, e.model);
    const std::string modelFile = std::string("resources/models/") + e.model + ".py";
    int ifs = 0, loops = 0, fromModelFile = 0;
    for (const auto& n : gen.staticGraph().nodes()) {
      ifs += n.kind == "prim::If";
      loops += n.kind == "prim::Loop";
      fromModelFile += n.source.file == modelFile;
    }
    MESSAGE(e.model, ": ", ifs, " prim::If, ", loops, " prim::Loop, ",
            gen.staticGraph().nodes().size(), " nodes");
    CHECK((ifs > 0) == e.ifs);
    CHECK((loops > 0) == e.loops);
    {
      INFO("source ranges point into the model file");
      CHECK(fromModelFile > 0);
    }
    CHECK(!zoo.description.empty());
  }
}

TEST_CASE_FIXTURE(TwoThreads, "each model's ci preset learns") {
  for (const Expect& e : kModels) {
    INFO(e.model);
    symtune::Trainer trainer(sessionFor(e));
    std::vector<double> loss;
    for (int i = 0; i < e.steps; ++i) {
      const auto r = trainer.step();
      INFO("step ", i);
      CHECK(std::isfinite(r.loss));
      loss.push_back(r.loss);
    }
    const double first = mean(loss, 0, 5), last = mean(loss, loss.size() - 5, loss.size());
    MESSAGE(e.model, ": mean loss of steps 1-5 ", first, ", of the last 5 ", last, " (",
            std::round(100 * last / first), "%)");
    INFO("the loss must fall");
    CHECK(last < e.fallRatio * first);
  }
}

TEST_CASE_FIXTURE(TwoThreads, "the evaluator gives each model's own result") {
  for (const Expect& e : kModels) {
    INFO(e.model);
    auto zoo = symtune::buildZooModel(e.model, {"ci", 0, std::nullopt});
    zoo.module.eval();  // batch statistics would be updated by both runs
    torch::NoGradGuard noGrad;
    const symtune::Batch b = zoo.data->batch(2);
    const torch::Tensor expected = zoo.module.forward(b.inputs).toTensor();
    symtune::SyMuGen gen(zoo.module, e.model);
    const torch::Tensor got = gen.forward(b.inputs).output.toTensor();
    REQUIRE((got.sizes() == expected.sizes()));
    CHECK(torch::allclose(got, expected, 1e-4, 1e-5));
    CHECK(expected.size(0) == b.target.size(0));  // one row of logits per target
  }
}

// Full checkpointing recomputes every top-level block in backward: the step must train exactly
// as without it (same losses, same updated parameters).
TEST_CASE_FIXTURE(TwoThreads, "each model trains the same under full checkpointing") {
  for (const Expect& e : kModels) {
    INFO(e.model);
    symtune::Trainer plain(sessionFor(e)), checkpointed(sessionFor(e));
    auto executor =
        std::make_unique<symtune::SegmentExecutor>(*checkpointed.executor().scriptModule());
    auto* ckpt = executor.get();
    CHECK(!ckpt->segments().empty());
    ckpt->setPlan(ckpt->recomputeAll());
    checkpointed.setExecutor(std::move(executor));
    for (int i = 0; i < 3; ++i) {
      const double a = plain.step().loss, b = checkpointed.step().loss;
      INFO("step ", i, ": ", a, " vs ", b, " (relative difference ", std::abs(a - b) / std::abs(a),
           ")");
      CHECK(std::abs(a - b) <= 1e-5 * std::abs(a));
    }
    {
      INFO("some block ran checkpointed");
      CHECK(ckpt->lastRecomputed() > 0);
    }
    checkSameParameters(plain, checkpointed);
    MESSAGE(e.model, ": ", ckpt->segments().size(), " top-level blocks, ", ckpt->lastRecomputed(),
            " block calls checkpointed in the last step");
  }
}

// Loop bodies recomputed trip by trip (Note [Loop-body spans]): the step trains exactly as
// without, and the tagger (whose GRU loop is one top-level block) and Transformer-XL (whose layer
// loop is inside one) hold less at their peaks.
TEST_CASE_FIXTURE(TwoThreads, "each model trains the same with its loops recomputed trip by trip") {
  std::set<std::string> withLoops;
  for (const Expect& e : kModels) {
    INFO(e.model);
    // Both through the evaluator, neither binding: the plan is the only difference.
    symtune::Trainer plain(sessionFor(e)), checkpointed(sessionFor(e));
    plain.setExecutor(std::make_unique<symtune::SegmentExecutor>(*plain.executor().scriptModule()));
    auto executor =
        std::make_unique<symtune::SegmentExecutor>(*checkpointed.executor().scriptModule());
    auto* ckpt = executor.get();
    const std::vector<std::string> loops = ckpt->symugen()->loopSpans();
    if (loops.empty())
      continue;
    withLoops.insert(e.model);
    symtune::SegmentPlan plan;
    plan.recompute.insert(loops.begin(), loops.end());
    ckpt->setPlan(plan);
    checkpointed.setExecutor(std::move(executor));
    std::ostringstream ratios;  // the peak with the plan over the peak without, steps 2 and 3
    for (int i = 0; i < 3; ++i) {
      const auto peaks = samePeakedStep(plain, checkpointed, i);
      const int64_t plainPeak = peaks.first, loopPeak = peaks.second;
      if (i > 0)
        ratios << " " << static_cast<double>(loopPeak) / static_cast<double>(plainPeak);
      if ((e.model == std::string("dynamic_tagger") || e.model == std::string("transformer_xl")) &&
          i > 0)
        CHECK(loopPeak < plainPeak);
    }
    CHECK(ckpt->lastRecomputed() > 0);
    checkSameParameters(plain, checkpointed);
    MESSAGE(std::string(e.model), ": loops ", c10::Join(", ", loops), "; ", ckpt->lastRecomputed(),
            " spans checkpointed in the last step; peak ratios", ratios.str());
  }
  CHECK(withLoops.count("dynamic_tagger") == 1);
}

// A block called in a loop recomputed on its first calls only (Note [A block's first calls]):
// Transformer-XL's decoder on its first two of three calls, the decoder's lighter runs on the
// third, trains as the plain run does; the first calls are the ones checkpointed, and the peak
// falls.
TEST_CASE_FIXTURE(TwoThreads, "a block recomputed on its first calls trains as the plain run") {
  const Expect& e = *std::find_if(std::begin(kModels), std::end(kModels), [](const Expect& x) {
    return x.model == std::string("transformer_xl");
  });
  symtune::Trainer plain(sessionFor(e)), partial(sessionFor(e));
  plain.setExecutor(std::make_unique<symtune::SegmentExecutor>(*plain.executor().scriptModule()));
  auto executor = std::make_unique<symtune::SegmentExecutor>(*partial.executor().scriptModule());
  auto* first = executor.get();
  const auto& inputs = partial.batch(0).inputs;
  REQUIRE(inputs.at(0).toTensor().size(1) / inputs.at(1).toInt() == 3);  // the decoder's calls
  symtune::SegmentPlan plan;
  plan.recompute.insert(symtune::SegmentPlan::firstCallsName("decoder", 2));
  first->setPlan(plan);
  partial.setExecutor(std::move(executor));
  for (int i = 0; i < 3; ++i) {
    const auto peaks = samePeakedStep(plain, partial, i);
    CHECK(first->lastRecomputed() == 2);  // calls 1 and 2 of 3
    if (i > 0)
      CHECK(peaks.second < peaks.first);
  }
  checkSameParameters(plain, partial);

  // With the decoder's lighter runs on the call it does not recompute: each call of those runs
  // is checkpointed on the third call only.
  std::vector<std::string> lighter;
  for (const auto& unit : first->symugen()->recomputableUnits()) {
    if (unit.name.find(" before #") != std::string::npos && unit.name.rfind("decoder ", 0) == 0)
      lighter.push_back(unit.name);
  }
  REQUIRE_FALSE(lighter.empty());
  plan.recompute.insert(lighter.begin(), lighter.end());
  first->setPlan(plan);
  for (int i = 0; i < 2; ++i) {
    const double a = plain.step().loss, b = partial.step().loss;
    INFO("with lighter runs, step ", i, ": ", a, " vs ", b);
    CHECK(std::abs(a - b) <= 1e-5 * std::abs(a));
    CHECK(first->lastRecomputed() > 2);
  }
  checkSameParameters(plain, partial);
  MESSAGE("transformer_xl: the decoder's first 2 of 3 calls recomputed, then with ", lighter.size(),
          " lighter runs on the third: ", first->lastRecomputed(),
          " spans checkpointed in the last step");

  // Names a plan cannot run are refused, the plan in force kept.
  for (const char* bad : {"head [first 2 calls]", "no.such.block [first 1 call]"}) {
    symtune::SegmentPlan wrong;
    wrong.recompute.insert(bad);
    CHECK_THROWS_WITH_AS(first->setPlan(wrong), doctest::Contains("not a top-level block"),
                         c10::Error);
  }
  symtune::SegmentPlan both;
  both.recompute = {"decoder", symtune::SegmentPlan::firstCallsName("decoder", 1)};
  CHECK_THROWS_WITH_AS(first->setPlan(both), doctest::Contains("every call or on its first"),
                       c10::Error);
  CHECK(first->plan().recompute == plan.recompute);
}

// Runs of ops recomputed (Note [Op runs]): every model trains as without, each run keeping only
// its inputs — the runs whole, and their lighter variants, which leave the closing op's forward
// where it was and free its saved input until its backward (Note [Runs without their closing op]).
TEST_CASE_FIXTURE(TwoThreads, "each model trains the same with its runs of ops recomputed") {
  for (const bool lighter : {false, true}) {
    int modelsRecomputed = 0;
    for (const Expect& e : kModels) {
      INFO(std::string(e.model), std::string(lighter ? ", lighter variants" : ", runs whole"));
      symtune::Trainer plain(sessionFor(e)), recomputed(sessionFor(e));
      plain.setExecutor(
          std::make_unique<symtune::SegmentExecutor>(*plain.executor().scriptModule()));
      auto executor =
          std::make_unique<symtune::SegmentExecutor>(*recomputed.executor().scriptModule());
      auto* runs = executor.get();
      std::vector<std::string> names;
      for (const auto& name : runs->symugen()->opRuns()) {
        if ((name.find(" before #") != std::string::npos) == lighter)
          names.push_back(name);
      }
      if (lighter && names.empty())
        continue;  // no run here closes on an op that saves what the run made
      REQUIRE_FALSE(names.empty());
      symtune::SegmentPlan plan;
      plan.recompute.insert(names.begin(), names.end());
      runs->setPlan(plan);
      recomputed.setExecutor(std::move(executor));
      for (int i = 0; i < 3; ++i) {
        const double a = plain.step().loss, b = recomputed.step().loss;
        INFO("step ", i, ": ", a, " vs ", b);
        CHECK(std::abs(a - b) <= 1e-5 * std::abs(a));
      }
      // The tagger's head reads its inputs as a list (torch.cat): it runs as usual.
      modelsRecomputed += runs->lastRecomputed() > 0 ? 1 : 0;
      checkSameParameters(plain, recomputed);
      MESSAGE(std::string(e.model), ": ", names.size(), std::string(lighter ? " lighter" : ""),
              " runs of ops, ", runs->lastRecomputed(),
              " run executions recomputed in the last step");
    }
    CHECK(modelsRecomputed >= (lighter ? 5 : 6));
  }
}

// What recomputing a run frees (Note [Counting a run's saved bytes]): the bytes its ops save of
// tensors it makes and does not hand on — here h, sigmoid(h) and their product, which the
// sigmoid, the product and the matmul save — less the input it keeps that nothing kept before
// (the first matmul's output, which the add does not save); neither the batch nor the
// parameters. A run that could free nothing is no unit.
TEST_CASE_FIXTURE(TwoThreads, "a run of ops counts what it would free") {
  const auto module = [] {
    torch::manual_seed(3);
    auto ffn = scriptedBlock("Ffn",
                             "def forward(self, x: Tensor) -> Tensor:\n"
                             "    h = x.mm(self.w) + self.b\n"
                             "    return (torch.sigmoid(h) * h).mm(self.w)\n",
                             {16, 16}, 16);
    torch::jit::Module root("Root");
    root.register_attribute("training", c10::BoolType::get(), true);
    root.register_module("ffn", ffn);
    root.define("def forward(self, x: Tensor) -> Tensor:\n    return self.ffn.forward(x)\n");
    return root;
  };
  auto root = module();
  symtune::SyMuGen gen(root, "ffn");
  const auto x = torch::randn({8, 16});
  std::map<std::string, std::string> parents;
  for (const auto& u : gen.recomputableUnits())
    parents[u.name] = u.parent;
  // From the first matmul on: the run up to it could free nothing (it saves x and w). The run
  // without its closing matmul is its child.
  REQUIRE(gen.opRuns().size() == size_t{2});
  const std::string run = gen.opRuns()[0], lighter = gen.opRuns()[1];
  CHECK(parents.at(run) == "ffn");
  CHECK(parents.at(lighter) == run);
  CHECK(lighter.rfind(run + " before #", 0) == 0);
  symtune::ForwardCost cost;
  {
    torch::NoGradGuard noGrad;
    symtune::ForwardOptions options;
    options.countCost = true;
    cost = gen.forward({x}, options).cost;
  }
  CHECK(cost.units.at(run).savedBytes == (3 - 1) * 8 * 16 * 4.0);
  CHECK(cost.units.at(run).flops > 2.0 * 8 * 16 * 16);
  CHECK(cost.units.at(run).executions == 1);
  // The same bytes — the product the matmul saves among them — without the matmul's FLOPs.
  CHECK(cost.units.at(lighter).savedBytes == (3 - 1) * 8 * 16 * 4.0);
  CHECK(cost.units.at(lighter).flops < 2.0 * 8 * 16 * 16);
  CHECK(cost.units.at(lighter).executions == 1);
  CHECK(cost.units.at("ffn").executions == 1);

  // Recomputed, the run or its lighter variant gives the gradients of the plain forward.
  auto plainRoot = module();
  plainRoot.forward({x}).toTensor().sum().backward();
  for (const auto& unit : {run, lighter}) {
    INFO(unit);
    auto recomputedRoot = module();
    symtune::SegmentExecutor executor(recomputedRoot);
    executor.setPlan(symtune::SegmentPlan{{unit}});
    executor.forward({x}).sum().backward();
    CHECK(executor.lastRecomputed() == int64_t{1});
    const auto p = plainRoot.parameters(), q = recomputedRoot.parameters();
    for (auto pi = p.begin(), qi = q.begin(); pi != p.end(); ++pi, ++qi)
      CHECK(torch::allclose((*pi).grad(), (*qi).grad()));
  }
}

// A run without its closing op frees, between the forward and the backward, what the op saves of
// it (Note [Runs without their closing op]): for (σ(h)·h)·w the matmul's input σ(h)·h, with h and
// σ(h), keeping the first matmul's output in their place — two tensors fewer than the plain
// forward holds. Its backward fills the storage back before the matmul's backward reads it, with
// the recomputation's own memory (Note [Refilling by sharing]): the backward holds two tensors
// more than the plain one — the run's input, kept for the recomputation, and the gradient its
// backward is handed, which lives until that backward returns — not three (a copy of the refill).
void lighterRunFreesUntilBackward(const torch::Device& device) {
  INFO(device.str());
  // The bytes live on `device` now, the peak reset to them (on CUDA: the caching allocator's).
  const auto live = [&]() -> int64_t {
    if (device.is_cuda()) {
      symtune::compat::cudaResetPeakStats(device.index());
      return symtune::compat::cudaPeakAllocatedBytes(device.index()).value_or(0);
    }
    symtune::CpuAllocationCounter::resetPeak();
    return symtune::CpuAllocationCounter::counters().current;
  };
  const auto peak = [&]() -> int64_t {
    if (device.is_cuda())
      return symtune::compat::cudaPeakAllocatedBytes(device.index()).value_or(0);
    return symtune::CpuAllocationCounter::counters().peak;
  };
  const int64_t n = 256;
  const auto module = [&] {
    torch::manual_seed(4);
    auto ffn = scriptedBlock("Ffn",
                             "def forward(self, x: Tensor) -> Tensor:\n"
                             "    h = x.mm(self.w) + self.b\n"
                             "    return (torch.sigmoid(h) * h).mm(self.w)\n",
                             {n, n}, n);
    torch::jit::Module root("Root");
    root.register_attribute("training", c10::BoolType::get(), true);
    root.register_module("ffn", ffn);
    root.define("def forward(self, x: Tensor) -> Tensor:\n    return self.ffn.forward(x)\n");
    root.to(device);
    return root;
  };
  const auto x = torch::randn({n, n}).to(device);
  const double tensorBytes = static_cast<double>(n * n * 4);
  std::map<std::string, double> held;          // live bytes the forward leaves for the backward
  std::map<std::string, double> backwardPeak;  // the most the backward holds, over the same start
  std::map<std::string, std::vector<at::Tensor>> grads;
  auto probe = module();
  symtune::SegmentExecutor names(probe);
  const std::string run = names.symugen()->opRuns()[0], lighter = names.symugen()->opRuns()[1];
  for (const std::string& unit : {std::string(), run, lighter}) {
    auto root = module();
    symtune::SegmentExecutor executor(root);
    if (!unit.empty())
      executor.setPlan(symtune::SegmentPlan{{unit}});
    const int64_t before = live();
    auto out = executor.forward({x}).sum();
    held[unit] = static_cast<double>(live() - before);
    out.backward();
    backwardPeak[unit] = static_cast<double>(peak() - before);
    for (const auto& p : root.parameters())
      grads[unit].push_back(p.grad().cpu());
  }
  INFO("plain ", held[""], ", the run whole ", held[run], ", without its matmul ", held[lighter]);
  CHECK(held[""] - held[lighter] >= 1.9 * tensorBytes);
  CHECK(held[""] - held[lighter] <= 2.1 * tensorBytes);
  CHECK(std::abs(held[run] - held[lighter]) <= 0.1 * tensorBytes);
  INFO("backward peaks: plain ", backwardPeak[""], ", without its matmul ", backwardPeak[lighter]);
  CHECK(backwardPeak[lighter] <= backwardPeak[""] + 2.1 * tensorBytes);
  for (const auto& unit : {run, lighter}) {
    for (size_t i = 0; i < grads[""].size(); ++i)
      CHECK(torch::allclose(grads[""][i], grads[unit][i], 1e-5, 1e-5));
  }
}

TEST_CASE_FIXTURE(TwoThreads,
                  "a run without its closing op frees that op's input until its "
                  "backward") {
  REQUIRE(symtune::CpuAllocationCounter::active());
  lighterRunFreesUntilBackward(torch::kCPU);
}

// On CUDA the storage is freed to the caching allocator and taken from it again.
TEST_CASE_FIXTURE(TwoThreads, "a run without its closing op frees that op's input on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  lighterRunFreesUntilBackward(torch::Device(torch::kCUDA, 0));
}

// Blocks checkpointing would get wrong run as usual: one that writes to its input in place (an
// in-place ReLU) and one whose output nests a tuple in a tuple. Gradients match the plain run.
TEST_CASE_FIXTURE(TwoThreads, "blocks checkpointing would get wrong are not checkpointed") {
  auto module = [] {
    torch::manual_seed(5);
    auto make = [](const char* name, const char* source) {
      return scriptedBlock(name, source, {4, 4});
    };
    auto lin = make("Lin", "def forward(self, x: Tensor) -> Tensor:\n    return x.mm(self.w)\n");
    auto act = make("Act", "def forward(self, x: Tensor) -> Tensor:\n    return torch.relu_(x)\n");
    auto pair = make("Pair",
                     "def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:\n"
                     "    h = x.mm(self.w)\n"
                     "    return h, (h * 2.0, h * 3.0)\n");
    torch::jit::Module root("Root");
    root.register_attribute("training", c10::BoolType::get(), true);
    root.register_module("lin", lin);
    root.register_module("act", act);
    root.register_module("pair", pair);
    root.define(R"(
def forward(self, x: Tensor) -> Tensor:
    y = self.act.forward(self.lin.forward(x))
    a, bc = self.pair.forward(y)
    b, c = bc
    return a + b + c
)");
    return root;
  };
  const auto x = torch::randn({3, 4});
  auto plain = module();
  plain.forward({x}).toTensor().sum().backward();
  auto checkpointed = module();
  symtune::SegmentExecutor executor(checkpointed);
  executor.setPlan(executor.recomputeAll());
  executor.forward({x}).sum().backward();
  CHECK(executor.lastRecomputed() == int64_t{1});  // only `lin`
  const auto p = plain.parameters(), q = checkpointed.parameters();
  auto pi = p.begin(), qi = q.begin();
  int compared = 0;
  for (; pi != p.end(); ++pi, ++qi) {
    CHECK((*qi).grad().defined() == (*pi).grad().defined());  // `act` uses no parameter
    if ((*pi).grad().defined()) {
      CHECK(torch::allclose((*pi).grad(), (*qi).grad()));
      ++compared;
    }
  }
  CHECK(compared == 2);
}

TEST_CASE_FIXTURE(TwoThreads, "a checkpointed dropout recomputes the same mask on the CPU") {
  checkpointedDropoutRecomputesTheSameMask(torch::kCPU);
}

// The CUDA generator's state is kept and restored too: aten::dropout on CUDA draws from it.
TEST_CASE_FIXTURE(TwoThreads, "a checkpointed dropout recomputes the same mask on CUDA") {
  if (!symtune::test::cudaRowsRun())
    return;
  checkpointedDropoutRecomputesTheSameMask(torch::Device(torch::kCUDA, 0));
}

TEST_CASE_FIXTURE(TwoThreads, "each model's data is deterministic per batch and varies") {
  for (const Expect& e : kModels) {
    INFO(e.model);
    auto a = symtune::buildZooModel(e.model, {"ci", 5, std::nullopt});
    auto b = symtune::buildZooModel(e.model, {"ci", 5, std::nullopt});
    std::set<std::string> shapes;
    for (int64_t i = 0; i < 6; ++i) {
      INFO("batch ", i);
      const auto x = a.data->batch(i), y = b.data->batch(i);
      CHECK(signature(x) == signature(y));
      CHECK(torch::equal(x.target, y.target));
      for (size_t k = 0; k < x.inputs.size(); ++k) {
        if (x.inputs[k].isTensor())
          CHECK(torch::equal(x.inputs[k].toTensor(), y.inputs[k].toTensor()));
      }
      shapes.insert(signature(x));
    }
    // The sequence and tree models' inputs change shape per batch; the others change routing.
    const std::string model = e.model;
    const bool shaped =
        model == "transformer_xl" || model == "dynamic_tagger" || model == "tree_rnn";
    if (shaped) {
      INFO("input shapes must vary between batches");
      CHECK(shapes.size() > 1);
    }
  }
}
