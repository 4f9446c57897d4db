/*
 * CPU kernel probe: the fused kernels of the GPT step at one shape, each
 * timed on one OpenBLAS thread (as a StarPU CPU worker runs them) next to the
 * bare sgemm of the same shape and the 2048^3 single-thread ceiling, so a
 * change to a kernel is measured without the scheduler, the other worker or
 * the rest of the step in the way.  The per-codelet GFLOP/s of
 * `taskgrad bench gpt --stats` are the end-to-end check; this probe is the
 * quick and quieter one for A/B comparisons of builds:
 *   cpu_kernels [--rows R] [--channels C] [--vocab V] [--reps N (at most 64)]
 * (defaults: GPT-2 124M at B=4 T=64 with 2 micro-batches, R = 128 rows per
 * task).  One line per kernel: name, median ms, GFLOP/s and % of the
 * ceiling, then the fastest call's ms and GFLOP/s: on a shared machine the
 * fastest call is the one least disturbed, the better figure for an A/B.
 *
 * The kernels come from the libtaskgrad this is linked with: linking the same
 * object against two builds' libraries compares their kernels.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe_common.h"
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/runtime.h"

void openblas_set_num_threads(int n);

enum { ACT_GELU = 1, ACT_NONE = 2 }; /* tg_activation's values */

typedef struct probe {
  int rows, C, V, reps;
  float *X, *W, *b, *Z, *H, *scratch, *dwte, *m, *v;
  int32_t *targets;
} probe;

static float *filled(size_t n, unsigned seed) {
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fputs("cpu_kernels: error: out of memory\n", stderr);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)(((i + seed) * 2654435761u) % 1000) * 2e-4f - 0.1f;
  return p;
}

typedef void (*kernel_fn)(const probe *p, int a, int b, int act);

typedef struct timing {
  double median, best; /* seconds */
} timing;

/* p->reps calls (at most 64) after one warm-up call */
static timing time_kernel(const probe *p, kernel_fn f, int a, int b, int act) {
  double t[64];
  int reps = p->reps < 64 ? p->reps : 64;
  f(p, a, b, act);
  for (int r = 0; r < reps; r++) {
    double t0 = probe_now_s();
    f(p, a, b, act);
    t[r] = probe_now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, probe_by_value);
  return (timing){.median = t[reps / 2], .best = t[0]};
}

static void ceiling_gemm(const probe *p, int S, int unused, int act) {
  (void)unused, (void)act;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0f, p->dwte, S,
              p->dwte + (size_t)S * S, S, 0.0f, p->scratch, S);
}

static void linear_fwd(const probe *p, int in, int out, int act) {
  tg_cpu_linear_fwd(p->rows, in, out, p->X, in, p->W, in, p->b, act, p->Z, out,
                    act == ACT_NONE ? NULL : p->H, out);
}

static void bare_fwd_gemm(const probe *p, int in, int out, int act) {
  (void)act;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->rows, out, in, 1.0f, p->X, in, p->W,
              in, 0.0f, p->Z, out);
}

static void linear_bwd_data(const probe *p, int in, int out, int act) {
  tg_cpu_linear_bwd_data(p->rows, in, out, p->Z, out, p->W, in, act, p->H, in, p->X, in);
}

static void wgrad(const probe *p, int in, int out, int act) {
  (void)act; /* dW (out, in) += dY^T (out, rows) X (rows, in) */
  tg_cpu_gemm(1, 0, out, in, p->rows, 1.0f, p->Z, out, p->X, in, 1.0f, p->W, in);
}

static void classifier(const probe *p, int backward, int unused, int act) {
  (void)unused, (void)act;
  float loss = 0.0f;
  tg_cpu_classifier(p->rows, p->C, p->V, p->rows, p->X, p->C, p->dwte, p->targets, 1.0f, 1.0f,
                    backward, p->H, p->C, p->W, &loss, p->scratch);
}

static void logits_gemm(const probe *p, int unused0, int unused1, int act) {
  (void)unused0, (void)unused1, (void)act;
  tg_cpu_gemm(0, 1, p->rows, p->V, p->C, 1.0f, p->X, p->C, p->dwte, p->C, 0.0f, p->scratch,
              p->V);
}

static void dlnf_gemm(const probe *p, int unused0, int unused1, int act) {
  (void)unused0, (void)unused1, (void)act;
  tg_cpu_gemm(0, 0, p->rows, p->C, p->V, 1.0f, p->scratch, p->V, p->dwte, p->C, 0.0f, p->H,
              p->C);
}

static void dwte_gemm(const probe *p, int unused0, int unused1, int act) {
  (void)unused0, (void)unused1, (void)act;
  tg_cpu_gemm(1, 0, p->V, p->C, p->rows, 1.0f, p->scratch, p->V, p->X, p->C, 1.0f, p->W, p->C);
}

static void softmax_xent(const probe *p, int unused0, int unused1, int act) {
  (void)unused0, (void)unused1, (void)act;
  float loss = 0.0f;
  /* from the probe's logits, not in place, so every call sees the same input */
  tg_cpu_softmax_xent(p->rows, p->V, p->scratch, p->V, p->targets, 1.0f,
                      p->scratch + (size_t)p->rows * p->V, p->V, &loss);
}

/* AdamW over the V x C tied embedding (the largest parameter): p->W the
 * weights, p->dwte the gradient, scratch halves as the two moments */
static void adamw(const probe *p, int unused0, int unused1, int act) {
  (void)unused0, (void)unused1, (void)act;
  size_t n = (size_t)p->V * p->C;
  tg_cpu_adamw(n, p->W, p->dwte, p->m, p->v, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.3f,
               1.0f);
}

