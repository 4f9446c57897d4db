/*
 * test_cuda_emulated: every launcher of include/taskgrad/kernels_cuda*.h,
 * compiled from kernels/cuda by the host compiler and run on the CPU by
 * tests/cuda_emu (a fiber or a pthread per CUDA thread, real barriers,
 * 32-lane warps, cuBLAS on OpenBLAS), against its CPU kernel, on every
 * build.
 *
 * Design note
 * -----------
 * - Shapes are those of tests/test_cuda_*.c: odd sizes and remainder tiles,
 *   leading dimensions larger than the width (padding NaN in inputs, a
 *   sentinel in outputs that must survive), T = 1 and T not a multiple of
 *   the attention tile or above the naive kernels' 256-wide chunks, head
 *   sizes 8, 32, 40, 64, 128 and 256, bf16 and fp16, the
 *   16-bit GEMM's k = 29 and 513 (zero-padding path), and the aliasing the
 *   API allows (in-place activations, residual, softmax).  Write-only
 *   outputs start as NaN, so an element a kernel forgets stays NaN.
 * - Errors are normwise: ||emu - cpu|| / ||cpu|| over the whole buffer
 *   (rel_err: tg_rel_err_f32 where NaN or Inf on both sides is equal), so
 *   near-zero entries do not dominate; attention gradients per q / k / v
 *   third (compare_qkv in cuda_emu/cases_gpt.c).  EXACT means bit-for-bit equality (and is reported
 *   as error 0).
 * - Tolerances (the emulator runs the kernels' arithmetic in the host's
 *   float with libm's expf / logf and without FMA contraction; on a GPU,
 *   nvcc contracts a * b + c into one FMA and expf / logf are within 2 ulp,
 *   so each tolerance also covers a GPU run of the same code):
 *     EXACT    copies, selects, single adds or multiplies (no a * b + c to
 *              contract, no rounding choice): fill, accumulate, scale,
 *              relu, bias_add, residual, embedding (the same float adds in
 *              the same order by design), conversions, flags, counts.
 *     kTolEw   1e-6: one element-wise formula of a few float operations
 *              (SGD, AdamW, GELU; bias_grad's double sums rounded once): a few ulp (2^-24 = 6e-8 each) from FMA
 *              contraction, libm vs device expf and the CPU's polynomial
 *              exp in GELU; 1e-6 is ~16 ulp.
 *     kTolRed  1e-5: float sums over a row or a head in another order
 *              (LayerNorm, softmax, attention, GEMMs with k <= 257): the
 *              error of a length-k float sum grows like sqrt(k) ulp, and the
 *              CUDA tests (tests/cuda_pair.h) use the same bound.
 *     kTolLong 1e-4: long products (k = 1025, the classifier's dlnf over
 *              V = 250 probabilities scaled by wte), as TOL_LARGE_K there.
 *     16-bit results: one 16-bit rounding step (2^-8 bf16, 2^-11 fp16) can
 *              flip when the fp32 sums differ in their last bit, on a few
 *              elements: 2^-8 / 2^-11 normwise.
 * - The table of launchers: each case adds to its launcher's line
 *   ("launcher tg_cuda_NAME: N cases, max rel err E"); the launchers
 *   declared in the headers (read at run time from TG_EMU_HEADER_DIR, the
 *   *_scratch_floats sizes exempt) must all have a line, or the test fails.
 * - Files: this one (the table, comparisons, the emulator's checks, the
 *   element-wise, softmax, optimizer, GEMM and linear launchers),
 *   cuda_emu/cases_gpt.c (embedding, LayerNorm, attention, classifier),
 *   cuda_emu/cases_lowp.c (16-bit launchers); cuda_emu/emu_test.h between.
 * - The emulator itself is checked first (tests/cuda_emu/selftest.cu): a
 *   partial or divergent __syncthreads, a shuffle naming missing or exited
 *   lanes and a deadlock must each fail the launch with a message naming the
 *   kernel; unwritten shared memory must read as NaN.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu/emu_test.h"
#include "cuda_emu/selftest.h"

tg_rng g_rng = {0x243F6A8885A308D3ULL};
cublasHandle_t g_blas;

/* TG_EMU_QUICK=1: a subset of the shapes (still every launcher, and every
 * path through shared memory and barriers that the full set has: partial
 * tiles, multi-block grids, both softmax layouts, a head size per DPL up to
 * 128), for the sanitizer builds (always), where every access is
 * instrumented and, under AddressSanitizer, every emulated thread is a real
 * thread (scripts/check-sanitizers). */
