// Per-node telemetry: ops attributed to graph nodes (forward by the node the evaluator published,
// backward by sequence number), op memory, and the acceptance figures of MetaInfoBroker: per-node
// times account for the step's forward and backward time.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "symtune/binding/binder.h"
#include "symtune/remat/rematerializer.h"
#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/memory_tracker.h"
#include "symtune/telemetry/op_tracer.h"

using symtune::NodeId;
using symtune::OpEvent;
using symtune::Telemetry;

namespace {

OpEvent opEvent(const char* name, uint64_t thread, int64_t start, int64_t duration, int depth,
                NodeId node = {}, int64_t seq = -1, bool backward = false) {
  OpEvent e;
  e.name = name;
  e.thread = thread;
  e.startNs = start;
  e.durationNs = duration;
  e.depth = depth;
  e.node = node;
  e.sequenceNr = seq;
  e.backward = backward;
  return e;
}

symtune::Session ciSession() {
  symtune::Session s;
  s.name = "nodes";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.optimizer.lr = 3e-3;
  return s;
}

// A relative tolerance, as Qt's fuzzy compare of doubles had: doctest::Approx's default also
// allows an absolute 1e-5 or so, far more than the nanosecond-scale times compared here.
doctest::Approx relativeApprox(double want) {
  return doctest::Approx(want).scale(0);
}

}  // namespace

TEST_CASE("sequence owners find the node whose range holds a sequence number") {
  symtune::SequenceOwners owners;
  owners.add(10, 12, NodeId(3));
  owners.add(12, 13, NodeId(4));
  owners.add(20, 25, NodeId(5));
  owners.add(30, 30, NodeId(6));  // an op that created no autograd function
  CHECK(!owners.ownerOf(9).valid());
  CHECK(owners.ownerOf(10).value() == 3);
  CHECK(owners.ownerOf(11).value() == 3);
  CHECK(owners.ownerOf(12).value() == 4);
  CHECK(!owners.ownerOf(13).valid());
  CHECK(owners.ownerOf(24).value() == 5);
  CHECK(!owners.ownerOf(25).valid());
  CHECK(!owners.ownerOf(30).valid());
}

TEST_CASE("attribution sums the outermost ops only") {
  symtune::SequenceOwners owners;
  owners.add(100, 101, NodeId(1));
  std::vector<OpEvent> events = {
      // Thread 1, forward: conv2d for node 1 with two nested ops, then the loss (no node).
      opEvent("aten::conv2d", 1, 0, 1000, 0, NodeId(1)),
      opEvent("aten::convolution", 1, 10, 900, 1, NodeId(1)),
      opEvent("aten::empty", 1, 20, 5, 2, NodeId(1)),
      opEvent("aten::cross_entropy_loss", 1, 1100, 300, 0),
      // Thread 2, backward: the conv's autograd function, in the engine's frame, with a nested
      // op; and one of no node.
      opEvent("autograd::engine::evaluate_function: ConvolutionBackward0", 2, 1990, 2100, 0),
      opEvent("ConvolutionBackward0", 2, 2000, 2000, 1, {}, 100, true),
      opEvent("aten::convolution_backward", 2, 2010, 1900, 2, {}, 100),
      // After the function, in its frame: the engine adds the gradient to another consumer's
      // (the frame's time, credited whole, holds it; it is no forward call of the node).
      opEvent("aten::add_", 2, 4010, 50, 1),
      opEvent("NllLossBackward0", 2, 1500, 400, 0, {}, 7, true),
      // A caller's own outer op around a forward op of node 2.
      opEvent("user_region", 1, 5000, 1000, 0),
      opEvent("aten::relu", 1, 5100, 600, 1, NodeId(2)),
  };
  std::sort(events.begin(), events.end(),
            [](const OpEvent& a, const OpEvent& b) { return a.startNs < b.startNs; });
  const symtune::NodeProfile p = symtune::attributeOps(events, owners);
  REQUIRE(p.nodes.size() == 2u);
  CHECK(p.nodes[0].node.value() == 1);
  CHECK(p.nodes[0].calls == 1);
  CHECK(p.nodes[0].backwardCalls == 1);
  CHECK(p.nodes[0].forwardSeconds == relativeApprox(1000e-9));
  CHECK(p.nodes[0].backwardSeconds == relativeApprox(2100e-9));  // the engine's frame counts too
  CHECK(p.nodes[1].forwardSeconds == relativeApprox(600e-9));
  CHECK(p.attributedSeconds == relativeApprox(3700e-9));
  // The loss, its backward and the caller's region less the node op inside it.
  CHECK(std::abs(p.unattributedSeconds - (300e-9 + 400e-9 + 400e-9)) < 1e-15);
  REQUIRE(!p.unattributed.empty());
  CHECK(p.unattributed.front().first == "user_region");
  // Nested ops of the autograd function inherit its node (for the trace).
  for (const auto& e : events) {
    if (e.name == "aten::convolution_backward")
      CHECK(e.node.value() == 1);
  }
}

