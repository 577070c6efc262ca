#pragma once
// doctest for the Qt-free suites, safe beside LibTorch. Include it instead of <doctest/doctest.h>,
// before any LibTorch header.
//
// c10's logging defines a glog-style CHECK(condition) that aborts the process and is no test
// assertion; doctest defines CHECK too, and whichever header comes last wins without a warning
// (both are system headers). A CHECK that silently became c10's would count nothing and fail
// nothing, so c10's header comes in first, once (its include guard keeps it from coming back), and
// CHECK is then doctest's.

#include <c10/util/Logging.h>
#include "doctest_text.h"

#undef CHECK
#define CHECK(...) DOCTEST_CHECK(__VA_ARGS__)
