#pragma once
// Per-op wall time, memory and (on CUDA) device time through at::RecordFunction: every ATen op and
// autograd function that runs while the tracer records, on any thread, with its step and graph
// node, the GPU activity each launched (CUPTI, OpTracerOptions::gpuActivity), and Chrome Trace
// Event export (opens in Perfetto and chrome://tracing). Part of MetaInfoBroker.
//
//   symtune::OpTracer tracer;
//   tracer.start();
//   tracer.markStep(0); ... train ...
//   tracer.stop();
//   auto events = tracer.takeEvents();
//   symtune::NodeProfile profile = symtune::attributeOps(events, owners);  // per graph node
//   symtune::GpuRecords gpu = tracer.takeGpuRecords();  // with gpuActivity
//   symtune::attributeGpu(events, gpu, profile);
//   writeFileAtomically("trace.json", chromeTrace(events, counters, &graph, &gpu));
//
// Note [Trace buffers]
// Each thread appends to its own buffer, found through a thread_local pointer; a lock is taken
// only the first time a thread records for a tracer (to register its buffer), never per op.
// takeEvents() must run when no thread appends any more (after the step's backward returned).
//
// Note [Op memory]
// An op's bytesAllocated / bytesFreed are the differences of its thread's running totals
// (threadMemoryTotals()) between its start and its end: they include the ops nested in it, and
// count only while a MemoryTracker is active (the trainer's broker keeps one active through every
// step). liveBytesAfter is the active tracker's live total when an outermost op ends. The CUDA
// caching allocator reports through the same channel: cudaBytesAllocated / cudaBytesFreed are the
// CUDA share.
//
// Note [Device time]
// A node's device time on CUDA comes from one of two sources. With gpuActivity (CUPTI), it is the
// time of the kernels, copies and memsets its ops launched, from their start and end on the GPU:
// what the GPU spent on the node, whatever else ran around it. Without it (no CUPTI here, or
// turned off), it is the time between two CUDA events recorded around each outermost op on the
// op's stream: that includes any gap where the stream waited for the host. attributeGpu()
// replaces the event times when activity records are there.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "symtune/core/atomic_file.h"
#include "symtune/core/ids.h"
#include "symtune/profiling/gpu_activity.h"
#include "symtune/telemetry/node_context.h"

namespace symtune {

class Graph;

struct OpEvent {
  std::string name;     // "aten::conv2d", "ConvolutionBackward0", ...
  int64_t startNs = 0;  // steady clock
  int64_t durationNs = 0;
  uint64_t thread = 0;  // a small per-tracer thread number
  int64_t sequenceNr = -1;
  int64_t step = -1;      // the step marked when it started
  bool backward = false;  // an autograd function (its nested ops are not)
  int depth = 0;          // ops open on its thread when it started: 0 is outermost
  NodeId node;  // the forward node it ran for; attributeOps() fills it in for backward ops
  int64_t bytesAllocated = 0, bytesFreed = 0;  // Note [Op memory]
  int64_t cudaBytesAllocated = 0, cudaBytesFreed = 0;
  std::optional<int64_t> liveBytesAfter;
  std::optional<int64_t> deviceNs;  // CUDA time of an outermost op (OpTracerOptions::deviceTime)
  std::string shapes;               // input shapes, "[[8, 3, 32, 32], [16, 3, 3, 3], []]"
  uint64_t externalId = 0;  // with gpuActivity: the id its GPU activity carries (gpu_activity.h)
};

// A counter sample for the trace ("C" events): e.g. the step's peak memory at its end.
struct CounterSample {
  std::string name;
  int64_t timeNs = 0;
  double value = 0;
};

struct OpTracerOptions {
  bool shapes = false;      // record input shapes (copies every op's inputs: for trace windows)
  bool deviceTime = false;  // CUDA events around outermost ops, on the thread's current stream
  // The GPU activity of every op, through CUPTI (GpuActivityTracer, which must be available):
  // kernels, copies and memsets tied to the op that launched them (Note [Device time]). Replaces
  // deviceTime's events.
  bool gpuActivity = false;
};

class OpTracer {
 public:
  OpTracer();
  ~OpTracer();
  OpTracer(const OpTracer&) = delete;
  OpTracer& operator=(const OpTracer&) = delete;

  // Installs the RecordFunction callback (idempotent). One tracer records at a time: start()
  // and resume() throw c10::Error while another records (not paused).
  void start(const OpTracerOptions& options = {});
  void stop();
  bool recording() const { return handle_ != 0; }
  // Holds the callback off, and on again: a trainer records its own steps only, not what runs
  // between them (another trainer's steps, a validation pass), which paid the callbacks' cost and
  // had its events thrown away. Paused, it lets another tracer record (Note [A paused tracer lets
  // go] in op_tracer.cpp); what it recorded stays for takeEvents() and takeGpuRecords().
  void pause();
  void resume();
  // Recording for a scope: resumed when made, paused when it goes, also when what it holds
  // throws (a step that failed left its tracer recording, and no other could until 2026-12-07).
  class Recording {
   public:
    explicit Recording(OpTracer& tracer) : tracer_(tracer) { tracer_.resume(); }
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;

   private:
    OpTracer& tracer_;
  };
  const OpTracerOptions& options() const { return options_; }
  // Why a resume() recorded with CUDA events rather than the GPU activity asked for (CUPTI
  // refused it then); nullopt: it did not.
  const std::optional<std::string>& gpuRefused() const { return gpuRefused_; }
  void markStep(int64_t step) { step_.store(step, std::memory_order_relaxed); }

