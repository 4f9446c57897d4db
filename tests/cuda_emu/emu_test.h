/*
 * test_cuda_emulated's shared pieces: the tolerances (chosen and explained
 * in tests/test_cuda_emulated.c), the comparison and buffer helpers defined
 * there, and the case files' entry points (cuda_emu/cases_*.c).  Every case
 * compares a launcher run through the emulator with its CPU kernel and adds
 * to that launcher's line of the table (record / compare).
 */
#ifndef TG_CUDA_EMU_TEST_H
#define TG_CUDA_EMU_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "gemm_lowp_pad.h" /* private: tg_gemm_lowp_pad_elems */
#include "taskgrad/kernels_cpu.h"
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "taskgrad/precision.h"
#include "testutil.h"

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

/* cuda_emu/cases_gpt.c */
void test_embedding(void);
void test_layernorm(void);
void test_attention(void);
void test_classifier(void);
void emu_cases_gpt_counts(int *checks, int *failures);
/* cuda_emu/cases_lowp.c */
void test_conversions(void);
void test_gemm_lowp(void);
void test_nonfinite_amp(void);
void emu_cases_lowp_counts(int *checks, int *failures);

#endif
