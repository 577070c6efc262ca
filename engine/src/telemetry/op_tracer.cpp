#include "symtune/telemetry/op_tracer.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <ATen/record_function.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include "symtune/core/graph.h"
#include "symtune/profiling/gpu_activity_tracer.h"
#include "symtune/telemetry/memory_tracker.h"

namespace symtune {

namespace {

// A pair of CUDA events around one outermost op, reused from step to step.
struct DeviceSpan {
  c10::Event begin{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event end{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
};

}  // namespace

struct OpTracer::Buffer {
  uint64_t thread = 0;
  std::vector<OpEvent> events;
  std::vector<std::unique_ptr<DeviceSpan>> spans;  // spans[i] timed events[spanOwners[i]]
  std::vector<size_t> spanOwners;
  size_t spansUsed = 0;
};

namespace {

std::atomic<uint64_t> gGeneration{1};
std::atomic<OpTracer*> gActive{nullptr};
std::atomic<uint64_t> gNextExternalId{1};  // Note [External correlation]: unique in the process

struct ThreadSlot {
  uint64_t generation = 0;
  OpTracer::Buffer* buffer = nullptr;
};
thread_local ThreadSlot tSlot;
thread_local int tDepth = 0;              // RecordFunctions of ours open on this thread
std::atomic<int> gCudaCaptures{0};        // OpTracer::CudaCaptureScope: captures under way
constexpr size_t kUnfinished = SIZE_MAX;  // a span whose op has not ended while recording
// The name prefix of the autograd engine's frame around each function it runs.
constexpr const char* kEngineFrame = "autograd::engine::evaluate_function: ";

struct StartContext : at::ObserverContext {
  int64_t startNs = 0;
  int64_t step = -1;
  int depth = 0;
  NodeId node;
  ThreadMemoryTotals memory;
  int64_t span = -1;  // index into the thread buffer's spans
  uint64_t externalId = 0;
  std::string shapes;
};

std::string shapesOf(c10::ArrayRef<const c10::IValue> inputs) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i > 0)
      s << ", ";
    if (inputs[i].isTensor() && inputs[i].toTensor().defined()) {
      s << inputs[i].toTensor().sizes();
    } else {
      s << "[]";
    }
  }
  s << ']';
  return s.str();
}

c10::Stream currentCudaStream() {
  const c10::impl::DeviceGuardImplInterface* impl =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return impl->getStream(impl->getDevice());
}

}  // namespace

// Gives the C-style callbacks access to the tracer's internals.
struct TracerAccess {
  static std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn) {
    OpTracer* tracer = gActive.load(std::memory_order_acquire);
    if (tracer == nullptr)
      return nullptr;
    auto ctx = std::make_unique<StartContext>();
    ctx->step = tracer->step_.load(std::memory_order_relaxed);
    ctx->depth = tDepth++;
    ctx->node = currentNode();
    ctx->memory = threadMemoryTotals();
    if (tracer->options_.shapes)
      ctx->shapes = shapesOf(fn.inputs());
    if (tracer->options_.deviceTime && ctx->depth == 0 && gCudaCaptures.load() == 0) {
      OpTracer::Buffer& buffer = tracer->bufferForThisThread();
      if (buffer.spansUsed == buffer.spans.size()) {
        buffer.spans.push_back(std::make_unique<DeviceSpan>());
        buffer.spanOwners.push_back(kUnfinished);
      }
      buffer.spanOwners[buffer.spansUsed] = kUnfinished;
      ctx->span = static_cast<int64_t>(buffer.spansUsed++);
      buffer.spans[static_cast<size_t>(ctx->span)]->begin.record(currentCudaStream());
    }
    if (tracer->options_.gpuActivity) {
      ctx->externalId = gNextExternalId.fetch_add(1, std::memory_order_relaxed);
      GpuActivityTracer::pushExternal(ctx->externalId);
    }
    ctx->startNs = OpTracer::nowNs();  // last: the bookkeeping above is not the op's time
    return ctx;
  }

  static void onEnd(const at::RecordFunction& fn, at::ObserverContext* raw) {
    auto* ctx = static_cast<StartContext*>(raw);
    if (ctx == nullptr)
      return;
    const int64_t endNs = OpTracer::nowNs();
    --tDepth;
    if (ctx->externalId != 0)
      GpuActivityTracer::popExternal();
    OpTracer* tracer = gActive.load(std::memory_order_acquire);
    if (tracer == nullptr)
      return;
    OpEvent e;
    e.name = fn.name();
    e.startNs = ctx->startNs;
    e.durationNs = endNs - ctx->startNs;
    e.sequenceNr = fn.seqNr();
    e.step = ctx->step;
    e.backward = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
    e.depth = ctx->depth;
    e.node = ctx->node;
    const ThreadMemoryTotals& now = threadMemoryTotals();
    e.bytesAllocated = now.allocated - ctx->memory.allocated;
    e.bytesFreed = now.freed - ctx->memory.freed;
    e.cudaBytesAllocated = now.cudaAllocated - ctx->memory.cudaAllocated;
    e.cudaBytesFreed = now.cudaFreed - ctx->memory.cudaFreed;
    e.externalId = ctx->externalId;
    if (ctx->depth == 0)
      e.liveBytesAfter = MemoryTracker::activeLiveBytes();
    e.shapes = std::move(ctx->shapes);
    OpTracer::Buffer& buffer = tracer->bufferForThisThread();
    e.thread = buffer.thread;
    if (ctx->span >= 0 && gCudaCaptures.load() == 0) {  // else left unfinished: not timed
      const auto span = static_cast<size_t>(ctx->span);
      buffer.spans[span]->end.record(currentCudaStream());
      buffer.spanOwners[span] = buffer.events.size();
    }
    buffer.events.push_back(std::move(e));
  }
};