// The acceptance test: on a CPU model (the zoo's cpu preset, where ops are not dwarfed by
// per-op overhead), the ops attributed to graph nodes account for the forward and backward
// wall time within 20 % (median of three steps; 10 % until 2026-12-07, below), and nothing is
// counted twice: nodes plus the ops of no node (loss, gradient accumulation, optimizer, data) stay
// within the step's time.
TEST_CASE("per-node times sum to the step's forward and backward time") {
  at::set_num_threads(2);
  symtune::Session session = ciSession();
  session.model.preset = "cpu";
  symtune::Trainer trainer(session);
  trainer.setTelemetry(Telemetry::PerNode);
  const symtune::Graph& graph = trainer.staticGraph();
  trainer.step();  // first step: allocator and kernels warm up
  // The binder's measurements of a bucket it meets for the first time replay its candidates
  // inside the step, as no node (docs/binding.md): a step that measured is not counted. The
  // ResNet's gates open blocks in later steps, whose sites are measured then.
  const auto measurements = [&trainer] {
    return trainer.binder() != nullptr ? trainer.binder()->measurements() : 0;
  };
  std::vector<double> ratios;
  for (int i = 0; i < 12 && ratios.size() < 3; ++i) {
    const auto measuredBefore = measurements();
    const symtune::StepResult r = trainer.step();
    const bool measured = measurements() != measuredBefore;
    INFO("step ", r.step);
    REQUIRE(r.nodes != nullptr);
    const auto& f = r.features;
    const double modelSeconds =
        f[symtune::Feature::ForwardTime] + f[symtune::Feature::BackwardTime];
    const double ratio = r.nodes->attributedSeconds / modelSeconds;
    if (!measured)
      ratios.push_back(ratio);
    std::printf(
        "step %lld%s: nodes %.1f ms of forward+backward %.1f ms (%.1f %%); ops of no "
        "node %.1f ms (largest %s); step %.1f ms\n",
        static_cast<long long>(r.step), measured ? " (the binder measured)" : "",
        r.nodes->attributedSeconds * 1e3, modelSeconds * 1e3, 100 * ratio,
        r.nodes->unattributedSeconds * 1e3,
        r.nodes->unattributed.empty() ? "-" : r.nodes->unattributed.front().first.c_str(),
        r.seconds * 1e3);
    for (size_t k = 0; k < std::min<size_t>(5, r.nodes->unattributed.size()); ++k)
      std::printf("  no node: %s %.2f ms\n", r.nodes->unattributed[k].first.c_str(),
                  r.nodes->unattributed[k].second * 1e3);
    CHECK(r.nodes->attributedSeconds + r.nodes->unattributedSeconds <= r.seconds);
    int convs = 0;
    for (const auto& n : r.nodes->nodes) {
      INFO("node ", n.node.value());
      REQUIRE((n.node.valid() && static_cast<size_t>(n.node.value()) < graph.nodes().size()));
      if (graph.node(n.node).kind != "aten::conv2d")
        continue;
      ++convs;
      CHECK(n.forwardSeconds > 0);
      // Its output was allocated while it ran: at least batch x channels x 1 x 1 floats.
      CHECK(n.bytesAllocated >= 16 * 4);
      CHECK((n.liveBytesAfter.has_value() && *n.liveBytesAfter > 0));
      INFO("a conv's backward is attributed to it");
      CHECK(n.backwardCalls >= 1);
    }
    CHECK(convs >= 50);
  }
  // Nothing counted twice: at most the phases' time, give or take the clock reads' own share
  // (ops are timed inside RecordFunction callbacks, phases around them; under a loaded machine
  // the median has come out at 1.001). The floor was 0.9 until 2026-12-07, met at 0.90-0.92 only
  // because the ops an engine frame runs after its function (the gradient adds of InputBuffer)
  // were counted twice, in the frame's credit and again as forward calls ("attribution sums the
  // outermost ops only" above now holds one). Counted once, the median came out at 0.87-0.89 on
  // this project's 2-core machine, and 0.857 with another test running beside it. The rest is the
  // loss, gradient accumulation (AccumulateGrad, 2-3 %), and the time between ops: the
  // evaluator's, the autograd engine's, RecordFunction's own (the tracer's callbacks themselves
  // took about 1 ms of a 130 ms step), and the scalar ops the JIT runs without RecordFunction.
  REQUIRE(ratios.size() == 3);
  std::sort(ratios.begin(), ratios.end());
  INFO("median of attributed / (forward + backward): ", ratios[1]);
  CHECK((ratios[1] >= 0.8 && ratios[1] <= 1.02));
}

