/*
 * taskgrad layer 1: CUDA fused softmax + cross-entropy and accuracy count,
 * the device twins of tg_cpu_softmax_xent / tg_cpu_accuracy_count in
 * kernels_cpu.h.
 *
 * Design note
 * -----------
 * Rows are independent, so a group of G threads handles one row at a time
 * (grid-stride over rows), its lanes striding over the columns:
 *   - cols <= 1024: G = 32, one warp per row, 8 rows per 256-thread block;
 *     reductions are pure __shfl_xor_sync (classification heads: 10 to a few
 *     hundred classes);
 *   - larger rows: G = 256, one block per row, warp shuffles plus a tiny
 *     shared-memory stage (tg_group_* in cuda_common.cuh).
 * softmax_xent makes three passes over a row (the row stays in L1/L2),
 * mirroring the CPU kernel:
 *   1. m = max_c x_c;
 *   2. e_c = exp(x_c - m): every thread of the group reads x_l (l = label)
 *      and sums the e_c of its columns other than l; s_o = group sum of those,
 *      e_l = exp(x_l - m), s = s_o + e_l;
 *   3. dlogits_c = scale * e_c / s for c != l, and
 *      dlogits_l = -scale * s_o / s, i.e. scale (p_l - 1) without the
 *      cancellation of p_l - 1 when the prediction is confident (the CPU
 *      kernel gets the same accuracy with a double sum).
 * Row loss: -log p_l = log(s / e_l) = log1p(s_o / e_l), accurate when the
 * loss is tiny; when e_l underflows to 0 it is log(s) - (x_l - m).
 * Each group's leader adds its row losses to a per-thread partial; a block
 * reduction then gives one atomicAdd of scale * (block's losses) into
 * *loss_acc (an accumulator: added to, never overwritten, as a StarPU REDUX
 * copy needs).  Float atomics make the last bits of the loss depend on block
 * order; dlogits are deterministic.
 * tg_cuda_softmax_xent_bf16 is the same kernel storing each dlogit rounded
 * to bf16 (nearest even) into a separate buffer: the bits of
 * tg_cuda_softmax_xent followed by tg_cuda_to_lowp, without the f32 write
 * and the second pass over it (the bf16 classifier's backward,
 * lm_classifier_lowp.cu).
 * In-place use (dlogits == logits, ldd == ldl) is allowed, as on the CPU:
 * x_l is read by every thread before a barrier of the group (__syncwarp,
 * or the __syncthreads of the block reduction) that precedes the writes,
 * and pass 3 reads and writes each element in the same thread.  Hence no
 * __restrict__ on those two pointers.
 * A label outside [0, cols) is never used as an index: that row gets a zero
 * gradient and makes the loss NaN, as the CPU kernel does, so that corrupt
 * labels show up (the data readers already reject them).
 * accuracy_count: per-row argmax over (value, index) pairs where an equal
 * value with a smaller index wins, i.e. the first maximum as in the CPU
 * kernel.  NaN logits are ignored (a row containing NaN may get a different
 * argmax than a sequential scan; a row of only NaN counts as wrong).
 * Correct rows are counted per block and added with one
 * atomicAdd of the (exact, integer-valued) count.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "cuda_common.cuh"
#include "lowp.cuh"

namespace {

constexpr int kBlock = 256; /* threads per block for both kernels */

/* a dlogit stored as f32, or rounded to bf16 */
__device__ __forceinline__ void store_dlogit(float *d, float v) { *d = v; }
__device__ __forceinline__ void store_dlogit(uint16_t *d, float v) {
  *d = tg_lowp::to_low<true>(v);
}

template <int G, typename Out>
__global__ void __launch_bounds__(kBlock)
    softmax_xent_kernel(int rows, int cols,
                        const float *logits, /* (rows, ldl) */
                        size_t ldl,
                        const int32_t *__restrict__ labels, /* (rows) */
                        float scale,
                        Out *dlogits, /* (rows, ldd); f32: may be logits */
                        size_t ldd, float *__restrict__ loss_acc /* (1) */) {
  __shared__ float sh[kBlock / 32];
  constexpr int kGroups = kBlock / G; /* rows handled at once by a block */
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  float loss = 0.0f; /* sum of this group's row losses (leader only) */
  /* Every thread of a block runs the same number of iterations when G ==
   * kBlock (one group), so the barriers inside tg_group_* are uniform; with
   * G == 32 the reductions have no block barrier. */
  for (int row = blockIdx.x * kGroups + group; row < rows;
       row += gridDim.x * kGroups) {
    const float *x = logits + (size_t)row * ldl;
    Out *d = dlogits + (size_t)row * ldd;
    const int32_t label = labels[row];
    if (label < 0 || label >= cols) { /* uniform over the group */
      for (int c = lane; c < cols; c += G) store_dlogit(&d[c], 0.0f);
      if (lane == 0) loss = NAN;
      continue;
    }
    float m = -INFINITY;
    for (int c = lane; c < cols; c += G) m = fmaxf(m, x[c]);
    m = tg_group_max<G>(m, sh);
    const float xl = x[label] - m; /* read before any dlogits write */
    float so = 0.0f;
    for (int c = lane; c < cols; c += G)
      if (c != label) so += expf(x[c] - m);
    so = tg_group_sum<G>(so, sh);
    /* memory barrier of the group between the reads of x_l and the writes
     * below (G > 32: the __syncthreads in tg_group_sum already is one) */
    if (G <= 32) __syncwarp();
    const float el = expf(xl);
    const float s = so + el;
    const float f = scale / s;
    for (int c = lane; c < cols; c += G)
      store_dlogit(&d[c], c == label ? -scale * so / s : expf(x[c] - m) * f);
    if (lane == 0) loss += el > 0.0f ? log1pf(so / el) : logf(s) - xl;
  }
  loss = tg_block_sum(loss, sh);
  if (threadIdx.x == 0) atomicAdd(loss_acc, scale * loss);
}