OpTracer::OpTracer() : generation_(gGeneration.fetch_add(1)) {
}

OpTracer::CudaCaptureScope::CudaCaptureScope() {
  ++gCudaCaptures;
}

OpTracer::CudaCaptureScope::~CudaCaptureScope() {
  --gCudaCaptures;
}

OpTracer::~OpTracer() {
  try {
    stop();
  } catch (const std::exception&) {  // collecting the GPU's records failed: a device gone wrong
  }
}

int64_t OpTracer::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

OpTracer::Buffer& OpTracer::bufferForThisThread() {
  if (tSlot.generation != generation_) {  // first op of this thread for this tracer
    std::lock_guard<std::mutex> lock(mutex_);
    buffers_.push_back(std::make_unique<Buffer>());
    buffers_.back()->thread = buffers_.size();
    tSlot = {generation_, buffers_.back().get()};
  }
  return *tSlot.buffer;
}

void OpTracer::start(const OpTracerOptions& options) {
  if (handle_ != 0)
    return;
  options_ = options;
  gpu_ = GpuRecords{};  // another window's, nobody took
  acquire();
  handle_ = at::addGlobalCallback(
      at::RecordFunctionCallback(&TracerAccess::onStart, &TracerAccess::onEnd)
          .needsInputs(options.shapes)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

// Note [A paused tracer lets go]
// One tracer records at a time (the RecordFunction callback attributes ops to its buffers, and
// CUPTI's activity is the process's), but a paused one records nothing: it lets go of both, so
// another (a benchmark's next mode, a second trainer in the process) may record between its
// steps, and takes them back on resume. Until 2026-12-07 a paused tracer held them: a second
// per-node trainer failed ("another OpTracer is recording"), and CUPTI recorded whatever ran
// between the steps.
void OpTracer::acquire() {
  OpTracer* expected = nullptr;
  TORCH_CHECK(gActive.compare_exchange_strong(expected, this),
              "another OpTracer is recording; one at a time");
  if (options_.gpuActivity) {
    try {
      GpuActivityTracer::start();
    } catch (...) {
      gActive.store(nullptr, std::memory_order_release);
      throw;
    }
    tracingGpu_ = true;
    options_.deviceTime = false;  // the activity records time the device (Note [Device time])
  }
}

void OpTracer::release() {
  // Let go of both whatever collecting throws (a device gone wrong: synchronising fails): held,
  // they kept every other tracer from recording.
  struct LetGo {
    OpTracer& tracer;
    ~LetGo() {
      if (tracer.tracingGpu_)
        GpuActivityTracer::stop();
      tracer.tracingGpu_ = false;
      gActive.store(nullptr, std::memory_order_release);
    }
  } letGo{*this};
  if (tracingGpu_)
    collectGpu();  // what ran up to here is this window's
}

void OpTracer::collectGpu() {
  torch::cuda::synchronize();  // every kernel launched so far has ended: its record is complete
  GpuRecords more = GpuActivityTracer::take();
  gpu_.activities.insert(gpu_.activities.end(), std::make_move_iterator(more.activities.begin()),
                         std::make_move_iterator(more.activities.end()));
  gpu_.links.insert(gpu_.links.end(), more.links.begin(), more.links.end());
  gpu_.dropped += more.dropped;
}

void OpTracer::pause() {
  if (handle_ != 0 && !paused_) {
    at::disableCallback(handle_);
    paused_ = true;
    release();  // Note [A paused tracer lets go]
  }
}

OpTracer::Recording::~Recording() {
  try {
    tracer_.pause();
  } catch (const std::exception&) {  // as ~OpTracer: the tracer let go all the same
  }
}

void OpTracer::resume() {
  if (handle_ != 0 && paused_) {
    try {
      acquire();
    } catch (const std::runtime_error& e) {
      // CUPTI refused since (another profiler took its buffers): CUDA events, and why.
      if (!options_.gpuActivity)
        throw;
      gpuRefused_ = e.what();
      options_.gpuActivity = false;
      options_.deviceTime = true;
      acquire();
    }
    at::reenableCallback(handle_);
    paused_ = false;
  }
}

void OpTracer::stop() {
  if (handle_ == 0)
    return;
  at::removeCallback(handle_);
  handle_ = 0;
  if (!paused_)
    release();
  paused_ = false;
}

GpuRecords OpTracer::takeGpuRecords() {
  return std::exchange(gpu_, GpuRecords{});
}

std::vector<OpEvent> OpTracer::takeEvents() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tracingGpu_) {
    gpu_ = GpuRecords{};  // the span of these events' only (a step's start drops what came before)
    collectGpu();
  }
  std::vector<OpEvent> all;
  for (auto& b : buffers_) {
    for (size_t i = 0; i < b->spansUsed; ++i) {
      if (b->spanOwners[i] == kUnfinished)
        continue;
      DeviceSpan& span = *b->spans[i];
      span.end.synchronize();
      b->events[b->spanOwners[i]].deviceNs =
          static_cast<int64_t>(span.begin.elapsedTime(span.end) * 1e6);  // ms
    }
    b->spansUsed = 0;
    all.insert(all.end(), std::make_move_iterator(b->events.begin()),
               std::make_move_iterator(b->events.end()));
    b->events.clear();
  }
  // By start; an op and the first op nested in it may share a start: the outer one first.
  std::sort(all.begin(), all.end(), [](const OpEvent& a, const OpEvent& b) {
    return a.startNs != b.startNs ? a.startNs < b.startNs : a.depth < b.depth;
  });
  return all;
}

