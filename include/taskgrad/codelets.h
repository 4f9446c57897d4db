/*
 * taskgrad layer 2: codelets and their typed insert wrappers.
 *
 * Each tg_<op>_insert() submits one StarPU task asynchronously on matrix
 * handles (see tensor.h for the row-major convention: nx = cols, ny = rows).
 * Shapes are checked at submission: a mismatch returns -EINVAL with a message
 * in tg_last_error() and submits nothing.  The access mode of an output is
 * chosen from the arguments, as in Chameleon:
 *   TG_OVERWRITE  STARPU_W       (beta is ignored where there is one: 0)
 *   TG_ACCUMULATE STARPU_RW      (beta as given)
 *   TG_REDUCE     STARPU_REDUX   (the task adds into a per-worker copy that
 *                                 starts at zero; the handle must have had
 *                                 tg_tensor_enable_reduction())
 *   TG_COMMUTE    STARPU_RW | STARPU_COMMUTE  (the task adds into the
 *                                 output itself, beta as 1, one task at a
 *                                 time in any order: no per-worker copies,
 *                                 so the memory of a sum does not grow with
 *                                 the workers; for workers that share one
 *                                 memory node)
 * Label buffers are int32 matrices (rows, 1); scalar accumulators (loss,
 * correct count) are float matrices (1, 1) and take TG_ACCUMULATE,
 * TG_REDUCE or TG_COMMUTE only (TG_OVERWRITE is refused with -EINVAL: zero them with
 * tg_fill_insert first).
 *
 * Every codelet has a CPU and (when built with CUDA) a CUDA implementation, a
 * history-based perfmodel named "taskgrad_<op>" whose footprint includes the
 * shape arguments, and runs asynchronously on the CUDA worker's stream.
 */
#ifndef TASKGRAD_CODELETS_H
#define TASKGRAD_CODELETS_H

#include <starpu.h>
#include "taskgrad/dtype.h"
#include "taskgrad/starpu_version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tg_accum {
  TG_OVERWRITE = 0,
  TG_ACCUMULATE = 1,
  TG_REDUCE = 2,
  TG_COMMUTE = 3,
} tg_accum;

typedef enum tg_activation {
  TG_ACT_RELU = 0,
  TG_ACT_GELU = 1,
  TG_ACT_NONE = 2, /* identity: only for the fused linear codelets */
} tg_activation;

/* Per-task options; pass NULL for the defaults (priority 0, any worker). */
typedef struct tg_task_opts {
  int priority;          /* STARPU_PRIORITY */
  int worker;            /* >= 0: run on this worker; -1: scheduler decides */
  const char *name;      /* task name for traces, or NULL (the codelet's
                            name); copied at submission */
  tg_dtype lowp;         /* TG_BF16 or TG_F16: the type of the task's 2-byte
                            matrix buffers, which an f32 codelet reads and
                            writes through f32 copies (mixed precision);
                            TG_F32 (0): the task has none */
  int cpu_only;          /* 1: CPU workers only (the optimizer offloaded
                            next to host-backed master weights) */
  int device_only;       /* 1: CUDA and OpenCL workers only, when the codelet
                            has such implementations (the rest of the step,
                            its CPU workers kept for the optimizer) */
} tg_task_opts;

/* C = alpha op(A) op(B) + beta C (see tg_cpu_gemm). */
int tg_gemm_insert(int transa, int transb, float alpha, starpu_data_handle_t A,
                   starpu_data_handle_t B, float beta, starpu_data_handle_t C,
                   tg_accum accum, const tg_task_opts *opts);
/* Y(r, :) += b(1, :) */
int tg_bias_add_insert(starpu_data_handle_t Y, starpu_data_handle_t b,
                       const tg_task_opts *opts);
/* db(1, :) (+)= column sums of dY */
int tg_bias_grad_insert(starpu_data_handle_t dY, starpu_data_handle_t db,
                        tg_accum accum, const tg_task_opts *opts);
/* Y = act(X) */
int tg_act_fwd_insert(tg_activation act, starpu_data_handle_t X,
                      starpu_data_handle_t Y, const tg_task_opts *opts);
