/*
 * Causal self-attention codelets, three variants:
 *  - naive: keeps the (b*NH*T, T) softmax probabilities as its state (the
 *    reference; memory O(T^2));
 *  - chunked: flash-style online softmax over query and key chunks, keeping
 *    one log-sum-exp per (row, head), state (n, NH); the backward recomputes
 *    the scores chunk by chunk.  Its workspace is a STARPU_SCRATCH buffer
 *    of tg_attention_scratch_bytes(), O(T * chunk) on the CPU.  On CUDA the
 *    flash kernels (FP32 CUDA cores);
 *  - flash: chunked's contract, state and CPU kernels; on CUDA in bf16 the
 *    flash kernels on the tensor cores (attention_flash_lowp.cu), no T x T
 *    scores in memory, for head sizes 16, 32, 64 and 128 (else chunked's);
 *  - gemm: chunked's contract, state and CPU kernels; on CUDA the products
 *    on cuBLAS (attention_gemm.cu), the (NH, T, T) scores of a sequence in
 *    the scratch, O(T^2), while that fits TG_ATTN_GEMM_MAX_FLOATS (scratch_sizes.h),
 *    else the flash kernels;
 *  - cudnn: chunked's contract, state and CPU kernels; on CUDA in bf16 and
 *    fp16 cuDNN's fused attention (attention_cudnn.cpp, through
 *    attention_sdpa.c), which the scratch sizes for next to the gemm
 *    kind's needs: where cuDNN is missing (not installed, or a build
 *    without its frontend), cannot be loaded or refuses a shape, the task
 *    runs as the gemm kind (its bf16 kernels, or in fp16 its f32 kernels
 *    through the adapter), and stderr says so once.  In f32 the gemm
 *    kind's kernels.  Keeping room for both costs the gemm kind's scratch,
 *    which the default kind on CUDA used before; it keeps the fallback
 *    exact without building a cuDNN graph on the submitting thread.
 * A task handles b = n / T whole sequences; graphs split a micro-batch into
 * several such tasks (row blocks of whole sequences) so that several
 * workers process one layer's attention at once.
 */
#include <stdatomic.h>

#include "scratch_sizes.h" /* kernels/cuda, plain C, every build */
#include "codelet_common.h"
#include "hooks.h"
#include "taskgrad/kernels_cpu.h"
#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"
#endif

typedef struct tg_attn_args {
  uint32_t shape;
  int kind, T, NH, chunk;
} tg_attn_args;

#define TG_ATTN_B(buf, T) (TG_ROWS(buf) / (T))
#define TG_ATTN_C(buf) (TG_COLS(buf) / 3)

/* The 16-bit buffers the chunked CPU kernels take as they are (qkv, out;
 * and dout, dqkv backward): tg_lowp_cpu_keep16, all or none; naive widens
 * through the adapter */
static const unsigned kFwdKeep = 1u << 0 | 1u << 1;
static const unsigned kBwdKeep = 1u << 0 | 1u << 1 | 1u << 3 | 1u << 4;

/* the 16-bit type of the task's kept buffers (buffer 0 is then 16-bit) */
static tg_dtype tg_attn_lowp(void) {
  return (tg_dtype)tg_lowp_of_task(tg_task_current(), NULL);
}

/* fwd buffers: qkv, out, state, scratch */
static void tg_attention_fwd_cpu(void *buffers[], void *cl_arg) {
  const tg_attn_args *a = cl_arg;
  int b = TG_ATTN_B(buffers[0], a->T), C = TG_ATTN_C(buffers[0]);
  if (tg_is16(buffers[0]))
    tg_cpu_attention_chunked_fwd16(tg_attn_lowp(), b, a->T, C, a->NH, a->chunk,
                                   TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
                                   TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_VPTR(buffers[3]));
  else if (a->kind == TG_ATTN_NAIVE)
    tg_cpu_attention_naive_fwd(b, a->T, C, a->NH, TG_PTR(buffers[0]), TG_LD(buffers[0]),
                               TG_PTR(buffers[2]), TG_PTR(buffers[1]), TG_LD(buffers[1]));
  else /* chunked and gemm: the same CPU kernel */
    tg_cpu_attention_chunked_fwd(b, a->T, C, a->NH, a->chunk, TG_PTR(buffers[0]),
                                 TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                                 TG_PTR(buffers[2]), TG_VPTR(buffers[3]));
}

