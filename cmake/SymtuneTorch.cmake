# Finds LibTorch and decides SYMTUNE_WITH_CUDA and SYMTUNE_WITH_CUPTI.
#
# Search order: Torch_DIR / CMAKE_PREFIX_PATH as given; the cache that scripts/common.sh fills
# (SYMTUNE_TORCH_HOME, Note [Dependency cache] in scripts/install-libtorch.sh); the torch package
# of the python3 on PATH (the GPU machine has PyTorch installed there).

set(SYMTUNE_TORCH_HOME "$ENV{HOME}/.cache/symtune/libtorch-2.11.0-cu130" CACHE PATH
    "Folder that scripts/common.sh installs the LibTorch wheel into")

set(_torch_hints "${SYMTUNE_TORCH_HOME}/site/torch/share/cmake")
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _py_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_py_torch_prefix)
    list(APPEND _torch_hints "${_py_torch_prefix}")
  endif()
endif()

# Torch's CUDA configuration needs the toolkit; point it at /usr/local/cuda unless told otherwise.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
# Torch's config ignores CMAKE_CUDA_ARCHITECTURES and detects archs from TORCH_CUDA_ARCH_LIST;
# without a GPU to detect it would build for eleven. Default to the GPU machine's (H200, sm_90).
set(SYMTUNE_CUDA_ARCH "9.0" CACHE STRING "CUDA compute capability to build for (e.g. 9.0, 8.0)")
set(TORCH_CUDA_ARCH_LIST "${SYMTUNE_CUDA_ARCH}")
string(REPLACE "." "" _cuda_arch "${SYMTUNE_CUDA_ARCH}")

find_package(Torch REQUIRED HINTS ${_torch_hints})
if(Torch_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "Symtune needs LibTorch 1.13 or newer, found ${Torch_VERSION}")
endif()

include(CheckLanguage)
check_language(CUDA)
set(_cuda_default OFF)
if(TARGET torch_cuda AND CMAKE_CUDA_COMPILER)
  set(_cuda_default ON)
endif()
option(SYMTUNE_WITH_CUDA "Build the CUDA kernels and CUDA paths (needs a CUDA LibTorch and nvcc)"
       ${_cuda_default})
if(SYMTUNE_WITH_CUDA)
  if(NOT TARGET torch_cuda)
    message(FATAL_ERROR "SYMTUNE_WITH_CUDA is ON but this LibTorch has no CUDA (torch_cuda missing)")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${_cuda_arch})
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  if(CUDAToolkit_VERSION_MAJOR AND CUDA_VERSION AND NOT CUDA_VERSION MATCHES "^${CUDAToolkit_VERSION_MAJOR}\\.")
    message(FATAL_ERROR "LibTorch was built for CUDA ${CUDA_VERSION} but nvcc is CUDA "
                        "${CUDAToolkit_VERSION}; one CUDA major per process (docs/building.md)")
  endif()
endif()

# CUPTI (the GPU activity tracer) and NVTX (ranges for Nsight Systems) need headers only: the
# toolkit's, wherever this toolkit keeps them. libcupti is opened at run time.
set(_cupti_default OFF)
if(SYMTUNE_WITH_CUDA)
  # Last: the copies scripts/gpu-check.sh --prepare carries to a machine whose toolkit has none.
  find_path(SYMTUNE_CUPTI_INCLUDE_DIR cupti_activity.h
            HINTS ${CUDAToolkit_CUPTI_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS}
                  ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/include
                  ${PROJECT_SOURCE_DIR}/.deps/cuda-extras/include)
  find_path(SYMTUNE_NVTX_INCLUDE_DIR nvtx3/nvToolsExt.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/.deps/cuda-extras/include)
  if(SYMTUNE_CUPTI_INCLUDE_DIR)
    set(_cupti_default ON)
  endif()
endif()
option(SYMTUNE_WITH_CUPTI "Build the CUPTI activity tracer (libcupti is loaded at run time)"
       ${_cupti_default})
if(SYMTUNE_WITH_CUPTI AND NOT SYMTUNE_WITH_CUDA)
  message(FATAL_ERROR "SYMTUNE_WITH_CUPTI needs SYMTUNE_WITH_CUDA")
endif()
if(SYMTUNE_WITH_CUPTI AND NOT SYMTUNE_CUPTI_INCLUDE_DIR)
  message(FATAL_ERROR "SYMTUNE_WITH_CUPTI is ON but CUPTI's headers (cupti_activity.h) were not "
                      "found; set SYMTUNE_CUPTI_INCLUDE_DIR")
endif()

# What Symtune's libraries link for LibTorch. TORCH_LIBRARIES holds this machine's absolute paths,
# so an installed Symtune names Symtune::torch instead, which its package config makes from the
# TORCH_LIBRARIES that find_package(Torch) gives on the user's machine (installers/).
# Each item wrapped alone: a semicolon inside a generator expression would split it.
set(SYMTUNE_TORCH_LINK "$<INSTALL_INTERFACE:Symtune::torch>")
foreach(lib IN LISTS TORCH_LIBRARIES)
  list(APPEND SYMTUNE_TORCH_LINK "$<BUILD_INTERFACE:${lib}>")
endforeach()

# torch's imported targets carry the ABI define but not the language standard (set above).
# symtune_torch_pch(<target>): the precompiled header shared by the LibTorch-heavy targets.
function(symtune_torch_pch target)
  target_precompile_headers(${target} PRIVATE <torch/torch.h> <torch/script.h>)
endfunction()