/* dX = dY * act'(X) */
int tg_act_bwd_insert(tg_activation act, starpu_data_handle_t X,
                      starpu_data_handle_t dY, starpu_data_handle_t dX,
                      const tg_task_opts *opts);
/* dlogits = scale (softmax - onehot); loss (+)= scale * sum of -log p */
int tg_softmax_xent_insert(starpu_data_handle_t logits,
                           starpu_data_handle_t labels, float scale,
                           starpu_data_handle_t dlogits,
                           starpu_data_handle_t loss, tg_accum loss_accum,
                           const tg_task_opts *opts);
/* correct (+)= number of rows whose argmax equals the label */
int tg_accuracy_insert(starpu_data_handle_t logits,
                       starpu_data_handle_t labels,
                       starpu_data_handle_t correct, tg_accum accum,
                       const tg_task_opts *opts);

/* Fused linear forward: Z = X W^T + b; H = act(Z) (H unused, may be NULL,
 * with TG_ACT_NONE).  X (rows, in), W (out, in), b (1, out), Z and H
 * (rows, out). */
int tg_linear_fwd_insert(starpu_data_handle_t X, starpu_data_handle_t W,
                         starpu_data_handle_t b, tg_activation act,
                         starpu_data_handle_t Z, starpu_data_handle_t H,
                         const tg_task_opts *opts);
/* Fused backward to the input: dX = (dZ W) * act'(Zprev).  dZ (rows, out),
 * W (out, in), Zprev and dX (rows, in); Zprev unused (may be NULL) with
 * TG_ACT_NONE. */
int tg_linear_bwd_data_insert(starpu_data_handle_t dZ, starpu_data_handle_t W,
                              tg_activation act, starpu_data_handle_t Zprev,
                              starpu_data_handle_t dX, const tg_task_opts *opts);

/* Column tiles of the two above (codelets/linear.c): the tile's
 * columns [c0, c0 + m) of the whole layer's output, m the columns of Zj,
 * Hj or dXj (rows, m), usually column blocks of the whole (tensor.h's
 * column plans).  X, W, b, dZ and Zprev are the whole layer's, read at the
 * tile's offset:
 *   fwd_tile       Zj = X W[c0:c0+m, :]^T + b[c0:c0+m];  Hj = act(Zj)
 *   bwd_data_tile  dXj = (dZ W[:, c0:c0+m]) * act'(Zprev[:, c0:c0+m]) */
int tg_linear_fwd_tile_insert(int c0, starpu_data_handle_t X, starpu_data_handle_t W,
                              starpu_data_handle_t b, tg_activation act,
                              starpu_data_handle_t Zj, starpu_data_handle_t Hj,
                              const tg_task_opts *opts);
int tg_linear_bwd_data_tile_insert(int c0, starpu_data_handle_t dZ, starpu_data_handle_t W,
                                   tg_activation act, starpu_data_handle_t Zprev,
                                   starpu_data_handle_t dXj, const tg_task_opts *opts);

/* The tied classifier in vocabulary tiles (codelets/lm_classifier_tile.c;
 * f32).  lnf (n, C), wte (Vp, C) contiguous, V <= Vp the real vocabulary;
 * a tile is columns [v0, v0 + m) of the (n, Vp) logits:
 *   logits_tile      logits (n, m) = lnf wte[v0:v0+m]^T, and stats (n, 2):
 *                    the tile's row max and sum of exp over columns < V;
 *   softmax_combine  from every tile's stats (n, 2 tiles, in tile order) and
 *                    the whole logits (n, Vp): lse (n, 2) (hi, lo) and
 *                    loss (+)= scale * sum of the rows' -log p(target);
 *   dlogits_tile     in place on a tile dl (n, m) of the logits:
 *                    alpha (softmax - onehot(target)), zero at columns >= V. */
int tg_lm_logits_tile_insert(int V, int v0, starpu_data_handle_t lnf, starpu_data_handle_t wte,
                             starpu_data_handle_t logits, starpu_data_handle_t stats,
                             const tg_task_opts *opts);