NodeProfile attributeOps(std::vector<OpEvent>& events, const SequenceOwners& owners) {
  NodeProfile profile;
  std::map<int32_t, NodeStats> nodes;
  std::map<std::string, double> unattributed;
  // Per thread, the chain of ops open at the current event: an event's parent is the chain's
  // last entry one level up.
  struct Open {
    size_t event;
    bool summed;   // it, or an op enclosing it, is summed in a node already
    bool counted;  // it is summed in a node
  };
  std::map<uint64_t, std::vector<Open>> chains;
  profile.ops = static_cast<int64_t>(events.size());
  for (size_t i = 0; i < events.size(); ++i) {  // by start time: parents come before children
    OpEvent& e = events[i];
    if (profile.step < 0)
      profile.step = e.step;
    auto& chain = chains[e.thread];
    chain.resize(std::min(chain.size(), static_cast<size_t>(e.depth)));
    const Open* parent = chain.empty() ? nullptr : &chain.back();
    if (e.backward && e.sequenceNr >= 0)
      e.node = owners.ownerOf(static_cast<uint64_t>(e.sequenceNr));
    if (!e.node.valid() && parent != nullptr)
      e.node = events[parent->event].node;
    const bool covered = parent != nullptr && parent->summed;
    const bool counted = !covered && e.node.valid();
    const double seconds = static_cast<double>(e.durationNs) * 1e-9;
    if (counted) {
      // The autograd engine runs each function inside its own outermost op
      // ("autograd::engine::evaluate_function: ConvolutionBackward0"): all of that frame is the
      // node's backward (input buffers, stream guards and hooks included).
      const OpEvent* frame = nullptr;
      if (e.backward && chain.size() == 1 && !chain.front().counted &&
          events[chain.front().event].name.rfind(kEngineFrame, 0) == 0) {
        frame = &events[chain.front().event];
      }
      const OpEvent& whole = frame != nullptr ? *frame : e;
      const double credit = static_cast<double>(whole.durationNs) * 1e-9;
      NodeStats& n = nodes[e.node.value()];
      n.node = e.node;
      auto addDevice = [&](std::optional<double>& total) {
        if (whole.deviceNs)
          total = total.value_or(0.0) + static_cast<double>(*whole.deviceNs) * 1e-9;
      };
      if (e.backward) {
        ++n.backwardCalls;
        n.backwardSeconds += credit;
        n.backwardBytesAllocated += whole.bytesAllocated;
        n.backwardBytesFreed += whole.bytesFreed;
        n.backwardCudaBytesAllocated += whole.cudaBytesAllocated;
        n.backwardCudaBytesFreed += whole.cudaBytesFreed;
        addDevice(n.backwardDeviceSeconds);
      } else {
        ++n.calls;
        n.forwardSeconds += credit;
        n.bytesAllocated += e.bytesAllocated;
        n.bytesFreed += e.bytesFreed;
        n.cudaBytesAllocated += e.cudaBytesAllocated;
        n.cudaBytesFreed += e.cudaBytesFreed;
        if (e.liveBytesAfter)
          n.liveBytesAfter = e.liveBytesAfter;
        addDevice(n.forwardDeviceSeconds);
      }
      profile.attributedSeconds += credit;
      // The outermost op around it belongs to no node (the engine's frame, or a caller's own
      // RecordFunction): it keeps only the time that is not in a node.
      if (!chain.empty() && !chain.front().counted) {
        OpEvent& outer = events[chain.front().event];
        unattributed[outer.name] -= credit;
        profile.unattributedSeconds -= credit;
        if (frame != nullptr) {
          // All of the frame is the node's now: the ops it runs after the function returns
          // (InputBuffer's add of a gradient with two consumers) are in that credit already.
          outer.node = e.node;
          chain.front().summed = chain.front().counted = true;
        }
      }
    } else if (e.depth == 0) {
      unattributed[e.name] += seconds;
      profile.unattributedSeconds += seconds;
    }
    chain.push_back({i, covered || counted, counted});
  }
  for (auto& [id, n] : nodes)
    profile.nodes.push_back(n);
  for (const auto& [name, seconds] : unattributed) {
    if (seconds > 1e-12)  // frames wholly credited to nodes leave (rounding) zero
      profile.unattributed.emplace_back(name, seconds);
  }
  std::sort(profile.unattributed.begin(), profile.unattributed.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return profile;
}

namespace {

// The GPU's lanes of a Chrome trace: a process per device ("GPU 0"), a thread per stream, each
// activity a complete event, and a flow arrow from the op that launched it (Perfetto draws it
// from the op's slice to the kernel's).
template <typename Json, typename ToMicros>
void appendGpuLanes(Json& list, const std::vector<OpEvent>& events, const GpuRecords& gpu,
                    const ToMicros& us) {
  constexpr int kGpuPidBase = 100;  // host ops are pid 1
  std::unordered_map<uint64_t, const OpEvent*> byExternal;
  for (const OpEvent& e : events) {
    if (e.externalId != 0)
      byExternal.emplace(e.externalId, &e);
  }
  std::unordered_map<uint32_t, const OpEvent*> launcher;
  for (const ExternalCorrelation& link : gpu.links) {
    if (auto op = byExternal.find(link.external); op != byExternal.end())
      launcher.emplace(link.correlation, op->second);
  }
  std::set<uint32_t> devices;
  std::set<std::pair<uint32_t, uint32_t>> streams;
  for (const GpuActivity& a : gpu.activities) {
    const int pid = kGpuPidBase + static_cast<int>(a.device);
    if (devices.insert(a.device).second) {
      list.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", "GPU " + std::to_string(a.device)}}}});
    }
    if (streams.insert({a.device, a.stream}).second) {
      list.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", a.stream},
                      {"args", {{"name", "stream " + std::to_string(a.stream)}}}});
    }
    Json args = {{"correlation", a.correlation}};
    if (a.kind != GpuActivityKind::Kernel)
      args["bytes"] = a.bytes;
    const auto op = launcher.find(a.correlation);
    if (op != launcher.end()) {
      args["op"] = op->second->name;
      if (op->second->node.valid())
        args["node"] = op->second->node.value();
    }
    list.push_back({{"name", a.name},
                    {"cat", gpuActivityKindName(a.kind)},
                    {"ph", "X"},
                    {"ts", us(a.startNs)},
                    {"dur", static_cast<double>(a.endNs - a.startNs) / 1000.0},
                    {"pid", pid},
                    {"tid", a.stream},
                    {"args", std::move(args)}});
    if (op == launcher.end())
      continue;
    list.push_back({{"name", "launch"},
                    {"cat", "launch"},
                    {"ph", "s"},
                    {"id", a.correlation},
                    {"ts", us(op->second->startNs)},
                    {"pid", 1},
                    {"tid", op->second->thread}});
    list.push_back({{"name", "launch"},
                    {"cat", "launch"},
                    {"ph", "f"},
                    {"bp", "e"},
                    {"id", a.correlation},
                    {"ts", us(a.startNs)},
                    {"pid", pid},
                    {"tid", a.stream}});
  }
}

}  // namespace

