#pragma once
// CUPTI's activity API for the whole process: kernels, memory copies and memsets recorded on the
// GPU with their start and end, and the external-correlation links that tie each to the host op
// that launched it (Note [External correlation]). OpTracer drives it when per-node telemetry asks
// for GPU activity; nothing else needs to.
//
//   if (auto why = GpuActivityTracer::unavailableReason()) { ... say *why ... }
//   GpuActivityTracer::start();
//   { ExternalCorrelationScope op(id); launch kernels... }
//   GpuRecords records = GpuActivityTracer::take();  // flushes CUPTI's buffers
//   GpuActivityTracer::stop();
//
// Note [CUPTI at run time]
// The build needs CUPTI's headers only (SYMTUNE_WITH_CUPTI). libcupti is opened when tracing
// first starts: LibTorch's CPU library already needs libcupti.so.<CUDA major> for its own profiler
// (Kineto), so it is normally loaded in the process before Symtune asks; SYMTUNE_CUPTI_LIBRARY
// names another file. Without the library, a device or with a build lacking CUPTI, tracing is
// unavailable with a reason and every other path runs unchanged. CUPTI's activity buffers are
// one per process: do not run LibTorch's profiler (Kineto) at the same time.
//
// Note [GPU clock]
// CUPTI stamps activities on its own clock (cuptiGetTimestamp). take() converts them to the
// host's steady clock, the one OpEvent uses, with an offset measured right then: the smallest
// of several bracketed readings of both clocks. The two clocks tick at the same rate (both are
// the system's monotonic time in nanoseconds); the offset absorbs their different origins.

#include <cstdint>
#include <optional>
#include <string>

#include "symtune/profiling/gpu_activity.h"

namespace symtune {

class GpuActivityTracer {
 public:
  // Why tracing cannot run in this process (no CUPTI in this build, no libcupti, no CUDA device),
  // or nullopt when it can.
  static std::optional<std::string> unavailableReason();

  // Enables the activity kinds (idempotent). Throws std::runtime_error with the reason when
  // tracing is unavailable or CUPTI refuses.
  static void start();
  // Flushes and disables; records not taken yet are dropped.
  static void stop();
  static bool running();

  // Every record completed since the last take(), by start; waits for CUPTI to hand over the
  // buffers it holds (kernels still running are not in them: synchronise the device first).
  static GpuRecords take();

  // The calling thread's external-correlation stack (Note [External correlation]). A push does
  // nothing while tracing is off; pop only what was pushed.
  static void pushExternal(uint64_t id);
  static void popExternal();
};

}  // namespace symtune
