/*
 * The op table: every op is a row, every row runs on every backend present.
 *
 * Design note
 * -----------
 * - One program per build flavour (test_ops, and test_ops_emu with the CUDA
 *   emulator linked in), one backend per run (`test_ops ref`), registered as
 *   one ctest test per backend so that a missing device is a SKIP (77) of
 *   that backend only.  Backends:
 *     ref       CPU kernels against float64 references; backward ops also
 *               against central finite differences (no StarPU);
 *     cpu       the codelet through its insert wrapper on StarPU CPU workers
 *               (against the kernel, or worker against worker, bit for bit);
 *     cuda      the codelet on a CUDA worker against a CPU worker;
 *     cuda-emu  the CUDA launchers run on the CPU by tests/cuda_emu against
 *               the CPU kernels (test_ops_emu only: its tg_cuda_* symbols
 *               would replace a CUDA build's real ones);
 *     device    the codelet on an emulated device (PoCL OpenCL) against a
 *               CPU worker, bit for bit;
 *     lowp      the codelet through the 16-bit adapter (bf16, fp16) against
 *               its fp32 result.
 * - One row per op (per insert wrapper, tg_<op>_insert).  A row names what
 *   it covers (codelets, insert wrappers, CUDA launchers), the CPU kernels
 *   its ref case checks, and, per backend, either a case function or why
 *   there is none.  Every codelet, insert wrapper and CUDA launcher
 *   declared in include/taskgrad must be covered by a row, and every CPU
 *   kernel declared in kernels_cpu.h and precision_kernels.h named by a
 *   row that has a ref case (or be in the harness's short exemption list,
 *   with its reason), or the run fails (check_complete in ops_harness.c);
 *   a named function that no header declares fails too (a stale row).
 * - Cases keep their own strictness: CHECK and CHECK_REL are testutil.h's,
 *   redirected here so that the counts are global (the cases live in one
 *   file per codelet file, tests/ops/<codelet file>.c, which may hold
 *   several rows) and each (row,
 *   backend) line shows its checks, failures and the largest error relative
 *   to its tolerance.
 */
#ifndef TASKGRAD_OPS_HARNESS_H
#define TASKGRAD_OPS_HARNESS_H

#include "testutil.h"

typedef enum ops_backend {
  OPS_REF,
  OPS_CPU,
  OPS_CUDA,
  OPS_CUDA_EMU,
  OPS_DEVICE,
  OPS_LOWP,
  OPS_NBACKENDS
} ops_backend;

typedef void (*ops_case_fn)(void);

typedef struct ops_row {
  const char *name;   /* the op: tg_<name>_insert */
  const char *doc;    /* what it computes (the codelet table, `test_ops table`) */
  const char *buffers; /* its buffers and their access modes (the same table) */
  const char *covers; /* codelets, insert wrappers, CUDA launchers declared in
                         include/taskgrad (space-separated) */
  const char *kernels; /* the CPU kernels of kernels_cpu.h and
                          precision_kernels.h that its ref case checks */
  ops_case_fn run[OPS_NBACKENDS];
  const char *why_not[OPS_NBACKENDS]; /* where run[b] is NULL */
} ops_row;

/* Each row file registers its rows (Chameleon's testing_register) before
 * main runs: OPS_ROWS(rows) at its end.  No central list: a new row file
 * is found by the build's glob (tests/CMakeLists.txt) and registers itself.
 * The rows run in the order of their files' names, then of the array. */
void ops_register(const char *file, const ops_row *rows, int nrows);
#define OPS_ROWS(rows_array)                                                     \
  __attribute__((constructor)) static void ops_register_rows_(void) {            \
    ops_register(__FILE__, rows_array, (int)(sizeof rows_array / sizeof rows_array[0])); \
  }

/* A case shared by several rows of one file (their ops share data or
 * setup) checks only the op of the row being run: `if (ops_row_is("fill"))`. */
int ops_row_is(const char *name);

/* The emulator's cases exist in test_ops_emu only: a row with a cuda-emu
 * case gives OPS_EMU_CASE(fn) and, as its reason in test_ops, OPS_EMU_ONLY. */
#define OPS_EMU_ONLY "built into test_ops_emu only"
/* the lowp reason of an f32 codelet whose 16-bit run adds nothing */
#define ADAPTER_ELSEWHERE                                                         \
  "the adapter is the same for every f32 codelet: linear_fwd, linear_bwd_data, " \
  "layernorm_fwd and layernorm_bwd rows"
#ifdef OPS_EMU
#define OPS_EMU_CASE(fn) (fn)
#else
#define OPS_EMU_CASE(fn) NULL
#endif

/* the backend being run (cases shared by cuda, device and cpu ask) */
ops_backend ops_current_backend(void);

/* a check, counted for the program and for the current (row, backend) */
void ops_check(int ok, const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* the failed checks so far, in this process */
int ops_failures(void);
/* an error measured against its tolerance (tol < 0: must be exact) */
void ops_note_error(double err, double tol);

#undef CHECK
#define CHECK(cond, ...) ops_check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)
#undef CHECK_REL
#define CHECK_REL(err, tol, what)                                                \
  do {                                                                           \
    double err_ = (err), tol_ = (tol);                                           \
    ops_note_error(err_, tol_);                                                  \
    CHECK(err_ <= tol_, "%s: relative error %.3e > %.1e", (what), err_, tol_);   \
  } while (0)

/* Runs body once under StarPU with 1 and once with 2 CPU workers (no CUDA),
 * each in a fresh child process: "/proc/self/exe child BACKEND:ROW", which
 * runs the row's case up to this call, then body, and exits.  So a case
 * calls it first, and whatever follows runs in the parent only. */
void ops_run_worker_counts(void (*body)(void));

#endif