/* bwd buffers: qkv, out, state, dout, dqkv, scratch */
static void tg_attention_bwd_cpu(void *buffers[], void *cl_arg) {
  const tg_attn_args *a = cl_arg;
  int b = TG_ATTN_B(buffers[0], a->T), C = TG_ATTN_C(buffers[0]);
  if (tg_is16(buffers[0]))
    tg_cpu_attention_chunked_bwd16(tg_attn_lowp(), b, a->T, C, a->NH, a->chunk,
                                   TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
                                   TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_HPTR(buffers[3]),
                                   TG_LD(buffers[3]), TG_HPTR(buffers[4]), TG_LD(buffers[4]),
                                   TG_VPTR(buffers[5]));
  else if (a->kind == TG_ATTN_NAIVE)
    tg_cpu_attention_naive_bwd(b, a->T, C, a->NH, TG_PTR(buffers[0]), TG_LD(buffers[0]),
                               TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_LD(buffers[3]),
                               TG_PTR(buffers[4]), TG_LD(buffers[4]), TG_VPTR(buffers[5]));
  else
    tg_cpu_attention_chunked_bwd(b, a->T, C, a->NH, a->chunk, TG_PTR(buffers[0]),
                                 TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]),
                                 TG_PTR(buffers[2]), TG_PTR(buffers[3]), TG_LD(buffers[3]),
                                 TG_PTR(buffers[4]), TG_LD(buffers[4]), TG_VPTR(buffers[5]));
}

/* the kinds whose CUDA f32 path is the cuBLAS one (cudnn's fallback) */
static inline int tg_attn_gemm_like(int kind) { return kind == TG_ATTN_GEMM || kind == TG_ATTN_CUDNN; }

/* Which bf16 path a CUDA worker runs for a task of b sequences in a
 * low-precision run (lowp) whose scratch holds scratch_floats: TG_BF16_FLASH
 * (attention_flash_lowp.cu, the flash kind, a head size it has; its scratch,
 * D, is chunked's), TG_BF16_GEMM (attention_gemm_lowp.cu, the gemm kind,
 * with the scratch the insert wrappers size for it), else 0: the adapter
 * runs the f32 kernels.  The CUDA functions and the simulator's cost model
 * both ask it (the gemm path runs the full T x T: twice the flops the
 * task declares). */
static int tg_attn_bf16_path(const tg_attn_args *a, int lowp, int C, int b,
                             size_t scratch_floats) {
  /* cuDNN: the causal blocks on the tensor cores, in bf16 and fp16 (the
   * simulator's expected model charges cuDNN's own rate, not our flash
   * kernels': platforms/gen-h100.py) */
  if (a->kind == TG_ATTN_CUDNN) return lowp == TG_BF16 || lowp == TG_F16 ? TG_BF16_CUDNN : 0;
  if (lowp != TG_BF16) return 0;
  if (a->kind == TG_ATTN_FLASH) return tg_attn_flash_lowp_hs_ok(C / a->NH) ? TG_BF16_FLASH : 0;
  if (a->kind == TG_ATTN_GEMM && tg_attn_gemm_lowp_fits(b, a->T, a->NH) &&
      scratch_floats >= tg_attn_gemm_lowp_scratch_floats(b, a->T, a->NH))
    return TG_BF16_GEMM;
  return 0;
}

