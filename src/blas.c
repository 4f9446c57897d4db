/*
 * OpenBLAS kernel selection.
 *
 * Debian's OpenBLAS is built with DYNAMIC_ARCH: it picks its kernels at load
 * time from the CPU model.  On CPUs it does not know (virtual machines often
 * report a generic "Intel Xeon Processor"), 0.3.21 falls back to the SSE3
 * "Prescott" kernels, which run sgemm several times slower than the AVX-512
 * ones on the same core (bench/results/2026-11-22-mlp-cpu.md,
 * 2026-11-22-gpt-cpu.md).  The choice is made in a load-time constructor, so
 * it can only be corrected through OPENBLAS_CORETYPE before the process
 * starts: the CLI re-executes itself once with it set; applications can do
 * the same with tg_blas_better_coretype().
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "taskgrad/runtime.h"

const char *tg_blas_corename(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}

const char *tg_blas_better_coretype(void) {
  if (getenv("OPENBLAS_CORETYPE")) return NULL; /* the user decided */
#if defined(__x86_64__) && defined(__GNUC__)
  const char *core = openblas_get_corename();
  if (!core) return NULL;
  const char *wanted = NULL;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    wanted = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    wanted = "Haswell";
  if (!wanted) return NULL;
  /* kernels OpenBLAS only picks for CPUs without AVX2 */
  static const char *const old[] = {"prescott", "core2", "penryn", "dunnington",
                                    "nehalem", "atom", "sandybridge", "katmai",
                                    "coppermine", "northwood", "banias", "unknown"};
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
    if (strcasecmp(core, old[i]) == 0) return wanted;
#endif
  return NULL;
}
