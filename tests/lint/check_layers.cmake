# cmake -DROOT=<source dir> -P check_layers.cmake
# The layout is the architecture (docs/architecture.md, "Layers"); this check keeps it true.
# - engine/'s folders are layers, lowest first (SYMTUNE_LAYERS below): a file in engine/src/<L>/
#   or engine/include/symtune/<L>/ includes headers of its own layer and of layers below, never
#   of a layer above.
# - core/ and app/cli/ include no LibTorch, no Qt and no engine header.
# - ui/, graphview/, app/studio/ and the studio's benchmarks (bench/chart/, bench/graphview/)
#   include no LibTorch and no engine header: the studio reaches the engine through core's
#   protocol only.
# - docs/architecture.md's layer diagram lists the same layers in the same order.

set(SYMTUNE_LAYERS compat profiling telemetry graph binding remat rules exec data zoo control runtime attach)

set(torch_include "^[ \t]*#[ \t]*include[ \t]*<(torch|ATen|c10|caffe2)/")
set(qt_include "^[ \t]*#[ \t]*include[ \t]*[<\"](Q[A-Za-z]+|Qt[A-Za-z]*/)")
list(JOIN SYMTUNE_LAYERS "|" layer_alternatives)
set(engine_include "^[ \t]*#[ \t]*include[ \t]*\"(symtune/|\\.\\./)(${layer_alternatives})/")

set(offenders "")
macro(offend file line why)
  file(RELATIVE_PATH _rel "${ROOT}" "${file}")
  string(STRIP "${line}" _line)
  list(APPEND offenders "${_rel}: ${_line}  (${why})")
endmacro()

function(sources_under dir out)
  file(GLOB_RECURSE found LIST_DIRECTORIES false "${ROOT}/${dir}/*")
  list(FILTER found INCLUDE REGEX "\\.(h|hpp|cpp|cc|cu|cuh|in)$")
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# Engine layers: no include points up.
list(LENGTH SYMTUNE_LAYERS layer_count)
sources_under(engine engine_files)
foreach(f IN LISTS engine_files)
  file(RELATIVE_PATH rel "${ROOT}" "${f}")
  if(NOT rel MATCHES "^engine/(src|include/symtune)/([a-z_]+)/")
    if(rel MATCHES "^engine/(src|include)/")
      list(APPEND offenders "${rel}: outside every layer (engine/src/<layer>/, engine/include/symtune/<layer>/)")
    endif()
    continue()
  endif()
  set(layer "${CMAKE_MATCH_2}")
  list(FIND SYMTUNE_LAYERS "${layer}" rank)
  if(rank LESS 0)
    list(APPEND offenders "${rel}: folder \"${layer}\" is not a layer (${SYMTUNE_LAYERS})")
    continue()
  endif()
  file(STRINGS "${f}" hits REGEX "${engine_include}")
  foreach(h IN LISTS hits)
    string(REGEX MATCH "${engine_include}" _ "${h}")
    list(FIND SYMTUNE_LAYERS "${CMAKE_MATCH_2}" included)
    if(included GREATER rank)
      offend("${f}" "${h}" "layer ${layer} includes ${CMAKE_MATCH_2}, a layer above it")
    endif()
  endforeach()
endforeach()

# Torch-free folders, and folders that must not reach into the engine.
foreach(dir core app/cli ui graphview app/studio bench/chart bench/graphview)
  sources_under(${dir} files)
  foreach(f IN LISTS files)
    file(STRINGS "${f}" hits REGEX "${torch_include}|${engine_include}")
    foreach(h IN LISTS hits)
      offend("${f}" "${h}" "${dir}/ may include neither LibTorch nor the engine")
    endforeach()
    if(dir STREQUAL "core" OR dir STREQUAL "app/cli")
      file(STRINGS "${f}" hits REGEX "${qt_include}")
      foreach(h IN LISTS hits)
        offend("${f}" "${h}" "${dir}/ is Qt-free")
      endforeach()
    endif()
  endforeach()
endforeach()

# The diagram in docs/architecture.md: the block after "### Layers of the engine" names each
# layer on a line of its own ("   runtime     Trainer, ..."), highest first.
file(READ "${ROOT}/docs/architecture.md" doc)
string(FIND "${doc}" "### Layers of the engine" at)
if(at LESS 0)
  list(APPEND offenders "docs/architecture.md: no \"### Layers of the engine\" section")
else()
  string(SUBSTRING "${doc}" ${at} -1 doc)
  string(REGEX MATCH "```\n([^`]*)```" _ "${doc}")
  string(REPLACE "\n" ";" lines "${CMAKE_MATCH_1}")
  set(documented "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^   ([a-z]+)  ")
      list(INSERT documented 0 "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(NOT documented STREQUAL SYMTUNE_LAYERS)
    list(JOIN documented " " documented_text)
    list(JOIN SYMTUNE_LAYERS " " layers_text)
    list(APPEND offenders "docs/architecture.md: the diagram's layers, lowest first, are \"${documented_text}\", the engine's \"${layers_text}\"")
  endif()
endif()

if(offenders)
  list(JOIN offenders "\n  " text)
  message(FATAL_ERROR "the layout breaks its layering:\n  ${text}")
endif()
list(JOIN SYMTUNE_LAYERS " " layers_text)
message(STATUS "${layer_count} engine layers (${layers_text}): no include points up; core/ and "
               "app/cli/ are LibTorch- and Qt-free; ui/, graphview/, app/studio/, bench/chart/, "
               "bench/graphview/ LibTorch-free")
