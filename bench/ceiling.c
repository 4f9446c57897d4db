/*
 * GEMM ceiling probe: the speed of a square sgemm (default 2048^3) through
 * the same OpenBLAS, with the same kernel choice, as taskgrad, on 1 thread
 * and on N threads.  Every benchmark figure is then given as a fraction of
 * the ceiling measured in the same run, on the same (possibly shared, noisy)
 * machine, rather than of a number taken on another day.
 *
 *   ceiling [--size S] [--threads N] [--reps R]
 * prints the OpenBLAS kernels and two lines, easy to grep from the bench
 * scripts (G the median, Gb the fastest call's GFLOP/s):
 *   ceiling 1 thread: G GFLOP/s (2048^3, median of R; best Gb)
 *   ceiling N threads: G GFLOP/s (2048^3, median of R; best Gb)
 *
 * The kernel choice: Debian's OpenBLAS may pick slow SSE3 kernels on a
 * virtual CPU it does not know; the taskgrad CLI corrects this by
 * re-executing itself with OPENBLAS_CORETYPE set (src/blas.c), and so does
 * this probe, through the same tg_blas_better_coretype(), so that the
 * ceiling is the one taskgrad's kernels can reach.
 *
 * Median of R timed calls after one untimed call (page faults, thread
 * start-up), each on the same operands; the operands are small random-ish
 * values so no denormals or overflow slow anything down.
 */
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe_common.h"
#include "taskgrad/runtime.h"

void openblas_set_num_threads(int n); /* not in every cblas.h */

static long parse_positive(const char *flag, const char *text, long max) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || *end || v < 1 || v > max) {
    fprintf(stderr, "ceiling: error: %s wants an integer in [1, %ld], got '%s'\n", flag, max,
            text);
    exit(2);
  }
  return v;
}

/* median and best GFLOP/s of `reps` S^3 sgemms on `threads` OpenBLAS
 * threads: on a shared machine the best call is the least disturbed one */
typedef struct rate {
  double median, best;
} rate;

static rate sgemm_gflops(int S, int threads, int reps, const float *A, const float *B,
                         float *C) {
  openblas_set_num_threads(threads);
  double *t = malloc(sizeof *t * (size_t)reps);
  if (!t) {
    fputs("ceiling: error: out of memory\n", stderr);
    exit(1);
  }
  for (int r = -1; r < reps; r++) {
    double t0 = probe_now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, S, S, S, 1.0f, A, S, B, S, 0.0f,
                C, S);
    if (r >= 0) t[r] = probe_now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, probe_by_value);
  double flop = 2.0 * S * (double)S * S;
  rate r = {.median = flop / t[reps / 2] * 1e-9, .best = flop / t[0] * 1e-9};
  free(t);
  return r;
}

int main(int argc, char **argv) {
  const char *core = tg_blas_better_coretype();
  if (core && setenv("OPENBLAS_CORETYPE", core, 1) == 0) {
    execv("/proc/self/exe", argv);
    perror("ceiling: re-executing with OPENBLAS_CORETYPE"); /* carry on, slower */
  }
  long S = 2048, reps = 5, threads = sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc) {
      fprintf(stderr, "ceiling: error: %s wants a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--size"))
      S = parse_positive("--size", argv[++i], 16384);
    else if (!strcmp(argv[i], "--threads"))
      threads = parse_positive("--threads", argv[++i], 1024);
    else if (!strcmp(argv[i], "--reps"))
      reps = parse_positive("--reps", argv[++i], 1000);
    else {
      fprintf(stderr, "ceiling: error: unknown flag '%s' (--size, --threads, --reps)\n",
              argv[i]);
      return 2;
    }
  }
  size_t n = (size_t)S * (size_t)S;
  float *A = malloc(n * sizeof *A), *B = malloc(n * sizeof *B), *C = malloc(n * sizeof *C);
  if (!A || !B || !C) {
    fputs("ceiling: error: out of memory for the operands\n", stderr);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    A[i] = (float)((i * 7919u) % 101) * 0.01f - 0.5f;
    B[i] = (float)((i * 104729u) % 97) * 0.01f - 0.5f;
  }
  const char *kernels = openblas_get_corename();
  printf("ceiling kernels: %s\n", kernels ? kernels : "?");
  rate one = sgemm_gflops((int)S, 1, (int)reps, A, B, C);
  printf("ceiling 1 thread: %.1f GFLOP/s (%ld^3, median of %ld; best %.1f)\n", one.median, S,
         reps, one.best);
  rate all = sgemm_gflops((int)S, (int)threads, (int)reps, A, B, C);
  printf("ceiling %ld threads: %.1f GFLOP/s (%ld^3, median of %ld; best %.1f)\n", threads,
         all.median, S, reps, all.best);
  free(A);
  free(B);
  free(C);
  return 0;
}
