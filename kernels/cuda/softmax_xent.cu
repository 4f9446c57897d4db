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
 * softmax_xent makes three passes over a row (the row stays in L1/L2):
 *   1. m = max_c x_c;  2. s = sum_c exp(x_c - m);
 *   3. dlogits_c = scale * (exp(x_c - m) / s - [c == label]);
 * and the row loss is -log p_label = log s - (x_label - m).  Each group's
 * leader adds scale * rowloss to a per-thread partial; at the end a block
 * reduction gives one atomicAdd per block into *loss_acc (an accumulator: it
 * is added to, never overwritten, as a StarPU REDUX copy needs).  Float
 * atomics make the last bits of the loss depend on block order; dlogits are
 * deterministic.
 * A label outside [0, cols) is never used as an index: that row gets
 * dlogits = scale * softmax (no one-hot term) and contributes NaN to the
 * loss, so that corrupt labels show up instead of being silently skipped
 * (the data readers already reject them).
 * dlogits must not alias logits (the loss reads x[label] after other lanes
 * have written their dlogits), which StarPU's distinct handles guarantee.
 * accuracy_count: per-row argmax over (value, index) pairs where an equal
 * value with a smaller index wins, i.e. the first maximum as in the CPU
 * kernel.  NaN logits are ignored (a row containing NaN may get a different
 * argmax than a sequential scan; a row of only NaN counts as wrong).
 * Correct rows are counted per block and added with one
 * atomicAdd of the (exact, integer-valued) count.
 */
#include "taskgrad/kernels_cuda.h"
#include "cuda_common.cuh"

namespace {

constexpr int kBlock = 256; /* threads per block for both kernels */

template <int G>
__global__ void __launch_bounds__(kBlock)
    softmax_xent_kernel(int rows, int cols,
                        const float *__restrict__ logits, /* (rows, ldl) */
                        size_t ldl,
                        const int32_t *__restrict__ labels, /* (rows) */
                        float scale, float *__restrict__ dlogits, /* (rows, ldd) */
                        size_t ldd, float *__restrict__ loss_acc /* (1) */) {
  __shared__ float sh[kBlock / 32];
  constexpr int kGroups = kBlock / G; /* rows handled at once by a block */
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  float loss = 0.0f; /* meaningful in group leaders only */
  /* Every thread of a block runs the same number of iterations when G ==
   * kBlock (one group), so the barriers inside tg_group_* are uniform; with
   * G == 32 the reductions have no barrier. */
  for (int row = blockIdx.x * kGroups + group; row < rows;
       row += gridDim.x * kGroups) {
    const float *x = logits + (size_t)row * ldl;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += G) m = fmaxf(m, x[c]);
    m = tg_group_max<G>(m, sh);
    float s = 0.0f;
    for (int c = lane; c < cols; c += G) s += expf(x[c] - m);
    s = tg_group_sum<G>(s, sh);
    const int32_t label = labels[row];
    const bool valid = label >= 0 && label < cols;
    const float inv = 1.0f / s;
    float *d = dlogits + (size_t)row * ldd;
    for (int c = lane; c < cols; c += G) {
      const float p = expf(x[c] - m) * inv;
      d[c] = scale * (c == label ? p - 1.0f : p);
    }
    if (lane == 0)
      loss += valid ? scale * (logf(s) - (x[label] - m)) : NAN;
  }
  loss = tg_block_sum(loss, sh);
  if (threadIdx.x == 0) atomicAdd(loss_acc, loss);
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

extern "C" cudaError_t tg_cuda_softmax_xent(int rows, int cols,
                                            const float *logits, int ldl,
                                            const int32_t *labels, float scale,
                                            float *dlogits, int ldd,
                                            float *loss_acc,
                                            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols <= 1024)
    softmax_xent_kernel<32><<<row_blocks<32>(rows), kBlock, 0, stream>>>(
        rows, cols, logits, (size_t)ldl, labels, scale, dlogits, (size_t)ldd,
        loss_acc);
  else
    softmax_xent_kernel<kBlock><<<row_blocks<kBlock>(rows), kBlock, 0,
                                  stream>>>(rows, cols, logits, (size_t)ldl,
                                            labels, scale, dlogits,
                                            (size_t)ldd, loss_acc);
  return cudaGetLastError();
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
