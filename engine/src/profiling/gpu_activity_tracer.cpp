#include "symtune/profiling/gpu_activity_tracer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <vector>

#ifdef SYMTUNE_HAVE_CUPTI
#include <dlfcn.h>

#include <ATen/Context.h>

#include "symtune/profiling/cupti_records.h"
#endif

namespace symtune {

const char* gpuActivityKindName(GpuActivityKind kind) {
  switch (kind) {
    case GpuActivityKind::Kernel:
      return "kernel";
    case GpuActivityKind::Memcpy:
      return "memcpy";
    case GpuActivityKind::Memset:
      return "memset";
  }
  return "?";
}

#ifndef SYMTUNE_HAVE_CUPTI

std::optional<std::string> GpuActivityTracer::unavailableReason() {
  return std::string("this build has no CUPTI (configured with SYMTUNE_WITH_CUPTI=OFF)");
}
void GpuActivityTracer::start() {
  throw std::runtime_error("GPU activity tracing is unavailable: " + *unavailableReason());
}
void GpuActivityTracer::stop() {
}
bool GpuActivityTracer::running() {
  return false;
}
GpuRecords GpuActivityTracer::take() {
  return {};
}
void GpuActivityTracer::pushExternal(uint64_t) {
}
void GpuActivityTracer::popExternal() {
}

#else

namespace {

// The entry points Symtune calls, looked up in the library (Note [CUPTI at run time]); their
// types come from CUPTI's own declarations.
struct CuptiApi {
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) registerCallbacks = nullptr;
  decltype(&cuptiActivityFlushAll) flushAll = nullptr;
  decltype(&cuptiActivityGetNextRecord) nextRecord = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) droppedRecords = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) pushExternal = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) popExternal = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiGetResultString) resultString = nullptr;
};

// CUPTI writes an external-correlation record only ahead of an API record (a runtime or driver
// call's), so those kinds are on too, though their records are read for nothing else: without
// them the activities come back with no link to the op that launched them (seen on an H200,
// 2026-12-04: 810 activities, none on a node). Driver calls as well as the runtime's, so that a
// kernel a library launches through the driver API is tied to its op too.
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER};
constexpr size_t kBufferBytes = 8u << 20;  // CUPTI's records of a step fit in a few of these

struct Loaded {
  CuptiApi api;
  std::string error;  // why the library could not be used; empty when it can
};

const Loaded& cuptiLibrary() {
  static const Loaded loaded = [] {
    Loaded l;
    std::vector<std::string> candidates;
    if (const char* named = std::getenv("SYMTUNE_CUPTI_LIBRARY"); named != nullptr && *named)
      candidates.emplace_back(named);
    candidates.emplace_back(SYMTUNE_CUPTI_SONAME);
    candidates.emplace_back("libcupti.so");
    void* handle = nullptr;
    std::string tried;
    for (const auto& name : candidates) {
      handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr)
        break;
      tried += (tried.empty() ? "" : "; ") + std::string(::dlerror());
    }
    if (handle == nullptr) {
      l.error = "cannot open libcupti (" + tried + "); set SYMTUNE_CUPTI_LIBRARY to its path";
      return l;
    }
    auto find = [&](auto& entry, const char* symbol) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)> >(::dlsym(handle, symbol));
      if (entry == nullptr && l.error.empty())
        l.error = std::string("libcupti has no ") + symbol + " (CUPTI older than this build's)";
    };
    find(l.api.enable, "cuptiActivityEnable");
    find(l.api.disable, "cuptiActivityDisable");
    find(l.api.registerCallbacks, "cuptiActivityRegisterCallbacks");
    find(l.api.flushAll, "cuptiActivityFlushAll");
    find(l.api.nextRecord, "cuptiActivityGetNextRecord");
    find(l.api.droppedRecords, "cuptiActivityGetNumDroppedRecords");
    find(l.api.pushExternal, "cuptiActivityPushExternalCorrelationId");
    find(l.api.popExternal, "cuptiActivityPopExternalCorrelationId");
    find(l.api.timestamp, "cuptiGetTimestamp");
    find(l.api.resultString, "cuptiGetResultString");
    // The records are read as this build's CUPTI lays them out (CUpti_ActivityKernel10, ...);
    // another major's library writes them otherwise (CUPTI 12's are shorter, and were read past
    // their end). Every entry point above is in CUPTI 11 and 12 as well: only the version tells.
    decltype(&cuptiGetVersion) version = nullptr;
    find(version, "cuptiGetVersion");
    uint32_t got = 0;
    if (l.error.empty() && version(&got) != CUPTI_SUCCESS)
      l.error = "libcupti does not say its version";
    else if (auto why = l.error.empty() ? cupti::versionMismatch(got) : std::nullopt)
      l.error = *why;
    return l;
  }();
  return loaded;
}

std::string describe(const CuptiApi& api, CUptiResult result) {
  const char* text = nullptr;
  if (api.resultString(result, &text) != CUPTI_SUCCESS || text == nullptr)
    return "CUPTI error " + std::to_string(static_cast<int>(result));
  return text;
}

std::atomic<bool> gRunning{false};
// The start/stop transitions. Not gMutex: CUPTI's worker thread takes that in bufferCompleted,
// and an enable or disable that waited for it under gMutex would wait for ever.
std::mutex gTransitions;
std::mutex gMutex;    // guards gPending
GpuRecords gPending;  // completed buffers' records, times still on CUPTI's clock

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *maxNumRecords = 0;  // as many as fit
}

