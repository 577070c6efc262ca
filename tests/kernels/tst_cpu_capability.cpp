// The CPU kernels' build in use: the CPU's widest, or the one SYMTUNE_CPU_CAPABILITY asks for
// (ctest runs every kernels test again under avx2 and default: tests/CMakeLists.txt).

#include "doctest_torch.h"

#include <cstdlib>
#include <string>

#include "symtune/kernels/cpu_capability.h"

TEST_CASE("the requested build runs") {
  const std::string used = symtune::kernels::cpuCapability();
  MESSAGE("CPU kernels: ", used);
  CHECK((used == "avx512" || used == "avx2" || used == "default"));
  const char* asked = std::getenv("SYMTUNE_CPU_CAPABILITY");
  if (asked == nullptr)
    return;
  const std::string name(asked);
  const int rank = name == "default" ? 0 : name == "avx2" ? 1 : 2;
  const int usedRank = used == "default" ? 0 : used == "avx2" ? 1 : 2;
  // Lowered to the request, unless the CPU has less than was asked for.
  INFO("used ", used, ", asked ", name);
  CHECK(usedRank <= rank);
#if defined(__x86_64__)
  const bool supported = rank == 0 || (rank == 1 && __builtin_cpu_supports("avx2")) ||
                         (rank == 2 && __builtin_cpu_supports("avx512f"));
  if (supported)
    CHECK(used == name);
#endif
}