int g_quick;
/* a sanitizer build is slower: quick */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* ---- the launcher table ----------------------------------------------------- */

#define MAX_LAUNCHERS 64
static struct {
  const char *name;
  int cases;
  double max_err;
} g_table[MAX_LAUNCHERS];
static int g_nlaunchers;

void record(const char *launcher, double err) {
  int i = 0;
  while (i < g_nlaunchers && strcmp(g_table[i].name, launcher) != 0) i++;
  if (i == g_nlaunchers) {
    if (g_nlaunchers == MAX_LAUNCHERS) {
      fprintf(stderr, "FATAL: more than %d launchers\n", MAX_LAUNCHERS);
      exit(1);
    }
    g_table[g_nlaunchers++].name = launcher;
  }
  g_table[i].cases++;
  if (!(err <= g_table[i].max_err)) g_table[i].max_err = err; /* NaN sticks */
}

/* ||emu - cpu|| / ||cpu|| (tg_rel_err_f32), except that positions NaN on
 * both sides (input padding in an in-place buffer, a NaN both kernels
 * produce) and equal infinities are equal; NaN or an infinity on one side
 * only makes the error infinite. */
static double rel_err(const float *emu, const float *cpu, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(emu[i]) || isnan(cpu[i])) {
      if (!(isnan(emu[i]) && isnan(cpu[i]))) return INFINITY;
      continue;
    }
    if (isinf(cpu[i])) { /* equal infinities add nothing; others fail */
      if (emu[i] != cpu[i]) return INFINITY;
      continue;
    }
    const double d = (double)emu[i] - (double)cpu[i];
    num += d * d;
    den += (double)cpu[i] * (double)cpu[i];
  }
  return den < 1e-300 ? sqrt(num) : sqrt(num / den);
}

/* Compares n floats of the emulated and the CPU result for `launcher`. */
void compare(const char *launcher, const char *what, const float *emu,
                    const float *cpu, size_t n, double tol) {
  double err = rel_err(emu, cpu, n);
  if (tol == EXACT) {
    size_t bad = 0, first = 0;
    for (size_t i = n; i-- > 0;)
      if (memcmp(&emu[i], &cpu[i], sizeof(float)) != 0) {
        bad++;
        first = i;
      }
    CHECK(bad == 0, "%s %s: %zu of %zu values differ (first at %zu: emu %g, cpu %g)",
          launcher, what, bad, n, first, (double)emu[first], (double)cpu[first]);
    if (bad && err == 0) err = INFINITY; /* e.g. NaN payloads, -0 vs +0 */
  } else {
    CHECK(err <= tol, "%s %s: relative error %.3e > %.1e", launcher, what, err, tol);
  }
  record(launcher, err);
}

/* A launch (or cuBLAS call) must succeed. */
void ok(const char *launcher, const char *what, int status) {
  CHECK(status == 0, "%s %s: status %d: %s", launcher, what, status, tg_emu_last_message());
  tg_emu_reset();
}

/* ---- buffers ------------------------------------------------------------------ */

float *fmalloc(size_t n) { return tg_test_malloc(sizeof(float) * (n ? n : 1)); }

/* (rows, ld) input: uniform in [-scale, scale), NaN padding (never read) */
float *input(int rows, int cols, int ld, float scale) {
  return tg_rand_mat(&g_rng, rows, cols, ld, scale, NAN);
}

/* (rows, ld) output, twice: random start (accumulating outputs) or NaN
 * (write-only), padding kSentinel; out[0] for the emulator, out[1] CPU */
void outputs(float *out[2], int rows, int cols, int ld, int random) {
  out[0] = random ? tg_rand_mat(&g_rng, rows, cols, ld, 1.0f, kSentinel)
                  : tg_const_mat(rows, cols, ld, NAN, kSentinel);
  out[1] = tg_copy_f(out[0], (size_t)rows * ld);
}

