/*
 * taskgrad layer 1: the CUDA exchange kernels, the device twins of
 * tg_cpu_sum_tree and tg_cpu_gather_rows in kernels_cpu.h.
 *
 * Design note
 * -----------
 * Sum: one tg_map2d() pass, each thread computing its elements through the
 * whole midpoint tree, so the bits are those of the CPU kernel (and of the
 * accumulate tasks of graphs/reduce.c): the same float additions of the same
 * operands.  The launcher flattens the tree into its post-order program
 * (push input i, or add the two values on top of the stack: left + right),
 * and the input pointers, their leading dimensions and the program travel in
 * the kernel's parameters (under 1 KiB for 64 inputs): no device array of
 * pointers, so nothing to allocate or copy.  The value stack is as deep as
 * the tree plus one (7 for 64 inputs).
 * Gather: one cudaMemcpy2DAsync per row block (a pitched copy: the block's
 * ld to out's), on the worker's stream, each status checked.
 * Zero sizes launch nothing; the launcher never allocates or synchronises.
 */
#include "taskgrad/kernels_cuda.h"
#include "cuda_common.cuh"

namespace {

constexpr int kMax = TG_CUDA_SUM_TREE_MAX;
constexpr unsigned char kAdd = 0xff; /* program code: add the top two */
constexpr int kStack = 8;           /* tree depth + 1 for kMax inputs */

struct SumTreeOp {
  const float *in[kMax];
  int ld[kMax];
  unsigned char prog[2 * kMax - 1];
  int nprog;
  float *out;
  size_t ldo;
  __device__ void operator()(size_t r, size_t c) const {
    float st[kStack];
    int sp = 0;
    for (int k = 0; k < nprog; k++) {
      const unsigned char op = prog[k];
      if (op == kAdd) {
        const float b = st[--sp];
        st[sp - 1] = st[sp - 1] + b; /* left + right */
      } else {
        st[sp++] = in[op][r * (size_t)ld[op] + c];
      }
    }
    out[r * ldo + c] = st[0];
  }
};

/* the post-order program of sum(lo, hi); returns its length */
int tree_program(int lo, int hi, unsigned char *prog, int k) {
  if (hi - lo == 1) {
    prog[k] = (unsigned char)lo;
    return k + 1;
  }
  const int mid = lo + (hi - lo) / 2;
  k = tree_program(lo, mid, prog, k);
  k = tree_program(mid, hi, prog, k);
  prog[k] = kAdd;
  return k + 1;
}

} // namespace

extern "C" cudaError_t tg_cuda_sum_tree(int rows, int cols, int n, const float *const *in,
                                        const int *ld_in, float *out, int ldo,
                                        cudaStream_t stream) {
  if (n < 1 || n > kMax) return cudaErrorInvalidValue;
  SumTreeOp op;
  for (int i = 0; i < n; i++) {
    op.in[i] = in[i];
    op.ld[i] = ld_in[i];
  }
  op.nprog = tree_program(0, n, op.prog, 0);
  op.out = out;
  op.ldo = (size_t)ldo;
  return tg_map2d(rows, cols, op, stream);
}

extern "C" cudaError_t tg_cuda_gather_rows(int cols, size_t elemsize, int n,
                                           const void *const *in, const int *rows_in,
                                           const int *ld_in, void *out, int ldo,
                                           cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const size_t width = elemsize * (size_t)cols, dpitch = elemsize * (size_t)ldo;
  char *o = (char *)out;
  for (int j = 0; j < n; j++) {
    if (rows_in[j] <= 0) continue;
    const cudaError_t e =
        cudaMemcpy2DAsync(o, dpitch, in[j], elemsize * (size_t)ld_in[j], width,
                          (size_t)rows_in[j], cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return e;
    o += dpitch * (size_t)rows_in[j];
  }
  return cudaSuccess;
}