template <int G>
__global__ void __launch_bounds__(kBlock)
    accuracy_kernel(int rows, int cols,
                    const float *__restrict__ logits, /* (rows, ldl) */
                    size_t ldl, const int32_t *__restrict__ labels, /* (rows) */
                    float *__restrict__ correct_acc /* (1) */) {
  __shared__ float shv[kBlock / 32];
  __shared__ int shi[kBlock / 32];
  constexpr int kGroups = kBlock / G;
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  float correct = 0.0f; /* meaningful in group leaders only */
  for (int row = blockIdx.x * kGroups + group; row < rows;
       row += gridDim.x * kGroups) {
    const float *x = logits + (size_t)row * ldl;
    float best = -INFINITY;
    int arg = INT32_MAX; /* no element yet: loses every tie */
    for (int c = lane; c < cols; c += G) {
      const float v = x[c];
      /* c increases, so a strict > keeps this lane's first maximum; the
       * first non-NaN element is taken even when it is -inf */
      if (v > best || (arg == INT32_MAX && v == v)) {
        best = v;
        arg = c;
      }
    }
    tg_group_argmax<G>(best, arg, shv, shi);
    if (lane == 0 && arg < cols && arg == labels[row]) correct += 1.0f;
  }
  correct = tg_block_sum(correct, shv);
  if (threadIdx.x == 0 && correct != 0.0f) atomicAdd(correct_acc, correct);
}

template <int G>
unsigned row_blocks(int rows) {
  const size_t per = kBlock / G;
  return tg_cuda_blocks(((size_t)rows + per - 1) / per, 1);
}

} // namespace

template <typename Out>
cudaError_t softmax_xent_launch(int rows, int cols, const float *logits, int ldl,
                                const int32_t *labels, float scale, Out *dlogits, int ldd,
                                float *loss_acc, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols <= 1024)
    softmax_xent_kernel<32, Out><<<row_blocks<32>(rows), kBlock, 0, stream>>>(
        rows, cols, logits, (size_t)ldl, labels, scale, dlogits, (size_t)ldd,
        loss_acc);
  else
    softmax_xent_kernel<kBlock, Out><<<row_blocks<kBlock>(rows), kBlock, 0,
                                       stream>>>(rows, cols, logits, (size_t)ldl,
                                                 labels, scale, dlogits,
                                                 (size_t)ldd, loss_acc);
  return cudaGetLastError();
}

extern "C" cudaError_t tg_cuda_softmax_xent(int rows, int cols,
                                            const float *logits, int ldl,
                                            const int32_t *labels, float scale,
                                            float *dlogits, int ldd,
                                            float *loss_acc,
                                            cudaStream_t stream) {
  return softmax_xent_launch(rows, cols, logits, ldl, labels, scale, dlogits, ldd, loss_acc,
                             stream);
}

extern "C" cudaError_t tg_cuda_softmax_xent_bf16(int rows, int cols, const float *logits,
                                                 int ldl, const int32_t *labels, float scale,
                                                 uint16_t *dlogits, int ldd, float *loss_acc,
                                                 cudaStream_t stream) {
  return softmax_xent_launch(rows, cols, logits, ldl, labels, scale, dlogits, ldd, loss_acc,
                             stream);
}

extern "C" cudaError_t tg_cuda_accuracy_count(int rows, int cols,
                                              const float *logits, int ldl,
                                              const int32_t *labels,
                                              float *correct_acc,
                                              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols <= 1024)
    accuracy_kernel<32><<<row_blocks<32>(rows), kBlock, 0, stream>>>(
        rows, cols, logits, (size_t)ldl, labels, correct_acc);
  else
    accuracy_kernel<kBlock><<<row_blocks<kBlock>(rows), kBlock, 0, stream>>>(
        rows, cols, logits, (size_t)ldl, labels, correct_acc);
  return cudaGetLastError();
}
