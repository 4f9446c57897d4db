/*
 * taskgrad layer 2: which back end the CPU GEMM uses for each shape class
 * (codelets/gemm_choice.c; the back ends are the kernels', gemm_libs.h).
 *
 * tg_init makes the choice (a start-up hook the codelets layer registers),
 * so the CLI and every program that links the library get the same one:
 *   - a name (tg_runtime_config.gemm_lib, the CLI's --gemm-lib, else
 *     TG_GEMM_LIB) forces one library for every class;
 *   - "auto" (the default) times each library at the step's own GEMMs of
 *     each class (the forward X W^T, the data gradient dY W, the weight
 *     gradient dY^T X at GPT-2 124M's and d4's shapes; the classifier's
 *     three GEMMs), on this thread, warm, and takes the fastest.  The
 *     result is cached in $XDG_CACHE_HOME/taskgrad/gemm-choice.txt (~/.cache/taskgrad without
 *     XDG_CACHE_HOME), keyed by the CPU model, the libraries' versions and
 *     OPENBLAS_CORETYPE, and measured again when any of them changes.  A
 *     cache that cannot be read or written just means measuring.
 * bf16 GEMMs (bf16 operands, fp32 sums) are native where the CPU has
 * AVX512-BF16 (kernels/cpu/matmul_onednn.c) and widened to f32 elsewhere;
 * TG_GEMM_BF16=native|widen forces one (native falls back to widening on a
 * CPU without it), "auto" (the default) measures both with the rest and
 * keeps the faster.
 */
#ifndef TASKGRAD_GEMM_CHOICE_H
#define TASKGRAD_GEMM_CHOICE_H

#include <stddef.h>

#include "taskgrad/gemm_libs.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_gemm_choice {
  int made;                                  /* 0 before the first choice */
  tg_gemm_lib lib[TG_GEMM_NCLASSES];         /* the back end of each class */
  /* GFLOP/s of each library at each class's probe shape, 0 when not
   * measured (a forced choice) */
  double gflops[TG_GEMM_NCLASSES][TG_GEMM_NLIBS];
  char how[48];                              /* "forced by TG_GEMM_LIB", ... */
  char cache[512];                           /* the cache file, "" if none */
  /* bf16 operands: native (oneDNN on AVX512-BF16) or widened to f32 and
   * multiplied in the fp32 back end; the GFLOP/s of each over the
   * forward, data- and weight-gradient probe shapes (0: not measured) */
  int bf16_native;
  double bf16_gflops[2];                     /* [0] widened, [1] native */
  char bf16_how[64];                         /* "measured", "no AVX512-BF16", ... */
} tg_gemm_choice;

/* Makes the choice and sets the kernels' table: name as above (NULL:
 * TG_GEMM_LIB, else "auto"); `how` tells where a forced name came from
 * ("--gemm-lib"); NULL for the default wording.  0, or -EINVAL with a
 * message for an unknown name. */
int tg_gemm_choose(const char *name, const char *how);
/* the last choice (made == 0 before any) */
const tg_gemm_choice *tg_gemm_current_choice(void);
/* one line: "gemm forward=onednn(61.2) data-grad=... [probed, cached]";
 * returns out */
char *tg_gemm_choice_summary(char *out, size_t n);
/* the cache file's path (out), or -1 when neither XDG_CACHE_HOME nor HOME
 * is set */
int tg_gemm_cache_path(char *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