#ifdef TG_HAVE_CUDA
static void tg_attention_fwd_cuda(void *buffers[], void *cl_arg) {
  const tg_attn_args *a = cl_arg;
  int b = TG_ATTN_B(buffers[0], a->T), C = TG_ATTN_C(buffers[0]);
  cudaStream_t s = starpu_cuda_get_local_stream();
  if (a->kind == TG_ATTN_NAIVE)
    TG_CUDA_CHECK(tg_cuda_attention_naive_fwd(b, a->T, C, a->NH, TG_PTR(buffers[0]),
                                              TG_LD(buffers[0]), TG_PTR(buffers[2]),
                                              TG_PTR(buffers[1]), TG_LD(buffers[1]), s));
  else if (tg_attn_gemm_like(a->kind) && tg_attn_gemm_fits(b, a->T, a->NH))
    TG_CUDA_CHECK(tg_cuda_attention_gemm_fwd(
        starpu_cublas_get_local_handle(), b, a->T, C, a->NH, TG_PTR(buffers[0]),
        TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]),
        TG_VPTR(buffers[3]), s));
  else
    TG_CUDA_CHECK(tg_cuda_attention_chunked_fwd(
        b, a->T, C, a->NH, a->chunk, TG_PTR(buffers[0]), TG_LD(buffers[0]),
        TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_VPTR(buffers[3]), s));
}

static void tg_attention_bwd_cuda(void *buffers[], void *cl_arg) {
  const tg_attn_args *a = cl_arg;
  int b = TG_ATTN_B(buffers[0], a->T), C = TG_ATTN_C(buffers[0]);
  cudaStream_t s = starpu_cuda_get_local_stream();
  if (a->kind == TG_ATTN_NAIVE)
    TG_CUDA_CHECK(tg_cuda_attention_naive_bwd(
        b, a->T, C, a->NH, TG_PTR(buffers[0]), TG_LD(buffers[0]), TG_PTR(buffers[2]),
        TG_PTR(buffers[3]), TG_LD(buffers[3]), TG_PTR(buffers[4]), TG_LD(buffers[4]),
        TG_VPTR(buffers[5]), s));
  else if (tg_attn_gemm_like(a->kind) && tg_attn_gemm_fits(b, a->T, a->NH))
    TG_CUDA_CHECK(tg_cuda_attention_gemm_bwd(
        starpu_cublas_get_local_handle(), b, a->T, C, a->NH, TG_PTR(buffers[0]),
        TG_LD(buffers[0]), TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]),
        TG_PTR(buffers[3]), TG_LD(buffers[3]), TG_PTR(buffers[4]), TG_LD(buffers[4]),
        TG_VPTR(buffers[5]), s));
  else
    TG_CUDA_CHECK(tg_cuda_attention_chunked_bwd(
        b, a->T, C, a->NH, a->chunk, TG_PTR(buffers[0]), TG_LD(buffers[0]),
        TG_PTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_PTR(buffers[3]),
        TG_LD(buffers[3]), TG_PTR(buffers[4]), TG_LD(buffers[4]), TG_VPTR(buffers[5]), s));
}

/* One line on stderr the first time a cudnn-kind task does not run on
 * cuDNN (the reason: missing library, refused shape, workspace) */
static atomic_int g_cudnn_noted;
static void tg_attn_cudnn_note(int path, const char *why) {
  if (path != TG_SDPA_CUDNN && !atomic_exchange(&g_cudnn_noted, 1))
    fprintf(stderr, "taskgrad: note: cuDNN attention unavailable (%s); using the gemm kind\n",
            why[0] ? why : "unknown reason");
}

/* a cudnn-kind task's 16-bit run (attention_sdpa.c): 0 done, 1 the adapter's
 * f32 path (fp16 without cuDNN: the gemm kind's f32 kernels) */