void free2(float *p[2]) {
  free(p[0]);
  free(p[1]);
}

/* ---- the emulator's own checks --------------------------------------------------- */

static void expect_failure(tg_emu_selftest_case c, const char *kernel, const char *why) {
  float *x = fmalloc(192);
  for (int i = 0; i < 192; i++) x[i] = (float)i;
  const cudaError_t e = tg_emu_selftest(c, x);
  const char *msg = tg_emu_last_message();
  CHECK(e == cudaErrorLaunchFailure || e == cudaErrorInvalidValue,
        "selftest %s: launch status %d, want a failure", kernel, (int)e);
  CHECK(strstr(msg, kernel) != NULL, "selftest %s: message does not name it: %s", kernel, msg);
  CHECK(strstr(msg, why) != NULL, "selftest %s: message lacks '%s': %s", kernel, why, msg);
  tg_emu_reset();
  free(x);
}

/* The checks, on fibers and on threads (mode 0, 1): both backends share the
 * collectives' bookkeeping but not the waiting. */
static void test_emulator_mode(int mode) {
  tg_emu_use_threads(mode);
  printf("(the 'cuda_emu: error' lines below are expected: %s)\n",
         mode ? "threads" : "fibers, or threads under AddressSanitizer");
  fflush(stdout);
  expect_failure(TG_EMU_PARTIAL_BARRIER, "partial_barrier_kernel", "__syncthreads");
  expect_failure(TG_EMU_DIVERGENT_BARRIER, "divergent_barrier_kernel", "divergent barriers");
  expect_failure(TG_EMU_PARTIAL_WARP, "partial_warp_kernel", "does not have");
  expect_failure(TG_EMU_EXITED_LANE, "exited_lane_kernel", "finished");
  expect_failure(TG_EMU_DEADLOCK, "deadlock_kernel", "deadlock");
  expect_failure(TG_EMU_SMEM_NO_OPTIN, "unwritten_shared_kernel", "dynamic shared memory");
  fflush(stderr);
  printf("(end of the expected errors)\n");

  float *x = fmalloc(192);
  for (int i = 0; i < 192; i++) x[i] = 1.0f;
  ok("selftest", "unwritten shared", tg_emu_selftest(TG_EMU_UNWRITTEN_SHARED, x));
  int nan = 0;
  for (int i = 0; i < 64; i++) nan += isnan(x[i]) != 0;
  CHECK(nan == 64, "unwritten shared memory read as a number in %d of 64 threads", 64 - nan);

  /* the positive control, against the same arithmetic done here: per block
   * of 64, v = x + x[t ^ 16] (lanes of a warp), then v + v[lane + 1]
   * (the last lane keeps its own), s = v + popc(ballot) = v + 5; out(t) =
   * s[63 - t] + 1 (or) + 10 (count) + 3 (lane 3's lane id) */
  float ref[192];
  float *y = fmalloc(192);
  for (int i = 0; i < 192; i++) y[i] = (float)(i % 37) - 11.0f;
  for (int blk = 0; blk < 3; blk++) {
    float v1[64], v2[64];
    const float *in = y + 64 * blk;
    for (int t = 0; t < 64; t++) v1[t] = in[t] + in[t ^ 16];
    for (int t = 0; t < 64; t++) v2[t] = v1[t] + ((t & 31) < 31 ? v1[t + 1] : v1[t]);
    for (int t = 0; t < 64; t++) ref[64 * blk + t] = (v2[63 - t] + 5.0f) + 1.0f + 10.0f + 3.0f;
  }
  ok("selftest", "collectives", tg_emu_selftest(TG_EMU_COLLECTIVES, y));
  compare("selftest", "collectives", y, ref, 192, EXACT);
  free(x);
  free(y);
  tg_emu_use_threads(-1);
}

/* TG_EMU_RACE=1: only the racy kernel, for ThreadSanitizer to report
 * (scripts/check-sanitizers expects that run to fail). */
