#pragma once
// CUPTI's activity records read into GpuRecords: the one place that knows CUPTI's record layouts
// (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
// CUpti_ActivityExternalCorrelation of CUPTI 13). GpuActivityTracer feeds it the records of each
// completed buffer; tests feed it records they fill in themselves. Only with CUPTI's headers
// (SYMTUNE_HAVE_CUPTI).

#ifdef SYMTUNE_HAVE_CUPTI

#include <cupti_activity.h>
#include <cupti_version.h>

#include <cstdint>
#include <optional>
#include <string>

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

// Why a libcupti whose cuptiGetVersion() says `libraryVersion` (130001: 13.0.1) cannot be read
// as this build's CUPTI: another major lays its records out otherwise (CUPTI 12's kernel records
// are shorter, and were read past their end). nullopt: the same major.
std::optional<std::string> versionMismatch(uint32_t libraryVersion);

}  // namespace symtune::cupti

#endif  // SYMTUNE_HAVE_CUPTI
