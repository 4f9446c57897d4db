/*
 * taskgrad layer 1: CPU kernels.
 *
 * Pure functions on row-major float32 data, with no StarPU types, so each one
 * can be tested alone against a float64 reference.  A matrix is (rows, cols)
 * with a leading dimension ld >= cols (the distance, in elements, between the
 * starts of two consecutive rows).  Codelets (layer 2) unpack StarPU buffers
 * and call these.
 *
 * Accumulator arguments (`*_acc`) are added to, never overwritten, so that a
 * kernel can run on a StarPU reduction copy that starts at zero.
 */
#ifndef TASKGRAD_KERNELS_CPU_H
#define TASKGRAD_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "taskgrad/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C(m, n) = alpha * op(A) * op(B) + beta * C.
 * op(A) is (m, k): A is (m, k) when transa == 0, (k, m) when transa != 0.
 * op(B) is (k, n): B is (k, n) when transb == 0, (n, k) when transb != 0.
 * beta == 0 means C is write-only (its old contents, even NaN, are ignored). */
void tg_cpu_gemm(int transa, int transb, int m, int n, int k, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc);

/* C(m, n) = op(A) * op(B) + bias, bias (n) added to every row; C is
 * write-only.  On the back end of the call's class (gemm_libs.h): oneDNN adds
 * the bias in the product's own pass, the others onto a C filled with it
 * (so the bits depend on the back end, as every GEMM's do). */
void tg_cpu_gemm_bias(int transa, int transb, int m, int n, int k, const float *A, int lda,
                      const float *B, int ldb, const float *bias, float *C, int ldc);

/* Y(r, c) += b(c) for every row r.  b: (cols) */
void tg_cpu_bias_add(int rows, int cols, float *Y, int ldy, const float *b);

/* db(c) = beta * db(c) + sum_r dY(r, c).  db: (cols) */
void tg_cpu_bias_grad(int rows, int cols, const float *dY, int ldy, float beta,
                      float *db);

/* Y = max(X, 0) */
void tg_cpu_relu_fwd(int rows, int cols, const float *X, int ldx, float *Y,
                     int ldy);
/* dX = dY * (X > 0), X being the forward input */
void tg_cpu_relu_bwd(int rows, int cols, const float *X, int ldx,
                     const float *dY, int lddy, float *dX, int lddx);

/* GELU, tanh approximation:
 * y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void tg_cpu_gelu_fwd(int rows, int cols, const float *X, int ldx, float *Y,
                     int ldy);
/* dX = dY * gelu'(X), X being the forward input */
void tg_cpu_gelu_bwd(int rows, int cols, const float *X, int ldx,
                     const float *dY, int lddy, float *dX, int lddx);

/* Fused softmax + cross-entropy over each row of logits (rows, cols) with
 * integer targets labels[r] in [0, cols):
 *   dlogits(r, c) = scale * (softmax(logits(r, :))(c) - [c == labels[r]])
 *   *loss_acc   += scale * sum_r -log softmax(logits(r, :))(labels[r])
 * With scale = 1 / (global batch size) the loss is the batch mean and the
 * gradients are those of the mean.  One pass per row, max-subtracted. */
void tg_cpu_softmax_xent(int rows, int cols, const float *logits, int ldl,
                         const int32_t *labels, float scale, float *dlogits,
                         int ldd, float *loss_acc);

/* *correct_acc += number of rows whose argmax (first maximum) equals labels[r] */
void tg_cpu_accuracy_count(int rows, int cols, const float *logits, int ldl,
                           const int32_t *labels, float *correct_acc);

/* SGD with momentum, PyTorch semantics, on n contiguous parameters:
 *   g = grad_scale * grad + weight_decay * w;  vel = momentum * vel + g;
 *   w -= lr * vel */
void tg_cpu_sgd(size_t n, float *w, const float *grad, float *vel, float lr,
                float momentum, float weight_decay, float grad_scale);

/* AdamW (decoupled weight decay, bias correction), PyTorch semantics:
 *   g = grad_scale * grad;  w *= 1 - lr * weight_decay;
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
 *   w -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
 * with bc1 = 1 - beta1^t and bc2 = 1 - beta2^t for the 1-based step t. */
void tg_cpu_adamw(size_t n, float *w, const float *grad, float *m, float *v,
                  float lr, float beta1, float beta2, float eps,
                  float weight_decay, float bc1, float bc2, float grad_scale);

/* Fused linear layer forward, the bias and activation applied as an epilogue
 * while the GEMM's output is still in cache:
 *   Z(rows, out) = X(rows, in) W(out, in)^T + b(out);  H = act(Z)
 * act: 0 ReLU, 1 GELU, 2 none (the values of tg_activation); with none, H is
 * not written and may be NULL. */