void attributeGpu(const std::vector<OpEvent>& events, const GpuRecords& gpu, NodeProfile& profile) {
  // Which op carried which external id, and whether it ran in the backward pass: an autograd
  // function, the engine's frame around one, or an op nested in either.
  std::unordered_map<uint64_t, size_t> byExternal;
  std::vector<bool> backward(events.size(), false);
  std::map<uint64_t, std::vector<size_t>> chains;  // per thread, the ops open at an event
  for (size_t i = 0; i < events.size(); ++i) {
    const OpEvent& e = events[i];
    auto& chain = chains[e.thread];
    chain.resize(std::min(chain.size(), static_cast<size_t>(e.depth)));
    backward[i] = e.backward || e.name.rfind(kEngineFrame, 0) == 0 ||
                  (!chain.empty() && backward[chain.back()]);
    if (e.externalId != 0)
      byExternal.emplace(e.externalId, i);
    chain.push_back(i);
  }
  std::unordered_map<uint32_t, uint64_t> externalOf;
  for (const ExternalCorrelation& link : gpu.links)
    externalOf.emplace(link.correlation, link.external);

  std::map<int32_t, NodeStats*> nodes;
  for (NodeStats& n : profile.nodes) {
    n.forwardDeviceSeconds = 0.0;  // measured: a node that launched nothing spent no GPU time
    n.backwardDeviceSeconds = 0.0;
    n.kernels = n.backwardKernels = 0;
    n.kernelList.clear();
    nodes[n.node.value()] = &n;
  }
  std::map<std::tuple<int32_t, bool, GpuActivityKind, std::string>, NodeKernel> kernels;
  profile.gpuTraced = true;
  profile.gpuActivities = static_cast<int64_t>(gpu.activities.size());
  profile.unattributedDeviceSeconds = 0;
  profile.gpuDropped = gpu.dropped;
  for (const GpuActivity& a : gpu.activities) {
    const double seconds = static_cast<double>(a.endNs - a.startNs) * 1e-9;
    const OpEvent* op = nullptr;
    bool inBackward = false;
    if (auto link = externalOf.find(a.correlation); link != externalOf.end()) {
      if (auto at = byExternal.find(link->second); at != byExternal.end()) {
        op = &events[at->second];
        inBackward = backward[at->second];
      }
    }
    auto node = op != nullptr && op->node.valid() ? nodes.find(op->node.value()) : nodes.end();
    if (node == nodes.end()) {
      profile.unattributedDeviceSeconds += seconds;
      continue;
    }
    NodeStats& n = *node->second;
    *(inBackward ? n.backwardDeviceSeconds : n.forwardDeviceSeconds) += seconds;
    if (a.kind == GpuActivityKind::Kernel) {
      ++n.kernels;
      n.backwardKernels += inBackward;
    }
    NodeKernel& k = kernels[{n.node.value(), inBackward, a.kind, a.name}];
    k.name = a.name;
    k.kind = a.kind;
    k.backward = inBackward;
    ++k.calls;
    k.seconds += seconds;
    k.bytes += a.bytes;
  }
  for (auto& [key, k] : kernels)
    nodes.at(std::get<0>(key))->kernelList.push_back(std::move(k));
  for (NodeStats& n : profile.nodes) {
    std::stable_sort(
        n.kernelList.begin(), n.kernelList.end(),
        [](const NodeKernel& a, const NodeKernel& b) { return a.seconds > b.seconds; });
  }
}

