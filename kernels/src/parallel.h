#pragma once
// at::parallel_for for the CPU kernels, with the check that makes it parallel. Private to kernels/.

#include <algorithm>
#include <cstdint>

#include <ATen/Parallel.h>

// Note [OpenMP kernels]
// LibTorch's wheel is built with AT_PARALLEL_OPENMP, and its at::parallel_for is a header
// template whose parallel region is an `#pragma omp parallel`: in a translation unit compiled
// without OpenMP the pragma is ignored and the loop body runs once, on the calling thread, over
// the whole range — correct, and silently serial (our kernels ran so until this check). The
// kernels are compiled with OpenMP (kernels/CMakeLists.txt); LibTorch ships its own libgomp.so.1
// under the system's soname, so a process loads one OpenMP runtime and at::set_num_threads
// governs our loops as it does ATen's.
// The CUDA sources include the list helpers but run no CPU loop; nvcc compiles them without it.
namespace symtune::kernels {

// Rows per task of a row loop: about 32K elements, at least one row.
inline int64_t rowGrain(int64_t columns) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(columns, 1));
}

}  // namespace symtune::kernels

#if AT_PARALLEL_OPENMP && !defined(_OPENMP) && !defined(__CUDACC__)
#error "kernels/ must be compiled with OpenMP: without it at::parallel_for runs serially"
#endif
