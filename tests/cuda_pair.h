/*
 * Shared harness of the CUDA codelet tests: run a submission once forced on
 * a CPU worker and once on a CUDA worker, on identical inputs and separate
 * outputs, and compare the outputs (see test_cuda_codelets.c for the
 * conventions).  cuda_pair_start() returns TG_TEST_SKIP's value when there is
 * no CUDA worker; the test then exits with it.
 *
 * Built with TG_PAIR_OPENCL (tests/test_emulated_*.c include the CUDA tests'
 * sources), the second worker is an emulated accelerator instead: a PoCL
 * OpenCL device, its own memory node, where the OpenCL adapter runs the CPU
 * kernels on mapped device buffers.  Every comparison is then bit for bit
 * (same kernels, same operands) and the cases check the adapter: transfers,
 * sub-matrix offsets, reductions, scratch and 16-bit buffers on a device.
 */
#ifndef TASKGRAD_CUDA_PAIR_H
#define TASKGRAD_CUDA_PAIR_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "taskgrad/codelets.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

#define TOL 1e-5
#define TOL_LARGE_K 1e-4
#define EXACT (-1.0) /* tolerance meaning "bit-for-bit equal values" */

static int g_cpu_worker = -1, g_cuda_worker = -1;
static tg_rng g_rng = {0x9E3779B97F4A7C15ULL};
static const char *const g_task_name = "cuda_pair";

/* ---- helpers -------------------------------------------------------------- */

static void die(const char *what) {
  fprintf(stderr, "FATAL: %s: %s\n", what, tg_last_error());
  exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "FATAL: out of memory\n");
    exit(1);
  }
  return p;
}

/* n uniform values in [-scale, scale) */
static float *rnd(size_t n, float scale) {
  float *x = xmalloc(n * sizeof *x);
  tg_rng_fill(&g_rng, x, n, scale);
  return x;
}

static float *filled(size_t n, float value) {
  float *x = xmalloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = value;
  return x;
}

/* A host float tensor holding data (zeros when data is NULL). */
static void new_tensor(tg_tensor *t, int rows, int cols, const float *data) {
  if (tg_tensor_alloc(t, rows, cols, TG_F32) != 0) die("tg_tensor_alloc");
  if (data && tg_tensor_write(t, data) != 0) die("tg_tensor_write");
}

static void new_labels(tg_tensor *t, int rows, const int32_t *labels) {
  if (tg_tensor_alloc(t, rows, 1, TG_I32) != 0) die("tg_tensor_alloc");
  if (tg_tensor_write(t, labels) != 0) die("tg_tensor_write");
}

static tg_task_opts on_worker(int worker) {
  tg_task_opts o = {0, worker, g_task_name, TG_F32};
  return o;
}

/* Compares the CUDA result with the CPU result. */
static void compare(const char *what, const float *cpu, const float *gpu,
                    size_t n, double tol) {
#ifdef TG_PAIR_OPENCL
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) differ += memcmp(&cpu[i], &gpu[i], sizeof *cpu) != 0;
  CHECK(differ == 0, "%s: %zu of %zu values differ in their bits on the emulated device", what,
        differ, n);
  (void)tol;
  return;
#endif
  if (tol == EXACT) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
      if (!(cpu[i] == gpu[i])) bad++;
    CHECK(bad == 0, "%s: %zu of %zu values differ (first: cpu %g, cuda %g)",
          what, bad, n, (double)cpu[0], (double)gpu[0]);
    return;
  }
  double err = tg_rel_err_f32(gpu, cpu, n);
  CHECK_REL(err, tol, what);
}

/* Outputs of a case: each is created twice (CPU run, CUDA run) from the same
 * initial contents. */
typedef struct outspec {
  const char *name;
  int rows, cols;
  const float *init; /* NULL: NaN everywhere (write-only outputs) */
  int redux;         /* 1: tg_tensor_enable_reduction() */
  double tol;        /* or EXACT */
} outspec;

#define MAX_OUT 3
typedef int (*submit_fn)(const void *ctx, const tg_task_opts *opts,
                         tg_tensor *out);

/* Runs fn on the CPU worker and on the CUDA worker and compares the outputs.
 * Results are returned in cpu_res / gpu_res when not NULL (output 0 only,
 * caller frees). */
