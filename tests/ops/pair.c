/*
 * The worker-pair engine (see pair.h): the runtime start for each backend,
 * the comparison, and run_pair.  Moved from tests/cuda_pair.h, where the
 * second worker was chosen at compile time (TG_PAIR_OPENCL); here the
 * backend chooses it at run time, so one case serves cuda, device and cpu.
 */
#include "pair.h"

#include <math.h>
#include <stdio.h>

int g_cpu_worker = -1, g_cuda_worker = -1;
tg_rng g_pair_rng = {.s = 0x9E3779B97F4A7C15ULL};
const int g_shapes[NSHAPES][2] = {{1, 1}, {7, 33}, {257, 7}, {33, 257}};
static const char *const g_task_name = "cuda_pair";
static ops_backend g_pair_backend;

int pair_bitwise(void) { return g_pair_backend != OPS_CUDA; }

const char *pair_second_name(void) {
  return g_pair_backend == OPS_CUDA ? "CUDA" : g_pair_backend == OPS_DEVICE ? "emulated device"
                                                                            : "second CPU";
}

void die(const char *what) {
  fprintf(stderr, "FATAL: %s: %s\n", what, tg_last_error());
  exit(1);
}

void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "FATAL: out of memory\n");
    exit(1);
  }
  return p;
}

float *rnd(size_t n, float scale) {
  float *x = xmalloc(n * sizeof *x);
  tg_rng_fill(&g_pair_rng, x, n, scale);
  return x;
}

float *filled(size_t n, float value) {
  float *x = xmalloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) x[i] = value;
  return x;
}

void new_tensor(tg_tensor *t, int rows, int cols, const float *data) {
  if (tg_tensor_alloc(t, rows, cols, TG_F32) != 0) die("tg_tensor_alloc");
  if (data && tg_tensor_write(t, data) != 0) die("tg_tensor_write");
}

void new_labels(tg_tensor *t, int rows, const int32_t *labels) {
  if (tg_tensor_alloc(t, rows, 1, TG_I32) != 0) die("tg_tensor_alloc");
  if (tg_tensor_write(t, labels) != 0) die("tg_tensor_write");
}

void tokens_tensor(tg_tensor *t, int n, int V) {
  int32_t *tok = xmalloc(sizeof(int32_t) * n);
  for (int i = 0; i < n; i++) tok[i] = (int32_t)(tg_rng_next(&g_pair_rng) % (uint64_t)V);
  new_labels(t, n, tok);
  free(tok);
}

tg_task_opts on_worker(int worker) {
  tg_task_opts o = {.priority = 0, .worker = worker, .name = g_task_name, .lowp = TG_F32};
  return o;
}

/* On a failure, the elements that differ most (index, both values): where
 * they sit (a row, a column tile, the tail) says more than the norm. */
static void pair_print_worst(const float *cpu, const float *gpu, size_t n) {
  enum { SHOW = 6 };
  size_t worst[SHOW];
  double dw[SHOW];
  int nw = 0;
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) {
    if (cpu[i] == gpu[i]) continue;
    differ++;
    double d = fabs((double)gpu[i] - (double)cpu[i]);
    if (d != d) d = INFINITY; /* NaN on one side */
    if (nw == SHOW && !(d > dw[SHOW - 1])) continue;
    int k = nw < SHOW ? nw++ : SHOW - 1; /* insert, keeping dw descending */
    for (; k > 0 && dw[k - 1] < d; k--) {
      dw[k] = dw[k - 1];
      worst[k] = worst[k - 1];
    }
    dw[k] = d;
    worst[k] = i;
  }
  fprintf(stderr, "  %zu of %zu values differ; the largest differences:\n", differ, n);
  for (int k = 0; k < nw; k++)
    fprintf(stderr, "    [%zu] cpu %.9g, %s %.9g\n", worst[k], (double)cpu[worst[k]],
            pair_second_name(), (double)gpu[worst[k]]);
}

