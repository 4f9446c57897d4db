/*
 * cuda_emu: the CUDA device dialect for C++ on the CPU (test_ops_emu
 * only; included by the stand-in cuda_runtime.h in C++).
 *
 * Design note
 * -----------
 * - Execution model (emu_runtime.cpp): a launch creates one pthread per CUDA
 *   thread of a block; the threads run the blocks of the grid one after the
 *   other (all threads of a block concurrently, with real barriers).  Warps
 *   are 32 consecutive linear thread ids, as on the GPU.
 * - Shared memory.  `__shared__` variables become function-local statics in
 *   the section "tg_emu_shared": one copy per kernel, which is the block's
 *   copy because blocks run one at a time.  Before each block the runtime
 *   fills that whole section, and the launch's dynamic shared memory
 *   (`extern __shared__`, given the launch's size), with 0xff bytes (NaN
 *   floats, -1 ints), so a kernel reading shared memory it did not write
 *   gets NaN rather than the previous block's values.  `extern __shared__`
 *   cannot be written as a static: the build rewrites it (rewrite.cmake)
 *   into a pointer to the dynamic buffer, and rewrites
 *   `kernel<<<grid, block, smem, stream>>>(args)` into
 *   `tg_emu::launch(kernel, "kernel", __FILE__, __LINE__, grid, block, smem,
 *   stream)(args)`.
 * - Collectives (__syncthreads*, __syncwarp, __shfl*_sync, __ballot_sync)
 *   are rendezvous of the threads they name.  They carry their call site, so
 *   that a barrier reached by part of a block, lanes of one warp at
 *   different collectives, a mask naming missing or exited lanes, or all
 *   threads blocked, fail the launch with a message naming the kernel
 *   (cudaErrorLaunchFailure from cudaGetLastError), instead of hanging.
 * - Arithmetic is the host's: libm's expf / logf (correctly rounded or
 *   nearly, where the GPU's are within 2 ulp), no FMA contraction unless the
 *   compiler chooses it.  The test's tolerances allow for the difference.
 */
#ifndef TG_CUDA_EMU_H
#define TG_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static __attribute__((section("tg_emu_shared")))

struct tg_emu_uint3 {
  unsigned x, y, z;
};
typedef tg_emu_uint3 uint3;

/* the 128-bit vector type of vector_types.h: 16-byte aligned, so that a
 * uint4 load or store through a cast pointer is one access of 16 bytes as on
 * the GPU (misaligned addresses are the kernel's bug there and here) */
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return uint4{x, y, z, w};
}

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1)
      : x(vx), y(vy), z(vz) {}
};

/* set by the runtime in each emulated thread */
extern __thread tg_emu_uint3 threadIdx, blockIdx, blockDim, gridDim;

namespace tg_emu {

struct Site {
  const char *what, *file;
  int line;
};

/* ---- runtime entry points (emu_runtime.cpp) ---- */
struct LaunchSpec {
  const void *kernel;
  const char *name, *file;
  int line;
  dim3 grid, block;
  size_t smem;
};
cudaError_t run(const LaunchSpec &spec, void (*body)(void *), void *ctx);
cudaError_t set_max_dynamic_smem(const void *kernel, int bytes);
void *dynamic_smem();
unsigned lane_id();
/* all[32] receives every participating lane's value */
void warp_collective(const Site &site, unsigned mask, uint64_t mine,
                     uint64_t *all);
enum BlockOp { SYNC, OR, AND, COUNT };
int block_collective(const Site &site, BlockOp op, int pred);

/* ---- launches ---- */
template <typename... P> struct Launcher {
  void (*kernel)(P...);
  LaunchSpec spec;
  template <typename... A> void operator()(A &&...a) const {
    std::tuple<P...> args(std::forward<A>(a)...); /* converted once */
    struct Ctx {
      void (*kernel)(P...);
      std::tuple<P...> *args;
    } ctx{kernel, &args};
    /* each emulated thread calls the kernel on its own copies of the
     * arguments, as each CUDA thread reads the parameter space */
    run(spec,
        [](void *p) {
          Ctx *c = static_cast<Ctx *>(p);
          std::apply(c->kernel, *c->args);
        },
        &ctx);
  }
};

template <typename... P>
Launcher<P...> launch(void (*kernel)(P...), const char *name, const char *file,
                      int line, dim3 grid, dim3 block, size_t smem = 0,
                      cudaStream_t stream = 0) {
  (void)stream; /* every launch completes before it returns */
  return Launcher<P...>{
      kernel, LaunchSpec{reinterpret_cast<const void *>(kernel), name, file,
                         line, grid, block, smem}};
}

/* ---- warp collectives on any 4- or 8-byte value ---- */
template <typename T> uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8, "shuffled values are at most 8 bytes");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof v);
  return u;
}
template <typename T> T from_bits(uint64_t u) {
  T v;
  memcpy(&v, &u, sizeof v);
  return v;
}
/* value of lane src (which must take part) */
template <typename T>
T shfl_from(const Site &s, unsigned mask, T v, unsigned src) {
  uint64_t all[32];
  warp_collective(s, mask, to_bits(v), all);
  return from_bits<T>(all[src]);
}
template <typename T>
T shfl(const Site &s, unsigned mask, T v, int src, int width = 32) {
  const unsigned l = lane_id(), w = (unsigned)width;
  return shfl_from(s, mask, v, (l & ~(w - 1)) + ((unsigned)src & (w - 1)));
}
template <typename T>
T shfl_xor(const Site &s, unsigned mask, T v, int lane_mask, int width = 32) {
  const unsigned l = lane_id(), src = l ^ (unsigned)lane_mask;
  /* a source outside the lane's segment of `width` lanes: own value */
  const bool outside = (src & ~((unsigned)width - 1)) != (l & ~((unsigned)width - 1));
  return shfl_from(s, mask, v, outside ? l : src);
}
template <typename T>
T shfl_down(const Site &s, unsigned mask, T v, unsigned delta, int width = 32) {
  const unsigned l = lane_id(), seg = l & ~((unsigned)width - 1);
  const unsigned src = l + delta < seg + (unsigned)width ? l + delta : l;
  return shfl_from(s, mask, v, src);
}
unsigned ballot(const Site &s, unsigned mask, int pred);
void syncwarp(const Site &s, unsigned mask = 0xffffffffu);

} // namespace tg_emu