int tg_lm_softmax_combine_insert(int V, float scale, starpu_data_handle_t stats,
                                 starpu_data_handle_t logits, starpu_data_handle_t targets,
                                 starpu_data_handle_t lse, starpu_data_handle_t loss,
                                 tg_accum loss_accum, const tg_task_opts *opts);
int tg_lm_dlogits_tile_insert(int V, int v0, float alpha, starpu_data_handle_t lse,
                              starpu_data_handle_t targets, starpu_data_handle_t dl,
                              const tg_task_opts *opts);

typedef struct tg_sgd_hyper {
  float lr, momentum, weight_decay, grad_scale;
} tg_sgd_hyper;
int tg_sgd_insert(starpu_data_handle_t w, starpu_data_handle_t grad,
                  starpu_data_handle_t vel, const tg_sgd_hyper *h,
                  const tg_task_opts *opts);

typedef struct tg_adamw_hyper {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int step; /* 1-based; the bias corrections are computed from it */
} tg_adamw_hyper;
int tg_adamw_insert(starpu_data_handle_t w, starpu_data_handle_t grad,
                    starpu_data_handle_t m, starpu_data_handle_t v,
                    const tg_adamw_hyper *h, const tg_task_opts *opts);

/* ---- transformer codelets (GPT-2, llm.c definitions; see kernels_cpu.h) ----
 * Token buffers are int32 (n, 1) with n = b * T rows (b sequences of T);
 * T is an argument.  Weight gradients take TG_ACCUMULATE, TG_REDUCE or TG_COMMUTE. */

/* X (n, C) = wte(tokens) + wpe(position) */
int tg_embedding_fwd_insert(int T, starpu_data_handle_t tokens,
                            starpu_data_handle_t wte, starpu_data_handle_t wpe,
                            starpu_data_handle_t X, const tg_task_opts *opts);
/* dwte, dwpe (+)= scatter of dX */
int tg_embedding_bwd_insert(int T, starpu_data_handle_t tokens,
                            starpu_data_handle_t dX, starpu_data_handle_t dwte,
                            starpu_data_handle_t dwpe, tg_accum accum,
                            const tg_task_opts *opts);
/* Y = LN(X) * w + b; mean, rstd (n, 1) kept for the backward */
int tg_layernorm_fwd_insert(starpu_data_handle_t X, starpu_data_handle_t w,
                            starpu_data_handle_t b, starpu_data_handle_t Y,
                            starpu_data_handle_t mean,
                            starpu_data_handle_t rstd, const tg_task_opts *opts);
/* The weight gradients of Z = X W^T + b in one task: dW (+)= dZ^T X, db
 * (+)= column sums of dZ, both by `accum`; dZ (rows, out) and X (rows, in)
 * f32, or 16-bit with opts->lowp naming their type (fp32 accumulation);
 * dW (out, in) and db (1, out) f32.  The bits of tg_gemm_insert (or
 * tg_gemm_lowp_insert) then tg_bias_grad_insert. */
int tg_linear_bwd_weight_insert(starpu_data_handle_t dZ, starpu_data_handle_t X,
                                starpu_data_handle_t dW, starpu_data_handle_t db,
                                tg_accum accum, const tg_task_opts *opts);
/* A linear layer's whole backward in one task: dX = (dZ W) * act'(Zprev)
 * as tg_linear_bwd_data_insert (W), then dW, db as
 * tg_linear_bwd_weight_insert from dZ and the layer's input X (rows, in);
 * dZ, W, X, Zprev and dX of one element type (16-bit: opts->lowp).  The
 * bits of the two. */
int tg_linear_bwd_insert(starpu_data_handle_t dZ, starpu_data_handle_t W, tg_activation act,
                         starpu_data_handle_t Zprev, starpu_data_handle_t X,
                         starpu_data_handle_t dX, starpu_data_handle_t dW,
                         starpu_data_handle_t db, tg_accum accum, const tg_task_opts *opts);
/* The LayerNorm whose output a linear layer reads, for the backward of
 * both in one task (tg_linear_layernorm_bwd_insert): its input x (rows,
 * in), weight w (1, in), statistics mean and rstd (rows, 1) f32, the
 * residual stream's gradient dres (rows, in) that its input gradient adds
 * into, and its weight gradients dw, db (1, in) f32 by accum. */