static int tg_attn_cudnn_done(cudaError_t e, int path, cublasStatus_t s, const char *why,
                              const char *op) {
  if (e == cudaErrorNotSupported && path == 0) {
    tg_attn_cudnn_note(path, why);
    return 1;
  }
  if (e != cudaSuccess && path == TG_SDPA_CUDNN) fprintf(stderr, "taskgrad: %s: %s\n", op, why);
  tg_cuda_launch_check(e, s, op);
  tg_attn_cudnn_note(path, why);
  return 0;
}

static int tg_attention_fwd_cuda_native(void *buffers[], void *cl_arg, tg_dtype lowp,
                                        float *ws) {
  (void)ws;
  const tg_attn_args *a = cl_arg;
  int b = TG_ATTN_B(buffers[0], a->T), C = TG_ATTN_C(buffers[0]);
  if (!tg_is16(buffers[0]) || !tg_is16(buffers[1])) return 1;
  if (a->kind == TG_ATTN_CUDNN) {
    char why[256] = "";
    int path;
    cublasStatus_t s;
    cudaError_t e = tg_cuda_attention_sdpa_fwd(
        starpu_cublas_get_local_handle(), lowp, b, a->T, C, a->NH, TG_HPTR(buffers[0]),
        TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]),
        TG_VPTR(buffers[3]), STARPU_VECTOR_GET_NX(buffers[3]), starpu_cuda_get_local_stream(),
        &path, &s, why, sizeof why);
    return tg_attn_cudnn_done(e, path, s, why, "tg_attention_fwd");
  }
  const int path = tg_attn_bf16_path(a, lowp, C, b, STARPU_VECTOR_GET_NX(buffers[3]));
  if (path == TG_BF16_FLASH) {
    TG_CUDA_CHECK(tg_cuda_attention_flash_fwd_lowp(
        b, a->T, C, a->NH, TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
        TG_LD(buffers[1]), TG_PTR(buffers[2]), starpu_cuda_get_local_stream()));
    return 0;
  }
  if (path != TG_BF16_GEMM) return 1;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_attention_gemm_fwd_lowp(
      starpu_cublas_get_local_handle(), b, a->T, C, a->NH, TG_HPTR(buffers[0]),
      TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]),
      TG_VPTR(buffers[3]), starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_attention_fwd");
  return 0;
}

static int tg_attention_bwd_cuda_native(void *buffers[], void *cl_arg, tg_dtype lowp,
                                        float *ws) {
  (void)ws;
  const tg_attn_args *a = cl_arg;
  int b = TG_ATTN_B(buffers[0], a->T), C = TG_ATTN_C(buffers[0]);
  if (!tg_is16(buffers[0]) || !tg_is16(buffers[1]) || !tg_is16(buffers[3]) ||
      !tg_is16(buffers[4]))
    return 1;
  if (a->kind == TG_ATTN_CUDNN) {
    char why[256] = "";
    int path;
    cublasStatus_t s;
    cudaError_t e = tg_cuda_attention_sdpa_bwd(
        starpu_cublas_get_local_handle(), lowp, b, a->T, C, a->NH, TG_HPTR(buffers[0]),
        TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]),
        TG_HPTR(buffers[3]), TG_LD(buffers[3]), TG_HPTR(buffers[4]), TG_LD(buffers[4]),
        TG_VPTR(buffers[5]), STARPU_VECTOR_GET_NX(buffers[5]), starpu_cuda_get_local_stream(),
        &path, &s, why, sizeof why);
    return tg_attn_cudnn_done(e, path, s, why, "tg_attention_bwd");
  }
  const int path = tg_attn_bf16_path(a, lowp, C, b, STARPU_VECTOR_GET_NX(buffers[5]));
  if (path == TG_BF16_FLASH) {
    TG_CUDA_CHECK(tg_cuda_attention_flash_bwd_lowp(
        b, a->T, C, a->NH, TG_HPTR(buffers[0]), TG_LD(buffers[0]), TG_HPTR(buffers[1]),
        TG_LD(buffers[1]), TG_PTR(buffers[2]), TG_HPTR(buffers[3]), TG_LD(buffers[3]),
        TG_HPTR(buffers[4]), TG_LD(buffers[4]), TG_VPTR(buffers[5]),
        starpu_cuda_get_local_stream()));
    return 0;
  }
  if (path != TG_BF16_GEMM) return 1;
  cublasStatus_t s;
  cudaError_t e = tg_cuda_attention_gemm_bwd_lowp(
      starpu_cublas_get_local_handle(), b, a->T, C, a->NH, TG_HPTR(buffers[0]),
      TG_LD(buffers[0]), TG_HPTR(buffers[1]), TG_LD(buffers[1]), TG_PTR(buffers[2]),
      TG_HPTR(buffers[3]), TG_LD(buffers[3]), TG_HPTR(buffers[4]), TG_LD(buffers[4]),
      TG_VPTR(buffers[5]), starpu_cuda_get_local_stream(), &s);
  tg_cuda_launch_check(e, s, "tg_attention_bwd");
  return 0;
}

