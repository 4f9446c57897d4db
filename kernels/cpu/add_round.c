/*
 * taskgrad layer 1: one level of the ranks' reduce-scatter by recursive
 * halving (parallel/halving.c): add the partner's half, keep one part of the
 * sum in f32 and round the other part into the next message.
 *
 * Design note
 * -----------
 * One task per level instead of a widening, an addition and a rounding task
 * per piece: in StarPU's SimGrid model each task and each copy costs a
 * GPU's driver about 10 us, and 8 ranks spent more time there than in
 * their kernels (bench/results/2026-11-26-sim-mpi-halving.md).  The bits
 * are those of the separate tasks: the widening is exact, the addition is
 * a + recv (tg_cpu_accumulate's operand order), and the rounding is
 * tg_cpu_to_lowp's.  Work goes in chunks of ADD_ROUND_CHUNK floats on the C
 * stack, through the conversions' own array kernels.
 */
#include <string.h>

#include "taskgrad/precision_kernels.h"

enum { ADD_ROUND_CHUNK = 512 };

static size_t elem_bytes(tg_dtype comm) { return comm == TG_F32 ? sizeof(float) : 2; }

/* v[0, len) widened from the comm type */
static void widen(tg_dtype comm, const void *src, size_t len, float *v) {
  if (comm == TG_F32) memcpy(v, src, len * sizeof(float));
  else tg_cpu_from_lowp(comm, 1, (int)len, src, (int)len, v, (int)len);
}

static void narrow(tg_dtype comm, const float *v, size_t len, void *dst) {
  if (comm == TG_F32) memcpy(dst, v, len * sizeof(float));
  else tg_cpu_to_lowp(comm, 1, (int)len, v, (int)len, dst, (int)len);
}

/* the part of [lo, lo + len) that [off, off + n) covers: first index, count */
static size_t overlap(size_t lo, size_t len, size_t off, size_t n, size_t *first) {
  size_t a = lo > off ? lo : off, b = lo + len < off + n ? lo + len : off + n;
  *first = a;
  return b > a ? b - a : 0;
}

void tg_cpu_add_round(tg_dtype comm, size_t n, const float *a, const void *recv, float *out,
                      size_t out_off, size_t out_len, void *send, size_t send_off,
                      size_t send_len) {
  const size_t es = elem_bytes(comm);
  float v[ADD_ROUND_CHUNK];
  for (size_t lo = 0; lo < n; lo += ADD_ROUND_CHUNK) {
    size_t len = n - lo < ADD_ROUND_CHUNK ? n - lo : ADD_ROUND_CHUNK, first, k;
    if (recv) {
      widen(comm, (const char *)recv + lo * es, len, v);
      for (size_t i = 0; i < len; i++) v[i] = a[lo + i] + v[i];
    } else {
      memcpy(v, a + lo, len * sizeof(float));
    }
    if (out && (k = overlap(lo, len, out_off, out_len, &first)))
      memcpy(out + (first - out_off), v + (first - lo), k * sizeof(float));
    if (send && (k = overlap(lo, len, send_off, send_len, &first)))
      narrow(comm, v + (first - lo), k, (char *)send + (first - send_off) * es);
  }
}