void pair_compare(const char *what, const float *cpu, const float *gpu, size_t n, double tol) {
  if (pair_bitwise()) {
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&cpu[i], &gpu[i], sizeof *cpu) != 0;
    ops_note_error(differ ? tg_rel_err_f32(gpu, cpu, n) : 0, PAIR_EXACT);
    CHECK(differ == 0, "%s: %zu of %zu values differ in their bits on the %s worker", what,
          differ, n, pair_second_name());
    return;
  }
  if (tol == PAIR_EXACT) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
      if (!(cpu[i] == gpu[i])) bad++;
    ops_note_error(bad ? tg_rel_err_f32(gpu, cpu, n) : 0, PAIR_EXACT);
    CHECK(bad == 0, "%s: %zu of %zu values differ (first: cpu %g, cuda %g)", what, bad, n,
          (double)cpu[0], (double)gpu[0]);
    return;
  }
  double err = tg_rel_err_f32(gpu, cpu, n);
  CHECK_REL(err, tol, what);
  if (err > tol) pair_print_worst(cpu, gpu, n);
}

void run_pair(const char *what, submit_fn fn, const void *ctx, int nout, const outspec *spec,
              float **cpu_res, float **gpu_res) {
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
          side ? pair_second_name() : "CPU", tg_last_error());
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
    pair_compare(label, res[0], res[1], n, spec[i].tol);
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

void split_columns(tg_tensor *t) {
  struct starpu_data_filter f;
  memset(&f, 0, sizeof f);
  f.filter_func = starpu_matrix_filter_block; /* along nx = columns */
  f.nchildren = 2;
  starpu_data_partition(t->handle, &f);
}
starpu_data_handle_t left_half(tg_tensor *t) { return starpu_data_get_sub_data(t->handle, 1, 0); }
void unsplit(tg_tensor *t) { starpu_data_unpartition(t->handle, STARPU_MAIN_RAM); }

const char *accum_name(tg_accum a) {
  return a == TG_OVERWRITE ? "overwrite" : a == TG_ACCUMULATE ? "accumulate"
         : a == TG_REDUCE ? "reduce" : "commute";
}

/* the first worker of a type, or -1 */
static int first_worker(enum starpu_worker_archtype type, int nth) {
  int ids[STARPU_NMAXWORKERS];
  int n = starpu_worker_get_ids_by_type(type, ids, STARPU_NMAXWORKERS);
  return n > nth ? ids[nth] : -1;
}

/* tg_init, then the two workers' ids; 0, or TG_TEST_SKIP after tg_shutdown
 * when the second worker is missing. */
int pair_start(ops_backend backend) {
  g_pair_backend = backend;
  tg_runtime_config rc = tg_runtime_config_default();
  if (backend == OPS_DEVICE) {
    rc.emulated_devices = 1;
    rc.ncpus = 1;
    if (tg_init(&rc) != 0) {
      if (!strstr(tg_last_error(), "pocl-opencl-icd")) die("tg_init");
      printf("SKIP: %s\n", tg_last_error());
      return TG_TEST_SKIP;
    }
    g_cpu_worker = first_worker(STARPU_CPU_WORKER, 0);
    g_cuda_worker = first_worker(STARPU_OPENCL_WORKER, 0);
    if (g_cpu_worker < 0 || g_cuda_worker < 0) die("no CPU or no OpenCL worker");
    printf("comparing CPU worker %d with emulated device (OpenCL worker %d), bit for bit\n",
           g_cpu_worker, g_cuda_worker);
    return 0;
  }
  if (backend == OPS_CPU) { /* two CPU workers whatever the machine */
    rc.ncpus = 2;
    rc.ncuda = 0;
    if (tg_init(&rc) != 0) die("tg_init");
    g_cpu_worker = first_worker(STARPU_CPU_WORKER, 0);
    g_cuda_worker = first_worker(STARPU_CPU_WORKER, 1);
    if (g_cpu_worker < 0 || g_cuda_worker < 0) die("tg_init gave fewer than 2 CPU workers");
    printf("comparing CPU worker %d with CPU worker %d, bit for bit\n", g_cpu_worker,
           g_cuda_worker);
    return 0;
  }
  if (tg_init(NULL) != 0) die("tg_init");
  if (!tg_built_with_cuda() || tg_ncuda_workers() == 0) {
    printf("SKIP: no CUDA worker\n");
    tg_shutdown();
    return TG_TEST_SKIP;
  }
  g_cpu_worker = first_worker(STARPU_CPU_WORKER, 0);
  g_cuda_worker = first_worker(STARPU_CUDA_WORKER, 0);
  if (g_cpu_worker < 0 || g_cuda_worker < 0) {
    printf("SKIP: need a CPU and a CUDA worker\n");
    tg_shutdown();
    return TG_TEST_SKIP;
  }
  printf("comparing CPU worker %d with CUDA worker %d\n", g_cpu_worker, g_cuda_worker);
  return 0;
}
