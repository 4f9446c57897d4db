/*
 * The scratch sizes of CUDA kernels: the attention paths (attention.cu, the
 * flash kernels; attention_gemm.cu, the cuBLAS products) and the LayerNorm
 * backward (layernorm.cu), private to taskgrad.
 * Kernel layer, plain C: the codelets include it in every build, so that the
 * SimGrid build, which simulates CUDA workers without compiling their
 * kernels, sizes a task's scratch, and so its perfmodel footprint, as the
 * CUDA build does (its calibrated histories then match).
 */
#ifndef TASKGRAD_SCRATCH_SIZES_H
#define TASKGRAD_SCRATCH_SIZES_H

#include <stddef.h>

/* floats above which the codelet keeps the flash kernels: 1 GiB */
#define TG_ATTN_GEMM_MAX_FLOATS ((size_t)1 << 28)

/* the head sizes of the bf16 flash kernels (attention_flash_lowp.cu) */
static inline int tg_attn_flash_lowp_hs_ok(int hs) {
  return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

/* the flash backward's D (n, NH) */
static inline size_t tg_attn_flash_scratch_floats(int b, int T, int NH) {
  if (b <= 0 || T <= 0 || NH <= 0) return 0;
  return (size_t)b * (size_t)T * (size_t)NH;
}

/* D (b T, NH), then scores and their gradient, (NH, T, T) each */
static inline size_t tg_attn_gemm_scratch_floats(int b, int T, int NH) {
  if (b <= 0 || T <= 0 || NH <= 0) return 0;
  return (size_t)b * T * NH + 2 * (size_t)NH * T * T;
}

static inline int tg_attn_gemm_fits(int b, int T, int NH) {
  return tg_attn_gemm_scratch_floats(b, T, NH) <= TG_ATTN_GEMM_MAX_FLOATS;
}

/* the bf16 path (attention_gemm_lowp.cu): the same, then P and dS in bf16,
 * (NH, T, T) each: NH T T floats more */
static inline size_t tg_attn_gemm_lowp_scratch_floats(int b, int T, int NH) {
  if (b <= 0 || T <= 0 || NH <= 0) return 0;
  return tg_attn_gemm_scratch_floats(b, T, NH) + (size_t)NH * T * T;
}

static inline int tg_attn_gemm_lowp_fits(int b, int T, int NH) {
  return tg_attn_gemm_lowp_scratch_floats(b, T, NH) <= TG_ATTN_GEMM_MAX_FLOATS;
}

/* The cudnn kind's cuDNN part (attention_cudnn.cpp): the softmax
 * statistics in cuDNN's (b, NH, T) order, padded to 64 floats (256 bytes),
 * then the plan's workspace, capped at TG_ATTN_CUDNN_WORKSPACE_FLOATS: the
 * backward's f32 dQ accumulator (b T C floats) and its row sums (two
 * (b, NH, T)), and 16 MiB for what else an engine asks; the forward's
 * plans ask for little or none.  A plan that asks for more is refused
 * (the gemm kind's kernels run). */
static inline size_t tg_attn_cudnn_stats_floats(int b, int T, int NH) {
  if (b <= 0 || T <= 0 || NH <= 0) return 0;
  return ((size_t)b * T * NH + 63) / 64 * 64;
}

static inline size_t tg_attn_cudnn_workspace_floats(int b, int T, int C, int NH) {
  if (b <= 0 || T <= 0 || C <= 0 || NH <= 0) return 0;
  return (size_t)b * T * C + 2 * (size_t)b * T * NH + ((size_t)1 << 22);
}

static inline size_t tg_attn_cudnn_scratch_floats(int b, int T, int C, int NH) {
  return tg_attn_cudnn_stats_floats(b, T, NH) + tg_attn_cudnn_workspace_floats(b, T, C, NH);
}

/* R, the row blocks of the LayerNorm backward's dw / db partial sums: at
 * least 64 rows each, at most 64 blocks (0 when n <= 0) */
static inline int tg_ln_row_blocks(int n) {
  if (n <= 0) return 0;
  int r = (n + 63) / 64;
  return r < 64 ? r : 64;
}

/* dw partials (R, C), then db partials (R, C) */
static inline size_t tg_ln_bwd_scratch_floats(int n, int C) {
  if (n <= 0 || C <= 0) return 0;
  return 2 * (size_t)tg_ln_row_blocks(n) * (size_t)C;
}

/* the bias gradient's row blocks (bias.cu): the rows are cut into R slices
 * so that R * ceil(cols / 32) blocks fill a large GPU (about 264 blocks of
 * 1024 threads: two per SM of an H100), each slice at least 256 rows, at
 * most 64 slices; 1 (no partials, no scratch) for a short or wide matrix.
 * A function of the shape only, so that the codelet sizes the scratch
 * without the device and the sums do not depend on the GPU. */
static inline int tg_bias_grad_row_blocks(int rows, int cols) {
  if (rows <= 0 || cols <= 0) return 1;
  const int tiles = (cols + 31) / 32;
  int r = (rows + 255) / 256;
  const int fill = (264 + tiles - 1) / tiles;
  if (r > fill) r = fill;
  return r < 64 ? r : 64;
}

/* the double partial sums (R, cols) as floats; 0 when R == 1 */
static inline size_t tg_bias_grad_scratch_floats(int rows, int cols) {
  const int r = tg_bias_grad_row_blocks(rows, cols);
  return r > 1 ? 2 * (size_t)r * (size_t)cols : 0;
}

#endif