// (A per-node step's peak against an unsampled one's: tests/engine/exec/tst_executor.cpp.)

// A trainer records its own steps only: paused between them, its tracer leaves what runs there
// (another trainer's steps in a benchmark, a validation pass) without callbacks.
TEST_CASE("a paused tracer records nothing; resumed, it records again") {
  symtune::OpTracer tracer;
  tracer.start();
  const torch::Tensor a = torch::ones({4});
  tracer.takeEvents();
  tracer.pause();
  const torch::Tensor b = a + 1;
  tracer.resume();
  const torch::Tensor c = a * 2;
  const std::vector<OpEvent> events = tracer.takeEvents();
  tracer.stop();
  bool added = false, multiplied = false;
  for (const OpEvent& e : events) {
    added = added || e.name == "aten::add";
    multiplied = multiplied || e.name == "aten::mul";
  }
  CHECK_FALSE(added);
  CHECK(multiplied);
  CHECK(b.sum().item<float>() == 8);  // the ops ran, recorded or not
  CHECK(c.sum().item<float>() == 8);
}

// Note [A paused tracer lets go] in op_tracer.cpp: one records at a time, but a paused one lets
// another record. Until 2026-12-07 a second per-node trainer in the process (symtune-bench
// --telemetry per-node with two modes) failed: "another OpTracer is recording".
TEST_CASE("two per-node trainers take turns, each recording its own steps") {
  at::set_num_threads(2);
  symtune::Trainer first(ciSession()), second(ciSession());
  first.setTelemetry(Telemetry::PerNode);
  REQUIRE_NOTHROW(second.setTelemetry(Telemetry::PerNode));
  for (int i = 0; i < 2; ++i) {
    INFO("round ", i);
    for (symtune::Trainer* t : {&first, &second}) {
      const symtune::StepResult r = t->step();
      REQUIRE(r.nodes != nullptr);
      CHECK(r.nodes->attributedSeconds > 0);
      CHECK(r.nodes->attributedSeconds + r.nodes->unattributedSeconds <= r.seconds);
    }
  }
  // A step that throws lets go too: it left its tracer recording, and the next trainer's step
  // failed ("another OpTracer is recording").
  symtune::Session tight = ciSession();
  tight.remat.enabled = true;
  tight.remat.budgetMb = 0.01;
  symtune::Trainer failing(tight);
  failing.setTelemetry(Telemetry::PerNode);
  CHECK_THROWS_AS(failing.step(), symtune::remat::RematInfeasible);
  CHECK(second.step().nodes != nullptr);
  // While one records, another does not start.
  symtune::OpTracer recording, other;
  recording.start();
  CHECK_THROWS_WITH(other.start(), doctest::Contains("another OpTracer is recording"));
  recording.pause();
  CHECK_NOTHROW(other.start());
  CHECK_THROWS_WITH(recording.resume(), doctest::Contains("another OpTracer is recording"));
  other.stop();
  CHECK_NOTHROW(recording.resume());
  recording.stop();
}

TEST_CASE("with telemetry off nothing is measured") {
  at::set_num_threads(2);
  symtune::Trainer trainer(ciSession());
  trainer.setTelemetry(Telemetry::Off);
  const symtune::StepResult r = trainer.step();
  CHECK(r.seconds > 0);
  CHECK(r.features[symtune::Feature::StepTime] == 0.0);
  CHECK(r.nodes == nullptr);
  CHECK(trainer.broker().history().empty());
  trainer.setTelemetry(Telemetry::Features);
  CHECK(trainer.step().features[symtune::Feature::StepTime] > 0);
}
