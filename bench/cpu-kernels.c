/*
 * CPU kernel probe: the fused kernels of the GPT step at one shape, each
 * timed on one OpenBLAS thread (as a StarPU CPU worker runs them) next to the
 * bare sgemm of the same shape and the 2048^3 single-thread ceiling, so a
 * change to a kernel is measured without the scheduler, the other worker or
 * the rest of the step in the way.  The per-codelet GFLOP/s of
 * `taskgrad bench gpt --stats` are the end-to-end check; this probe is the
 * quick and quieter one for A/B comparisons of builds:
 *   cpu_kernels [--rows R] [--channels C] [--vocab V] [--reps N]
 * (defaults: GPT-2 124M at B=4 T=64 with 2 micro-batches, R = 128 rows per
 * task).  One line per kernel: name, median ms, GFLOP/s, % of the ceiling.
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

#include "taskgrad/kernels_cpu.h"
#include "taskgrad/runtime.h"

void openblas_set_num_threads(int n);

enum { ACT_GELU = 1, ACT_NONE = 2 }; /* tg_activation's values */

typedef struct probe {
  int rows, C, V, reps;
  float *X, *W, *b, *Z, *H, *scratch, *dwte;
  int32_t *targets;
} probe;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

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

/* median seconds of p->reps calls after one warm-up call */
static double time_kernel(const probe *p, kernel_fn f, int a, int b, int act) {
  double t[64];
  int reps = p->reps < 64 ? p->reps : 64;
  f(p, a, b, act);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    f(p, a, b, act);
    t[r] = now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, by_value);
  return t[reps / 2];
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

static void report(const probe *p, const char *name, double flops, double s, double ceiling) {
  (void)p;
  double g = flops / s * 1e-9;
  printf("%-28s %9.2f ms %7.1f GFLOP/s %5.1f%%\n", name, s * 1e3, g, 100.0 * g / ceiling);
}

int main(int argc, char **argv) {
  const char *core = tg_blas_better_coretype();
  if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) execv("/proc/self/exe", argv);
  openblas_set_num_threads(1);
  probe p = {.rows = 128, .C = 768, .V = 50257, .reps = 7};
  for (int i = 1; i + 1 < argc; i += 2) {
    int v = atoi(argv[i + 1]);
    if (v < 1) {
      fprintf(stderr, "cpu_kernels: error: %s wants a positive integer\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--rows")) p.rows = v;
    else if (!strcmp(argv[i], "--channels")) p.C = v;
    else if (!strcmp(argv[i], "--vocab")) p.V = v;
    else if (!strcmp(argv[i], "--reps")) p.reps = v;
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
  p.targets = malloc(sizeof *p.targets * (size_t)R);
  if (!p.targets) return 1;
  for (int r = 0; r < R; r++) p.targets[r] = (int32_t)((r * 7919) % V);

  double ceiling = 2.0 * 2048.0 * 2048.0 * 2048.0 / time_kernel(&p, ceiling_gemm, 2048, 0, 0) * 1e-9;
  printf("ceiling 1 thread: %.1f GFLOP/s (2048^3)\n", ceiling);
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
    report(&p, name, fl, time_kernel(&p, linear_fwd, lin[i].in, lin[i].out, lin[i].act), ceiling);
    snprintf(name, sizeof name, "  bare sgemm %s", lin[i].name);
    report(&p, name, fl, time_kernel(&p, bare_fwd_gemm, lin[i].in, lin[i].out, 0), ceiling);
    /* backward to the input of this layer: its act is the previous layer's */
    int bact = !strcmp(lin[i].name, "fcproj") ? ACT_GELU : ACT_NONE;
    snprintf(name, sizeof name, "linear_bwd_data %s", lin[i].name);
    report(&p, name, fl, time_kernel(&p, linear_bwd_data, lin[i].in, lin[i].out, bact), ceiling);
    snprintf(name, sizeof name, "wgrad %s", lin[i].name);
    report(&p, name, fl, time_kernel(&p, wgrad, lin[i].in, lin[i].out, 0), ceiling);
  }
  double fl = 2.0 * R * (double)V * C;
  report(&p, "  logits sgemm", fl, time_kernel(&p, logits_gemm, 0, 0, 0), ceiling);
  report(&p, "  softmax_xent (as GEMM flops)", fl, time_kernel(&p, softmax_xent, 0, 0, 0),
         ceiling);
  report(&p, "  dlnf sgemm", fl, time_kernel(&p, dlnf_gemm, 0, 0, 0), ceiling);
  report(&p, "  dwte sgemm", fl, time_kernel(&p, dwte_gemm, 0, 0, 0), ceiling);
  report(&p, "classifier fwd", fl, time_kernel(&p, classifier, 0, 0, 0), ceiling);
  report(&p, "classifier fwd+bwd", 3 * fl, time_kernel(&p, classifier, 1, 0, 0), ceiling);
  return 0;
}
