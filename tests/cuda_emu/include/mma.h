/*
 * cuda_emu: stand-in for <mma.h> (test_ops_emu only): the warp matrix
 * functions of nvcuda::wmma that the kernels use, 16 x 16 x 16 tiles of
 * bf16 operands with f32 accumulators.
 *
 * Design note
 * -----------
 * - On the GPU a fragment's elements are spread over the warp's lanes in an
 *   unspecified layout; the kernels never index them (they go through
 *   shared memory), so here every lane holds the whole tile, widened to
 *   float: load_matrix_sync reads it all, mma_sync computes it all.
 * - mma_sync sums each output's 16 products in f32, k ascending, onto the
 *   accumulator; the tensor cores' order and internal precision differ in
 *   the last bits, which the op table's tolerances allow for.
 * - load and store are warp-collective as on the GPU (every lane must call
 *   them, at the same call): store_matrix_sync has lane 0 write the tile
 *   between two warp barriers, so no two threads write one address and the
 *   whole warp sees the tile when the call returns.
 * - Written from the CUDA C++ Programming Guide's description of wmma (the
 *   layouts: row_major element (r, c) at p[r * ldm + c], col_major at
 *   p[c * ldm + r]), not from the kernels.
 */
#ifndef TG_CUDA_EMU_MMA_H
#define TG_CUDA_EMU_MMA_H

#include "cuda_bf16.h"
#include "cuda_runtime.h" /* and, in C++, cuda_emu.h */

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "cuda_emu: only 16 x 16 x 16 tiles");
  float t[16 * 16]; /* (row, col) at t[row * 16 + col] of the tile it holds */
};

namespace detail {
inline bool is_col(row_major) { return false; }
inline bool is_col(col_major) { return true; }
inline void load16(float *t, const __nv_bfloat16 *p, unsigned ldm, bool col) {
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      t[r * 16 + c] = __bfloat162float(col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]);
}
} // namespace detail

template <typename Layout>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, Layout> &f,
                             const __nv_bfloat16 *p, unsigned ldm) {
  tg_emu::syncwarp(TG_EMU_SITE("wmma::load_matrix_sync"));
  detail::load16(f.t, p, ldm, detail::is_col(Layout()));
}
template <typename Layout>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, Layout> &f,
                             const __nv_bfloat16 *p, unsigned ldm) {
  tg_emu::syncwarp(TG_EMU_SITE("wmma::load_matrix_sync"));
  detail::load16(f.t, p, ldm, detail::is_col(Layout()));
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t layout) {
  tg_emu::syncwarp(TG_EMU_SITE("wmma::load_matrix_sync"));
  for (int r = 0; r < 16; r++)
    for (int c = 0; c < 16; c++)
      f.t[r * 16 + c] =
          layout == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  tg_emu::syncwarp(TG_EMU_SITE("wmma::store_matrix_sync"));
  if (tg_emu::lane_id() == 0)
    for (int r = 0; r < 16; r++)
      for (int c = 0; c < 16; c++)
        (layout == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) =
            f.t[r * 16 + c];
  tg_emu::syncwarp(TG_EMU_SITE("wmma::store_matrix_sync"));
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float v) {
  for (int i = 0; i < 256; i++) f.t[i] = v;
}
template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c) {
  float out[256];
  for (int r = 0; r < 16; r++)
    for (int n = 0; n < 16; n++) {
      float s = c.t[r * 16 + n];
      for (int k = 0; k < 16; k++) s += a.t[r * 16 + k] * b.t[k * 16 + n];
      out[r * 16 + n] = s;
    }
  memcpy(d.t, out, sizeof out);
}

} // namespace wmma
} // namespace nvcuda

#endif