  // All events recorded so far, by start time; clears the buffers. With deviceTime, waits for the
  // recorded CUDA events first; with gpuActivity, for the device, and collects the GPU activity
  // of the same span for takeGpuRecords().
  std::vector<OpEvent> takeEvents();
  // The GPU activity of the last takeEvents()'s span, and what pause() or stop() collected after
  // it, cleared; empty without gpuActivity. start() clears what nobody took.
  GpuRecords takeGpuRecords();

  static int64_t nowNs();

  // Held while a CUDA graph is captured, on whatever thread (the backward's capture runs on the
  // autograd engine's device thread): no op's device time is recorded meanwhile, since a CUDA
  // event recorded in a capturing stream can be neither waited on nor timed (takeEvents would
  // throw and fail the step). Those ops have no deviceNs.
  class CudaCaptureScope {
   public:
    CudaCaptureScope();
    ~CudaCaptureScope();
    CudaCaptureScope(const CudaCaptureScope&) = delete;
    CudaCaptureScope& operator=(const CudaCaptureScope&) = delete;
  };

  struct Buffer;

 private:
  friend struct TracerAccess;
  Buffer& bufferForThisThread();
  void acquire();     // becomes the tracer that records (and starts CUPTI's, with gpuActivity)
  void release();     // lets go of both, keeping the GPU activity so far
  void collectGpu();  // appends CUPTI's records so far to gpu_

  uint64_t handle_ = 0;
  bool paused_ = false;
  bool tracingGpu_ = false;  // this tracer started GpuActivityTracer, and has not stopped it
  GpuRecords gpu_;
  std::optional<std::string> gpuRefused_;
  uint64_t generation_;
  OpTracerOptions options_;
  std::atomic<int64_t> step_{-1};
  std::mutex mutex_;  // guards buffers_ (registration and takeEvents only)
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// One name's GPU activity in a node: a kernel (or "Memcpy HtoD", "Memset") and how often and how
// long it ran, forward or backward.
struct NodeKernel {
  std::string name;
  GpuActivityKind kind = GpuActivityKind::Kernel;
  bool backward = false;
  int64_t calls = 0;
  double seconds = 0;
  int64_t bytes = 0;  // copies and memsets
};

// One forward node's share of a step (per-node mode): the outermost ops that ran for it, forward
// and backward.
struct NodeStats {
  NodeId node;
  int64_t calls = 0, backwardCalls = 0;  // outermost ops (loop bodies: every iteration)
  double forwardSeconds = 0, backwardSeconds = 0;
  // CUDA, when measured (Note [Device time])
  std::optional<double> forwardDeviceSeconds, backwardDeviceSeconds;
  int64_t bytesAllocated = 0, bytesFreed = 0;  // by its forward ops, every device
  int64_t backwardBytesAllocated = 0, backwardBytesFreed = 0;
  int64_t cudaBytesAllocated = 0, cudaBytesFreed = 0;  // the CUDA share of the four above
  int64_t backwardCudaBytesAllocated = 0, backwardCudaBytesFreed = 0;
  std::optional<int64_t> liveBytesAfter;  // after its last forward op
  // GPU activity (attributeGpu): how many kernels it launched, forward and backward, and each
  // name's activity, most time first.
  int64_t kernels = 0, backwardKernels = 0;  // backwardKernels: those of its backward
  std::vector<NodeKernel> kernelList;
};

struct NodeProfile {
  int64_t step = -1;
  std::vector<NodeStats> nodes;    // the nodes that ran ops, by id
  double attributedSeconds = 0;    // the nodes' forward and backward seconds together
  double unattributedSeconds = 0;  // outermost ops of no node: loss, optimizer, AccumulateGrad...
  std::vector<std::pair<std::string, double>> unattributed;  // those by op name, largest first
  int64_t ops = 0;                                           // events seen, nested ones included
  // GPU activity (attributeGpu): activities seen, the device time of those no node launched
  // (loss, optimizer, copies of the batch), and records CUPTI dropped (figures are then floors).
  bool gpuTraced = false;
  int64_t gpuActivities = 0;
  double unattributedDeviceSeconds = 0;
  uint64_t gpuDropped = 0;
};

// Attributes a step's events to forward nodes: forward ops by the node they ran for, autograd
// functions by their sequence number's owner, nested ops by their outermost op. Fills in
// OpEvent::node for backward and nested ops. Only outermost ops are summed, so nothing counts
// twice.
NodeProfile attributeOps(std::vector<OpEvent>& events, const SequenceOwners& owners);

// Attributes a step's GPU activity to its nodes (after attributeOps, which fills in the events'
// nodes): each activity belongs to the op whose external id its launch carried, and so to that
// op's node, forward or backward as the op ran. Sets the nodes' device seconds to their
// activities' time (Note [Device time]), their kernel counts and lists.
void attributeGpu(const std::vector<OpEvent>& events, const GpuRecords& gpu, NodeProfile& profile);

// Chrome Trace Event JSON: ops as complete ("X") events with their step, sequence number, memory
// and — given the graph — node id, kind, module path and source line in args; counters as "C"
// events; given GPU activity, one lane per device stream with its kernels, copies and memsets,
// each linked to the op that launched it by a flow arrow. Timestamps in microseconds from the
// first event.
std::string chromeTrace(const std::vector<OpEvent>& events,
                        const std::vector<CounterSample>& counters, const Graph* graph = nullptr,
                        const GpuRecords* gpu = nullptr);

}  // namespace symtune
