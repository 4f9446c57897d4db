/*
 * taskgrad layer 1: the CPU GEMM's back ends (kernels/cpu/gemm.c).
 *
 * tg_cpu_gemm runs on one of several libraries: OpenBLAS (as the
 * environment configures it, OPENBLAS_CORETYPE included), oneDNN
 * (dnnl_sgemm) and libxsmm (JIT kernels).  Which one is a per-shape-class
 * table: the class of a call is the step's GEMM it is, read from the
 * transposes (forward X W^T: (0, 1); data gradient dY W: (0, 0); weight
 * gradient dY^T X: (1, 0)) or named by the caller (the classifier).  The
 * table starts at OpenBLAS everywhere; the codelets layer fills it at
 * tg_init from TG_GEMM_LIB / --gemm-lib or from a measured and cached
 * choice (gemm_choice.h).  Every back end gives tg_cpu_gemm's semantics
 * (all transposes, leading dimensions, alpha, beta, beta == 0 never reading
 * C, the degenerate sizes); a call a library cannot do goes to OpenBLAS.
 * Each runs single-threaded (StarPU runs one kernel per core).
 */
#ifndef TASKGRAD_GEMM_LIBS_H
#define TASKGRAD_GEMM_LIBS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tg_gemm_lib {
  TG_GEMM_OPENBLAS = 0,
  TG_GEMM_ONEDNN,
  TG_GEMM_LIBXSMM,
  TG_GEMM_NLIBS
} tg_gemm_lib;

typedef enum tg_gemm_class {
  TG_GEMM_FORWARD = 0, /* X W^T: transa 0, transb 1 */
  TG_GEMM_DATA_GRAD,   /* dY W: transa 0, transb 0 */
  TG_GEMM_WEIGHT_GRAD, /* dY^T X: transa 1 (transb 1 too: rare, same class) */
  TG_GEMM_CLASSIFIER,  /* the language-model head, named by its kernel */
  TG_GEMM_NCLASSES
} tg_gemm_class;

/* "openblas", "onednn", "libxsmm"; NULL out of range */
const char *tg_gemm_lib_name(tg_gemm_lib lib);
/* the library named name, or -1 (not "auto": that is the chooser's) */
int tg_gemm_lib_parse(const char *name);
/* "forward", "data-grad", "weight-grad", "classifier" */
const char *tg_gemm_class_name(tg_gemm_class cls);
/* the class of a call with these transposes (never the classifier) */
tg_gemm_class tg_gemm_class_of(int transa, int transb);

/* Sets the back end of one class (cls < 0: every class).  Call it while no
 * GEMM runs (at start-up, between steps). */
void tg_cpu_gemm_set_lib(int cls, tg_gemm_lib lib);
tg_gemm_lib tg_cpu_gemm_lib(tg_gemm_class cls);

/* tg_cpu_gemm in an explicit class (the classifier's kernels) */
void tg_cpu_gemm_in(tg_gemm_class cls, int transa, int transb, int m, int n, int k,
                    float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc);
/* tg_cpu_gemm_in on an explicit library, whatever the table says (the
 * probe): a library may run a class's calls on kernels of its own (oneDNN:
 * the forward class's X W^T on its matmul primitive, kernels/cpu/gemm.c) */
void tg_cpu_gemm_on(tg_gemm_lib lib, tg_gemm_class cls, int transa, int transb, int m,
                    int n, int k, float alpha, const float *A, int lda, const float *B,
                    int ldb, float beta, float *C, int ldc);

/* What the library is here, one line: its version and kernel set (ISA),
 * e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64,
 * kernels Zen" or "oneDNN 2.6.3 (OpenMP), max ISA avx2".  Returns out. */
char *tg_gemm_lib_describe(tg_gemm_lib lib, char *out, size_t n);
/* a version string that changes when the library does (the cache key) */
char *tg_gemm_lib_version(tg_gemm_lib lib, char *out, size_t n);

#ifdef __cplusplus
}
#endif

#endif