/* the cuDNN graphs and handles go at tg_shutdown (registered before main,
 * on one thread, as codelets/cublaslt.c does) */
__attribute__((constructor)) static void tg_attention_cudnn_register(void) {
  tg_at_shutdown(tg_cuda_attention_cudnn_release);
}
#endif

static void tg_attention_fwd_cpu_entry(void *b[], void *a) {
  const tg_attn_args *x = a;
  tg_lowp_cpu_keep16(b, a, tg_attention_fwd_cpu, x->kind == TG_ATTN_NAIVE ? 0 : kFwdKeep);
}
static void tg_attention_bwd_cpu_entry(void *b[], void *a) {
  const tg_attn_args *x = a;
  tg_lowp_cpu_keep16(b, a, tg_attention_bwd_cpu, x->kind == TG_ATTN_NAIVE ? 0 : kBwdKeep);
}
TG_CUDA_ENTRY_NATIVE(attention_fwd, tg_attention_fwd_cuda, tg_attention_fwd_cuda_native)
TG_CODELET_ENTRIES(attention_fwd, tg_attention_fwd_cpu_entry, tg_attention_fwd_cuda_entry);
TG_CUDA_ENTRY_NATIVE(attention_bwd, tg_attention_bwd_cuda, tg_attention_bwd_cuda_native)
TG_CODELET_ENTRIES(attention_bwd, tg_attention_bwd_cpu_entry, tg_attention_bwd_cuda_entry);

int tg_attention_on_tensor_cores(const struct starpu_task *task) {
  if (!task || !task->cl || (task->cl != &tg_attention_fwd_cl && task->cl != &tg_attention_bwd_cl))
    return 0;
  const tg_attn_args *a = task->cl_arg;
  if (!a || task->cl_arg_size < sizeof *a) return 0;
  starpu_data_handle_t qkv = STARPU_TASK_GET_HANDLE(task, 0);
  starpu_data_handle_t scratch = STARPU_TASK_GET_HANDLE(task, task->cl == &tg_attention_fwd_cl ? 3 : 5);
  /* flash: the causal blocks only; gemm: the whole T x T */
  return tg_attn_bf16_path(a, tg_lowp_of_task(task, NULL), (int)starpu_matrix_get_nx(qkv) / 3,
                           (int)starpu_matrix_get_ny(qkv) / a->T, starpu_vector_get_nx(scratch));
}