static int race_only(void) {
  const char *e = getenv("TG_EMU_RACE");
  if (!e || strcmp(e, "1") != 0) return 0;
  float *x = fmalloc(192);
  for (int i = 0; i < 192; i++) x[i] = (float)i;
  const cudaError_t rc = tg_emu_selftest(TG_EMU_RACE, x);
  printf("race_kernel ran (status %d); ThreadSanitizer should have reported it\n", (int)rc);
  free(x);
  return 1;
}

static void test_emulator(void) {
  test_emulator_mode(0);
  test_emulator_mode(1);
}

/* ---- element-wise launchers -------------------------------------------------------- */

static const int g_shapes[][2] = {{1, 1}, {7, 33}, {257, 7}, {33, 257}};
#define NSHAPES 4

/* ReLU and GELU, forward and backward, out of place and in place (the API
 * allows Y == X and dX == dY) */
typedef struct activation {
  const char *fwd, *bwd; /* launcher names */
  cudaError_t (*cuda_fwd)(int, int, const float *, int, float *, int, cudaStream_t);
  void (*cpu_fwd)(int, int, const float *, int, float *, int);
  cudaError_t (*cuda_bwd)(int, int, const float *, int, const float *, int, float *, int,
                          cudaStream_t);
  void (*cpu_bwd)(int, int, const float *, int, const float *, int, float *, int);
  double tol; /* ReLU selects (exact); GELU evaluates exp */
} activation;

static const activation g_acts[2] = {
    {"tg_cuda_relu_fwd", "tg_cuda_relu_bwd", tg_cuda_relu_fwd, tg_cpu_relu_fwd,
     tg_cuda_relu_bwd, tg_cpu_relu_bwd, EXACT},
    {"tg_cuda_gelu_fwd", "tg_cuda_gelu_bwd", tg_cuda_gelu_fwd, tg_cpu_gelu_fwd,
     tg_cuda_gelu_bwd, tg_cpu_gelu_bwd, kTolEw}};

static void test_activation(const activation *a, int rows, int cols, int ld, const float *X,
                            const float *dY) {
  const size_t n = (size_t)rows * ld;
  for (int inplace = 0; inplace < 2; inplace++) {
    float *o[2];
    if (inplace) {
      o[0] = tg_copy_f(X, n);
      o[1] = tg_copy_f(X, n);
    } else {
      outputs(o, rows, cols, ld, 0);
    }
    ok(a->fwd, "", a->cuda_fwd(rows, cols, inplace ? o[0] : X, ld, o[0], ld, NULL));
    a->cpu_fwd(rows, cols, inplace ? o[1] : X, ld, o[1], ld);
    compare(a->fwd, inplace ? "in place" : "Y", o[0], o[1], n, a->tol);
    free2(o);
    if (inplace) {
      o[0] = tg_copy_f(dY, n);
      o[1] = tg_copy_f(dY, n);
    } else {
      outputs(o, rows, cols, ld, 0);
    }
    ok(a->bwd, "", a->cuda_bwd(rows, cols, X, ld, inplace ? o[0] : dY, ld, o[0], ld, NULL));
    a->cpu_bwd(rows, cols, X, ld, inplace ? o[1] : dY, ld, o[1], ld);
    compare(a->bwd, inplace ? "in place" : "dX", o[0], o[1], n, a->tol);
    free2(o);
  }
}