void tg_cpu_linear_fwd(int rows, int in, int out, const float *X, int ldx,
                       const float *W, int ldw, const float *b, int act,
                       float *Z, int ldz, float *H, int ldh);
/* Fused backward of a linear layer to its input, through the activation
 * that produced that input:
 *   dX(rows, in) = (dZ(rows, out) W(out, in)) * act'(Zprev(rows, in))
 * Zprev is the previous layer's pre-activation; with act 2 (none) it is not
 * read and may be NULL. */
void tg_cpu_linear_bwd_data(int rows, int in, int out, const float *dZ,
                            int lddz, const float *W, int ldw, int act,
                            const float *Zprev, int ldzp, float *dX, int lddx);

/* X = value */
void tg_cpu_fill(int rows, int cols, float *X, int ldx, float value);
/* dst += src */
void tg_cpu_accumulate(int rows, int cols, float *dst, int ldd,
                       const float *src, int lds);
/* X *= alpha */
void tg_cpu_scale(int rows, int cols, float *X, int ldx, float alpha);

/* The exchange kernels of sharded data parallelism (kernels/cpu/exchange.c).
 * out(rows, cols) = in[0] + ... + in[n-1] (input i with leading dimension
 * ld_in[i]), added in the midpoint tree sum(lo, hi) = sum(lo, mid) +
 * sum(mid, hi), mid = lo + (hi - lo) / 2, one float addition per node (the
 * bits of accumulate tasks in that order); n == 1 copies.  out is written,
 * never read, and must not overlap an input. */
void tg_cpu_sum_tree(int rows, int cols, int n, const float *const *in, const int *ld_in,
                     float *out, int ldo);
/* out = the row blocks in[0 .. n-1] stacked (block j: rows_in[j] rows of
 * cols elements of elemsize bytes, leading dimension ld_in[j]; out's is
 * ldo, in elements): bytes copied, no conversion. */
void tg_cpu_gather_rows(int cols, size_t elemsize, int n, const void *const *in,
                        const int *rows_in, const int *ld_in, void *out, int ldo);


/* ---- transformer (GPT-2, llm.c definitions) ---------------------------------
 * Token rows: a micro-batch of b sequences of T tokens is n = b * T rows, row
 * i holding token t = i % T of sequence i / T.  Token ids are int32. */

/* X(i, :) = wte(tokens[i], :) + wpe(i % T, :).  wte (Vp, C), wpe (maxT, C). */
void tg_cpu_embedding_fwd(int n, int T, int C, const int32_t *tokens,
                          const float *wte, const float *wpe, float *X,
                          int ldx);
/* dwte(tokens[i], :) += dX(i, :);  dwpe(i % T, :) += dX(i, :), rows i in
 * increasing order (deterministic). */
void tg_cpu_embedding_bwd(int n, int T, int C, const int32_t *tokens,
                          const float *dX, int lddx, float *dwte,
                          float *dwpe);

/* LayerNorm over each row (eps 1e-5, biased variance):
 *   Y = (X - mean) * rstd * w + b;  mean(i), rstd(i) = 1/sqrt(var + eps) kept */
void tg_cpu_layernorm_fwd(int n, int C, const float *X, int ldx,
                          const float *w, const float *b, float *Y, int ldy,
                          float *mean, float *rstd);
/* Accumulates (+=) into dX, dw and db, as llm.c does: dX is the residual
 * stream's gradient, which already holds the skip path's contribution. */
void tg_cpu_layernorm_bwd(int n, int C, const float *dY, int lddy,
                          const float *X, int ldx, const float *w,
                          const float *mean, const float *rstd, float *dX,
                          int lddx, float *dw, float *db);

/* Y = A + B (Y may alias A or B) */
void tg_cpu_residual_fwd(int n, int C, const float *A, int lda, const float *B,
                         int ldb, float *Y, int ldy);

/* Causal multi-head self-attention, llm.c layout: qkv (n, 3C) holds q, k, v
 * side by side, head h using columns h*hs .. (h+1)*hs - 1 of each (hs =
 * C / NH); out (n, C) the same way; scale 1/sqrt(hs).
 *
 * Naive: materialises the (b, NH, T, T) softmax probabilities `att` (the
 * reference implementation; its backward reads att). */
void tg_cpu_attention_naive_fwd(int b, int T, int C, int NH, const float *qkv,
                                int ldqkv, float *att, float *out, int ldo);
/* dqkv is written (not accumulated).  scratch: T floats. */
void tg_cpu_attention_naive_bwd(int b, int T, int C, int NH, const float *qkv,
                                int ldqkv, const float *att, const float *dout,
                                int lddo, float *dqkv, int lddqkv,
                                float *scratch);
/* Chunked (flash-style): online softmax over key chunks for each query chunk
 * of `chunk` rows (T need not be a multiple of chunk); causal chunks entirely
 * above the diagonal are skipped.  Keeps only out and one log-sum-exp per
 * (row, head): lse (n, NH).  Scratch: tg_attention_chunked_scratch_floats()
 * floats, O(T * chunk) (never O(T^2)). */
