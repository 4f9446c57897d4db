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

#ifdef __cplusplus
}
#endif
#endif
