// GPU activity: CUPTI's records read into GpuRecords (hand-filled records of CUPTI 13's layouts),
// activities attributed to graph nodes through their external correlation (recorded events and
// records, no device needed), the Chrome trace's GPU lanes and flow arrows, and — where a GPU is
// — a real per-node step traced with CUPTI: kernels on the nodes that launched them.

#include "doctest_torch.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_rows.h"
#include "symtune/profiling/cupti_records.h"
#include "symtune/profiling/gpu_activity_tracer.h"
#include "symtune/profiling/nvtx.h"
#include "symtune/runtime/trainer.h"
#include "symtune/telemetry/op_tracer.h"

using symtune::GpuActivity;
using symtune::GpuActivityKind;
using symtune::GpuRecords;
using symtune::NodeId;
using symtune::OpEvent;

namespace {

OpEvent op(const char* name, int64_t start, int64_t duration, int depth, uint64_t external,
           NodeId node = {}, int64_t seq = -1, bool backward = false) {
  OpEvent e;
  e.name = name;
  e.thread = 1;
  e.startNs = start;
  e.durationNs = duration;
  e.depth = depth;
  e.externalId = external;
  e.node = node;
  e.sequenceNr = seq;
  e.backward = backward;
  return e;
}

GpuActivity activity(GpuActivityKind kind, const char* name, int64_t start, int64_t end,
                     uint32_t correlation, int64_t bytes = 0) {
  GpuActivity a;
  a.kind = kind;
  a.name = name;
  a.startNs = start;
  a.endNs = end;
  a.stream = 7;
  a.correlation = correlation;
  a.bytes = bytes;
  return a;
}

// One step on one thread: node 3's linear (an addmm nested in it launches a kernel, the linear
// itself a copy), the loss (no node), node 3's backward in the autograd engine's frame (its mm
// launches two kernels), node 5's relu launching nothing, and the optimizer (no node).
struct RecordedStep {
  std::vector<OpEvent> events;
  symtune::SequenceOwners owners;
  GpuRecords gpu;

