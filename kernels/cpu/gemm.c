/*
 * GEMM: C(m, n) = alpha * op(A) * op(B) + beta * C, row-major, on one of
 * three libraries (include/taskgrad/gemm_libs.h): OpenBLAS's cblas_sgemm
 * (CblasRowMajor), oneDNN's dnnl_sgemm (row-major too) or a libxsmm JIT
 * kernel, chosen per shape class from a table that the codelets layer fills
 * at tg_init (codelets/gemm_choice.c).  The table starts at OpenBLAS.
 *
 * One thread each: StarPU runs one kernel per worker core.  OpenBLAS is
 * pinned in tg_init (openblas_set_num_threads(1)); Debian's oneDNN runs on
 * OpenMP and asks omp_get_max_threads(), an ICV of the calling thread, so
 * the oneDNN path sets it to 1 once in each thread that calls it (a StarPU
 * worker, the probe); libxsmm's kernels are plain single-threaded code.
 *
 * Degenerate shapes are handled here for every library, rather than passed
 * on (cblas's argument checks print an error for an empty operand):
 *   m == 0 or n == 0:       nothing to do, no pointer is touched;
 *   k == 0 or alpha == 0:   C = beta * C (BLAS semantics: A and B are not
 *                           read), with beta == 0 writing zeros even over NaN.
 * For the general case with beta == 0, OpenBLAS and oneDNN ignore the old C
 * and libxsmm gets its BETA_0 kernel; the op table checks each with C
 * filled with NaN.  libxsmm 1.17's JIT has no transposed first operand
 * (column-major TRANS_A, i.e. our transb: the forward X W^T): those calls,
 * an alpha far from 1 (see gemm_libxsmm) and any shape it declines (a NULL
 * kernel) go to OpenBLAS.  So do oneDNN calls that fail (a non-success status).
 */
#include <cblas.h>
#include <libxsmm.h>
#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "matmul_onednn.h"
#include "taskgrad/gemm_libs.h"
#include "taskgrad/kernels_cpu.h"

/* libgomp's (oneDNN's runtime); declared here rather than through omp.h,
 * which not every compiler of the build ships (clang without libomp-dev) */
void omp_set_num_threads(int n);

/* the back end of each class; set at start-up, read by every call */
static volatile int g_lib[TG_GEMM_NCLASSES];

static const char *const kLibNames[TG_GEMM_NLIBS] = {"openblas", "onednn", "libxsmm"};
static const char *const kClassNames[TG_GEMM_NCLASSES] = {"forward", "data-grad",
                                                          "weight-grad", "classifier"};

const char *tg_gemm_lib_name(tg_gemm_lib lib) {
  return (unsigned)lib < TG_GEMM_NLIBS ? kLibNames[lib] : NULL;
}

int tg_gemm_lib_parse(const char *name) {
  for (int i = 0; name && i < TG_GEMM_NLIBS; i++)
    if (strcasecmp(name, kLibNames[i]) == 0) return i;
  return -1;
}

const char *tg_gemm_class_name(tg_gemm_class cls) {
  return (unsigned)cls < TG_GEMM_NCLASSES ? kClassNames[cls] : NULL;
}

tg_gemm_class tg_gemm_class_of(int transa, int transb) {
  if (transa) return TG_GEMM_WEIGHT_GRAD;
  return transb ? TG_GEMM_FORWARD : TG_GEMM_DATA_GRAD;
}

void tg_cpu_gemm_set_lib(int cls, tg_gemm_lib lib) {
  if ((unsigned)lib >= TG_GEMM_NLIBS) return;
  for (int c = 0; c < TG_GEMM_NCLASSES; c++)
    if (cls < 0 || cls == c) g_lib[c] = lib;
}

tg_gemm_lib tg_cpu_gemm_lib(tg_gemm_class cls) {
  return (unsigned)cls < TG_GEMM_NCLASSES ? (tg_gemm_lib)g_lib[cls] : TG_GEMM_OPENBLAS;
}