static void test_elementwise(void) {
  for (int s = 0; s < NSHAPES; s++) {
    FULL_ONLY(s != 1);
    const int rows = g_shapes[s][0], cols = g_shapes[s][1], ld = cols + 3;
    const size_t n = (size_t)rows * ld;
    float *X = input(rows, cols, ld, 2.0f), *B = input(1, cols, cols, 1.0f);
    float *dY = input(rows, cols, ld, 1.0f);
    float *o[2];

    outputs(o, rows, cols, ld, 1);
    ok("tg_cuda_bias_add", "", tg_cuda_bias_add(rows, cols, o[0], ld, B, NULL));
    tg_cpu_bias_add(rows, cols, o[1], ld, B);
    compare("tg_cuda_bias_add", "Y", o[0], o[1], n, EXACT);
    free2(o);

    for (int beta = 0; beta < 2; beta++) {
      outputs(o, 1, cols, cols, beta);
      ok("tg_cuda_bias_grad", "", tg_cuda_bias_grad(rows, cols, dY, ld, 0.5f * beta, o[0], NULL));
      tg_cpu_bias_grad(rows, cols, dY, ld, 0.5f * beta, o[1]);
      /* double sums on both sides, rounded once to float */
      compare("tg_cuda_bias_grad", "db", o[0], o[1], cols, kTolEw);
      free2(o);
    }

    for (int a = 0; a < 2; a++) test_activation(&g_acts[a], rows, cols, ld, X, dY);

    outputs(o, rows, cols, ld, 1);
    ok("tg_cuda_fill", "", tg_cuda_fill(rows, cols, o[0], ld, -3.5f, NULL));
    tg_cpu_fill(rows, cols, o[1], ld, -3.5f);
    compare("tg_cuda_fill", "X", o[0], o[1], n, EXACT);
    free2(o);
    outputs(o, rows, cols, ld, 1);
    ok("tg_cuda_accumulate", "", tg_cuda_accumulate(rows, cols, o[0], ld, dY, ld, NULL));
    tg_cpu_accumulate(rows, cols, o[1], ld, dY, ld);
    compare("tg_cuda_accumulate", "dst", o[0], o[1], n, EXACT);
    free2(o);
    outputs(o, rows, cols, ld, 1);
    ok("tg_cuda_scale", "", tg_cuda_scale(rows, cols, o[0], ld, -0.75f, NULL));
    tg_cpu_scale(rows, cols, o[1], ld, -0.75f);
    compare("tg_cuda_scale", "X", o[0], o[1], n, EXACT);
    free2(o);

    outputs(o, rows, cols, ld, 0);
    ok("tg_cuda_residual_fwd", "", tg_cuda_residual_fwd(rows, cols, X, ld, dY, ld, o[0], ld, NULL));
    tg_cpu_residual_fwd(rows, cols, X, ld, dY, ld, o[1], ld);
    compare("tg_cuda_residual_fwd", "Y", o[0], o[1], n, EXACT);
    free2(o);
    for (int alias = 0; alias < 2; alias++) { /* Y == A, then Y == B */
      float *a[2] = {tg_copy_f(X, n), tg_copy_f(X, n)};
      for (int side = 0; side < 2; side++) {
        const float *A = alias ? dY : a[side], *Bm = alias ? a[side] : dY;
        if (side == 0)
          ok("tg_cuda_residual_fwd", "aliased", tg_cuda_residual_fwd(rows, cols, A, ld, Bm, ld, a[0], ld, NULL));
        else
          tg_cpu_residual_fwd(rows, cols, A, ld, Bm, ld, a[1], ld);
      }
      compare("tg_cuda_residual_fwd", "aliased", a[0], a[1], n, EXACT);
      free2(a);
    }
    free(X);
    free(B);
    free(dY);
  }
  /* bias_grad over zero rows: db = beta * db */
  float *o[2];
  outputs(o, 1, 40, 40, 1);
  ok("tg_cuda_bias_grad", "rows 0", tg_cuda_bias_grad(0, 40, NULL, 40, 0.5f, o[0], NULL));
  tg_cpu_bias_grad(0, 40, NULL, 40, 0.5f, o[1]);
  compare("tg_cuda_bias_grad", "rows 0", o[0], o[1], 40, kTolEw);
  free2(o);
}

/* ---- softmax + cross-entropy, accuracy ------------------------------------------------ */

