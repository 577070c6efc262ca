#pragma once
// CUPTI's activity records read into GpuRecords: the one place that knows CUPTI's record layouts
// (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
// CUpti_ActivityExternalCorrelation of CUPTI 13). GpuActivityTracer feeds it the records of each
// completed buffer; tests feed it records they fill in themselves. Only with CUPTI's headers
// (SYMTUNE_HAVE_CUPTI).

#ifdef SYMTUNE_HAVE_CUPTI

#include <cupti_activity.h>

#include <cstdint>

#include "symtune/profiling/gpu_activity.h"

namespace symtune::cupti {

// The external-correlation kind Symtune pushes. Kineto (LibTorch's profiler) uses CUSTOM0 and
// CUSTOM1; CUSTOM2 keeps Symtune's ids apart from its ones.
constexpr CUpti_ExternalCorrelationKind kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;

// Appends `record` to `out` when it is a kind Symtune reads (a kernel, a copy, a memset, a link of
// kExternalKind), with its times moved to the host clock: host = cupti + clockOffsetNs. Returns
// whether it was read.
bool readRecord(const CUpti_Activity& record, int64_t clockOffsetNs, GpuRecords& out);

// "HtoD", "DtoH", "DtoD", ... for a CUpti_ActivityMemcpyKind.
const char* memcpyKindName(uint8_t copyKind);

}  // namespace symtune::cupti

#endif  // SYMTUNE_HAVE_CUPTI
