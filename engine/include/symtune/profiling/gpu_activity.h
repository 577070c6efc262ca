#pragma once
// What the GPU did, as CUPTI's activity API reports it afterwards: kernels, memory copies and
// memsets with their start and end on the device, and the links from each to the host op that
// launched it. Plain records, so everything that reads them (attribution to graph nodes, the
// Chrome trace's GPU lanes) is tested on recorded records where no GPU is (docs/profiling.md).
//
// Note [External correlation]
// CUPTI gives every CUDA API call a correlation id and every kernel, copy and memset the id of
// the call that launched it. Around each op, OpTracer pushes an id of its own (the op's external
// id) on CUPTI's external-correlation stack of the thread; CUPTI then emits one
// ExternalCorrelation record per API call made while it was on top, tying the call's correlation
// id to the op. An op's kernels are the activities whose correlation id has a link to the op's
// external id. Nested ops push their own ids, so a kernel belongs to the innermost op around its
// launch (aten::addmm, not the aten::linear around it).

#include <cstdint>
#include <string>
#include <vector>

namespace symtune {

enum class GpuActivityKind { Kernel, Memcpy, Memset };

const char* gpuActivityKindName(GpuActivityKind kind);  // "kernel", "memcpy", "memset"

struct GpuActivity {
  GpuActivityKind kind = GpuActivityKind::Kernel;
  std::string name;     // a kernel's demangled name; "Memcpy HtoD", "Memset" for the others
  int64_t startNs = 0;  // on the host's steady clock (GpuActivityTracer converts)
  int64_t endNs = 0;
  uint32_t device = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;  // the launching API call's CUPTI correlation id
  int64_t bytes = 0;         // copies and memsets
};

struct ExternalCorrelation {
  uint32_t correlation = 0;  // a CUDA API call's CUPTI correlation id
  uint64_t external = 0;     // the op's external id on top of the stack when the call was made
};

struct GpuRecords {
  std::vector<GpuActivity> activities;  // by start
  std::vector<ExternalCorrelation> links;
  uint64_t dropped = 0;  // records CUPTI lost (buffers full); nonzero makes every figure a floor
};

}  // namespace symtune
