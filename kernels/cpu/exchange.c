/*
 * taskgrad layer 1: the exchange kernels of sharded data parallelism
 * (codelets/exchange.c): the fixed-tree sum of n equally shaped matrices
 * and the stacking of row blocks.
 *
 * Design note
 * -----------
 * The sum must have the bits of the deterministic micro-batch sums
 * (graphs/reduce.c), which add their leaves with accumulate tasks in the
 * midpoint tree: sum(lo, hi) = sum(lo, mid) + sum(mid, hi), mid = lo +
 * (hi - lo) / 2, each node one float addition of its two halves.  Here the
 * tree runs over column chunks of one row at a time: a chunk of the left
 * half's sum goes into `dst` (the output row for the root), the right half's
 * into a chunk of a small stack array (one per tree level, on the C stack),
 * then dst = left + right.  A leaf is not copied: its input row is read in
 * place.  No heap memory, no allocation per row, any n >= 1 (the tree is at
 * most 31 levels deep for an int n); the additions are plain float adds, so
 * FMA contraction cannot change them.
 *
 * The gather copies bytes (any element size: f32, bf16, fp16), one memcpy
 * per row.
 */
#include <string.h>

#include "taskgrad/kernels_cpu.h"

#define TG_TREE_CHUNK 64  /* floats of one row chunk */
#define TG_TREE_LEVELS 32 /* right halves pending at once, at most */

typedef struct tg_tree {
  const float *const *in;
  const int *ld_in;
  size_t r, c0; /* the chunk: row r, columns c0 .. c0 + w - 1 */
  int w;
  float (*tmp)[TG_TREE_CHUNK];
} tg_tree;

/* sum of inputs lo .. hi-1 over one chunk: the input itself for one leaf,
 * else written to dst (which the right half's work never touches) */
static const float *tg_tree_sum(const tg_tree *t, int lo, int hi, float *dst, int level) {
  if (hi - lo == 1) return t->in[lo] + t->r * (size_t)t->ld_in[lo] + t->c0;
  const int mid = lo + (hi - lo) / 2;
  const float *a = tg_tree_sum(t, lo, mid, dst, level + 1);
  const float *b = tg_tree_sum(t, mid, hi, t->tmp[level], level + 1);
  for (int i = 0; i < t->w; i++) dst[i] = a[i] + b[i];
  return dst;
}

void tg_cpu_sum_tree(int rows, int cols, int n, const float *const *in, const int *ld_in,
                     float *out, int ldo) {
  if (rows <= 0 || cols <= 0 || n <= 0) return;
  float tmp[TG_TREE_LEVELS][TG_TREE_CHUNK]; /* 8 KiB */
  for (int r = 0; r < rows; r++)
    for (int c0 = 0; c0 < cols; c0 += TG_TREE_CHUNK) {
      const tg_tree t = {.in = in, .ld_in = ld_in, .r = (size_t)r, .c0 = (size_t)c0,
                         .w = cols - c0 < TG_TREE_CHUNK ? cols - c0 : TG_TREE_CHUNK,
                         .tmp = tmp};
      float *dst = out + (size_t)r * ldo + c0;
      const float *s = tg_tree_sum(&t, 0, n, dst, 0);
      if (s != dst) memcpy(dst, s, sizeof(float) * (size_t)t.w); /* n == 1 */
    }
}

void tg_cpu_gather_rows(int cols, size_t elemsize, int n, const void *const *in,
                        const int *rows_in, const int *ld_in, void *out, int ldo) {
  if (cols <= 0) return;
  char *o = out;
  const size_t bytes = elemsize * (size_t)cols;
  for (int j = 0; j < n; j++) {
    const char *s = in[j];
    for (int r = 0; r < rows_in[j]; r++) {
      memcpy(o, s + (size_t)r * ld_in[j] * elemsize, bytes);
      o += (size_t)ldo * elemsize;
    }
  }
}