static void test_softmax(void) {
  /* <= 1024 columns: a warp per row; 1537: a block per row */
  static const int shapes[][2] = {{1, 1}, {7, 33}, {257, 10}, {33, 257}, {7, 1537}};
  for (int s = 0; s < 5; s++) {
    FULL_ONLY(s != 1 && s != 4);
    const int rows = shapes[s][0], cols = shapes[s][1], ld = cols + 1;
    const size_t n = (size_t)rows * ld;
    float *X = input(rows, cols, ld, 4.0f);
    int32_t *lab = tg_test_malloc(sizeof(int32_t) * rows);
    for (int r = 0; r < rows; r++) lab[r] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)cols);
    float *o[2], loss[2] = {0.5f, 0.5f};
    outputs(o, rows, cols, ld, 0);
    ok("tg_cuda_softmax_xent", "",
       tg_cuda_softmax_xent(rows, cols, X, ld, lab, 0.25f, o[0], ld, &loss[0], NULL));
    tg_cpu_softmax_xent(rows, cols, X, ld, lab, 0.25f, o[1], ld, &loss[1]);
    compare("tg_cuda_softmax_xent", "dlogits", o[0], o[1], n, kTolRed);
    compare("tg_cuda_softmax_xent", "loss", &loss[0], &loss[1], 1, kTolRed);
    free2(o);

    /* in place (dlogits == logits), and a corrupt label in the last row:
     * zero gradient row, NaN loss on both sides */
    float *io[2] = {tg_copy_f(X, n), tg_copy_f(X, n)};
    lab[rows - 1] = cols;
    loss[0] = loss[1] = 0.0f;
    ok("tg_cuda_softmax_xent", "in place",
       tg_cuda_softmax_xent(rows, cols, io[0], ld, lab, 1.0f, io[0], ld, &loss[0], NULL));
    tg_cpu_softmax_xent(rows, cols, io[1], ld, lab, 1.0f, io[1], ld, &loss[1]);
    compare("tg_cuda_softmax_xent", "in place", io[0], io[1], n, kTolRed);
    CHECK(isnan(loss[0]) && isnan(loss[1]), "softmax_xent bad label: loss %g / %g, want NaN",
          (double)loss[0], (double)loss[1]);
    free2(io);

    /* accuracy: values on a coarse grid so that rows have tied maxima
     * (the first one wins) */
    for (size_t i = 0; i < n; i++) X[i] = roundf(X[i]);
    for (int r = 0; r < rows; r++) lab[r] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)cols);
    float acc[2] = {2.0f, 2.0f};
    ok("tg_cuda_accuracy_count", "", tg_cuda_accuracy_count(rows, cols, X, ld, lab, &acc[0], NULL));
    tg_cpu_accuracy_count(rows, cols, X, ld, lab, &acc[1]);
    compare("tg_cuda_accuracy_count", "count", &acc[0], &acc[1], 1, EXACT);
    /* the argmax of each row as label: every row is correct */
    for (int r = 0; r < rows; r++) {
      int best = 0;
      for (int c = 1; c < cols; c++)
        if (X[(size_t)r * ld + c] > X[(size_t)r * ld + best]) best = c;
      lab[r] = best;
    }
    acc[0] = acc[1] = 0.0f;
    ok("tg_cuda_accuracy_count", "", tg_cuda_accuracy_count(rows, cols, X, ld, lab, &acc[0], NULL));
    tg_cpu_accuracy_count(rows, cols, X, ld, lab, &acc[1]);
    compare("tg_cuda_accuracy_count", "all correct", &acc[0], &acc[1], 1, EXACT);
    CHECK(acc[0] == (float)rows, "accuracy_count: %g of %d first maxima", (double)acc[0], rows);
    free(X);
    free(lab);
  }
}

/* ---- optimizers --------------------------------------------------------------------------- */