#define TG_EMU_SITE(what) (tg_emu::Site{what, __FILE__, __LINE__})
#define __syncthreads() \
  ((void)tg_emu::block_collective(TG_EMU_SITE("__syncthreads"), tg_emu::SYNC, 0))
#define __syncthreads_or(p) \
  tg_emu::block_collective(TG_EMU_SITE("__syncthreads_or"), tg_emu::OR, (p) != 0)
#define __syncthreads_and(p) \
  tg_emu::block_collective(TG_EMU_SITE("__syncthreads_and"), tg_emu::AND, (p) != 0)
#define __syncthreads_count(p) \
  tg_emu::block_collective(TG_EMU_SITE("__syncthreads_count"), tg_emu::COUNT, (p) != 0)
#define __syncwarp(...) tg_emu::syncwarp(TG_EMU_SITE("__syncwarp"), ##__VA_ARGS__)
#define __shfl_sync(...) tg_emu::shfl(TG_EMU_SITE("__shfl_sync"), __VA_ARGS__)
#define __shfl_xor_sync(...) tg_emu::shfl_xor(TG_EMU_SITE("__shfl_xor_sync"), __VA_ARGS__)
#define __shfl_down_sync(...) tg_emu::shfl_down(TG_EMU_SITE("__shfl_down_sync"), __VA_ARGS__)
#define __ballot_sync(m, p) tg_emu::ballot(TG_EMU_SITE("__ballot_sync"), (m), (p) != 0)

/* ---- host-side runtime calls that need C++ ---- */
template <typename F>
cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return tg_emu::set_max_dynamic_smem(reinterpret_cast<const void *>(kernel), value);
}

/* ---- atomics (sequentially consistent host atomics) ---- */
inline float atomicAdd(float *p, float v) {
  uint32_t old = __atomic_load_n(reinterpret_cast<uint32_t *>(p), __ATOMIC_SEQ_CST);
  for (;;) {
    const float sum = tg_emu::from_bits<float>(old) + v;
    uint32_t nb;
    memcpy(&nb, &sum, sizeof nb);
    if (__atomic_compare_exchange_n(reinterpret_cast<uint32_t *>(p), &old, nb, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return tg_emu::from_bits<float>(old);
  }
}
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned *p, unsigned v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

/* ---- integer and bit intrinsics, CUDA's overloaded min / max ---- */
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __float_as_uint(float f) { return tg_emu::from_bits<unsigned>(tg_emu::to_bits(f)); }
inline int __float_as_int(float f) { return tg_emu::from_bits<int>(tg_emu::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return tg_emu::from_bits<float>(tg_emu::to_bits(u)); }
inline float __int_as_float(int i) { return tg_emu::from_bits<float>(tg_emu::to_bits(i)); }

inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline size_t max(size_t a, size_t b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }

#endif
