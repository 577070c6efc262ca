#include "symtune/profiling/cupti_records.h"

#ifdef SYMTUNE_HAVE_CUPTI

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace symtune::cupti {

namespace {

std::string demangled(const char* name) {
  if (name == nullptr)
    return "(unnamed kernel)";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && text ? std::string(text.get()) : std::string(name);
}

int64_t onHost(uint64_t cuptiNs, int64_t clockOffsetNs) {
  return static_cast<int64_t>(cuptiNs) + clockOffsetNs;
}

}  // namespace

const char* memcpyKindName(uint8_t copyKind) {
  switch (copyKind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "array";
    default:
      return "unknown";
  }
}

namespace {

// A record of the layout its kind names. CUPTI's buffers hold records of many layouts behind one
// `kind` field; copying out (rather than casting the reference) keeps the compiler's aliasing
// rules intact.
template <typename Record>
Record as(const CUpti_Activity& record) {
  Record r;
  std::memcpy(&r, &record, sizeof r);
  return r;
}

// The fields kernels, copies and memsets share, from whichever record layout holds them.
template <typename Record>
GpuActivity common(GpuActivityKind kind, std::string name, const Record& r, int64_t offset) {
  GpuActivity a;
  a.kind = kind;
  a.name = std::move(name);
  a.startNs = onHost(r.start, offset);
  a.endNs = onHost(r.end, offset);
  a.device = r.deviceId;
  a.stream = r.streamId;
  a.correlation = r.correlationId;
  return a;
}

}  // namespace

bool readRecord(const CUpti_Activity& record, int64_t clockOffsetNs, GpuRecords& out) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto k = as<CUpti_ActivityKernel10>(record);
      out.activities.push_back(
          common(GpuActivityKind::Kernel, demangled(k.name), k, clockOffsetNs));
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto m = as<CUpti_ActivityMemcpy6>(record);
      out.activities.push_back(common(GpuActivityKind::Memcpy,
                                      std::string("Memcpy ") + memcpyKindName(m.copyKind), m,
                                      clockOffsetNs));
      out.activities.back().bytes = static_cast<int64_t>(m.bytes);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto m = as<CUpti_ActivityMemset4>(record);
      out.activities.push_back(common(GpuActivityKind::Memset, "Memset", m, clockOffsetNs));
      out.activities.back().bytes = static_cast<int64_t>(m.bytes);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto l = as<CUpti_ActivityExternalCorrelation>(record);
      if (l.externalKind != kExternalKind)
        return false;
      out.links.push_back({l.correlationId, l.externalId});
      return true;
    }
    default:
      return false;
  }
}

std::optional<std::string> versionMismatch(uint32_t libraryVersion) {
  constexpr uint32_t kMajor = CUPTI_API_VERSION / 10000;
  if (libraryVersion / 10000 == kMajor)
    return std::nullopt;
  return "libcupti's API version is " + std::to_string(libraryVersion) + ", not CUPTI " +
         std::to_string(kMajor) + "'s as this build's (" + std::to_string(CUPTI_API_VERSION) +
         "), whose records it lays out otherwise; set SYMTUNE_CUPTI_LIBRARY to the libcupti of "
         "the toolkit Symtune was built with";
}

}  // namespace symtune::cupti

#endif  // SYMTUNE_HAVE_CUPTI