/* C = beta * C on the (m, n) block, beta == 0 meaning C is write-only. */
static void scale_c(int m, int n, float beta,
                    float *C, int ldc) // (m, ldc)
{
  for (int i = 0; i < m; i++) {
    float *restrict c = C + (size_t)i * ldc;
    if (beta == 0.0f)
      for (int j = 0; j < n; j++) c[j] = 0.0f;
    else if (beta != 1.0f)
      for (int j = 0; j < n; j++) c[j] *= beta;
  }
}

static void gemm_openblas(int transa, int transb, int m, int n, int k, float alpha,
                          const float *A, int lda, const float *B, int ldb, float beta,
                          float *C, int ldc) {
  cblas_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans,
              transb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

/* 0 when oneDNN did it: the forward class's X W^T (and its bias) on the
 * matmul primitive, the rest on dnnl_sgemm, whichever was measured the
 * faster in the step (matmul_onednn.c; the classifier's X W^T was slower on
 * the primitive there: bench/results/2026-11-27-cpu-step.md) */
static int gemm_onednn(tg_gemm_class cls, int transa, int transb, int m, int n, int k,
                       float alpha, const float *A, int lda, const float *B, int ldb,
                       const float *bias, float beta, float *C, int ldc) {
  if (cls == TG_GEMM_FORWARD && !transa && transb &&
      tg_cpu_matmul_onednn_f32(0, 1, m, n, k, alpha, A, lda, B, ldb, bias, beta, C, ldc) == 0)
    return 0;
  if (bias) return -1;
  static _Thread_local int one_thread;
  if (!one_thread) { /* this thread's OpenMP ICV: no team of its own */
    omp_set_num_threads(1);
    one_thread = 1;
  }
  return dnnl_sgemm(transa ? 'T' : 'N', transb ? 'T' : 'N', m, n, k, alpha, A, lda,
                    B, ldb, beta, C, ldc) == dnnl_success ? 0 : -1;
}

/* C *= f on the (m, n) block */
static void mul_c(int m, int n, float f, float *C, int ldc) {
  for (int i = 0; i < m; i++) {
    float *restrict c = C + (size_t)i * ldc;
    for (int j = 0; j < n; j++) c[j] *= f;
  }
}

/* 0 when a libxsmm kernel did it.  libxsmm is column-major: the row-major
 * C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, i.e. B's
 * storage as the first operand with B's transpose flag, A's as the second.
 * Its JIT kernels take alpha 1 and beta 0 or 1 only; another alpha is
 * applied to C around a beta-1 kernel, C = alpha (AB + (beta / alpha) C),
 * so that a call differs from its alpha-1 twin only by that scaling (exact
 * for a power of two: a scaled loss gives exactly scaled gradients, as the
 * op table checks), within 2^-20..2^20 so that beta / alpha stays finite. */
static int gemm_libxsmm(int transa, int transb, int m, int n, int k, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc) {
  const float a = fabsf(alpha);
  if (transb || a < 0x1p-20f || a > 0x1p20f) return -1; /* see the top */
  const float one = 1.0f, kbeta = beta == 0.0f ? 0.0f : 1.0f;
  const libxsmm_blasint xlda = ldb, xldb = lda, xldc = ldc;
  const int flags = (transa ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) |
                    (beta == 0.0f ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
  const int prefetch = LIBXSMM_PREFETCH_NONE;
  libxsmm_smmfunction kernel = libxsmm_smmdispatch(n, m, k, &xlda, &xldb, &xldc, &one,
                                                   &kbeta, &flags, &prefetch);
  if (!kernel) return -1;
  if (beta != 0.0f && beta != alpha) mul_c(m, n, beta / alpha, C, ldc);
  kernel(B, A, C);
  if (alpha != 1.0f) mul_c(m, n, alpha, C, ldc);
  return 0;
}

void tg_cpu_gemm_on(tg_gemm_lib lib, tg_gemm_class cls, int transa, int transb, int m,
                    int n, int k, float alpha,
                    const float *A, int lda, // (m, lda) or, transposed, (k, lda)
                    const float *B, int ldb, // (k, ldb) or, transposed, (n, ldb)
                    float beta,
                    float *C, int ldc)       // (m, ldc)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    scale_c(m, n, beta, C, ldc);
    return;
  }
  if (lib == TG_GEMM_ONEDNN &&
      gemm_onednn(cls, transa, transb, m, n, k, alpha, A, lda, B, ldb, NULL, beta, C, ldc) ==
          0)
    return;
  if (lib == TG_GEMM_LIBXSMM &&
      gemm_libxsmm(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
    return;
  gemm_openblas(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

void tg_cpu_gemm_in(tg_gemm_class cls, int transa, int transb, int m, int n, int k,
                    float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc) {
  tg_cpu_gemm_on(tg_cpu_gemm_lib(cls), cls, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                 beta, C, ldc);
}

void tg_cpu_gemm(int transa, int transb, int m, int n, int k, float alpha,
                 const float *A, int lda, // (m, lda) or, transposed, (k, lda)
                 const float *B, int ldb, // (k, ldb) or, transposed, (n, ldb)
                 float beta,
                 float *C, int ldc)       // (m, ldc)
{
  tg_cpu_gemm_in(tg_gemm_class_of(transa, transb), transa, transb, m, n, k, alpha, A, lda,
                 B, ldb, beta, C, ldc);
}

void tg_cpu_gemm_bias(int transa, int transb, int m, int n, int k,
                      const float *A, int lda, // (m, lda) or, transposed, (k, lda)
                      const float *B, int ldb, // (k, ldb) or, transposed, (n, ldb)
                      const float *bias,       // (n)
                      float *C, int ldc)       // (m, ldc)
{
  if (m <= 0 || n <= 0) return;
  const tg_gemm_class cls = tg_gemm_class_of(transa, transb);
  const tg_gemm_lib lib = tg_cpu_gemm_lib(cls);
  if (k > 0 && lib == TG_GEMM_ONEDNN &&
      gemm_onednn(cls, transa, transb, m, n, k, 1.0f, A, lda, B, ldb, bias, 0.0f, C, ldc) == 0)
    return;
  /* elsewhere the bias is written into C first and the GEMM adds onto it:
   * one write pass instead of a read-modify-write pass after the GEMM */
  for (int r = 0; r < m; r++) memcpy(C + (size_t)r * ldc, bias, sizeof(float) * (size_t)n);
  tg_cpu_gemm_on(lib, cls, transa, transb, m, n, k, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
}

/* ---- what each library is ------------------------------------------------- */

static const char *onednn_isa(void) {
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_sse41: return "sse41";
  case dnnl_cpu_isa_avx: return "avx";
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
  case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
  case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "unknown";
  }
}

char *tg_gemm_lib_version(tg_gemm_lib lib, char *out, size_t n) {
  const dnnl_version_t *v;
  switch (lib) {
  case TG_GEMM_OPENBLAS: snprintf(out, n, "%s", openblas_get_config()); break;
  case TG_GEMM_ONEDNN:
    v = dnnl_version();
    snprintf(out, n, "%d.%d.%d", v->major, v->minor, v->patch);
    break;
  case TG_GEMM_LIBXSMM: snprintf(out, n, "%s", LIBXSMM_VERSION); break;
  default: snprintf(out, n, "?");
  }
  return out;
}

char *tg_gemm_lib_describe(tg_gemm_lib lib, char *out, size_t n) {
  char ver[256];
  tg_gemm_lib_version(lib, ver, sizeof ver);
  switch (lib) {
  case TG_GEMM_OPENBLAS:
    snprintf(out, n, "%s, kernels %s", ver, openblas_get_corename()); /* "OpenBLAS 0.3..." */
    break;
  case TG_GEMM_ONEDNN:
    snprintf(out, n, "oneDNN %s (CPU runtime %s), max ISA %s", ver,
             dnnl_version()->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other",
             onednn_isa());
    break;
  case TG_GEMM_LIBXSMM:
    snprintf(out, n, "libxsmm %s, JIT target %s (a transposed B goes to OpenBLAS)", ver,
             libxsmm_get_target_arch());
    break;
  default: snprintf(out, n, "?");
  }
  return out;
}
