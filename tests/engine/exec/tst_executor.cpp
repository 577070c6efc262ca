// The execution seam (Note [The execution seam]): every forward the trainer runs — plain,
// per-node telemetry, captured, with segments recomputed, and every combination of them — is one
// Executor::run call carrying what the step measures; every combination trains with the plain
// run's losses; and measuring a step does not change how much it keeps alive.

#include "doctest_torch.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "symtune/exec/segment_executor.h"
#include "symtune/runtime/trainer.h"

namespace {

const char* const kModels[] = {"dynamic_resnet", "transformer_xl"};

symtune::Session session(const char* zoo) {
  symtune::Session s;
  s.name = "seam";
  s.model.zoo = zoo;
  s.model.preset = "ci";
  s.data.seed = 3;
  s.optimizer.lr = 3e-3;
  s.run.device = "cpu";
  // Bit-for-bit candidates only: these tests compare executors, and two trainers' binders may
  // choose differently between candidates that round differently.
  s.binding.exact = true;
  return s;
}

// Runs another executor and notes what each call asked for: the seam as the trainer uses it.
class Witness final : public symtune::Executor {
 public:
  explicit Witness(std::unique_ptr<symtune::Executor> inner) : inner_(std::move(inner)) {}

  struct Call {
    bool attributeOps = false, recorded = false;
    int64_t recomputed = 0;
  };
  std::vector<Call> calls;

  symtune::ForwardResult run(const std::vector<torch::jit::IValue>& inputs,
                             const symtune::ForwardRequest& request) override {
    symtune::ForwardResult r = inner_->run(inputs, request);
    calls.push_back({request.attributeOps, request.record != nullptr, r.recomputed});
    return r;
  }
  std::vector<torch::Tensor> parameters() override { return inner_->parameters(); }
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override {
    return inner_->namedParameters();
  }
  void setTraining(bool on) override { inner_->setTraining(on); }
  void to(const torch::Device& device) override { inner_->to(device); }
  torch::jit::Module* scriptModule() override { return inner_->scriptModule(); }
  symtune::SyMuGen* symugen() override { return inner_->symugen(); }
  const char* name() const override { return "witness"; }

