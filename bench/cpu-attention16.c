/*
 * The 16-bit CPU attention, A/B in one process: per call, the chunked
 * kernels as the low-precision adapter ran them (whole bf16 tensors widened
 * to f32 copies, the f32 kernel, its outputs rounded back) against the
 * 16-bit kernels (tg_cpu_attention_chunked_fwd16 / _bwd16: rows widened
 * as they are packed, outputs rounded as they are written; the same bits).
 * The two alternate call by call on one OpenBLAS thread (as a StarPU CPU
 * worker runs them), so a shared machine's drift hits both alike; the
 * ratio of their medians is the figure.
 *   cpu_attention16 [--seqs B] [--seq T] [--channels C] [--heads NH]
 *                   [--chunk N] [--reps N (at most 64)]
 * Defaults: one task of the GPT d4 step (bench gpt's defaults: 2 sequences
 * of T 256 per attention task, C 256, NH 4, chunk 64).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "probe_common.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/precision_kernels.h"
#include "taskgrad/runtime.h"

void openblas_set_num_threads(int n);

typedef struct shape {
  int b, T, C, NH, chunk, reps;
} shape;

static void *alloc(size_t bytes) { return probe_alloc("cpu_attention16", bytes); }

/* n bf16 values in about [-1, 1] */
static uint16_t *bf16_filled(size_t n, unsigned seed) {
  float *f = alloc(n * sizeof *f);
  for (size_t i = 0; i < n; i++) f[i] = (float)(((i + seed) * 2654435761u) % 1000) * 2e-3f - 1.0f;
  uint16_t *h = alloc(n * sizeof *h);
  tg_cpu_to_lowp(TG_BF16, 1, (int)n, f, (int)n, h, (int)n);
  free(f);
  return h;
}

static int by_value(const void *a, const void *b) { return probe_by_value(a, b); }

int main(int argc, char **argv) {
  /* OpenBLAS's kernels as taskgrad runs them (runtime.h) */
  const char *core = tg_blas_better_coretype();
  if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) execv("/proc/self/exe", argv);
  openblas_set_num_threads(1);
  shape s = {.b = 2, .T = 256, .C = 256, .NH = 4, .chunk = 64, .reps = 15};
  for (int i = 1; i < argc; i += 2) {
    char *end = NULL;
    long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
    if (v < 1 || v > 100000 || *end) {
      fprintf(stderr, "cpu_attention16: error: %s wants an integer in [1, 100000]\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--seqs")) s.b = (int)v;
    else if (!strcmp(argv[i], "--seq")) s.T = (int)v;
    else if (!strcmp(argv[i], "--channels")) s.C = (int)v;
    else if (!strcmp(argv[i], "--heads")) s.NH = (int)v;
    else if (!strcmp(argv[i], "--chunk")) s.chunk = (int)v;
    else if (!strcmp(argv[i], "--reps")) s.reps = (int)(v < 64 ? v : 64);
    else {
      fprintf(stderr, "cpu_attention16: error: unknown flag '%s'\n", argv[i]);
      return 2;
    }
  }
  if (s.C % s.NH) {
    fprintf(stderr, "cpu_attention16: error: %d channels in %d heads\n", s.C, s.NH);
    return 2;
  }
  const int n = s.b * s.T, C = s.C;
  const size_t nq = (size_t)n * 3 * C, no = (size_t)n * C;
  uint16_t *qkv = bf16_filled(nq, 1), *out = bf16_filled(no, 2), *dout = bf16_filled(no, 3);
  uint16_t *dqkv = alloc(nq * sizeof *dqkv);
  float *lse = alloc((size_t)n * s.NH * sizeof *lse);
  float *scr = alloc(tg_attention_chunked_scratch_floats(s.T, C, s.NH, s.chunk) * sizeof *scr);
  /* the adapter's f32 copies */
  float *qkvf = alloc(nq * sizeof *qkvf), *outf = alloc(no * sizeof *outf);
  float *doutf = alloc(no * sizeof *doutf), *dqkvf = alloc(nq * sizeof *dqkvf);
  double t[4][64];
  for (int r = -1; r < s.reps; r++) { /* r = -1: a warm-up round */
    double t0 = probe_now_s();
    tg_cpu_from_lowp(TG_BF16, n, 3 * C, qkv, 3 * C, qkvf, 3 * C);
    tg_cpu_attention_chunked_fwd(s.b, s.T, C, s.NH, s.chunk, qkvf, 3 * C, outf, C, lse, scr);
    tg_cpu_to_lowp(TG_BF16, n, C, outf, C, out, C);
    double t1 = probe_now_s();
    tg_cpu_attention_chunked_fwd16(TG_BF16, s.b, s.T, C, s.NH, s.chunk, qkv, 3 * C, out, C, lse,
                                   scr);
    double t2 = probe_now_s();
    tg_cpu_from_lowp(TG_BF16, n, 3 * C, qkv, 3 * C, qkvf, 3 * C);
    tg_cpu_from_lowp(TG_BF16, n, C, out, C, outf, C);
    tg_cpu_from_lowp(TG_BF16, n, C, dout, C, doutf, C);
    tg_cpu_attention_chunked_bwd(s.b, s.T, C, s.NH, s.chunk, qkvf, 3 * C, outf, C, lse, doutf, C,
                                 dqkvf, 3 * C, scr);
    tg_cpu_to_lowp(TG_BF16, n, 3 * C, dqkvf, 3 * C, dqkv, 3 * C);
    double t3 = probe_now_s();
    tg_cpu_attention_chunked_bwd16(TG_BF16, s.b, s.T, C, s.NH, s.chunk, qkv, 3 * C, out, C, lse,
                                   dout, C, dqkv, 3 * C, scr);
    double t4 = probe_now_s();
    if (r < 0) continue;
    t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = t3 - t2, t[3][r] = t4 - t3;
  }
  static const char *name[4] = {"fwd, adapter (widen, f32 kernel, round)", "fwd, 16-bit kernel",
                                "bwd, adapter (widen, f32 kernel, round)", "bwd, 16-bit kernel"};
  double med[4];
  printf("attention bf16: %d sequence(s) of T %d, C %d, NH %d, chunk %d, %d calls each\n", s.b,
         s.T, C, s.NH, s.chunk, s.reps);
  for (int k = 0; k < 4; k++) {
    qsort(t[k], (size_t)s.reps, sizeof t[k][0], by_value);
    med[k] = t[k][s.reps / 2];
    printf("%-42s median %8.3f ms  best %8.3f ms\n", name[k], med[k] * 1e3, t[k][0] * 1e3);
  }
  printf("16-bit kernel / adapter: fwd %.3f, bwd %.3f (medians)\n", med[1] / med[0],
         med[3] / med[2]);
  free(qkv), free(out), free(dout), free(dqkv), free(lse), free(scr);
  free(qkvf), free(outf), free(doutf), free(dqkvf);
  return 0;
}
