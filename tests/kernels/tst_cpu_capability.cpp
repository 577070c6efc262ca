// The CPU kernels' build in use: the CPU's widest, or the one SYMTUNE_CPU_CAPABILITY asks for
// (ctest runs every kernels test again under avx2 and default: tests/CMakeLists.txt).

#include <cstdlib>
#include <string>

#include "symtune/kernels/cpu_capability.h"
#include "test_main.h"

class TestCpuCapability : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void theRequestedBuildRuns() {
    const std::string used = symtune::kernels::cpuCapability();
    qInfo("CPU kernels: %s", used.c_str());
    QVERIFY(used == "avx512" || used == "avx2" || used == "default");
    const char* asked = std::getenv("SYMTUNE_CPU_CAPABILITY");
    if (asked == nullptr)
      return;
    const std::string name(asked);
    const int rank = name == "default" ? 0 : name == "avx2" ? 1 : 2;
    const int usedRank = used == "default" ? 0 : used == "avx2" ? 1 : 2;
    // Lowered to the request, unless the CPU has less than was asked for.
    QVERIFY2(usedRank <= rank, used.c_str());
#if defined(__x86_64__)
    const bool supported = rank == 0 || (rank == 1 && __builtin_cpu_supports("avx2")) ||
                           (rank == 2 && __builtin_cpu_supports("avx512f"));
    if (supported)
      QCOMPARE(used, name);
#endif
  }
};

SYMTUNE_TEST_MAIN_CORE(TestCpuCapability)
#include "tst_cpu_capability.moc"