size_t tg_attention_chunked_scratch_floats(int T, int C, int NH, int chunk);
void tg_cpu_attention_chunked_fwd(int b, int T, int C, int NH, int chunk,
                                  const float *qkv, int ldqkv, float *out,
                                  int ldo, float *lse, float *scratch);
/* Recomputes the scores chunk by chunk from q, k, lse; dqkv is written. */
void tg_cpu_attention_chunked_bwd(int b, int T, int C, int NH, int chunk,
                                  const float *qkv, int ldqkv,
                                  const float *out, int ldo, const float *lse,
                                  const float *dout, int lddo, float *dqkv,
                                  int lddqkv, float *scratch);
/* The same kernels on 16-bit qkv, out, dout and dqkv (lowp TG_BF16 or
 * TG_F16; lse and the scratch f32): the bits of the f32 kernels on widened
 * copies, with out and dqkv rounded to nearest even. */
void tg_cpu_attention_chunked_fwd16(tg_dtype lowp, int b, int T, int C, int NH, int chunk,
                                    const uint16_t *qkv, int ldqkv, uint16_t *out, int ldo,
                                    float *lse, float *scratch);
void tg_cpu_attention_chunked_bwd16(tg_dtype lowp, int b, int T, int C, int NH, int chunk,
                                    const uint16_t *qkv, int ldqkv, const uint16_t *out,
                                    int ldo, const float *lse, const uint16_t *dout, int lddo,
                                    uint16_t *dqkv, int lddqkv, float *scratch);

/* Fused classifier with the LM head tied to wte (Vp, C), over the first V
 * vocabulary rows only (padded rows never enter the softmax), in chunks of
 * `chunk` rows so that only a (chunk, V) block of logits exists at a time:
 *   logits = lnf wte[:V]^T;  *loss_acc += scale * sum_i -log p_i(targets[i])
 * and when backward != 0, with dlogits = scale (p - onehot):
 *   dlnf = grad_scale dlogits wte[:V]   (written);
 *   dwte[:V] += grad_scale dlogits^T lnf
 * (grad_scale: the loss scale of mixed-precision training, 1 otherwise; it
 * multiplies the gradients, never the loss). 
 * scratch: chunk * V floats. */
void tg_cpu_classifier(int n, int C, int V, int chunk, const float *lnf,
                       int ldl, const float *wte, const int32_t *targets,
                       float scale, float grad_scale, int backward, float *dlnf, int lddl,
                       float *dwte, float *loss_acc, float *scratch);
/* The same with backward, but dwte left to the caller: dlogits (n, Vd),
 * Vd >= V, is written with scale (p - onehot) in columns [0, V) and zeros
 * after, so that the caller's dwte (Vd, C) += grad_scale dlogits^T lnf
 * completes the fused kernel's result (in one GEMM instead of one per chunk,
 * so not bit for bit when n > chunk).  loss_acc and dlnf as above, bit for
 * bit. */
void tg_cpu_classifier_dlogits(int n, int C, int V, int chunk, const float *lnf, int ldl,
                               const float *wte, const int32_t *targets, float scale,
                               float grad_scale, float *dlnf, int lddl, float *loss_acc,
                               float *dlogits, int Vd);

/* The classifier in vocabulary tiles (lm_classifier_tile.c):
 *   logits_tile   logits (n, m) = lnf (n, C) wte[v0 : v0+m]^T, wte (Vp, C)
 *                 contiguous; stats (n, 2): each row's max over the tile's
 *                 columns below V and its sum of exp(x - max) ((-inf, 0)
 *                 for a tile of padding);
 *   combine       from the ntiles stats (n, 2 ntiles) and the whole logits
 *                 (n, ldo): lse (n, 2) as hi, lo floats, and
 *                 *loss_acc += scale * sum over rows (lse - x_target);
 *   dlogits_tile  in place on the tile (n, m): alpha (softmax - onehot)
 *                 below V, zero on the padding.
 * A target outside [0, V): zero gradient row, NaN loss. */
void tg_cpu_lm_logits_tile(int n, int C, int V, int v0, int m, const float *lnf, int ldl,
                           const float *wte, float *logits, int ldo, float *stats, int lds);
void tg_cpu_lm_softmax_combine(int n, int V, int ntiles, const float *stats, int lds,
                               const float *logits, int ldo, const int32_t *targets,
                               float scale, float *lse, int ldlse, float *loss_acc);
void tg_cpu_lm_dlogits_tile(int n, int V, int v0, int m, const float *lse, int ldlse,
                            const int32_t *targets, float alpha, float *dl, int ldd);

#ifdef __cplusplus
}
#endif
#endif
