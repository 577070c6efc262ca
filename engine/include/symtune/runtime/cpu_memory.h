#pragma once
// How the process's C library hands CPU memory back (session `run.cpu_memory`,
// docs/session-format.md).
//
// Note [Freed memory kept]
// LibTorch allocates CPU tensors with posix_memalign, and glibc's malloc serves a block above its
// mmap threshold (128 KiB to begin with) with a mapping of its own, unmapped when the block is
// freed; it raises the threshold to the size of a mapped block freed (up to 32 MiB), and trims the
// top of its heap back to the system past a threshold twice that. A training step frees its
// activations and gradients and the next allocates them again: whatever glibc unmapped or trimmed
// in between comes back as page faults, the kernel zeroing each page, and how much a step pays
// depends on where the thresholds stand after the steps before it. On this project's 2-vCPU
// machine, over 200 steps of four trainers in one process, the tagger's steps had a standard
// deviation of 0.20-0.42 in the log of their time, and two trainers of one configuration side by
// side differed step by step by 0.16-0.32; with the thresholds fixed, 0.06-0.12 and 0.05-0.08
// (docs/benchmarks.md, "Freed CPU memory kept"). Fixing the trim threshold alone is the worst of
// both: it also freezes the mmap threshold at 128 KiB, and the tagger ran at a fifth of its speed.
//
// keepFreedCpuMemory() fixes the mmap threshold at glibc's largest (32 MiB) and the trim threshold
// at 1 GiB, so freed blocks up to 32 MiB stay on the heap for the next step: the process keeps its
// high-water mark of such memory rather than handing it back between steps, as the CUDA caching
// allocator does on a GPU. It does not make every model faster: over eight alternated processes
// each (which on that machine run a model 20-50 % apart from one start to the next whatever the
// setting) the ResNet ran at 0.86-0.91 and Transformer-XL at 0.86-0.90 of their speed as glibc
// comes, the other four at 0.98-1.06; why is not known yet. So it is a session's choice
// (run.cpu_memory "retain"), not the default. It is process-wide and stays for the process: a run
// whose session says "system" after one that kept leaves it as it is. Elsewhere than glibc it does
// nothing.

namespace symtune {

// Note [Freed memory kept]. Returns whether the C library took the settings (false where it is
// not glibc). Safe to call more than once and from several threads.
bool keepFreedCpuMemory();

}  // namespace symtune
