/*
 * GEMM shape probe: what one core's sgemm reaches at the shapes of a GPT
 * training step, in the conditions of the step rather than of a loop over
 * one warm operand.  Per shape (row-major C (M, N) = A (M, K) op(B), B the
 * layer's weight, as tg_cpu_linear_fwd (NT) and tg_cpu_linear_bwd_data (NN)
 * call it):
 *   warm        the same weight every call (it stays in the caches);
 *   cold        a different weight every call, from a pool of 64 (hundreds
 *               of MB): inside a step every weight is read once per pass,
 *               long after the previous pass evicted it;
 *   cold x2     the cold case on both cores at once, each its own pool (the
 *               two workers of the step), per core.
 * The shapes: GPT-2 124M at B=4 T=64 with 2 micro-batches (128 rows per
 * task), the same layers at 256 rows and half the columns (what splitting a
 * GEMM of one 256-row micro-batch over 2 cores would hand each core), and
 * GPT d4 (1024 rows, K = 256).
 *
 *   gemm_shapes [--reps R]     (default 4 passes over the pool)
 * One line per shape: GFLOP/s warm, cold, cold x2 (the slower thread), each
 * the median over R passes; then the 2048^3 one-core ceiling of `ceiling`
 * for reference.  Same OpenBLAS kernel choice as taskgrad.
 */
#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "probe_common.h"
#include "taskgrad/runtime.h"

void openblas_set_num_threads(int n); /* not in every cblas.h */

enum { POOL = 64, MAX_REPS = 32 };

typedef struct shape {
  const char *name;
  int M, N, K, transb;
} shape;

static const shape shapes[] = {
    {"124M qkv fwd       128x2304x768 NT", 128, 2304, 768, 1},
    {"124M fc fwd        128x3072x768 NT", 128, 3072, 768, 1},
    {"124M fc bwd_data   128x768x3072 NN", 128, 768, 3072, 0},
    {"124M qkv bwd_data  128x768x2304 NN", 128, 768, 2304, 0},
    {"  256 rows, half   256x1152x768 NT", 256, 1152, 768, 1},
    {"  256 rows, half   256x1536x768 NT", 256, 1536, 768, 1},
    {"  256 rows, half   256x384x3072 NN", 256, 384, 3072, 0},
    {"  256 rows, half   256x384x2304 NN", 256, 384, 2304, 0},
    {"d4 fc fwd         1024x1024x256 NT", 1024, 1024, 256, 1},
    {"d4 fcproj fwd     1024x256x1024 NT", 1024, 256, 1024, 1},
};

typedef struct job {
  const shape *s;
  int reps, cold;
  float **W, *A, *C; /* W[POOL] (or W[0] only when warm) */
  double median;     /* GFLOP/s */
} job;

static void *xmalloc(size_t n) { return probe_alloc("gemm_shapes", n); }

static float *filled(size_t n, unsigned seed) {
  float *p = xmalloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = (float)(((i + seed) * 2654435761u) % 1000) * 1e-4f;
  return p;
}

/* reps passes; a pass is POOL calls, over the pool (cold) or on W[0] */
static void *run(void *arg) {
  job *j = arg;
  const shape *s = j->s;
  double t[MAX_REPS];
  double flops = 2.0 * s->M * s->N * s->K * POOL;
  for (int r = 0; r < j->reps; r++) {
    double t0 = probe_now_s();
    for (int w = 0; w < POOL; w++)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, s->transb ? CblasTrans : CblasNoTrans, s->M,
                  s->N, s->K, 1.0f, j->A, s->K, j->W[j->cold ? w : 0], s->transb ? s->K : s->N,
                  0.0f, j->C, s->N);
    t[r] = probe_now_s() - t0;
  }
  qsort(t, (size_t)j->reps, sizeof t[0], probe_by_value);
  j->median = flops / t[j->reps / 2] * 1e-9;
  return NULL;
}

static job make_job(const shape *s, int reps, int cold, unsigned seed) {
  job j = {.s = s, .reps = reps, .cold = cold, .W = xmalloc(POOL * sizeof(float *))};
  for (int w = 0; w < (cold ? POOL : 1); w++) j.W[w] = filled((size_t)s->N * s->K, seed + w);
  j.A = filled((size_t)s->M * s->K, seed + 999);
  j.C = xmalloc((size_t)s->M * s->N * sizeof(float));
  return j;
}

static void free_job(job *j) {
  for (int w = 0; w < (j->cold ? POOL : 1); w++) free(j->W[w]);
  free(j->W);
  free(j->A);
  free(j->C);
}

int main(int argc, char **argv) {
  const char *core = tg_blas_better_coretype();
  if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) {
    execv("/proc/self/exe", argv);
    perror("gemm_shapes: re-executing with OPENBLAS_CORETYPE"); /* carry on, slower */
  }
  int reps = 4;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      errno = 0;
      long v = strtol(argv[++i], &end, 10);
      if (errno || *end || v < 1 || v > MAX_REPS) {
        fprintf(stderr, "gemm_shapes: error: --reps wants an integer in [1, %d]\n", MAX_REPS);
        return 2;
      }
      reps = (int)v;
    } else {
      fprintf(stderr, "usage: gemm_shapes [--reps R (1..%d)]\n", MAX_REPS);
      return 2;
    }
  }
  openblas_set_num_threads(1); /* one core per call, as a StarPU worker */
  printf("%-36s %8s %8s %8s  (GFLOP/s per core, median of %d passes of %d calls)\n", "shape",
         "warm", "cold", "cold x2", reps, POOL);
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    const shape *s = &shapes[k];
    job warm = make_job(s, reps, 0, 1), a = make_job(s, reps, 1, 2), b = make_job(s, reps, 1, 3);
    run(&warm);
    run(&a);
    double cold = a.median;
    pthread_t ta, tb;
    if (pthread_create(&ta, NULL, run, &a) || pthread_create(&tb, NULL, run, &b)) {
      fputs("gemm_shapes: error: cannot start a thread\n", stderr);
      return 1;
    }
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    printf("%-36s %8.1f %8.1f %8.1f\n", s->name, warm.median, cold,
           a.median < b.median ? a.median : b.median);
    fflush(stdout);
    free_job(&warm);
    free_job(&a);
    free_job(&b);
  }
  return 0;
}