typedef struct tg_layernorm_bwd_part {
  starpu_data_handle_t x, w, mean, rstd, dres, dw, db;
  tg_accum accum;
} tg_layernorm_bwd_part;
/* tg_linear_bwd_insert without an activation, then tg_layernorm_bwd_insert
 * (dY = the dX just computed, its own accum) in the same task: the bits of
 * the two.  X is the LayerNorm's output; x and dres of dZ's element type. */
int tg_linear_layernorm_bwd_insert(starpu_data_handle_t dZ, starpu_data_handle_t W,
                                   starpu_data_handle_t X, starpu_data_handle_t dX,
                                   starpu_data_handle_t dW, starpu_data_handle_t db,
                                   tg_accum accum, const tg_layernorm_bwd_part *ln,
                                   const tg_task_opts *opts);
/* Y = A + B, then Z, mean, rstd as tg_layernorm_fwd_insert on Y, in one
 * task (a residual add and the LayerNorm after it); a 16-bit Y's rounded
 * values are what the LayerNorm reads.  Y is a tensor of its own. */
int tg_residual_layernorm_fwd_insert(starpu_data_handle_t A, starpu_data_handle_t B,
                                     starpu_data_handle_t w, starpu_data_handle_t b,
                                     starpu_data_handle_t Y, starpu_data_handle_t Z,
                                     starpu_data_handle_t mean, starpu_data_handle_t rstd,
                                     const tg_task_opts *opts);
/* dX += (RW); dw, db (+)= (TG_OVERWRITE: written, a gradient's first
 * contribution, with no zero fill before it) */
int tg_layernorm_bwd_insert(starpu_data_handle_t dY, starpu_data_handle_t X,
                            starpu_data_handle_t w, starpu_data_handle_t mean,
                            starpu_data_handle_t rstd, starpu_data_handle_t dX,
                            starpu_data_handle_t dw, starpu_data_handle_t db,
                            tg_accum accum, const tg_task_opts *opts);
/* Y = A + B */
int tg_residual_insert(starpu_data_handle_t A, starpu_data_handle_t B,
                       starpu_data_handle_t Y, const tg_task_opts *opts);

typedef enum tg_attention_kind {
  TG_ATTN_NAIVE = 0,   /* state: probabilities (b*NH*T, T) */
  TG_ATTN_CHUNKED = 1, /* state: log-sum-exp (n, NH) */
  TG_ATTN_GEMM = 2,    /* chunked's contract and CPU kernels; on CUDA its
                          products on cuBLAS with the (NH, T, T) scores of a
                          sequence in the scratch (O(T^2), attention_gemm.cu)
                          while that is at most 1 GiB, else chunked's */
  TG_ATTN_FLASH = 3,   /* chunked's contract and CPU kernels; on CUDA in bf16
                          the flash kernels on the tensor cores (WMMA,
                          attention_flash_lowp.cu) for head sizes 16, 32, 64
                          and 128, else chunked's */
  TG_ATTN_CUDNN = 4,   /* chunked's contract and CPU kernels; on CUDA in bf16
                          and fp16 cuDNN's fused attention (attention_cudnn.cpp,
                          loaded at first use), where cuDNN is missing or
                          refuses the shape the gemm kind's kernels; its
                          scratch holds both */
} tg_attention_kind;
/* out (n, C) = causal attention of qkv (n, 3C); `state` as above.  The
 * chunked variants use a STARPU_SCRATCH workspace of
 * tg_attention_scratch_bytes() bytes. */
int tg_attention_fwd_insert(tg_attention_kind kind, int T, int NH, int chunk,
                            starpu_data_handle_t qkv, starpu_data_handle_t out,
                            starpu_data_handle_t state,
                            const tg_task_opts *opts);
/* dqkv (n, 3C) written */
int tg_attention_bwd_insert(tg_attention_kind kind, int T, int NH, int chunk,
                            starpu_data_handle_t qkv, starpu_data_handle_t out,
                            starpu_data_handle_t state,
                            starpu_data_handle_t dout,
                            starpu_data_handle_t dqkv,
                            const tg_task_opts *opts);
