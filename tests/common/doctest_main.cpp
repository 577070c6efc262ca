// The main of the Qt-free test executables (doctest): the engine's and kernels' suites, which run
// where Qt is absent (the GPU machine). Each executable is one suite; CTest runs it whole.

#define DOCTEST_CONFIG_IMPLEMENT
#include "doctest_text.h"

#include <cstdlib>

int main(int argc, char** argv) {
  doctest::Context context;
  // SYMTUNE_TEST_DURATIONS=1 prints each test case's time (scripts/gpu-check.sh sets it, to find
  // what is slow on a machine that is seldom lent); the command line still has the last word.
  if (const char* durations = std::getenv("SYMTUNE_TEST_DURATIONS");
      durations != nullptr && *durations != '\0' && *durations != '0')
    context.setOption("duration", true);
  context.applyCommandLine(argc, argv);
  return context.run();
}
