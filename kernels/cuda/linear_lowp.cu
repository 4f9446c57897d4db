/*
 * taskgrad layer 1: the fused linear layer with 16-bit operands on the GPU's
 * tensor cores, the native twins of tg_cuda_linear_fwd / _bwd_data (linear.c)
 * for tasks whose X and W (forward) or dZ and W (backward) are bf16 or fp16.
 *
 * Design note
 * -----------
 * Through the low-precision adapter these layers widened X and W to f32,
 * ran an f32 GEMM in TF32 tensor-core math and rounded the outputs back:
 * three passes at half the bf16 tensor-core rate, far behind the same GPU's
 * native bf16 weight-gradient GEMMs (bench/results/2026-11-26-h100-measured.md).
 * Here:
 *   1. cublasGemmEx multiplies the 16-bit operands as they are, summing in
 *      f32 (tg_cuda_gemm_lowp), into an f32 result G: the caller's f32 output
 *      itself, or a workspace when the output is 16-bit;
 *   2. one epilogue kernel per element adds the bias (forward) or applies the
 *      activation's derivative (backward) in f32 and stores each output once,
 *      rounded to nearest even where it is 16-bit.
 * The rounding points are the adapter's: 16-bit inputs are exact in f32,
 * every sum and the activation are f32, each stored output is rounded once;
 * H = act(Z) is computed from the unrounded Z.  Only the GEMM's summation
 * order differs from the CPU kernel (which adds the bias first), as it does
 * for cublasSgemm.  The bias, Z, H, Zprev and dX may each be f32 or of the
 * operands' 16-bit type.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "activation.cuh"
#include "cuda_common.cuh"
#include "lowp.cuh"

namespace {

enum { ACT_RELU = 0, ACT_GELU = 1, ACT_NONE = 2 };

/* element i of an f32 or 16-bit array */
template <bool BF> __device__ __forceinline__ float load(const void *p, int is16, size_t i) {
  return is16 ? tg_lowp::from_low<BF>(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
template <bool BF> __device__ __forceinline__ void store(void *p, int is16, size_t i, float x) {
  if (is16)
    ((uint16_t *)p)[i] = tg_lowp::to_low<BF>(x);
  else
    ((float *)p)[i] = x;
}

template <bool BF> struct FwdEpilogue {
  const float *G; /* (rows, ldg): X W^T */
  const void *b;  /* (out) or NULL */
  void *Z, *H;    /* (rows, ldz), (rows, ldh) */
  size_t ldg, ldz, ldh;
  int b16, z16, h16, act;
  __device__ void operator()(size_t r, size_t c) const {
    float z = G[r * ldg + c];
    if (b) z += load<BF>(b, b16, c);
    store<BF>(Z, z16, r * ldz + c, z);
    if (act == ACT_RELU) store<BF>(H, h16, r * ldh + c, z < 0.0f ? 0.0f : z);
    if (act == ACT_GELU) store<BF>(H, h16, r * ldh + c, tg_act::gelu(z));
  }
};

template <bool BF> struct BwdEpilogue {
  const float *G;    /* (rows, ldg): dZ W */
  const void *Zprev; /* (rows, ldzp), NULL without an activation */
  void *dX;          /* (rows, lddx) */
  size_t ldg, ldzp, lddx;
  int zp16, dx16, act;
  __device__ void operator()(size_t r, size_t c) const {
    float d = G[r * ldg + c];
    if (act != ACT_NONE) {
      const float x = load<BF>(Zprev, zp16, r * ldzp + c);
      d = act == ACT_RELU ? (x > 0.0f ? d : 0.0f) : d * tg_act::gelu_deriv(x);
    }
    store<BF>(dX, dx16, r * lddx + c, d);
  }
};

} // namespace

extern "C" cudaError_t tg_cuda_linear_fwd_lowp(
    cublasHandle_t handle, tg_dtype lowp, int rows, int in, int out, const uint16_t *X,
    int ldx, const uint16_t *W, int ldw, const void *b, int b16, int act, void *Z, int ldz,
    int z16, void *H, int ldh, int h16, float *work, cudaStream_t stream,
    cublasStatus_t *cublas_status) {
  *cublas_status = CUBLAS_STATUS_SUCCESS;
  if (rows <= 0 || out <= 0) return cudaSuccess;
  if ((z16 && !work) || (lowp != TG_BF16 && lowp != TG_F16)) return cudaErrorInvalidValue;
  float *G = z16 ? work : (float *)Z; /* (rows, ldg) */
  const int ldg = z16 ? out : ldz;
  cudaError_t e = tg_cublas_status(tg_cuda_gemm_lowp(handle, lowp, 0, 1, rows, out, in, 1.0f, X,
                                                ldx, W, ldw, 0.0f, TG_F32, G, ldg),
                              cublas_status);
  if (e != cudaSuccess) return e;
  if (lowp == TG_BF16)
    return tg_map2d(rows, out, FwdEpilogue<true>{G, b, Z, H, (size_t)ldg, (size_t)ldz,
                                                 (size_t)ldh, b16, z16, h16, act}, stream);
  return tg_map2d(rows, out, FwdEpilogue<false>{G, b, Z, H, (size_t)ldg, (size_t)ldz,
                                                (size_t)ldh, b16, z16, h16, act}, stream);
}

extern "C" cudaError_t tg_cuda_linear_bwd_data_lowp(
    cublasHandle_t handle, tg_dtype lowp, int rows, int in, int out, const uint16_t *dZ,
    int lddz, const uint16_t *W, int ldw, int act, const void *Zprev, int ldzp, int zp16,
    void *dX, int lddx, int dx16, float *work, cudaStream_t stream,
    cublasStatus_t *cublas_status) {
  *cublas_status = CUBLAS_STATUS_SUCCESS;
  if (rows <= 0 || in <= 0) return cudaSuccess;
  if ((dx16 && !work) || (lowp != TG_BF16 && lowp != TG_F16)) return cudaErrorInvalidValue;
  float *G = dx16 ? work : (float *)dX; /* (rows, ldg) */
  const int ldg = dx16 ? in : lddx;
  cudaError_t e = tg_cublas_status(tg_cuda_gemm_lowp(handle, lowp, 0, 0, rows, in, out, 1.0f, dZ,
                                                lddz, W, ldw, 0.0f, TG_F32, G, ldg),
                              cublas_status);
  if (e != cudaSuccess) return e;
  if (lowp == TG_BF16)
    return tg_map2d(rows, in, BwdEpilogue<true>{G, Zprev, dX, (size_t)ldg, (size_t)ldzp,
                                                (size_t)lddx, zp16, dx16, act}, stream);
  return tg_map2d(rows, in, BwdEpilogue<false>{G, Zprev, dX, (size_t)ldg, (size_t)ldzp,
                                               (size_t)lddx, zp16, dx16, act}, stream);
}
