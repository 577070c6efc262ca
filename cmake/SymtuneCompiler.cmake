# Warnings, ccache and the helper that applies them to every Symtune target.

option(SYMTUNE_WARNINGS_AS_ERRORS "Treat compiler warnings as errors (on in the ci preset)" OFF)
option(SYMTUNE_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)

find_program(SYMTUNE_CCACHE ccache)
if(SYMTUNE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  # Precompiled headers are only cacheable with these sloppiness settings (ccache manual, "Precompiled
  # headers"). BASEDIR makes paths inside the checkout relative, so a second clone (CI's) hits the
  # cache that the first filled.
  set(_launcher ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" ${SYMTUNE_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${_launcher})
endif()

# symtune_target_defaults(<target>): warnings (errors in CI), sanitizers and the PCH-friendly flags.
function(symtune_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
                              -Wcast-qual -Wformat=2 -Wimplicit-fallthrough>)
  if(SYMTUNE_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
  if(SYMTUNE_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(CMAKE_CXX_COMPILER_LAUNCHER)
    # ccache needs -fpch-preprocess to cache translation units that use a precompiled header.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)
  endif()
endfunction()

# symtune_find_header(VAR HEADER): the folder holding HEADER, in VAR (cached): the system's first,
# then the copies scripts/gpu-check.sh --prepare puts in the ignored .deps/include for the GPU
# machine, which has no Debian packages. Searched the other way, a checkout that had once prepared
# built against .deps rather than the packages, and failed to compile once .deps was deleted (the
# cached folder no longer holding HEADER is searched again).
function(symtune_find_header var header)
  if(${var} AND NOT EXISTS "${${var}}/${header}")
    unset(${var} CACHE)
  endif()
  find_path(${var} ${header})
  if(NOT ${var})
    find_path(${var} ${header} PATHS ${PROJECT_SOURCE_DIR}/.deps/include NO_DEFAULT_PATH)
  endif()
endfunction()