/* Bytes of the scratch workspace an attention task of b sequences
 * registers (the largest need of its CPU and CUDA implementations). */
size_t tg_attention_scratch_bytes(tg_attention_kind kind, int b, int T, int C,
                                  int NH, int chunk);

/* Tied LM head + softmax cross-entropy over the first V vocabulary rows, in
 * row chunks (a (chunk, V) scratch):  loss (+)= scale * sum -log p(target);
 * with dlnf != NULL also dlnf = dlogits wte[:V] (written) and
 * dwte (+)= dlogits^T lnf.  lnf (n, C), wte (Vp, C), targets (n, 1). */
int tg_lm_classifier_insert(int V, int chunk, float scale,
                            starpu_data_handle_t lnf, starpu_data_handle_t wte,
                            starpu_data_handle_t targets,
                            starpu_data_handle_t dlnf,
                            starpu_data_handle_t dwte, tg_accum dwte_accum,
                            starpu_data_handle_t loss, tg_accum loss_accum,
                            const tg_task_opts *opts);
/* The same with the gradients (dlnf, dwte) multiplied by grad_scale > 0,
 * the loss scale of mixed-precision training; the loss is not scaled. */
int tg_lm_classifier_scaled_insert(int V, int chunk, float scale, float grad_scale,
                                   starpu_data_handle_t lnf, starpu_data_handle_t wte,
                                   starpu_data_handle_t targets, starpu_data_handle_t dlnf,
                                   starpu_data_handle_t dwte, tg_accum dwte_accum,
                                   starpu_data_handle_t loss, tg_accum loss_accum,
                                   const tg_task_opts *opts);
/* The split form (tg_cpu_classifier_dlogits): loss and dlnf as the scaled
 * classifier, dlogits (n, Vd >= V, contiguous) written with scale (p -
 * onehot) and zero padding columns, dwte not touched: the caller adds
 * grad_scale dlogits^T lnf into it (tg_gemm_insert), in a task that holds
 * dwte for a third of the classifier's time. */
int tg_lm_classifier_dlogits_insert(int V, int chunk, float scale, float grad_scale,
                                    starpu_data_handle_t lnf, starpu_data_handle_t wte,
                                    starpu_data_handle_t targets, starpu_data_handle_t dlnf,
                                    starpu_data_handle_t dlogits, starpu_data_handle_t loss,
                                    tg_accum loss_accum, const tg_task_opts *opts);
/* dwte_rows (Vb, C) (+)= grad_scale dlogits[:, v0 : v0 + Vb]^T lnf: the split
 * classifier's dwte increment on a row block of dwte (rows v0 .. v0 + Vb - 1
 * of the vocabulary), so that the micro-batches' increments of different
 * blocks run at once; dlogits (n, Vd) and lnf (n, C) are read whole.  The
 * access mode of dwte_rows follows accum (TG_OVERWRITE: beta 0). */
int tg_lm_classifier_dwte_insert(int v0, float grad_scale, starpu_data_handle_t dlogits,
                                 starpu_data_handle_t lnf, starpu_data_handle_t dwte_rows,
                                 tg_accum accum, const tg_task_opts *opts);

/* X = value (write-only) */
int tg_fill_insert(starpu_data_handle_t X, float value,
                   const tg_task_opts *opts);
/* dst += src */
int tg_accumulate_insert(starpu_data_handle_t dst, starpu_data_handle_t src,
                         const tg_task_opts *opts);
/* X *= alpha */
int tg_scale_insert(starpu_data_handle_t X, float alpha,
                    const tg_task_opts *opts);

/* Sharded data parallelism (graphs/shard.c): the exchange codelets.
 * out (rows, cols) f32 = in[0] + ... + in[n-1] (each (rows, cols) f32),
 * added in the fixed midpoint tree: sum(lo, hi) = sum(lo, mid) +
 * sum(mid, hi), mid = lo + (hi - lo) / 2, the order in which the
 * deterministic micro-batch sums (graphs/reduce.c) add their leaves, so the
 * bits equal theirs whatever device holds which input.  1 <= n <=
 * TG_EXCHANGE_MAX; n == 1 copies.  out is written (W), not read. */
