// run.cpu_memory "retain" (Note [Freed memory kept] in symtune/runtime/cpu_memory.h): glibc's
// malloc keeps blocks up to 32 MiB on its heap, where before it mapped them on their own. Its own
// process: the setting is the process's.

#include "doctest_torch.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "symtune/runtime/cpu_memory.h"

namespace {

#if defined(__GLIBC__)
// Whether a block of `bytes` from malloc is a mapping of its own (glibc counts them in hblks).
bool mappedOnItsOwn(size_t bytes) {
  const size_t before = mallinfo2().hblks;
  void* block = std::malloc(bytes);
  REQUIRE(block != nullptr);
  static_cast<volatile char*>(block)[0] = 1;
  const bool mapped = mallinfo2().hblks > before;
  std::free(block);
  return mapped;
}
#endif

}  // namespace

TEST_CASE("kept, a block glibc would map on its own comes from the heap") {
#if defined(__GLIBC__)
  // glibc as it comes: 16 MiB is above its first threshold (128 KiB), mapped on its own; freed, it
  // raises the threshold to its size, so a larger block still is.
  CHECK(mappedOnItsOwn(16u << 20));
  CHECK(mappedOnItsOwn(24u << 20));
  CHECK(symtune::keepFreedCpuMemory());
  CHECK(symtune::keepFreedCpuMemory());  // once for the process; again is the same
  CHECK_FALSE(mappedOnItsOwn(24u << 20));
  CHECK_FALSE(mappedOnItsOwn(30u << 20));
  CHECK(mappedOnItsOwn(48u << 20));  // above glibc's largest threshold, mapped as before
#else
  CHECK_FALSE(symtune::keepFreedCpuMemory());
  MESSAGE("not glibc: run.cpu_memory retain changes nothing here");
#endif
}
