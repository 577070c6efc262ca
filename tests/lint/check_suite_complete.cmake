# cmake -DROOT=<source dir> -DREGISTERED=<file> -DUI=<ON|OFF> -P check_suite_complete.cmake
# Fails when a test source in tests/ (tests/**/tst_*.cpp) is not built into a test that CTest runs,
# so a dependency that goes missing cannot shrink the suite while the run stays green. REGISTERED
# lists the sources that tests/CMakeLists.txt registered (one per line, relative to tests/); it is
# empty when tests/ was not configured at all.
cmake_minimum_required(VERSION 3.25)
file(GLOB_RECURSE existing RELATIVE "${ROOT}/tests" "${ROOT}/tests/tst_*.cpp")
list(FILTER existing EXCLUDE REGEX "^fuzz/")
set(registered "")
if(EXISTS "${REGISTERED}")
  file(STRINGS "${REGISTERED}" registered)
endif()

set(missing "")
foreach(source IN LISTS existing)
  if(NOT source IN_LIST registered)
    list(APPEND missing "${source}")
  endif()
endforeach()
list(LENGTH existing n_existing)
list(LENGTH registered n_registered)
list(LENGTH missing n_missing)

if(missing AND NOT UI)
  # Asked for (-DSYMTUNE_BUILD_UI=OFF, the gpu preset): the Qt Test suites are not built, and only
  # they may be missing. A Qt Test source includes test_main.h or QtTest; any other one missing is
  # a test the gpu preset would silently not run.
  set(qt_free "")
  foreach(source IN LISTS missing)
    file(STRINGS "${ROOT}/tests/${source}" qt REGEX "test_main\\.h|QtTest")
    if(NOT qt)
      list(APPEND qt_free "${source}")
    endif()
  endforeach()
  if(qt_free)
    list(JOIN qt_free "\n  " text)
    message(FATAL_ERROR "SYMTUNE_BUILD_UI is OFF, yet these test sources, which need no Qt, are "
                        "not in the suite:\n  ${text}")
  endif()
  message(STATUS "SYMTUNE_BUILD_UI is OFF: ${n_missing} of ${n_existing} test sources (Qt Test "
                 "suites) not built")
  return()
endif()
if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "${n_missing} of the ${n_existing} test sources in tests/ are not in the "
                      "suite that CTest runs:\n  ${text}\nA dependency is missing or tests/"
                      "CMakeLists.txt skipped them; the suite must not shrink silently.")
endif()
message(STATUS "all ${n_existing} test sources in tests/ are built and registered")
