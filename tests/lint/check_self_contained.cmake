# cmake -DROOT=<source dir> -P check_self_contained.cmake
# Fails when a source, build file or document cites a file outside the repository (a planning
# folder beside the checkout, such as ../shared/): a clone must explain itself; the design is
# docs/architecture.md.
set(offenders "")
file(GLOB_RECURSE files LIST_DIRECTORIES false "${ROOT}/*")
foreach(f IN LISTS files)
  file(RELATIVE_PATH rel "${ROOT}" "${f}")
  if(rel MATCHES "^(build|\\.git|\\.deps)/" OR rel STREQUAL "tests/lint/check_self_contained.cmake"
     OR NOT rel MATCHES "\\.(h|hpp|cpp|cu|cuh|in|py|sh|cmake|txt|md|json|xml|desktop)$|(^|/)run$")
    continue()
  endif()
  file(STRINGS "${f}" hits REGEX "\\.\\./shared/|(^|[^A-Za-z_./])(DESIGN|STYLE)\\.md")
  foreach(h IN LISTS hits)
    string(STRIP "${h}" h)
    list(APPEND offenders "${rel}: ${h}")
  endforeach()
endforeach()
if(offenders)
  list(JOIN offenders "\n  " text)
  message(FATAL_ERROR "the repository cites files outside it:\n  ${text}")
endif()
message(STATUS "nothing cites files outside the repository")
