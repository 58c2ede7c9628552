// SPDX-License-Identifier: Apache-2.0
#pragma once

// Portable builds compile the CPU backend for baseline x86-64, so the
// binaries run on any x86-64 CPU, and let the kernels' loops pick AVX2 + FMA
// + F16C (x86-64-v3) or AVX-512 (x86-64-v4) when the library loads. GCC's
// target_clones compiles a function once per level and binds an ifunc
// resolver to the best level the CPU has; `flatten` inlines everything the
// function calls (a kernel's loop body and the element functions it uses),
// so the whole body is compiled for that level, not only the call.
//
// Every kernel runs its loops through ThreadPool::parallel_for, which calls
// each chunk through run_for_this_cpu; the fused chains' steps, called
// through std::function inside a chunk, go through it once more.
//
// SWITCHYARD_CPU_ONE_LEVEL builds the plain function: the SWITCHYARD_NATIVE=ON
// build (-march=native needs no clones) and the sanitizer builds (which test
// memory and threads, not speed). So do Clang and other architectures.

#if defined(SWITCHYARD_CPU_ONE_LEVEL) || defined(__clang__) || !defined(__GNUC__) || !defined(__x86_64__)
#define SWITCHYARD_ISA_CLONES
#else
#define SWITCHYARD_ISA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#endif

namespace switchyard::backends::cpu {

/// f(args...), compiled for each instruction-set level (see above).
template <class F, class... Args>
SWITCHYARD_ISA_CLONES void run_for_this_cpu(F& f, Args... args) {
  f(args...);
}

}  // namespace switchyard::backends::cpu