static void test_optimizers(void) {
  static const size_t sizes[] = {1, 1000, 70001}; /* 70001: 274 blocks */
  for (int s = 0; s < 3; s++) {
    FULL_ONLY(s == 2);
    const size_t n = sizes[s];
    float *g = input(1, (int)n, (int)n, 1.0f);
    float *w[2], *m[2], *v[2];
    outputs(w, 1, (int)n, (int)n, 1);
    outputs(m, 1, (int)n, (int)n, 1);
    ok("tg_cuda_sgd", "", tg_cuda_sgd(n, w[0], g, m[0], 0.1f, 0.9f, 1e-2f, 0.5f, NULL));
    tg_cpu_sgd(n, w[1], g, m[1], 0.1f, 0.9f, 1e-2f, 0.5f);
    compare("tg_cuda_sgd", "w", w[0], w[1], n, kTolEw);
    compare("tg_cuda_sgd", "vel", m[0], m[1], n, kTolEw);
    free2(m);
    outputs(m, 1, (int)n, (int)n, 1);
    outputs(v, 1, (int)n, (int)n, 1);
    for (size_t i = 0; i < n; i++) v[0][i] = v[1][i] = fabsf(v[0][i]); /* second moments >= 0 */
    for (int step = 1; step <= 2; step++) {
      const float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
      ok("tg_cuda_adamw", "", tg_cuda_adamw(n, w[0], g, m[0], v[0], 1e-2f, 0.9f, 0.999f, 1e-8f,
                                            1e-2f, bc1, bc2, 0.5f, NULL));
      tg_cpu_adamw(n, w[1], g, m[1], v[1], 1e-2f, 0.9f, 0.999f, 1e-8f, 1e-2f, bc1, bc2, 0.5f);
      compare("tg_cuda_adamw", "w", w[0], w[1], n, kTolEw);
      compare("tg_cuda_adamw", "m", m[0], m[1], n, kTolEw);
      compare("tg_cuda_adamw", "v", v[0], v[1], n, kTolEw);
    }
    free2(w);
    free2(m);
    free2(v);
    free(g);
  }
}

/* ---- GEMM and the fused linear layer --------------------------------------------------- */

static const int g_gemm_shapes[][3] = {{1, 1, 1},    {7, 1, 33},   {1, 7, 257},  {33, 7, 7},
                                       {257, 33, 1}, {33, 257, 257}, {7, 33, 1025}};
#define NGEMM 7

static void test_gemm(void) {
  for (int s = 0; s < NGEMM; s++)
    for (int t = 0; t < 4; t++) {
      const int m = g_gemm_shapes[s][0], n = g_gemm_shapes[s][1], k = g_gemm_shapes[s][2];
      const int ta = t & 1, tb = t >> 1;
      const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      float *A = input(ar, ac, ac + 2, 1.0f), *B = input(br, bc, bc + 1, 1.0f), *C[2];
      const float beta = t == 3 ? 0.0f : 0.5f;
      outputs(C, m, n, n + 3, beta != 0.0f);
      ok("tg_cuda_gemm", "", tg_cuda_gemm(g_blas, ta, tb, m, n, k, 1.5f, A, ac + 2, B, bc + 1,
                                          beta, C[0], n + 3));
      tg_cpu_gemm(ta, tb, m, n, k, 1.5f, A, ac + 2, B, bc + 1, beta, C[1], n + 3);
      compare("tg_cuda_gemm", "C", C[0], C[1], (size_t)m * (n + 3), k > 257 ? kTolLong : kTolRed);
      free2(C);
      free(A);
      free(B);
    }
  /* k == 0: C = beta C, beta == 0 writing zeros over NaN; ld 0 operands */
  for (int b = 0; b < 3; b++) {
    float *C[2];
    const float beta = b == 0 ? 0.0f : b == 1 ? 1.0f : -2.0f;
    outputs(C, 5, 6, 7, b != 0);
    ok("tg_cuda_gemm", "k 0", tg_cuda_gemm(g_blas, 0, 0, 5, 6, 0, 1.0f, NULL, 0, NULL, 0, beta,
                                           C[0], 7));
    tg_cpu_gemm(0, 0, 5, 6, 0, 1.0f, NULL, 0, NULL, 0, beta, C[1], 7);
    compare("tg_cuda_gemm", "k 0", C[0], C[1], 35, EXACT);
    free2(C);
  }
}