double tg_attention_scratch_traffic(const struct starpu_task *task) {
  if (!task || !task->cl || (task->cl != &tg_attention_fwd_cl && task->cl != &tg_attention_bwd_cl))
    return 0;
  const tg_attn_args *a = task->cl_arg;
  if (!a || task->cl_arg_size < sizeof *a || a->kind != TG_ATTN_GEMM) return 0;
  const int fwd = task->cl == &tg_attention_fwd_cl;
  int b = (int)starpu_matrix_get_ny(STARPU_TASK_GET_HANDLE(task, 0)) / a->T;
  if (!tg_attn_gemm_fits(b, a->T, a->NH)) return 0; /* the flash kernels: no T x T */
  /* bytes per score of (NH, T, T): f32 forward A written, read and written
   * by the softmax, read by P V (16); backward A and B written, read and
   * written by the pass, A read once and B twice by the products (36); bf16
   * (attention_gemm_lowp.cu) P and dS are written once in bf16 beside A and
   * B: 12 and 26 */
  double per =
      tg_attention_on_tensor_cores(task) == TG_BF16_GEMM ? (fwd ? 12 : 26) : (fwd ? 16 : 36);
  return per * b * (double)a->NH * a->T * a->T;
}

/* The scratch of a task: tg_attention_scratch_bytes, or for a bf16 gemm
 * task (CUDA and SimGrid builds) the bf16 path's if larger */
static size_t tg_attn_task_scratch(tg_attention_kind kind, int b, int T, int C, int NH,
                                   int chunk, starpu_data_handle_t qkv,
                                   const tg_task_opts *opts) {
  size_t bytes = tg_attention_scratch_bytes(kind, b, T, C, NH, chunk);
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
  if (tg_attn_gemm_like(kind) && opts && opts->lowp == TG_BF16 &&
      starpu_matrix_get_elemsize(qkv) == 2 && tg_attn_gemm_lowp_fits(b, T, NH)) {
    size_t lowp = tg_attn_gemm_lowp_scratch_floats(b, T, NH) * sizeof(float);
    if (lowp > bytes) bytes = lowp;
  }
#else
  (void)qkv;
  (void)opts;
#endif
  return bytes;
}

size_t tg_attention_scratch_bytes(tg_attention_kind kind, int b, int T, int C, int NH,
                                  int chunk) {
  size_t floats;
  if (kind == TG_ATTN_NAIVE) {
    floats = (size_t)T; /* the CPU backward's row buffer; CUDA needs none */
  } else {
    floats = tg_attention_chunked_scratch_floats(T, C, NH, chunk);
#if defined(TG_HAVE_CUDA) || defined(TG_SIMGRID)
    /* the CUDA paths' too, in the SimGrid build as well (scratch_sizes.h) */
    size_t cuda = tg_attn_gemm_like(kind) && tg_attn_gemm_fits(b, T, NH)
                      ? tg_attn_gemm_scratch_floats(b, T, NH)
                      : tg_attn_flash_scratch_floats(b, T, NH);
    if (cuda > floats) floats = cuda;
    /* cudnn: cuDNN's statistics and workspace beside the gemm kind's */
    if (kind == TG_ATTN_CUDNN && tg_attn_cudnn_scratch_floats(b, T, C, NH) > floats)
      floats = tg_attn_cudnn_scratch_floats(b, T, C, NH);
#else
    (void)b;
#endif
  }
  return floats * sizeof(float);
}

