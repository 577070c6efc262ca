#include "symtune/runtime/cpu_memory.h"

#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace symtune {

bool keepFreedCpuMemory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  static bool taken = false;
  std::call_once(once, [] {
    // glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); a trim threshold of
    // 1 GiB: only a heap top that large is handed back.
    constexpr int kMmapThreshold = 32 * 1024 * 1024;
    constexpr int kTrimThreshold = 1024 * 1024 * 1024;
    taken = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
            mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  });
  return taken;
#else
  return false;
#endif
}

}  // namespace symtune
