#pragma once
// Per-op wall time through at::RecordFunction: every ATen op and autograd function that runs while
// the tracer records, on any thread, with its step, and Chrome Trace Event export (opens in
// Perfetto and chrome://tracing). Part of MetaInfoBroker.
//
//   symtune::OpTracer tracer;
//   tracer.start();
//   tracer.markStep(0); ... train ...
//   tracer.stop();
//   writeFileAtomically("trace.json", chromeTrace(tracer.takeEvents(), counters));
//
// Note [Trace buffers]
// Each thread appends to its own buffer, found through a thread_local pointer; a lock is taken
// only the first time a thread records for a tracer (to register its buffer), never per op.
// takeEvents() must run after stop(), when no thread appends any more.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace symtune {

struct OpEvent {
  std::string name;     // "aten::conv2d", "ConvolutionBackward0", ...
  int64_t startNs = 0;  // steady clock
  int64_t durationNs = 0;
  uint64_t thread = 0;  // a small per-tracer thread number
  int64_t sequenceNr = -1;
  int64_t step = -1;  // the step marked when it started
  bool backward = false;
};

// A counter sample for the trace ("C" events): e.g. the step's peak memory at its end.
struct CounterSample {
  std::string name;
  int64_t timeNs = 0;
  double value = 0;
};

class OpTracer {
 public:
  OpTracer();
  ~OpTracer();
  OpTracer(const OpTracer&) = delete;
  OpTracer& operator=(const OpTracer&) = delete;

  void start();  // installs the RecordFunction callback (idempotent)
  void stop();
  bool recording() const { return handle_ != 0; }
  void markStep(int64_t step) { step_.store(step, std::memory_order_relaxed); }

  // All events recorded so far, by start time; clears the buffers. Call after stop().
  std::vector<OpEvent> takeEvents();

  static int64_t nowNs();

  struct Buffer;

 private:
  friend struct TracerAccess;
  Buffer& bufferForThisThread();

  uint64_t handle_ = 0;
  uint64_t generation_;
  std::atomic<int64_t> step_{-1};
  std::mutex mutex_;  // guards buffers_ (registration and takeEvents only)
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// Chrome Trace Event JSON: ops as complete ("X") events with their step, sequence number and
// thread; counters as "C" events. Timestamps in microseconds from the first event.
std::string chromeTrace(const std::vector<OpEvent>& events,
                        const std::vector<CounterSample>& counters);

}  // namespace symtune
