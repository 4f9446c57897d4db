/*
 * The cuda-emu backend's shared pieces: the tolerances (chosen and explained
 * in tests/ops/emu.c), the comparison and buffer helpers defined there, for
 * the cuda-emu sections of the op table's row files (tests/ops/<file>.c).  Every
 * case compares a launcher run through the emulator with its CPU kernel and
 * adds to that launcher's line of the table (record / compare) and to its
 * row's line of the op table.
 */
#ifndef TG_CUDA_EMU_TEST_H
#define TG_CUDA_EMU_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "gemm_lowp_pad.h" /* private: tg_gemm_lowp_pad_elems */
#include "scratch_sizes.h"  /* private: the attention and LayerNorm scratch */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "taskgrad/precision.h"
#include "ops/ops_harness.h"

#define EXACT 0.0
#define kTolEw 1e-6
#define kTolRed 1e-5
#define kTolLong 1e-4
#define kSentinel 777.0f /* output padding: must survive */

extern tg_rng g_rng;
extern cublasHandle_t g_blas;
extern int g_quick; /* TG_EMU_QUICK: a subset of the shapes */
#define FULL_ONLY(cond) if (g_quick && (cond)) continue

/* adds a case with error err to the launcher's line */
void record(const char *launcher, double err);
/* n floats of the emulated and the CPU result, within tol (or EXACT) */
void compare(const char *launcher, const char *what, const float *emu, const float *cpu,
             size_t n, double tol);
/* a launch (or cuBLAS call) status that must be 0 */
void ok(const char *launcher, const char *what, int status);
float *fmalloc(size_t n);
/* (rows, ld) input: uniform in [-scale, scale), NaN padding */
float *input(int rows, int cols, int ld, float scale);
/* (rows, ld) output twice (emulator, CPU): random or NaN, padding kSentinel */
void outputs(float *out[2], int rows, int cols, int ld, int random);
void free2(float *p[2]);
/* n tokens in [0, V) */
int32_t *tokens(int n, int V);
/* the 16-bit types, and their comparison (equal bits, or NaN on both sides) */
extern const tg_dtype g_lowp[2];
void compare16(const char *launcher, const char *what, tg_dtype t, const uint16_t *emu,
               const uint16_t *cpu, size_t n);
/* x (rows, ld) rounded to t in place; returns its 16-bit copy with ld
 * cols + pad (padding 0xabcd) */
uint16_t *to16(tg_dtype t, float *x, int rows, int cols, int ld, int pad);
/* 16-bit values widened, for the GEMM with a 16-bit C */
float *widen16(tg_dtype t, const uint16_t *h, size_t n);

#endif
