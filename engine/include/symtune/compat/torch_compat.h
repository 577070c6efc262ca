#pragma once
// Every difference between the LibTorch versions Symtune builds against lives here, so the rest of
// the engine reads the same on Debian's libtorch-dev (1.13) and the 2.11 wheel
// (docs/building.md, "LibTorch versions", lists the differences).

#include <cstdint>
#include <optional>
#include <string>

#include <torch/version.h>

#define SYMTUNE_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include <c10/core/Allocator.h>

namespace symtune::compat {

// The integer type of MemoryReportingInfoBase::reportMemoryUsage's totals: int64_t in 1.13, size_t
// in 2.x. Taken from the base class so the override compiles against both.
namespace detail {
template <class T>
struct ReportTotal;
template <class C, class R, class Ptr, class Size, class Total, class Reserved, class Dev>
struct ReportTotal<R (C::*)(Ptr, Size, Total, Reserved, Dev)> {
  using type = Total;
};
}  // namespace detail
using MemoryReportTotal =
    detail::ReportTotal<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

// The CUDA caching allocator's peak of allocated bytes on `device` since the last reset, or
// nullopt when this build has no CUDA. (getDeviceStats takes an int up to 2.2, a DeviceIndex
// since.)
std::optional<int64_t> cudaPeakAllocatedBytes(int device);
void cudaResetPeakStats(int device);
// The CUDA device's name ("NVIDIA H200"), or "" without CUDA.
std::string cudaDeviceName(int device);

// Whether cuDNN's float32 convolutions may run in TF32 (ATen's default on CUDA), and setting it:
// ATen's float32-precision settings from 2.9, its allow_tf32 flag before.
bool cudnnConvolutionsInTf32();
void setCudnnConvolutionsInTf32(bool allowed);

}  // namespace symtune::compat
