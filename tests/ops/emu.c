/*
 * The cuda-emu backend of the op table (was test_cuda_emulated): every
 * launcher of include/taskgrad/kernels_cuda*.h,
 * compiled from kernels/cuda by the host compiler and run on the CPU by
 * tests/cuda_emu (a fiber or a pthread per CUDA thread, real barriers,
 * 32-lane warps, cuBLAS on OpenBLAS), against its CPU kernel, on every
 * build.
 *
 * Design note
 * -----------
 * - Shapes are those of the pair cases (cuda backend): odd sizes and remainder tiles,
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
 *   third (compare_qkv in tests/ops/attention.c).  EXACT means bit-for-bit equality (and is reported
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
 *              cuda backend (tests/ops/pair.h) uses the same bound.
 *     kTolLong 1e-4: long products (k = 1025, the classifier's dlnf over
 *              V = 250 probabilities scaled by wte), as TOL_LARGE_K there.
 *     16-bit results: one 16-bit rounding step (2^-8 bf16, 2^-11 fp16) can
 *              flip when the fp32 sums differ in their last bit, on a few
 *              elements: 2^-8 / 2^-11 normwise.
 * - The table of launchers: each case adds to its launcher's line
 *   ("launcher tg_cuda_NAME: N cases, max rel err E"); the launchers
 *   declared in the headers (read at run time from TG_EMU_HEADER_DIR, the
 *   *_scratch_floats sizes exempt) must all have a line, or the test fails.
 * - Files: this one (the launcher table, the comparisons, the buffers and
 *   the emulator's own checks, run first by emu_start), the cases in the op
 *   row files (tests/ops/<codelet file>.c, section cuda-emu);
 *   cuda_emu/emu_test.h between.  Each comparison is also noted in the op
 *   table's line of its row.
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
#include "ops_table.h"

tg_rng g_rng = {.s = 0x243F6A8885A308D3ULL};
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

#define MAX_LAUNCHERS 96
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
  ops_note_error(err, tol == EXACT ? -1.0 : tol);
}

/* A launch (or cuBLAS call) must succeed. */
void ok(const char *launcher, const char *what, int status) {
  CHECK(status == 0, "%s %s: status %d: %s", launcher, what, status, tg_emu_last_message());
  tg_emu_reset();
}

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

/* ---- helpers of the GPT and 16-bit cases ---- */

/* n tokens in [0, V) */
int32_t *tokens(int n, int V) {
  int32_t *t = tg_test_malloc(sizeof(int32_t) * n);
  for (int i = 0; i < n; i++) t[i] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)V);
  return t;
}

const tg_dtype g_lowp[2] = {TG_BF16, TG_F16};

static int is_nan16(tg_dtype t, uint16_t h) {
  return t == TG_BF16 ? (h & 0x7f80) == 0x7f80 && (h & 0x7f) : (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

/* n 16-bit values: equal bits, or NaN on both sides (the device returns a
 * canonical NaN, the CPU keeps the payload) */
void compare16(const char *launcher, const char *what, tg_dtype t, const uint16_t *emu,
                      const uint16_t *cpu, size_t n) {
  size_t bad = 0, first = 0;
  for (size_t i = n; i-- > 0;)
    if (emu[i] != cpu[i] && !(is_nan16(t, emu[i]) && is_nan16(t, cpu[i]))) {
      bad++;
      first = i;
    }
  CHECK(bad == 0, "%s %s (%s): %zu of %zu values differ (first at %zu: emu 0x%04x, cpu 0x%04x)",
        launcher, what, tg_dtype_name(t), bad, n, first, emu[first], cpu[first]);
  record(launcher, bad ? INFINITY : 0.0);
  ops_note_error(bad ? INFINITY : 0.0, -1.0);
}

/* 16-bit values widened, for the GEMM with a 16-bit C */
float *widen16(tg_dtype t, const uint16_t *h, size_t n) {
  float *f = fmalloc(n);
  tg_cpu_from_lowp(t, 1, (int)n, h, (int)n, f, (int)n);
  return f;
}

/* x (rows, ld) rounded to t in place, and its 16-bit copy (rows, cols +
 * pad), the padding 0xabcd */
uint16_t *to16(tg_dtype t, float *x, int rows, int cols, int ld, int pad) {
  uint16_t *h = malloc(sizeof *h * (size_t)rows * (cols + pad) + 1);
  for (size_t i = 0; i < (size_t)rows * (cols + pad); i++) h[i] = 0xabcd;
  tg_cpu_to_lowp(t, rows, cols, x, ld, h, cols + pad);
  tg_cpu_from_lowp(t, rows, cols, h, cols + pad, x, ld);
  return h;
}

/* ---- the emulator's own checks ---- */

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
static void emu_emulator_mode(int mode) {
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

static void emulator_checks(void) {
  emu_emulator_mode(0);
  emu_emulator_mode(1);
}

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

int emu_start(void) {
  if (race_only()) exit(0);
  const char *quick = getenv("TG_EMU_QUICK");
  g_quick = (quick && strcmp(quick, "1") == 0) || SANITIZED;
  if (cublasCreate(&g_blas) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "FATAL: cublasCreate (emulated) failed\n");
    return 1;
  }
  emulator_checks();
  return 0;
}

void emu_stop(void) {
  for (int i = 0; i < g_nlaunchers; i++)
    if (strncmp(g_table[i].name, "tg_cuda_", 8) == 0)
      printf("launcher %s: %d cases, max rel err %.3g\n", g_table[i].name, g_table[i].cases,
             g_table[i].max_err);
  check_declared("kernels_cuda.h");
  check_declared("kernels_cuda_precision.h");
  cublasDestroy(g_blas);
}