#define TG_EXCHANGE_MAX 64
int tg_sum_tree_insert(int n, const starpu_data_handle_t *in, starpu_data_handle_t out,
                       const tg_task_opts *opts);
/* out (rows, cols) = the row blocks in[0 .. n-1] stacked: block j is
 * (tg_split_start(rows, n, j, &size): size rows, cols), all of out's element
 * size (f32 or 16-bit: bytes are copied).  The all-gather of a sharded
 * parameter's updated blocks into one device's replica.  out is written. */
int tg_gather_rows_insert(int n, const starpu_data_handle_t *in, starpu_data_handle_t out,
                          const tg_task_opts *opts);
/* The same, started only once the last task that wrote `gate` is done: the
 * task reads gate (any handle but its own buffers; n <= TG_EXCHANGE_MAX - 1)
 * and nothing else of it.  A graph uses it to move a copy of a weight into
 * a device a few layers before it is read, and not sooner. */
int tg_gather_rows_after_insert(int n, const starpu_data_handle_t *in, starpu_data_handle_t out,
                                starpu_data_handle_t gate, const tg_task_opts *opts);

/* Task fusion (codelets/fuse.c): between tg_fuse_begin() and
 * tg_fuse_end(1), the tasks that this thread's insert wrappers submit are
 * gathered, and tg_fuse_end submits them as one task of tg_fused_cl that
 * runs their functions in order on the same worker (the same kernels, so
 * the same bits), over the union of their buffers.  It saves the runtime's
 * cost per task and per buffer where one worker runs them one after the
 * other anyway (a GPU's chain), and costs the overlap between them.  A task
 * with a REDUX buffer, pinned elsewhere than the group, or with
 * no worker kind in common, ends the group so far and goes alone; a group
 * of one task goes as it is.  Temporaries released inside the group
 * (tg_tensor_release) are unregistered after its submission.  Nothing else
 * that submits (partition plans, unregistering a handle with
 * starpu_data_unregister_submit yourself) may happen inside.
 * tg_fuse_end(0) drops the gathered tasks (after an error).  Groups do not
 * nest; they are per thread. */
int tg_fuse_begin(void);
int tg_fuse_end(int submit);
/* The codelets of a tg_fused task's parts, in order: up to max of them in
 * names (static storage); returns their count, 0 for any other task.  For
 * traces and statistics (plugins/trace.c). */
int tg_fused_parts(const struct starpu_task *task, const char **names, int max);

/* The codelets themselves, for applications that build tasks by hand or set
 * reduction methods (tg_fill_zero_cl is the REDUX init, tg_accumulate_cl the
 * REDUX merge). */
extern struct starpu_codelet tg_gemm_cl, tg_linear_fwd_cl, tg_linear_bwd_data_cl,
    tg_linear_bwd_weight_cl, tg_linear_bwd_cl,
    tg_linear_fwd_tile_cl, tg_linear_bwd_data_tile_cl, tg_lm_logits_tile_cl,
    tg_lm_softmax_combine_cl, tg_lm_dlogits_tile_cl,
    tg_bias_add_cl, tg_bias_grad_cl,
    tg_act_fwd_cl, tg_act_bwd_cl, tg_softmax_xent_cl, tg_accuracy_cl,
    tg_sgd_cl, tg_adamw_cl, tg_fill_cl, tg_fill_zero_cl, tg_accumulate_cl,
    tg_scale_cl, tg_embedding_fwd_cl, tg_embedding_bwd_cl, tg_layernorm_fwd_cl,
    tg_layernorm_bwd_cl, tg_residual_layernorm_fwd_cl, tg_residual_cl, tg_attention_fwd_cl,
    tg_attention_bwd_cl, tg_lm_classifier_cl, tg_lm_classifier_dwte_cl,
    tg_sum_tree_cl, tg_gather_rows_cl, tg_fused_cl;
#if TG_STARPU_AT_LEAST(1, 4)
/* StarPU 1.4's REDUX merge: tg_accumulate with RW|COMMUTE on dst */
extern struct starpu_codelet tg_accumulate_redux_cl;
#endif

#ifdef __cplusplus
}
#endif
#endif