  RecordedStep() {
    owners.add(40, 41, NodeId(3));
    events = {
        op("aten::linear", 0, 1000, 0, 10, NodeId(3)),
        op("aten::addmm", 100, 800, 1, 11, NodeId(3)),
        op("aten::relu", 1100, 100, 0, 12, NodeId(5)),
        op("aten::cross_entropy_loss", 1300, 200, 0, 13),
        op("autograd::engine::evaluate_function: AddmmBackward0", 2000, 900, 0, 20),
        op("AddmmBackward0", 2010, 880, 1, 21, {}, 40, true),
        op("aten::mm", 2020, 800, 2, 22),
        op("aten::_foreach_add_", 3000, 300, 0, 30),
    };
    gpu.activities = {
        activity(GpuActivityKind::Memcpy, "Memcpy HtoD", 150, 250, 101, 4096),
        activity(GpuActivityKind::Kernel, "gemm_fwd", 300, 700, 100),
        activity(GpuActivityKind::Kernel, "gemm_bwd", 2100, 2400, 102),
        activity(GpuActivityKind::Kernel, "gemm_bwd", 2400, 2600, 103),
        activity(GpuActivityKind::Kernel, "adam_step", 3100, 3250, 104),
        activity(GpuActivityKind::Kernel, "launched_by_nothing_traced", 3300, 3310, 105),
    };
    gpu.links = {{100, 11}, {101, 10}, {102, 22}, {103, 22}, {104, 30}};
    gpu.dropped = 2;
  }
};

const symtune::NodeStats* statsOf(const symtune::NodeProfile& p, int32_t node) {
  for (const auto& n : p.nodes) {
    if (n.node.value() == node)
      return &n;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("activities belong to the node whose op launched them, forward or backward") {
  RecordedStep step;
  symtune::NodeProfile profile = symtune::attributeOps(step.events, step.owners);
  symtune::attributeGpu(step.events, step.gpu, profile);

  CHECK(profile.gpuTraced);
  CHECK(profile.gpuActivities == 6);
  CHECK(profile.gpuDropped == 2);
  // The optimizer's kernel and the one with no link: 150 + 10 ns.
  CHECK(profile.unattributedDeviceSeconds == doctest::Approx(160e-9).scale(0));

  const symtune::NodeStats* linear = statsOf(profile, 3);
  REQUIRE(linear != nullptr);
  // Forward: the addmm's kernel (400 ns) and the linear's own copy (100 ns) — the copy is device
  // time but not a kernel. Backward: the mm's two kernels inside the engine's frame (500 ns).
  REQUIRE(linear->forwardDeviceSeconds.has_value());
  REQUIRE(linear->backwardDeviceSeconds.has_value());
  CHECK(*linear->forwardDeviceSeconds == doctest::Approx(500e-9).scale(0));
  CHECK(*linear->backwardDeviceSeconds == doctest::Approx(500e-9).scale(0));
  CHECK(linear->kernels == 3);
  REQUIRE(linear->kernelList.size() == 3);
  // Most time first; one entry per name and pass.
  CHECK(linear->kernelList[0].name == "gemm_bwd");
  CHECK(linear->kernelList[0].backward);
  CHECK(linear->kernelList[0].calls == 2);
  CHECK(linear->kernelList[0].seconds == doctest::Approx(500e-9).scale(0));
  CHECK(linear->kernelList[1].name == "gemm_fwd");
  CHECK(!linear->kernelList[1].backward);
  CHECK(linear->kernelList[2].name == "Memcpy HtoD");
  CHECK((linear->kernelList[2].kind == GpuActivityKind::Memcpy));
  CHECK(linear->kernelList[2].bytes == 4096);

  // A node that launched nothing was measured all the same: zero, not unknown.
  const symtune::NodeStats* relu = statsOf(profile, 5);
  REQUIRE(relu != nullptr);
  CHECK(relu->forwardDeviceSeconds.value_or(-1) == 0.0);
  CHECK(relu->kernels == 0);
  CHECK(relu->kernelList.empty());
}

TEST_CASE("attributing twice gives the same figures") {
  RecordedStep step;
  symtune::NodeProfile profile = symtune::attributeOps(step.events, step.owners);
  symtune::attributeGpu(step.events, step.gpu, profile);
  symtune::attributeGpu(step.events, step.gpu, profile);
  const symtune::NodeStats* linear = statsOf(profile, 3);
  REQUIRE(linear != nullptr);
  CHECK(linear->kernels == 3);
  CHECK(*linear->forwardDeviceSeconds == doctest::Approx(500e-9).scale(0));
  CHECK(profile.unattributedDeviceSeconds == doctest::Approx(160e-9).scale(0));
}

TEST_CASE("the Chrome trace has a lane per stream and an arrow from each op to its kernels") {
  RecordedStep step;
  symtune::attributeOps(step.events, step.owners);
  const auto trace =
      nlohmann::json::parse(symtune::chromeTrace(step.events, {}, nullptr, &step.gpu));
  const auto& list = trace["traceEvents"];
  std::set<std::string> lanes;
  int kernels = 0, flowStarts = 0, flowEnds = 0;
  for (const auto& e : list) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["pid"] == 100)
      lanes.insert(e["args"]["name"].get<std::string>());
    if (ph == "X" && e["pid"] == 100) {
      ++kernels;
      CHECK(e["tid"] == 7);
      if (e["name"] == "gemm_fwd") {
        CHECK(e["args"]["op"] == "aten::addmm");
        CHECK(e["args"]["node"] == 3);
        CHECK(e["dur"].get<double>() == doctest::Approx(0.4));
      }
    }
    if (ph == "s") {
      ++flowStarts;
      CHECK(e["pid"] == 1);
    }
    if (ph == "f") {
      ++flowEnds;
      CHECK(e["pid"] == 100);
      CHECK(e["bp"] == "e");
    }
  }
  CHECK(lanes == std::set<std::string>{"GPU 0", "stream 7"});
  CHECK(kernels == 6);
  // Every linked activity has its arrow; the unlinked one has none.
  CHECK(flowStarts == 5);
  CHECK(flowEnds == 5);
  // An arrow's two ends share its id, the activity's correlation.
  std::multiset<uint32_t> starts, ends;
  for (const auto& e : list) {
    if (e["ph"] == "s")
      starts.insert(e["id"].get<uint32_t>());
    if (e["ph"] == "f")
      ends.insert(e["id"].get<uint32_t>());
  }
  CHECK(starts == ends);
}

TEST_CASE("without GPU records the trace has no GPU lanes") {
  RecordedStep step;
  const auto trace = nlohmann::json::parse(symtune::chromeTrace(step.events, {}));
  for (const auto& e : trace["traceEvents"])
    CHECK(e["pid"] == 1);
}

#ifdef SYMTUNE_HAVE_CUPTI
// A record as CUPTI hands it over: bytes in a buffer, read through its `kind`.
template <typename Record>
bool readRaw(const Record& record, int64_t offset, GpuRecords& out) {
  alignas(8) unsigned char buffer[sizeof(Record)];
  std::memcpy(buffer, &record, sizeof record);
  return symtune::cupti::readRecord(*reinterpret_cast<const CUpti_Activity*>(buffer), offset, out);
}

TEST_CASE("CUPTI 13's records are read with their times on the host clock") {
  GpuRecords out;
  const int64_t offset = 1'000'000;

  CUpti_ActivityKernel10 kernel;
  std::memset(&kernel, 0, sizeof kernel);
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  kernel.start = 5000;
  kernel.end = 7000;
  kernel.deviceId = 1;
  kernel.streamId = 13;
  kernel.correlationId = 77;
  kernel.name = "_ZN2at6native18elementwise_kernelEv";  // at::native::elementwise_kernel()
  CHECK(readRaw(kernel, offset, out));

  CUpti_ActivityMemcpy6 copy;
  std::memset(&copy, 0, sizeof copy);
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  copy.bytes = 1 << 20;
  copy.start = 8000;
  copy.end = 9000;
  copy.correlationId = 78;
  CHECK(readRaw(copy, offset, out));

  CUpti_ActivityMemset4 set;
  std::memset(&set, 0, sizeof set);
  set.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  set.bytes = 512;
  set.start = 9500;
  set.end = 9600;
  set.correlationId = 79;
  CHECK(readRaw(set, offset, out));

  CUpti_ActivityExternalCorrelation mine{}, kineto{};
  mine.kind = kineto.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  mine.externalKind = symtune::cupti::kExternalKind;
  mine.externalId = 4242;
  mine.correlationId = 77;
  kineto.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;  // LibTorch's profiler's
  kineto.externalId = 1;
  kineto.correlationId = 77;
  CHECK(readRaw(mine, offset, out));
  CHECK(!readRaw(kineto, offset, out));

  CUpti_ActivityKernel10 other;  // a kind Symtune does not read
  std::memset(&other, 0, sizeof other);
  other.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  CHECK(!readRaw(other, 0, out));

  REQUIRE(out.activities.size() == 3);
  const GpuActivity& k = out.activities[0];
  CHECK((k.kind == GpuActivityKind::Kernel));
  CHECK(k.name == "at::native::elementwise_kernel()");
  CHECK(k.startNs == 5000 + offset);
  CHECK(k.endNs == 7000 + offset);
  CHECK(k.device == 1);
  CHECK(k.stream == 13);
  CHECK(k.correlation == 77);
  CHECK(out.activities[1].name == "Memcpy DtoH");
  CHECK(out.activities[1].bytes == (1 << 20));
  CHECK(out.activities[1].startNs == 8000 + offset);
  CHECK(out.activities[2].name == "Memset");
  CHECK(out.activities[2].bytes == 512);
  REQUIRE(out.links.size() == 1);
  CHECK(out.links[0].correlation == 77);
  CHECK(out.links[0].external == 4242);
}

// Every entry point Symtune looks up is in CUPTI 11 and 12 as well, whose records are laid out
// otherwise: a libcupti of another major was read past its records' ends. Its version tells.
TEST_CASE("a libcupti of another major than this build's is refused by its version") {
  // CUPTI 12.x says 19 to 28 (cupti_version.h); from 13.0 the version is major, minor and patch.
  const auto older = symtune::cupti::versionMismatch(28);
  REQUIRE(older.has_value());
  CHECK(older->find("libcupti's API version is 28, not CUPTI 13's") == 0);
  CHECK(symtune::cupti::versionMismatch(19).has_value());
  CHECK(symtune::cupti::versionMismatch(140000).has_value());
  // Another minor or patch of the same major is this build's layout.
  CHECK_FALSE(symtune::cupti::versionMismatch(CUPTI_API_VERSION).has_value());
  CHECK_FALSE(symtune::cupti::versionMismatch(130000).has_value());
  CHECK_FALSE(symtune::cupti::versionMismatch(130200).has_value());
  // This machine's is not refused for its version.
  const auto why = symtune::GpuActivityTracer::unavailableReason();
  CHECK((!why || why->find("API version") == std::string::npos));
}
#endif

TEST_CASE("tracing says why it cannot run, and refuses to start there") {
  const auto why = symtune::GpuActivityTracer::unavailableReason();
  if (!why) {
    MESSAGE("GPU activity tracing is available here");
    return;
  }
  MESSAGE("GPU activity tracing is unavailable here: ", *why);
  CHECK(!why->empty());
  CHECK_THROWS_WITH_AS(symtune::GpuActivityTracer::start(),
                       ("GPU activity tracing is unavailable: " + *why).c_str(),
                       std::runtime_error);
  CHECK(!symtune::GpuActivityTracer::running());
  CHECK(symtune::GpuActivityTracer::take().activities.empty());
}

TEST_CASE("a per-node step on CUDA puts each node's kernels on it") {
  if (!symtune::test::cudaRowsRun())
    return;
  if (auto why = symtune::GpuActivityTracer::unavailableReason())
    FAIL("a GPU is here but GPU activity tracing is not: ", *why);
  symtune::Session s;
  s.name = "gpu-activity";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.run.device = "cuda";
  symtune::Trainer trainer(s);
  CHECK(!trainer.gpuTraceNote().has_value());
  trainer.step();  // TorchScript's profiling run
  trainer.setTelemetry(symtune::Telemetry::PerNode);
  trainer.setKeepEvents(true);
  const symtune::StepResult r = trainer.step();
  trainer.setTelemetry(symtune::Telemetry::Features);
  REQUIRE(r.nodes != nullptr);
  const symtune::NodeProfile& p = *r.nodes;
  CHECK(p.gpuTraced);
  CHECK(p.gpuDropped == 0);
  CHECK(p.gpuActivities > 0);
  int64_t kernels = 0, convsWithKernels = 0;
  double device = 0;
  const symtune::Graph& graph = trainer.staticGraph();
  for (const auto& n : p.nodes) {
    kernels += n.kernels;
    device += n.forwardDeviceSeconds.value_or(0) + n.backwardDeviceSeconds.value_or(0);
    if (graph.node(n.node).kind == "aten::conv2d" && n.kernels > 0) {
      ++convsWithKernels;
      CHECK(n.backwardDeviceSeconds.value_or(0) > 0);  // its backward launched kernels too
      CHECK(n.cudaBytesAllocated > 0);                 // its output lives on the GPU
    }
  }
  MESSAGE("kernels on nodes: ", kernels, ", activities: ", p.gpuActivities, ", device time on ",
          "nodes ", device * 1e3, " ms, unattributed ", p.unattributedDeviceSeconds * 1e3, " ms");
  CHECK(kernels > 0);
  CHECK(convsWithKernels > 0);
  // The GPU's time on nodes fits in the step: kernels run one after another on one stream here.
  CHECK(device <= r.seconds);

  const GpuRecords gpu = trainer.takeGpuRecords();
  std::vector<OpEvent> events = trainer.takeEvents();
  const auto trace = nlohmann::json::parse(symtune::chromeTrace(events, {}, &graph, &gpu));
  int lanes = 0, flows = 0;
  for (const auto& e : trace["traceEvents"]) {
    lanes += e["ph"] == "X" && e["pid"].get<int>() >= 100;
    flows += e["ph"] == "f";
  }
  CHECK(lanes == static_cast<int>(gpu.activities.size()));
  CHECK(flows > 0);
}

TEST_CASE("with GPU tracing off, a per-node step on CUDA times nodes with CUDA events") {
  if (!symtune::test::cudaRowsRun())
    return;
  symtune::Session s;
  s.name = "cuda-events";
  s.model.zoo = "dynamic_resnet";
  s.model.preset = "ci";
  s.run.device = "cuda";
  s.run.gpuTrace = false;
  symtune::Trainer trainer(s);
  REQUIRE(trainer.gpuTraceNote().has_value());
  CHECK(trainer.gpuTraceNote()->find("run.gpu_trace is false") != std::string::npos);
  trainer.step();
  trainer.setTelemetry(symtune::Telemetry::PerNode);
  const symtune::StepResult r = trainer.step();
  trainer.setTelemetry(symtune::Telemetry::Features);
  REQUIRE(r.nodes != nullptr);
  CHECK(!r.nodes->gpuTraced);
  int64_t timed = 0, withCudaMemory = 0;
  for (const auto& n : r.nodes->nodes) {
    timed += n.forwardDeviceSeconds.value_or(0) > 0;
    withCudaMemory += n.cudaBytesAllocated > 0;
    CHECK(n.kernels == 0);  // kernels are CUPTI's to count
    CHECK(n.kernelList.empty());
  }
  MESSAGE(timed, " of ", r.nodes->nodes.size(), " nodes timed by CUDA events, ", withCudaMemory,
          " with CUDA allocations");
  CHECK(timed > 0);
  CHECK(withCudaMemory > 0);
}

TEST_CASE("NVTX ranges are a session switch: a run with them trains, or says why it cannot") {
  symtune::Session s;
  s.name = "nvtx";
  s.model.zoo = "dynamic_tagger";
  s.model.preset = "ci";
  s.run.nvtx = true;
  if (auto why = symtune::nvtx::unavailableReason()) {
    CHECK_THROWS_WITH_AS(symtune::Trainer{s},
                         ("run.nvtx: NVTX ranges are unavailable: " + *why).c_str(),
                         symtune::SetupError);
    return;
  }
  symtune::Trainer trainer(s);
  CHECK(symtune::nvtx::enabled());
  // Ranges on every part of a step, per-node too (the evaluator names each node's range); with
  // no profiler attached they cost a call each and change nothing.
  const double plain = trainer.step().loss;
  trainer.setTelemetry(symtune::Telemetry::PerNode);
  const symtune::StepResult sampled = trainer.step();
  CHECK(std::isfinite(plain));
  CHECK(std::isfinite(sampled.loss));
  REQUIRE(sampled.nodes != nullptr);
  CHECK(!sampled.nodes->nodes.empty());
  symtune::nvtx::setEnabled(false);
  CHECK(!symtune::nvtx::enabled());
}
