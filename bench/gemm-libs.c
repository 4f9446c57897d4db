/*
 * GEMM library probe: each back end of tg_cpu_gemm (gemm_libs.h: OpenBLAS,
 * oneDNN, libxsmm) at the GPT step's shapes, per shape class, on 1 thread
 * and on 2 threads at once, and the 2048^3 sgemm ceiling of each library.
 *
 *   gemm_libs [--reps R]     (default 5)
 *   gemm_libs --ceiling      only the ceilings (a few seconds: for each
 *                            round of an interleaved benchmark)
 *
 * The shapes are a task's GEMMs in `taskgrad bench gpt` on 2 workers
 * (2 micro-batches): GPT d4 (L4 C256 T256 B8: 1024 rows per task, V 256)
 * and GPT-2 124M at B4 T64 (128 rows per task; the classifier an 8192-
 * column slice of V).  Classes as gemm_libs.h: forward X W^T (NT), data
 * gradient dY W (NN), weight gradient dY^T X (TN, beta 1), classifier (its
 * NT, NN and TN).  A class's figure is its shapes' flops over their time,
 * each shape the best of R warm calls on the same operands.  "2 threads"
 * runs the same on two threads at once, each with its own operands (the
 * two StarPU workers), and gives the sum of both threads' rates.  Calls go
 * through tg_cpu_gemm_on, so a call libxsmm cannot do (a transposed B, alpha
 * != 1) is timed on its OpenBLAS fallback, as in a step.
 *
 * The ceiling: C = A B at n = 2048, 2 threads, in two ways: two threads
 * each running its own single-threaded GEMM (every library), and one call
 * threaded by the library itself (OpenBLAS with openblas_set_num_threads(2),
 * oneDNN with omp_set_num_threads(2); libxsmm's JIT kernels are not
 * threaded).  It also checks that the single-threaded back ends start no
 * threads: the process's thread count before and after.
 */
#include <cblas.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "probe_common.h"
#include "taskgrad/gemm_libs.h"

void openblas_set_num_threads(int n); /* not in every cblas.h */
void omp_set_num_threads(int n);

typedef struct shape {
  int ta, tb, m, n, k;
  float alpha, beta;
} shape;

enum { MAXS = 4 };
typedef struct klass {
  const char *name;
  tg_gemm_class cls;
  shape s[MAXS];
} klass;

/* a task's GEMMs at `rows` rows, C channels, a V-column classifier: the
 * layer's qkv (3C), attention projection (C), fc (4C) and fc projection */
static void make_classes(klass k[4], int rows, int C, int V) {
  const int out[4] = {3 * C, C, 4 * C, C}, in[4] = {C, C, C, 4 * C};
  k[0].name = "forward";
  k[1].name = "data-grad";
  k[2].name = "weight-grad";
  k[3].name = "classifier";
  for (int c = 0; c < 4; c++) k[c].cls = (tg_gemm_class)c; /* gemm_libs.h's order */
  for (int i = 0; i < MAXS; i++) {
    k[0].s[i] = (shape){0, 1, rows, out[i], in[i], 1, 0};  /* Y = X W^T */
    k[1].s[i] = (shape){0, 0, rows, in[i], out[i], 1, 0};  /* dX = dY W */
    k[2].s[i] = (shape){1, 0, out[i], in[i], rows, 1, 1};  /* dW += dY^T X */
  }
  memset(k[3].s, 0, sizeof k[3].s);
  k[3].s[0] = (shape){0, 1, rows, V, C, 1, 0};         /* logits */
  k[3].s[1] = (shape){0, 0, rows, C, V, 0.5f, 0};      /* dlnf, grad-scaled */
  k[3].s[2] = (shape){1, 0, V, C, rows, 0.5f, 1};      /* dwte */
}

static int g_reps = 5;

