#pragma once
// Every CUDA runtime call in kernels/ goes through SYMTUNE_CUDA_CHECK, which reports the call and
// the error string.

#include <cuda_runtime.h>

#include <c10/util/Exception.h>

#define SYMTUNE_CUDA_CHECK(call)                                                                \
  do {                                                                                          \
    const cudaError_t symtune_err_ = (call);                                                    \
    TORCH_CHECK(symtune_err_ == cudaSuccess, #call " failed: ", cudaGetErrorName(symtune_err_), \
                ": ", cudaGetErrorString(symtune_err_));                                        \
  } while (0)
