# cmake -DROOT=<source dir> -P check_doctest_include.cmake
# Fails when a test includes <doctest/doctest.h> itself: tests/common/doctest_text.h is the one
# that does, with the specializations that write a C string as its text in doctest's messages;
# a unit without them would hold a second definition of the same function (the address-writing
# one), and which of the two the linker keeps is not said.
set(offenders "")
file(GLOB_RECURSE files "${ROOT}/tests/*.h" "${ROOT}/tests/*.cpp")
foreach(f IN LISTS files)
  if(f MATCHES "tests/common/doctest_text\\.h$")
    continue()
  endif()
  file(STRINGS "${f}" hits REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]doctest/doctest\\.h[>\"]")
  foreach(h IN LISTS hits)
    file(RELATIVE_PATH rel "${ROOT}" "${f}")
    string(STRIP "${h}" h)
    list(APPEND offenders "${rel}: ${h}")
  endforeach()
endforeach()
if(offenders)
  list(JOIN offenders "\n  " text)
  message(FATAL_ERROR "tests include doctest through tests/common/doctest_text.h, found:\n  ${text}")
endif()
message(STATUS "every test includes doctest through tests/common/doctest_text.h")
