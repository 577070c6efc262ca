# cmake -DROOT=<source dir> -P check_qt_free.cmake
# Fails when core/, engine/, kernels/ or the runner (app/runner/, app/cli/) — or their tests
# (tests/core/, tests/engine/, tests/kernels/, tests/gpu/, and the helpers they share in
# tests/common/) — include a Qt header or name a Qt target: the engine, the runner and their test
# suites build and run on machines without Qt, the GPU machine among them (docs/architecture.md,
# "Libraries and what they may use"). tests/common/test_main.h is the Qt suites' own main.
set(offenders "")
foreach(dir core engine kernels app/runner app/cli tests/core tests/engine tests/kernels tests/gpu
        tests/common)
  file(GLOB_RECURSE files "${ROOT}/${dir}/*")
  foreach(f IN LISTS files)
    if(f MATCHES "tests/common/test_main\\.h$")
      continue()
    elseif(f MATCHES "\\.(h|hpp|cpp|cc|cu|cuh|in)$")
      file(STRINGS "${f}" hits REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](Q[A-Za-z]+|Qt[A-Za-z]*/)")
    elseif(f MATCHES "CMakeLists\\.txt$|\\.cmake$")
      file(STRINGS "${f}" hits REGEX "Qt6?::|find_package\\(Qt")
    else()
      continue()
    endif()
    foreach(h IN LISTS hits)
      file(RELATIVE_PATH rel "${ROOT}" "${f}")
      string(STRIP "${h}" h)
      list(APPEND offenders "${rel}: ${h}")
    endforeach()
  endforeach()
endforeach()
if(offenders)
  list(JOIN offenders "\n  " text)
  message(FATAL_ERROR "core/, engine/, kernels/, the runner and their tests must stay Qt-free, "
                      "found:\n  ${text}")
endif()
message(STATUS "core/, engine/, kernels/, app/runner/, app/cli/ and their tests are Qt-free")