void CUPTIAPI bufferCompleted(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                              size_t validSize) {
  const CuptiApi& api = cuptiLibrary().api;
  GpuRecords local;
  CUpti_Activity* record = nullptr;
  while (api.nextRecord(buffer, validSize, &record) == CUPTI_SUCCESS)
    cupti::readRecord(*record, 0, local);
  size_t dropped = 0;
  if (api.droppedRecords(context, stream, &dropped) != CUPTI_SUCCESS)
    dropped = 0;
  std::free(buffer);
  std::lock_guard<std::mutex> lock(gMutex);
  gPending.activities.insert(gPending.activities.end(),
                             std::make_move_iterator(local.activities.begin()),
                             std::make_move_iterator(local.activities.end()));
  gPending.links.insert(gPending.links.end(), local.links.begin(), local.links.end());
  gPending.dropped += dropped;
}

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// host = cupti + offset (Note [GPU clock]).
int64_t clockOffsetNs(const CuptiApi& api) {
  int64_t best = 0, narrowest = INT64_MAX;
  for (int i = 0; i < 7; ++i) {
    uint64_t cupti = 0;
    const int64_t before = steadyNs();
    if (api.timestamp(&cupti) != CUPTI_SUCCESS)
      continue;
    const int64_t after = steadyNs();
    if (after - before < narrowest) {
      narrowest = after - before;
      best = before + (after - before) / 2 - static_cast<int64_t>(cupti);
    }
  }
  return best;
}

}  // namespace

std::optional<std::string> GpuActivityTracer::unavailableReason() {
  const Loaded& l = cuptiLibrary();
  if (!l.error.empty())
    return l.error;
  if (!at::globalContext().hasCUDA())
    return std::string("no CUDA device here");
  return std::nullopt;
}

void GpuActivityTracer::start() {
  std::lock_guard<std::mutex> lock(gTransitions);
  if (gRunning.load())
    return;
  if (auto why = unavailableReason())
    throw std::runtime_error("GPU activity tracing is unavailable: " + *why);
  const CuptiApi& api = cuptiLibrary().api;
  // On every start: the callbacks are one slot of the process's, which another CUPTI client
  // (LibTorch's profiler, run between two traced steps) may have taken since, and registered
  // once, every buffer after that went to it, and the steps' GPU time read as 0 measured.
  const CUptiResult registered = api.registerCallbacks(&bufferRequested, &bufferCompleted);
  if (registered != CUPTI_SUCCESS) {
    throw std::runtime_error("CUPTI refused Symtune's activity buffers (" +
                             describe(api, registered) + "); is LibTorch's profiler running?");
  }
  for (size_t i = 0; i < std::size(kKinds); ++i) {
    const CUptiResult r = api.enable(kKinds[i]);
    if (r != CUPTI_SUCCESS) {
      for (size_t j = 0; j < i; ++j)
        api.disable(kKinds[j]);
      throw std::runtime_error("CUPTI cannot record activity kind " +
                               std::to_string(static_cast<int>(kKinds[i])) + ": " +
                               describe(api, r));
    }
  }
  {
    std::lock_guard<std::mutex> pending(gMutex);
    gPending = {};
  }
  gRunning.store(true);
}

void GpuActivityTracer::stop() {
  std::lock_guard<std::mutex> lock(gTransitions);
  if (!gRunning.exchange(false))
    return;
  const CuptiApi& api = cuptiLibrary().api;
  // Nothing more recorded first, then what the buffers hold delivered and let go: flushed before
  // the disables, records made between the two waited in CUPTI's buffers and reached the next
  // run's first take() as its own.
  for (CUpti_ActivityKind kind : kKinds)
    api.disable(kind);
  api.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // calls bufferCompleted, which takes gMutex
  std::lock_guard<std::mutex> pending(gMutex);
  gPending = {};
}

bool GpuActivityTracer::running() {
  return gRunning.load(std::memory_order_relaxed);
}

GpuRecords GpuActivityTracer::take() {
  if (!running())
    return {};
  const CuptiApi& api = cuptiLibrary().api;
  api.flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // hands every buffer to bufferCompleted
  const int64_t offset = clockOffsetNs(api);
  GpuRecords records;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    std::swap(records, gPending);
  }
  // A forced flush also hands over activities still in flight, with no end yet.
  records.activities.erase(
      std::remove_if(records.activities.begin(), records.activities.end(),
                     [](const GpuActivity& a) { return a.endNs < a.startNs || a.startNs == 0; }),
      records.activities.end());
  for (GpuActivity& a : records.activities) {
    a.startNs += offset;
    a.endNs += offset;
  }
  std::sort(records.activities.begin(), records.activities.end(),
            [](const GpuActivity& a, const GpuActivity& b) { return a.startNs < b.startNs; });
  return records;
}

void GpuActivityTracer::pushExternal(uint64_t id) {
  if (running())
    cuptiLibrary().api.pushExternal(cupti::kExternalKind, id);
}

void GpuActivityTracer::popExternal() {
  // Not tied to running(): an id pushed just before stop() still comes off the stack.
  if (cuptiLibrary().error.empty()) {
    uint64_t last = 0;
    cuptiLibrary().api.popExternal(cupti::kExternalKind, &last);
  }
}

#endif  // SYMTUNE_HAVE_CUPTI

}  // namespace symtune