 private:
  std::unique_ptr<symtune::Executor> inner_;
};

// The trainer's executor, or a SegmentExecutor recomputing every segment, behind a witness.
Witness* installWitness(symtune::Trainer& trainer, bool recompute) {
  std::unique_ptr<symtune::Executor> inner;
  torch::jit::Module& module = *trainer.executor().scriptModule();
  if (recompute) {
    auto segments = std::make_unique<symtune::SegmentExecutor>(module);
    segments->setPlan(segments->recomputeAll());
    inner = std::move(segments);
  } else {
    inner = std::make_unique<symtune::ScriptModuleExecutor>(module);
  }
  auto witness = std::make_unique<Witness>(std::move(inner));
  Witness* seen = witness.get();
  trainer.setExecutor(std::move(witness));
  return seen;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One combination: three steps measured as the flags say, each against the plain run's loss.
void runsThroughTheSeam(const char* model, bool perNode, bool recompute, bool capture) {
  INFO(model, (perNode ? " per-node" : ""), (recompute ? " recompute" : ""),
       (capture ? " capture" : ""));
  const symtune::Session s = session(model);
  symtune::Trainer plain(s), measured(s);
  Witness* seam = installWitness(measured, recompute);
  if (perNode)
    measured.setTelemetry(symtune::Telemetry::PerNode);
  constexpr int kSteps = 3;
  for (int i = 0; i < kSteps; ++i) {
    const double expected = plain.step().loss;
    symtune::StepResult r;
    symtune::Graph graph;
    if (capture)
      graph = measured.captureStep(&r);
    else
      r = measured.step();
    INFO("step ", i, ": ", r.loss, " vs the plain run's ", expected, " (relative difference ",
         std::abs(r.loss - expected) / std::abs(expected), ")");
    CHECK(std::abs(r.loss - expected) <= 1e-5 * std::abs(expected));
    CHECK((r.nodes != nullptr) == perNode);
    if (perNode && r.nodes) {
      CHECK(!r.nodes->nodes.empty());
      INFO("ops were attributed to graph nodes");
      CHECK(r.nodes->attributedSeconds > 0);
    }
    if (capture) {
      CHECK(graph.countNodes(symtune::GraphSide::Backward) > 0);
      const auto& nodes = graph.nodes();
      const bool shaped = std::any_of(nodes.begin(), nodes.end(), [](const auto& n) {
        return n.side == symtune::GraphSide::Forward && !n.outputs.empty() &&
               n.outputs.front().shape.has_value();
      });
      INFO("the step's shapes were recorded");
      CHECK(shaped);
      const bool linked =
          std::any_of(nodes.begin(), nodes.end(), [](const auto& n) { return n.forward.valid(); });
      INFO("autograd nodes are linked to the forward ops that made them");
      CHECK(linked);
    }
  }
  // One executor call per step, asking for what the step measured.
  CHECK(seam->calls.size() == size_t{kSteps});
  for (const auto& call : seam->calls) {
    CHECK(call.attributeOps == perNode);
    CHECK(call.recorded == capture);
    CHECK((call.recomputed > 0) == recompute);
  }
}

// Eleven steps cycling through unsampled, per-node and captured; the peaks of each kind, as
// multiples of the unsampled steps' median peak.
void samplingKeepsThePeak(const char* model, bool recompute) {
  const char* executorName = recompute ? "segments" : "torchscript";
  INFO(model, " ", executorName);
  symtune::Trainer trainer(session(model));
  installWitness(trainer, recompute);
  std::vector<double> plain, perNode, captured;
  for (int i = 0; i < 11; ++i) {
    const int kind = i % 3;
    trainer.setTelemetry(kind == 1 ? symtune::Telemetry::PerNode : symtune::Telemetry::Features);
    symtune::StepResult r;
    if (kind == 2)
      trainer.captureStep(&r);
    else
      r = trainer.step();
    if (i < 2)
      continue;  // TorchScript's profiling runs
    const double peak = r.features[symtune::Feature::PeakMemory];
    (kind == 0 ? plain : kind == 1 ? perNode : captured).push_back(peak);
  }
  const double base = median(plain);
  const double nodeRatio = median(perNode) / base, captureRatio = median(captured) / base;
  MESSAGE(model, " ", executorName, ": peak ", base / 1048576.0, " MiB unsampled; per-node ",
          nodeRatio, "x, captured ", captureRatio, "x");
  CHECK(base > 0);
  const double low = recompute ? 0.95 : 0.0;
  CHECK(nodeRatio <= 1.05);
  CHECK(nodeRatio >= low);
  CHECK(captureRatio <= 1.05);
  CHECK(captureRatio >= low);
}

// The parameters' gradients of ‖model(x)‖², every segment recomputed or none, and how many
// segment calls were.
std::pair<std::vector<torch::Tensor>, int64_t> gradientsOf(torch::jit::Module model,
                                                           const torch::Tensor& x, bool recompute) {
  symtune::SegmentExecutor executor(std::move(model));
  if (recompute)
    executor.setPlan(executor.recomputeAll());
  const symtune::ForwardResult r = executor.run({x}, {});
  r.output.pow(2).sum().backward();
  std::vector<torch::Tensor> out;
  for (const auto& p : executor.parameters()) {
    REQUIRE(p.grad().defined());
    out.push_back(p.grad().clone());
  }
  return {out, r.recomputed};
}

// The gradients of makeModel()'s ‖model(x)‖² with every segment recomputed, each the same, to
// 1e-6, as with none (which recomputes no call); how many segment calls were recomputed.
int64_t recomputedAlike(const std::function<torch::jit::Module()>& makeModel,
                        const torch::Tensor& x) {
  const auto [plain, none] = gradientsOf(makeModel(), x, false);
  const auto [planned, recomputed] = gradientsOf(makeModel(), x, true);
  CHECK(none == 0);
  REQUIRE(plain.size() == planned.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    CAPTURE(i);
    CHECK(torch::allclose(plain[i], planned[i], 1e-6, 1e-6));
  }
  return recomputed;
}

}  // namespace

TEST_CASE("every combination of per-node, recompute and capture runs through the seam") {
  for (const char* model : kModels) {
    for (int bits = 0; bits < 8; ++bits)
      runsThroughTheSeam(model, bits & 1, bits & 2, bits & 4);
  }
}

// A sampled step (per-node telemetry, or a capture) runs as an unsampled one does: through a
// SegmentExecutor both run the evaluator with the same plan, so their peaks agree within a few
// percent; through the TorchScript executor the measured step runs in the evaluator, which
// frees each value after its last use and so must keep no more alive than TorchScript does.
TEST_CASE("sampling a step keeps its peak memory") {
  for (const char* model : kModels) {
    samplingKeepsThePeak(model, /*recompute=*/false);
    samplingKeepsThePeak(model, /*recompute=*/true);
  }
}

// A plan names segments by their blocks; a block that is not one is an error that lists them.
TEST_CASE("a plan names segments by their blocks and an unknown block is refused") {
  symtune::Trainer trainer(session("dynamic_resnet"));
  symtune::SegmentExecutor executor(*trainer.executor().scriptModule());
  const auto segments = executor.segments();
  REQUIRE(segments.size() > 2);
  symtune::SegmentPlan plan;
  plan.recompute = {segments[1]};
  executor.setPlan(plan);
  CHECK(executor.plan().recompute.size() == size_t{1});
  plan.recompute = {"no.such.block"};
  try {
    executor.setPlan(plan);
    FAIL("an unknown block was accepted");
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    INFO(e.what());
    CHECK(what.find("\"no.such.block\" is not a segment") != std::string::npos);
    CHECK(what.find(segments[1]) != std::string::npos);
  }
  CHECK(executor.plan().recompute.size() == size_t{1});  // the old plan stays
}

// One recomputed segment trains like the plain run and recomputes that block's calls alone.
TEST_CASE("a plan recomputing one segment trains like the plain run") {
  const symtune::Session s = session("dynamic_resnet");
  symtune::Trainer plain(s), planned(s);
  auto executor = std::make_unique<symtune::SegmentExecutor>(*planned.executor().scriptModule());
  auto* segments = executor.get();
  symtune::SegmentPlan plan;
  plan.recompute = {segments->segments().front()};
  segments->setPlan(plan);
  planned.setExecutor(std::move(executor));
  for (int i = 0; i < 3; ++i) {
    const double a = plain.step().loss, b = planned.step().loss;
    INFO("step ", i, ": ", a, " vs ", b);
    CHECK(std::abs(a - b) <= 1e-5 * std::abs(a));
  }
  CHECK(segments->lastRecomputed() == int64_t{1});
}

// A block that writes to its input through a view (a select made in the block, then add_, as
// `x[:, 0] += 1` does) cannot be recomputed from that input, which the recompute would write again:
// it is no segment a plan recomputes, and the step's gradients are the plain run's. Before, it was
// recomputed and the gradients came out wrong.
TEST_CASE("a block that writes to its input through a view is not recomputed") {
  // The model anew for each run: the same parameters, gradients of its own.
  const auto makeModel = [] {
    torch::manual_seed(2);
    torch::jit::Module block("Writes");
    block.register_parameter("w", torch::randn({4, 4}).requires_grad_(), false);
    block.define(R"(
def forward(self, x: Tensor) -> Tensor:
    v = x.select(1, 0)
    v.add_(1.0)
    return torch.tanh(torch.matmul(x, self.w))
)");
    torch::jit::Module head("Head");
    head.register_parameter("w", torch::randn({4, 3}).requires_grad_(), false);
    head.define(R"(
def forward(self, x: Tensor) -> Tensor:
    return torch.matmul(x, self.w)
)");
    torch::jit::Module model("Model");
    model.register_module("block", block);
    model.register_module("head", head);
    model.define(R"(
def forward(self, x: Tensor) -> Tensor:
    h = x * 2.0
    return self.head.forward(self.block.forward(h))
)");
    return model;
  };
  MESSAGE("segment calls recomputed: ", recomputedAlike(makeModel, torch::randn({5, 4})));
}

// A block whose input is written in place after it (`h.mul_(2)` once b has read h, or read a view
// of h) cannot be recomputed from that input either: the recompute would start from the written
// value. Until 2026-12-07 it was recomputed, and the backward failed ("modified by an inplace
// operation").
TEST_CASE("a block whose input is written after it is not recomputed") {
  const struct {
    const char* name;
    const char* forward;
  } rows[] = {{"its input", R"(
def forward(self, x: Tensor) -> Tensor:
    h = self.a.forward(x * 2.0)
    y = self.b.forward(h)
    h.mul_(2.0)
    return y + h
)"},
              {"the tensor its input is a view of", R"(
def forward(self, x: Tensor) -> Tensor:
    h = self.a.forward(x * 2.0)
    y = self.b.forward(h.narrow(0, 1, 3))
    h.mul_(2.0)
    return y.sum() + h.sum()
)"}};
  for (const auto& row : rows) {
    INFO(row.name);
    const auto makeModel = [&] {
      torch::manual_seed(3);
      torch::jit::Module model("Model");
      for (const char* name : {"a", "b"}) {
        torch::jit::Module block("Block");
        block.register_parameter("w", torch::randn({4, 4}).requires_grad_(), false);
        // Its output is saved by nothing of its own (matmul keeps its inputs): the plain run may
        // write to it.
        block.define(R"(
def forward(self, x: Tensor) -> Tensor:
    return torch.matmul(torch.tanh(x), self.w)
)");
        model.register_module(name, block);
      }
      model.define(row.forward);
      return model;
    };
    CHECK(recomputedAlike(makeModel, torch::randn({5, 4})) == 1);  // a: nothing writes its input
  }
}

// Note [Tied parameters once]: a weight two modules share is one parameter. TorchScript's C++
// named_parameters lists it under each name, and the trainer's optimizer stepped it twice a step.
TEST_CASE("a weight two modules share is one parameter, under its first name") {
  torch::manual_seed(2);
  const torch::Tensor shared = torch::randn({4, 4}).requires_grad_();
  torch::jit::Module m("Tied");
  for (const char* name : {"a", "b"}) {
    torch::jit::Module layer("Layer");
    layer.register_parameter("weight", shared, false);
    layer.define("def forward(self, x: Tensor):\n    return torch.matmul(x, self.weight)\n");
    m.register_module(name, layer);
  }
  m.define("def forward(self, x: Tensor):\n    return self.b.forward(self.a.forward(x))\n");
  REQUIRE(m.named_parameters().size() == 2);  // TorchScript's own list: both names
  symtune::ScriptModuleExecutor executor(m, "tied");
  const auto named = executor.namedParameters();
  REQUIRE(named.size() == 1);
  CHECK(named[0].first == "a.weight");
  CHECK(named[0].second.is_same(shared));
  CHECK(executor.parameters().size() == 1);
}