static float *fill(size_t n) {
  float *p = malloc(n * sizeof(float));
  if (!p) {
    fprintf(stderr, "gemm_libs: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 7919u) % 1000) * 1e-3f - 0.5f;
  return p;
}

/* seconds of the best of g_reps calls (after a warm one) */
static double time_shape(tg_gemm_lib lib, tg_gemm_class cls, const shape *s) {
  float *A = fill((size_t)s->m * s->k), *B = fill((size_t)s->k * s->n),
        *C = fill((size_t)s->m * s->n);
  double best = 1e30;
  for (int r = 0; r <= g_reps; r++) {
    double t0 = probe_now_s();
    tg_cpu_gemm_on(lib, cls, s->ta, s->tb, s->m, s->n, s->k, s->alpha, A, s->ta ? s->m : s->k, B,
                   s->tb ? s->k : s->n, s->beta, C, s->n);
    double t = probe_now_s() - t0;
    if (r && t < best) best = t;
  }
  free(A);
  free(B);
  free(C);
  return best;
}

/* GFLOP/s of one class on one thread */
static double time_class(tg_gemm_lib lib, const klass *c) {
  double flops = 0, t = 0;
  for (int i = 0; i < MAXS && c->s[i].m; i++) {
    flops += 2.0 * c->s[i].m * c->s[i].n * c->s[i].k;
    t += time_shape(lib, c->cls, &c->s[i]);
  }
  return flops / t * 1e-9;
}

typedef struct job {
  tg_gemm_lib lib;
  const klass *c;
  double gflops;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  j->gflops = time_class(j->lib, j->c);
  return NULL;
}

static double two_threads(tg_gemm_lib lib, const klass *c) {
  job j[2] = {{lib, c, 0}, {lib, c, 0}};
  pthread_t t;
  pthread_create(&t, NULL, run_job, &j[1]);
  run_job(&j[0]);
  pthread_join(t, NULL);
  return j[0].gflops + j[1].gflops;
}

static int nthreads(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

/* ceiling, two independent single-threaded GEMMs at once */
typedef struct cjob {
  tg_gemm_lib lib;
  int n;
  double gflops;
} cjob;

static void *run_ceiling(void *arg) {
  cjob *j = arg;
  shape s = {0, 0, j->n, j->n, j->n, 1, 0};
  j->gflops = 2.0 * j->n * j->n * j->n / time_shape(j->lib, TG_GEMM_DATA_GRAD, &s) * 1e-9;
  return NULL;
}

static double ceiling_threaded(tg_gemm_lib lib, int n) {
  float *A = fill((size_t)n * n), *B = fill((size_t)n * n), *C = fill((size_t)n * n);
  double best = 1e30;
  for (int r = 0; r <= g_reps; r++) {
    double t0 = probe_now_s();
    if (lib == TG_GEMM_OPENBLAS)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, A, n, B, n, 0, C, n);
    else
      dnnl_sgemm('N', 'N', n, n, n, 1, A, n, B, n, 0, C, n);
    double t = probe_now_s() - t0;
    if (r && t < best) best = t;
  }
  free(A);
  free(B);
  free(C);
  return 2.0 * n * n * n / best * 1e-9;
}

int main(int argc, char **argv) {
  int ceiling_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      g_reps = atoi(argv[++i]);
      if (g_reps < 1 || g_reps > 1000) return fprintf(stderr, "--reps 1..1000\n"), 2;
    } else if (!strcmp(argv[i], "--ceiling")) {
      ceiling_only = 1;
    } else {
      fprintf(stderr, "usage: gemm_libs [--reps R] [--ceiling]\n");
      return 2;
    }
  }
  openblas_set_num_threads(1);
  char d[512];
  for (int l = 0; l < TG_GEMM_NLIBS; l++)
    printf("%-8s %s\n", tg_gemm_lib_name(l), tg_gemm_lib_describe(l, d, sizeof d));
  struct {
    const char *name;
    klass k[4];
  } sets[2];
  sets[0].name = "d4 (1024 rows/task)";
  sets[1].name = "124M B4 T64 (128 rows/task)";
  make_classes(sets[0].k, 1024, 256, 256);
  make_classes(sets[1].k, 128, 768, 8192);
  int before = nthreads();
  for (int si = 0; si < 2 && !ceiling_only; si++) {
    printf("\n%s: GFLOP/s, 1 thread | 2 threads (sum)\n%-12s", sets[si].name, "class");
    for (int l = 0; l < TG_GEMM_NLIBS; l++) printf(" %17s", tg_gemm_lib_name(l));
    printf("\n");
    for (int c = 0; c < 4; c++) {
      printf("%-12s", sets[si].k[c].name);
      for (int l = 0; l < TG_GEMM_NLIBS; l++)
        printf("   %6.1f | %6.1f", time_class(l, &sets[si].k[c]),
               two_threads(l, &sets[si].k[c]));
      printf("\n");
    }
  }
  int after = nthreads();
  if (!ceiling_only)
    printf("\nthreads of this process before the single-threaded runs %d, after %d\n", before,
           after);
  const int n = 2048;
  printf("\nceiling %d^3 NN, GFLOP/s: 1 thread | 2 threads, one GEMM each (sum) | one GEMM "
         "threaded by the library\n", n);
  for (int l = 0; l < TG_GEMM_NLIBS; l++) {
    cjob one = {l, n, 0}, two[2] = {{l, n, 0}, {l, n, 0}};
    run_ceiling(&one);
    pthread_t t;
    pthread_create(&t, NULL, run_ceiling, &two[1]);
    run_ceiling(&two[0]);
    pthread_join(t, NULL);
    printf("ceiling %-8s %6.1f | %6.1f | ", tg_gemm_lib_name(l), one.gflops,
           two[0].gflops + two[1].gflops);
    if (l == TG_GEMM_OPENBLAS) {
      openblas_set_num_threads(2);
      printf("%6.1f\n", ceiling_threaded(l, n));
      openblas_set_num_threads(1);
    } else if (l == TG_GEMM_ONEDNN) {
      omp_set_num_threads(2);
      printf("%6.1f\n", ceiling_threaded(l, n));
      omp_set_num_threads(1);
    } else {
      printf("     -\n");
    }
  }
  return 0;
}