/* Checks shapes; returns b (sequences) through *pb and C through *pC. */
static int tg_attn_check(const char *op, tg_attention_kind kind, int T, int NH, int chunk,
                         starpu_data_handle_t qkv, starpu_data_handle_t out,
                         starpu_data_handle_t state, int *pb, int *pC) {
  int n, c3;
  char what[64];
  snprintf(what, sizeof what, "%s: qkv", op);
  TG_TRY(tg_shape(qkv, what, &n, &c3));
  if (kind != TG_ATTN_NAIVE && kind != TG_ATTN_CHUNKED && kind != TG_ATTN_GEMM &&
      kind != TG_ATTN_FLASH && kind != TG_ATTN_CUDNN)
    return tg_fail(EINVAL, "%s: unknown attention kind %d", op, (int)kind);
  if (T < 1 || n % T) return tg_fail(EINVAL, "%s: T = %d does not divide the %d rows", op, T, n);
  if (c3 % 3 || NH < 1 || (c3 / 3) % NH)
    return tg_fail(EINVAL, "%s: qkv has %d columns: 3C with C divisible by NH = %d expected", op,
                   c3, NH);
  if (kind != TG_ATTN_NAIVE && chunk < 1)
    return tg_fail(EINVAL, "%s: chunk must be >= 1 (got %d)", op, chunk);
  int b = n / T, C = c3 / 3;
  TG_TRY(tg_expect(out, op, "out", n, C, TG_FLOAT_SLOT));
  if (kind == TG_ATTN_NAIVE)
    TG_TRY(tg_expect(state, op, "probabilities", b * NH * T, T, TG_FLOAT_SLOT));
  else
    TG_TRY(tg_expect(state, op, "lse", n, NH, TG_FLOAT_SLOT));
  *pb = b;
  *pC = C;
  return 0;
}

static double tg_attn_flops(int b, int T, int C) {
  /* causal: half of the T x T score and weighted-sum products */
  return 2.0 * b * (double)T * T * C;
}

int tg_attention_fwd_insert(tg_attention_kind kind, int T, int NH, int chunk,
                            starpu_data_handle_t qkv, starpu_data_handle_t out,
                            starpu_data_handle_t state, const tg_task_opts *opts) {
  int b, C;
  TG_TRY(tg_attn_check("tg_attention_fwd", kind, T, NH, chunk, qkv, out, state, &b, &C));
  tg_attn_args args = {.shape = 0, .kind = (int)kind, .T = T, .NH = NH, .chunk = chunk};
  int key[3] = {(int)kind, NH, kind != TG_ATTN_NAIVE ? chunk : 0};
  args.shape = tg_hash_ints(key, 3);
  starpu_data_handle_t h[4] = {qkv, out, state,
                               tg_scratch(tg_attn_task_scratch(kind, b, T, C, NH, chunk, qkv, opts))};
  enum starpu_data_access_mode md[4] = {STARPU_R, STARPU_W, STARPU_W, STARPU_SCRATCH};
  return tg_submit(&tg_attention_fwd_cl, 4, h, md, &args, sizeof args,
                   tg_attn_flops(b, T, C), opts);
}

int tg_attention_bwd_insert(tg_attention_kind kind, int T, int NH, int chunk,
                            starpu_data_handle_t qkv, starpu_data_handle_t out,
                            starpu_data_handle_t state, starpu_data_handle_t dout,
                            starpu_data_handle_t dqkv, const tg_task_opts *opts) {
  int b, C;
  TG_TRY(tg_attn_check("tg_attention_bwd", kind, T, NH, chunk, qkv, out, state, &b, &C));
  TG_TRY(tg_expect(dout, "tg_attention_bwd", "dout", b * T, C, TG_FLOAT_SLOT));
  TG_TRY(tg_expect(dqkv, "tg_attention_bwd", "dqkv", b * T, 3 * C, TG_FLOAT_SLOT));
  tg_attn_args args = {.shape = 0, .kind = (int)kind, .T = T, .NH = NH, .chunk = chunk};
  int key[3] = {(int)kind, NH, kind != TG_ATTN_NAIVE ? chunk : 0};
  args.shape = tg_hash_ints(key, 3);
  starpu_data_handle_t h[6] = {qkv, out, state, dout, dqkv,
                               tg_scratch(tg_attn_task_scratch(kind, b, T, C, NH, chunk, qkv, opts))};
  enum starpu_data_access_mode md[6] = {STARPU_R, STARPU_R, STARPU_R,
                                        STARPU_R, STARPU_W, STARPU_SCRATCH};
  return tg_submit(&tg_attention_bwd_cl, 6, h, md, &args, sizeof args,
                   2.5 * tg_attn_flops(b, T, C), opts);
}
