/*
 * taskgrad mixed precision, codelets layer: the conversion, non-finite
 * check, 16-bit GEMM and AMP AdamW tasks (codelets/precision.c,
 * codelets/gemm_lowp.c) over the kernels of precision_kernels.h; the
 * scheme is described there.
 */
#ifndef TASKGRAD_PRECISION_CODELETS_H
#define TASKGRAD_PRECISION_CODELETS_H

#include "taskgrad/codelets.h"
#include "taskgrad/dtype.h"
#include "taskgrad/precision_kernels.h" /* TG_ADAMW_MULTI_MAX */

#ifdef __cplusplus
extern "C" {
#endif

/* `lowp` names the 2-byte type (TG_BF16 or TG_F16): StarPU handles only know
 * the element size, which is 2 for both. */

/* dst = src converted: f32 -> lowp or lowp -> f32, decided by the element
 * sizes (4 -> 2 or 2 -> 4); same shape; dst written (W). */
int tg_convert_insert(tg_dtype lowp, starpu_data_handle_t src,
                      starpu_data_handle_t dst, const tg_task_opts *opts);

/* One level of the ranks' reduce-scatter (codelets/add_round.c, kernel
 * tg_cpu_add_round): v = a[a_off, a_off + n) + recv (n rows in comm: TG_F32,
 * TG_BF16 or TG_F16; NULL: a's rows alone), then v[out_off, out_off +
 * rows(out)) into out (f32) and v[send_off, send_off + rows(send)) rounded
 * into send (comm).  All contiguous (rows, 1) columns; out or send may be
 * NULL, not both. */
int tg_add_round_insert(tg_dtype comm, starpu_data_handle_t a, int a_off, int n,
                        starpu_data_handle_t recv, starpu_data_handle_t out, int out_off,
                        starpu_data_handle_t send, int send_off, const tg_task_opts *opts);

/* C = alpha op(A) op(B) + beta C (see tg_cpu_gemm_lowp): A, B in lowp,
 * C f32 (4-byte elements) or lowp (2-byte).  accum as tg_gemm_insert;
 * TG_REDUCE only with an f32 C (the reduction codelets add floats). */
int tg_gemm_lowp_insert(tg_dtype lowp, int transa, int transb, float alpha,
                        starpu_data_handle_t A, starpu_data_handle_t B,
                        float beta, starpu_data_handle_t C, tg_accum accum,
                        const tg_task_opts *opts);

/* flag (1, 1) f32 (RW) = 1 when grad (f32, contiguous) holds an Inf or NaN */
int tg_nonfinite_insert(starpu_data_handle_t grad, starpu_data_handle_t flag,
                        const tg_task_opts *opts);

/* tg_cpu_adamw_amp as a task: w, grad, m, v f32 (rows, cols), contiguous
 * (w, m, v RW; grad R); w_low (rows, cols) lowp written, or NULL; flag
 * (1, 1) f32 (R).  h as tg_adamw_insert (grad_scale = 1 / loss scale). */
int tg_adamw_amp_insert(tg_dtype lowp, starpu_data_handle_t w,
                        starpu_data_handle_t grad, starpu_data_handle_t m,
                        starpu_data_handle_t v, starpu_data_handle_t w_low,
                        starpu_data_handle_t flag, const tg_adamw_hyper *h,
                        const tg_task_opts *opts);

/* Multi-tensor AdamW (codelets/adamw_multi.c): one task updates n <=
 * TG_ADAMW_MULTI_MAX parameters, w[i], grad[i], m[i], v[i] each of its own
 * shape (contiguous f32), with the arithmetic of tg_adamw_insert (lowp
 * TG_F32, flag NULL, w_low NULL) or of tg_adamw_amp_insert (lowp TG_BF16 or
 * TG_F16, the overflow flag, w_low NULL or an array whose NULL entries have
 * no copy), bit for bit: fewer, fuller tasks for the launch-bound step. */
int tg_adamw_multi_insert(tg_dtype lowp, int n, const starpu_data_handle_t *w,
                          const starpu_data_handle_t *grad, const starpu_data_handle_t *m,
                          const starpu_data_handle_t *v, const starpu_data_handle_t *w_low,
                          starpu_data_handle_t flag, const tg_adamw_hyper *h,
                          const tg_task_opts *opts);

extern struct starpu_codelet tg_convert_cl, tg_add_round_cl, tg_adamw_multi_cl, tg_gemm_lowp_cl, tg_nonfinite_cl,
    tg_adamw_amp_cl;

#ifdef __cplusplus
}
#endif
#endif