static void report(const char *name, double flops, timing t, double ceiling) {
  double g = flops / t.median * 1e-9;
  printf("%-30s %8.2f ms %6.1f GFLOP/s %5.1f%%  best %8.2f ms %6.1f GFLOP/s\n", name,
         t.median * 1e3, g, 100.0 * g / ceiling, t.best * 1e3, flops / t.best * 1e-9);
}

int main(int argc, char **argv) {
  const char *core = tg_blas_better_coretype();
  if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) execv("/proc/self/exe", argv);
  openblas_set_num_threads(1);
  probe p = {.rows = 128, .C = 768, .V = 50257, .reps = 7};
  for (int i = 1; i < argc; i += 2) {
    char *end = NULL;
    long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
    if (v < 1 || v > 1000000 || *end) {
      fprintf(stderr, "cpu_kernels: error: %s wants an integer in [1, 1000000]\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--rows")) p.rows = (int)v;
    else if (!strcmp(argv[i], "--channels")) p.C = (int)v;
    else if (!strcmp(argv[i], "--vocab")) p.V = (int)v;
    else if (!strcmp(argv[i], "--reps")) p.reps = (int)v;
    else {
      fprintf(stderr, "cpu_kernels: error: unknown flag '%s'\n", argv[i]);
      return 2;
    }
  }
  int R = p.rows, C = p.C, V = p.V, F = 4 * C;
  size_t big = (size_t)2 * R * V > (size_t)2 * 2048 * 2048 ? (size_t)2 * R * V : (size_t)2 * 2048 * 2048;
  size_t wte = (size_t)V * C > (size_t)2 * 2048 * 2048 ? (size_t)V * C : (size_t)2 * 2048 * 2048;
  p.X = filled((size_t)R * F, 1);
  p.W = filled(wte, 2);
  p.b = filled((size_t)F, 3);
  p.Z = filled((size_t)R * F, 4);
  p.H = filled((size_t)R * F, 5);
  p.scratch = filled(big, 6);
  p.dwte = filled(wte, 7);
  p.m = filled(wte, 8);
  p.v = filled(wte, 9);
  for (size_t i = 0; i < wte; i++) p.v[i] *= p.v[i]; /* a second moment is >= 0 */
  p.targets = malloc(sizeof *p.targets * (size_t)R);
  if (!p.targets) {
    fputs("cpu_kernels: error: out of memory\n", stderr);
    return 1;
  }
  for (int r = 0; r < R; r++) p.targets[r] = (int32_t)((r * 7919) % V);

  timing tc = time_kernel(&p, ceiling_gemm, 2048, 0, 0);
  double ceiling = 2.0 * 2048.0 * 2048.0 * 2048.0 / tc.median * 1e-9;
  printf("ceiling 1 thread: %.1f GFLOP/s (2048^3), best %.1f\n", ceiling,
         2.0 * 2048.0 * 2048.0 * 2048.0 / tc.best * 1e-9);
  const struct { const char *name; int in, out, act; } lin[] = {
      {.name = "qkv", .in = C, .out = 3 * C, .act = ACT_NONE},
      {.name = "attproj", .in = C, .out = C, .act = ACT_NONE},
      {.name = "fc+gelu", .in = C, .out = F, .act = ACT_GELU},
      {.name = "fcproj", .in = F, .out = C, .act = ACT_NONE},
  };
  char name[64];
  for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
    double fl = 2.0 * R * (double)lin[i].in * lin[i].out;
    snprintf(name, sizeof name, "linear_fwd %s", lin[i].name);
    report(name, fl, time_kernel(&p, linear_fwd, lin[i].in, lin[i].out, lin[i].act), ceiling);
    snprintf(name, sizeof name, "  bare sgemm %s", lin[i].name);
    report(name, fl, time_kernel(&p, bare_fwd_gemm, lin[i].in, lin[i].out, 0), ceiling);
    /* backward to the input of this layer: its act is the previous layer's */
    int bact = !strcmp(lin[i].name, "fcproj") ? ACT_GELU : ACT_NONE;
    snprintf(name, sizeof name, "linear_bwd_data %s", lin[i].name);
    report(name, fl, time_kernel(&p, linear_bwd_data, lin[i].in, lin[i].out, bact), ceiling);
    snprintf(name, sizeof name, "wgrad %s", lin[i].name);
    report(name, fl, time_kernel(&p, wgrad, lin[i].in, lin[i].out, 0), ceiling);
  }
  double fl = 2.0 * R * (double)V * C;
  report("  logits sgemm", fl, time_kernel(&p, logits_gemm, 0, 0, 0), ceiling);
  report("  softmax_xent (as GEMM flops)", fl, time_kernel(&p, softmax_xent, 0, 0, 0),
         ceiling);
  report("  dlnf sgemm", fl, time_kernel(&p, dlnf_gemm, 0, 0, 0), ceiling);
  report("  dwte sgemm", fl, time_kernel(&p, dwte_gemm, 0, 0, 0), ceiling);
  report("classifier fwd", fl, time_kernel(&p, classifier, 0, 0, 0), ceiling);
  report("classifier fwd+bwd", 3 * fl, time_kernel(&p, classifier, 1, 0, 0), ceiling);
  /* AdamW: memory-bound, so given as GB/s (4 floats read, 3 written) */
  size_t n = (size_t)V * C;
  timing ta = time_kernel(&p, adamw, 0, 0, 0);
  printf("%-30s %8.2f ms %6.1f GB/s          best %8.2f ms %6.1f GB/s\n", "adamw (V x C)",
         ta.median * 1e3, 28.0 * (double)n / ta.median * 1e-9, ta.best * 1e3,
         28.0 * (double)n / ta.best * 1e-9);
  return 0;
}