static void run_pair(const char *what, submit_fn fn, const void *ctx,
                     int nout, const outspec *spec, float **cpu_res,
                     float **gpu_res) {
  tg_tensor out[2][MAX_OUT];
  const int workers[2] = {g_cpu_worker, g_cuda_worker};
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < nout; i++) {
      size_t n = (size_t)spec[i].rows * (size_t)spec[i].cols;
      float *nan_init = spec[i].init ? NULL : filled(n, NAN);
      new_tensor(&out[side][i], spec[i].rows, spec[i].cols,
                 spec[i].init ? spec[i].init : nan_init);
      free(nan_init);
      if (spec[i].redux) tg_tensor_enable_reduction(&out[side][i]);
    }
  for (int side = 0; side < 2; side++) {
    tg_task_opts o = on_worker(workers[side]);
    int rc = fn(ctx, &o, out[side]);
    CHECK(rc == 0, "%s: submission on the %s worker failed: %s", what,
          side ? "CUDA" : "CPU", tg_last_error());
  }
  for (int i = 0; i < nout; i++) {
    size_t n = (size_t)spec[i].rows * (size_t)spec[i].cols;
    float *res[2];
    for (int side = 0; side < 2; side++) {
      res[side] = xmalloc(n * sizeof(float));
      if (tg_tensor_read(&out[side][i], res[side]) != 0) die("tg_tensor_read");
    }
    char label[256];
    snprintf(label, sizeof label, "%s [%s]", what, spec[i].name);
    compare(label, res[0], res[1], n, spec[i].tol);
    if (i == 0 && cpu_res) {
      *cpu_res = res[0];
      res[0] = NULL;
    }
    if (i == 0 && gpu_res) {
      *gpu_res = res[1];
      res[1] = NULL;
    }
    free(res[0]);
    free(res[1]);
  }
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < nout; i++) tg_tensor_free(&out[side][i]);
}


/* tg_init, then the CPU and CUDA worker ids; 0, or TG_TEST_SKIP after
 * tg_shutdown when there is no CUDA worker (or no CPU worker). */
static int cuda_pair_start(void) {
#ifdef TG_PAIR_OPENCL
  tg_runtime_config rc = tg_runtime_config_default();
  rc.emulated_devices = 1;
  rc.ncpus = 1;
  if (tg_init(&rc) != 0) {
    if (!strstr(tg_last_error(), "pocl-opencl-icd")) die("tg_init");
    printf("SKIP: %s\n", tg_last_error());
    return TG_TEST_SKIP;
  }
  int one[1];
  if (starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, one, 1) != 1) die("no CPU worker");
  g_cpu_worker = one[0];
  if (starpu_worker_get_ids_by_type(STARPU_OPENCL_WORKER, one, 1) != 1) die("no OpenCL worker");
  g_cuda_worker = one[0];
  printf("comparing CPU worker %d with emulated device (OpenCL worker %d), bit for bit\n",
         g_cpu_worker, g_cuda_worker);
  return 0;
#else
  if (tg_init(NULL) != 0) die("tg_init");
  /* Developer self-test of the harness and the cases, never run by ctest:
   * a second CPU worker stands in for the CUDA one.  It validates the test,
   * not CUDA, and says so. */
  if (getenv("TG_CUDA_PAIR_SELFTEST")) {
    int ids[STARPU_NMAXWORKERS];
    unsigned ncpu = starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids, STARPU_NMAXWORKERS);
    if (ncpu < 2) die("TG_CUDA_PAIR_SELFTEST needs 2 CPU workers");
    g_cpu_worker = ids[0];
    g_cuda_worker = ids[1];
    printf("SELF-TEST: CPU worker %d against CPU worker %d (no CUDA involved)\n", ids[0],
           ids[1]);
    return 0;
  }
  if (!tg_built_with_cuda() || tg_ncuda_workers() == 0) {
    printf("SKIP: no CUDA worker\n");
    tg_shutdown();
    return TG_TEST_SKIP;
  }
  int ids[STARPU_NMAXWORKERS];
  unsigned ncpu = starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids, STARPU_NMAXWORKERS);
  if (ncpu > 0) g_cpu_worker = ids[0];
  unsigned ncuda = starpu_worker_get_ids_by_type(STARPU_CUDA_WORKER, ids, STARPU_NMAXWORKERS);
  if (ncuda > 0) g_cuda_worker = ids[0];
  if (g_cpu_worker < 0 || g_cuda_worker < 0) {
    printf("SKIP: need a CPU and a CUDA worker (found %u and %u)\n", ncpu, ncuda);
    tg_shutdown();
    return TG_TEST_SKIP;
  }
  printf("comparing CPU worker %d with CUDA worker %d\n", g_cpu_worker, g_cuda_worker);
  return 0;
#endif
}

#endif