static void test_linear(void) {
  static const int shapes[][3] = {{1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 257, 7}};
  for (int s = 0; s < 4; s++)
    for (int act = 0; act < 3; act++)
      for (int bias = 0; bias < 2; bias++) {
        FULL_ONLY(s != 1);
        const int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *X = input(rows, in, in + 1, 1.0f), *W = input(out, in, in, 1.0f);
        float *b = bias ? input(1, out, out, 1.0f) : NULL, *Z[2], *H[2];
        outputs(Z, rows, out, out + 2, 0);
        outputs(H, rows, out, out + 2, 0);
        cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
        ok("tg_cuda_linear_fwd", "",
           tg_cuda_linear_fwd(g_blas, rows, in, out, X, in + 1, W, in, b, act, Z[0], out + 2,
                              act == 2 ? NULL : H[0], out + 2, NULL, &cs));
        ok("tg_cuda_linear_fwd", "cublas", cs);
        tg_cpu_linear_fwd(rows, in, out, X, in + 1, W, in, b, act, Z[1], out + 2,
                          act == 2 ? NULL : H[1], out + 2);
        compare("tg_cuda_linear_fwd", "Z", Z[0], Z[1], (size_t)rows * (out + 2), kTolRed);
        compare("tg_cuda_linear_fwd", "H", H[0], H[1], (size_t)rows * (out + 2), kTolRed);
        free2(Z);
        free2(H);

        float *dZ = input(rows, out, out, 1.0f), *Zp = input(rows, in, in + 3, 1.0f), *dX[2];
        outputs(dX, rows, in, in + 1, 0);
        ok("tg_cuda_linear_bwd_data", "",
           tg_cuda_linear_bwd_data(g_blas, rows, in, out, dZ, out, W, in, act,
                                   act == 2 ? NULL : Zp, in + 3, dX[0], in + 1, NULL, &cs));
        ok("tg_cuda_linear_bwd_data", "cublas", cs);
        tg_cpu_linear_bwd_data(rows, in, out, dZ, out, W, in, act, act == 2 ? NULL : Zp, in + 3,
                               dX[1], in + 1);
        compare("tg_cuda_linear_bwd_data", "dX", dX[0], dX[1], (size_t)rows * (in + 1), kTolRed);
        free2(dX);
        free(X); free(W); free(b); free(dZ); free(Zp);
      }
}

/* ---- every declared launcher has a line ---------------------------------------------- */

/* Names "tg_cuda_*(" declared in one header, each checked against the table. */
static void check_declared(const char *header) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", TG_EMU_HEADER_DIR, header);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  char line[1024];
  int declared = 0;
  while (fgets(line, sizeof line, f)) {
    for (char *p = strstr(line, "tg_cuda_"); p; p = strstr(p + 1, "tg_cuda_")) {
      size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
      if (p[len] != '(') continue; /* a mention, not a declaration */
      char name[128];
      snprintf(name, sizeof name, "%.*s", (int)len, p);
      const char *suffix = "_scratch_floats"; /* sizes, not launchers */
      if (len > strlen(suffix) && strcmp(name + len - strlen(suffix), suffix) == 0) continue;
      declared++;
      int found = 0;
      for (int i = 0; i < g_nlaunchers; i++) found |= strcmp(g_table[i].name, name) == 0;
      CHECK(found, "%s: launcher %s declared but never run", header, name);
    }
  }
  if (fclose(f) != 0) CHECK(0, "fclose %s", path);
  CHECK(declared > 0, "%s: no launcher declarations found", header);
}

int main(void) {
  if (race_only()) return 0;
  const char *quick = getenv("TG_EMU_QUICK");
  g_quick = (quick && strcmp(quick, "1") == 0) || SANITIZED;
  if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "FATAL: cublasCreate (emulated) failed\n");
    return 1;
  }
  static void (*const parts[])(void) = {test_emulator, test_elementwise, test_softmax,
                                         test_optimizers, test_gemm, test_linear,
                                         test_embedding, test_layernorm, test_attention,
                                         test_classifier, test_conversions, test_gemm_lowp,
                                         test_nonfinite_amp};
  for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) parts[i]();
  for (int i = 0; i < g_nlaunchers; i++)
    if (strncmp(g_table[i].name, "tg_cuda_", 8) == 0)
      printf("launcher %s: %d cases, max rel err %.3g\n", g_table[i].name, g_table[i].cases,
             g_table[i].max_err);
  check_declared("kernels_cuda.h");
  check_declared("kernels_cuda_precision.h");
  cublasDestroy(g_blas);
  /* the case files count their own CHECKs (testutil.h's counters are per
   * file) */
  int checks = tg_test_checks, failures = tg_test_failures;
  emu_cases_gpt_counts(&checks, &failures);
  emu_cases_lowp_counts(&checks, &failures);
  printf("test_cuda_emulated: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
