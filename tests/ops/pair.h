/*
 * The worker-pair engine of the cpu, cuda and device backends (was
 * tests/cuda_pair.h): a submission runs once forced on a CPU worker and once
 * forced on a second worker, on identical inputs and separate outputs, and
 * the outputs are compared.  The second worker is
 *   cuda    a CUDA worker: within each output's tolerance (PAIR_EXACT: equal
 *           values);
 *   device  an emulated accelerator (PoCL OpenCL, --emulated-devices), its own
 *           memory node, where the OpenCL adapter runs the CPU kernels on
 *           mapped buffers: bit for bit (same kernels, same operands), which
 *           checks the adapter: transfers, sub-matrix offsets, reductions,
 *           scratch and 16-bit buffers on a device;
 *   cpu     another CPU worker: bit for bit, which checks the insert
 *           wrapper and the codelet's data handling on its own.
 * pair_start() returns TG_TEST_SKIP when the second worker is missing.
 */
#ifndef TASKGRAD_OPS_PAIR_H
#define TASKGRAD_OPS_PAIR_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "ops_harness.h"
#include "taskgrad/codelets.h"
#include "taskgrad/parallel.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"

#define TOL 1e-5
#define TOL_LARGE_K 1e-4
#define PAIR_EXACT (-1.0) /* tolerance meaning "bit-for-bit equal values" */

extern int g_cpu_worker, g_cuda_worker; /* the second worker, whatever it is */
extern tg_rng g_pair_rng;

int pair_start(ops_backend backend);
/* 1 when every comparison is bit for bit (device, cpu) */
int pair_bitwise(void);
/* the second worker's kind, for messages: "CUDA", "emulated device", "CPU" */
const char *pair_second_name(void);

void die(const char *what);
void *xmalloc(size_t n);
/* n uniform values in [-scale, scale) */
float *rnd(size_t n, float scale);
float *filled(size_t n, float value);
/* A host float tensor holding data (zeros when data is NULL). */
void new_tensor(tg_tensor *t, int rows, int cols, const float *data);
void new_labels(tg_tensor *t, int rows, const int32_t *labels);
tg_task_opts on_worker(int worker);
/* Compares the second worker's result with the CPU result. */
void pair_compare(const char *what, const float *cpu, const float *gpu, size_t n, double tol);

/* Outputs of a case: each is created twice (CPU run, second run) from the
 * same initial contents. */
typedef struct outspec {
  const char *name;
  int rows, cols;
  const float *init; /* NULL: NaN everywhere (write-only outputs) */
  int redux;         /* 1: tg_tensor_enable_reduction() */
  double tol;        /* or PAIR_EXACT */
} outspec;

#define MAX_OUT 3
typedef int (*submit_fn)(const void *ctx, const tg_task_opts *opts, tg_tensor *out);

/* Runs fn on the CPU worker and on the second worker and compares the
 * outputs.  Results are returned in cpu_res / gpu_res when not NULL (output
 * 0 only, caller frees). */
void run_pair(const char *what, submit_fn fn, const void *ctx, int nout, const outspec *spec,
              float **cpu_res, float **gpu_res);

/* the element-wise cases' shapes (rows, cols), also the emulator's */
#define NSHAPES 4
extern const int g_shapes[NSHAPES][2];

/* context of the MLP element-wise, bias and activation cases */
typedef struct hctx {
  starpu_data_handle_t h[3];
  tg_accum accum;
  int act;
  float f;
  int ld_test; /* inputs/outputs on the left half of partitioned tensors */
} hctx;

/* context of the GPT cases */
typedef struct gctx {
  starpu_data_handle_t h[6];
  int T, NH, chunk, V, kind;
  tg_accum accum;
} gctx;
/* an (n, 1) int32 tensor of tokens in [0, V) */
void tokens_tensor(tg_tensor *t, int n, int V);

/* column halves of a tensor, for the leading-dimension cases */
void split_columns(tg_tensor *t);
starpu_data_handle_t left_half(tg_tensor *t);
void unsplit(tg_tensor *t);
const char *accum_name(tg_accum a);

/* ---- outputs of any dtype (pair16.c) ---- */

typedef struct out16 {
  const char *name;
  int rows, cols;
  tg_dtype dt;       /* TG_F32 or 16-bit */
  const float *init; /* rounded to dt; NULL: NaN */
  double tol;        /* relative (Frobenius), or PAIR_EXACT */
} out16;

enum { MAX_OUT16 = 4 };
typedef int (*submit16_fn)(const void *ctx, const tg_task_opts *opts, tg_tensor *out);

/* like run_pair, for outputs of the dtypes of spec (no REDUX) */
void run_pair16(const char *what, submit16_fn fn, const void *ctx, int nout, const out16 *spec);
/* half a unit in the last place of the 16-bit type at 1.0 */
double half_ulp(tg_dtype t);

#endif