std::string chromeTrace(const std::vector<OpEvent>& events,
                        const std::vector<CounterSample>& counters, const Graph* graph,
                        const GpuRecords* gpu) {
  using json = nlohmann::ordered_json;
  int64_t origin = INT64_MAX;
  for (const auto& e : events)
    origin = std::min(origin, e.startNs);
  for (const auto& c : counters)
    origin = std::min(origin, c.timeNs);
  if (gpu != nullptr) {
    for (const auto& a : gpu->activities)
      origin = std::min(origin, a.startNs);
  }
  if (origin == INT64_MAX)
    origin = 0;
  auto us = [&](int64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };

  json list = json::array();
  list.push_back({{"name", "process_name"},
                  {"ph", "M"},
                  {"pid", 1},
                  {"tid", 0},
                  {"args", {{"name", "symtune-runner"}}}});
  for (const auto& e : events) {
    json args = {{"step", e.step},
                 {"sequence_nr", e.sequenceNr},
                 {"bytes_allocated", e.bytesAllocated},
                 {"bytes_freed", e.bytesFreed}};
    if (e.liveBytesAfter)
      args["live_bytes_after"] = *e.liveBytesAfter;
    if (e.deviceNs)
      args["device_us"] = static_cast<double>(*e.deviceNs) / 1000.0;
    if (!e.shapes.empty())
      args["input_shapes"] = e.shapes;
    if (e.node.valid()) {
      args["node"] = e.node.value();
      if (graph != nullptr && static_cast<size_t>(e.node.value()) < graph->nodes().size()) {
        const GraphNode& n = graph->node(e.node);
        args["node_kind"] = n.kind;
        args["module"] = n.modulePath;
        if (n.source.known())
          args["source"] = n.source.file + ":" + std::to_string(n.source.line);
      }
    }
    list.push_back({{"name", e.name},
                    {"cat", e.backward ? "backward" : "op"},
                    {"ph", "X"},
                    {"ts", us(e.startNs)},
                    {"dur", static_cast<double>(e.durationNs) / 1000.0},
                    {"pid", 1},
                    {"tid", e.thread},
                    {"args", std::move(args)}});
    if (e.liveBytesAfter) {  // the memory curve, one sample per outermost op
      list.push_back({{"name", "live_bytes"},
                      {"ph", "C"},
                      {"ts", us(e.startNs + e.durationNs)},
                      {"pid", 1},
                      {"args", {{"value", *e.liveBytesAfter}}}});
    }
  }
  for (const auto& c : counters) {
    list.push_back({{"name", c.name},
                    {"ph", "C"},
                    {"ts", us(c.timeNs)},
                    {"pid", 1},
                    {"args", {{"value", c.value}}}});
  }
  if (gpu != nullptr)
    appendGpuLanes(list, events, *gpu, us);
  return json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

}  // namespace symtune
