/*
 * Elementwise kernels compiled for AVX-512 and AVX2 as well as the baseline
 * x86-64 (SSE2) the library is built for, the variant picked at load time
 * (GCC's target_clones, a GNU ifunc); elsewhere a plain function.  Helpers
 * called from a cloned function must be inlined into it (TG_ROW_INLINE) to
 * be compiled for each variant.
 *
 * A clone rounds like the baseline only where its source file is compiled
 * without floating-point contraction (-ffp-contract=off: no FMA formed from
 * a * b + c): then every operation is the same IEEE single operation in any
 * vector width, and the variants agree bit for bit.
 */
#ifndef TASKGRAD_KERNELS_SIMD_CLONES_H
#define TASKGRAD_KERNELS_SIMD_CLONES_H

#if defined(__GNUC__) && defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define TG_SIMD_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef TG_SIMD_CLONES
#define TG_SIMD_CLONES
#endif

#if defined(__GNUC__)
#define TG_ROW_INLINE static inline __attribute__((always_inline))
#else
#define TG_ROW_INLINE static inline
#endif

#endif
