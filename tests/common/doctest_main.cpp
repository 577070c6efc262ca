// The main of the Qt-free test executables (doctest): the engine's and kernels' suites, which run
// where Qt is absent (the GPU machine). Each executable is one suite; CTest runs it whole.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
