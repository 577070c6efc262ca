#pragma once
// Which build of the CPU kernels runs: "avx512", "avx2" or "default" — the widest the CPU has, or
// lower when SYMTUNE_CPU_CAPABILITY asks (Note [CPU capabilities] in src/cpu/cpu_dispatch.cpp).

#include <string>

namespace symtune::kernels {

std::string cpuCapability();

}  // namespace symtune::kernels
