/*
 * Rows sum_tree and gather_rows (codelets/exchange.c; each case checks its
 * row's op), the exchange codelets of sharded data parallelism.
 *  ref       tg_cpu_sum_tree bit for bit against the midpoint tree done in
 *            separate accumulate steps (tg_cpu_accumulate on copies of the
 *            leaves, graphs/reduce.c's order), and within TOL_FWD of a
 *            float64 sum; n = 1, 2, 3, 5, 17, 64, sizes 1, 7, 33, 257 (rows
 *            wider than the kernel's 64-float chunk), inputs with their own
 *            leading dimensions and NaN padding, output padding intact.
 *            tg_cpu_gather_rows byte for byte (f32 and 2-byte elements)
 *            against the blocks of tg_split_start stacked, remainder blocks
 *            included;
 *  pair      both codelets through their insert wrappers (n up to 17, more
 *            than STARPU_NMAXBUFS buffers), on separate tensors, on column
 *            halves (ld != cols) and on the row blocks of a partitioned
 *            matrix; both workers' results bit for bit against the host
 *            references (the sum: also on CUDA, whose kernel adds in the same
 *            order), the gather in f32 and bf16; the cpu backend also checks
 *            the refusals (n, shapes, element sizes, aliased handles);
 *  cuda-emu  both launchers against the CPU kernels, exact.
 */

#include <errno.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"

/* ---- host references ----------------------------------------------------------- */

/* The midpoint tree in separate accumulate steps, as graphs/reduce.c's
 * tg_sum_tree submits them: leaf[lo] += leaf[mid] once both halves are
 * summed.  leaf[i]: compact (rows, cols) copies, overwritten; the sum ends
 * in leaf[lo]. */
static void tree_by_steps(float **leaf, int lo, int hi, int rows, int cols) {
  if (hi - lo < 2) return;
  int mid = lo + (hi - lo) / 2;
  tree_by_steps(leaf, lo, mid, rows, cols);
  tree_by_steps(leaf, mid, hi, rows, cols);
  tg_cpu_accumulate(rows, cols, leaf[lo], cols, leaf[mid], cols);
}

/* the exact tree sum of in[i] ((rows, ld[i]) each) into a compact result
 * (caller frees), and the float64 sum into *ref64 */
static float *sum_reference(int n, const float *const *in, const int *ld, int rows, int cols,
                            double **ref64) {
  float **leaf = xmalloc(sizeof *leaf * (size_t)n);
  double *d = xmalloc(sizeof *d * ((size_t)rows * cols + 1));
  memset(d, 0, sizeof *d * (size_t)rows * cols);
  for (int i = 0; i < n; i++) {
    leaf[i] = compact_f32(in[i], rows, cols, ld[i]);
    for (size_t k = 0; k < (size_t)rows * cols; k++) d[k] += leaf[i][k];
  }
  tree_by_steps(leaf, 0, n, rows, cols);
  float *res = leaf[0];
  for (int i = 1; i < n; i++) free(leaf[i]);
  free(leaf);
  if (ref64) *ref64 = d;
  else free(d);
  return res;
}

/* the rows of block j of `rows` rows in n blocks */
static int block_rows(int rows, int n, int j) {
  int size;
  tg_split_start(rows, n, j, &size);
  return size;
}

/* ---- ref --------------------------------------------------------------------------- */

static void ref_sum_tree(tg_rng *rng) {
  static const int NS_[] = {1, 2, 3, 5, 17, 64};
  for (size_t in_ = 0; in_ < sizeof NS_ / sizeof NS_[0]; in_++)
    for (int ir = 0; ir < NSIZES; ir++)
      for (int ic = 0; ic < NSIZES; ic++) {
        const int n = NS_[in_], rows = SIZES[ir], cols = SIZES[ic], ldo = cols + 2;
        if (n == 64 && (rows > 33 || cols > 33) && !(rows == 7 && cols == 257)) continue;
        float **in = xmalloc(sizeof *in * (size_t)n);
        int *ld = xmalloc(sizeof *ld * (size_t)n);
        for (int i = 0; i < n; i++) {
          ld[i] = cols + i % 3; /* contiguous, and padded with NaN */
          in[i] = tg_rand_mat(rng, rows, cols, ld[i], 1.0f, NAN);
        }
        float *out = tg_const_mat(rows, cols, ldo, NAN, OUT_PAD);
        tg_cpu_sum_tree(rows, cols, n, (const float *const *)in, ld, out, ldo);
        double *d;
        float *ref = sum_reference(n, (const float *const *)in, ld, rows, cols, &d);
        float *got = compact_f32(out, rows, cols, ldo);
        size_t differ = 0, total = (size_t)rows * cols;
        for (size_t k = 0; k < total; k++) differ += !same_bits(&got[k], &ref[k], 1);
        ops_note_error(differ ? INFINITY : 0, -1.0);
        CHECK(differ == 0, "sum_tree n=%d %dx%d: %zu of %zu values differ in their bits from "
              "the accumulate steps", n, rows, cols, differ, total);
        CHECK_REL(mat_err(out, rows, cols, ldo, d), TOL_FWD, "sum_tree against float64");
        CHECK(pad_intact(out, rows, cols, ldo, OUT_PAD), "sum_tree n=%d %dx%d wrote padding", n,
              rows, cols);
        free(got);
        free(ref);
        free(d);
        free(out);
        for (int i = 0; i < n; i++) free(in[i]);
        free(in);
        free(ld);
      }
}

/* random bytes; sentinel bytes 0xA5 in each row's padding */
static unsigned char *byte_mat(tg_rng *rng, int rows, size_t row_bytes, size_t ld_bytes) {
  unsigned char *m = xmalloc(rows * ld_bytes + 1);
  for (int r = 0; r < rows; r++)
    for (size_t b = 0; b < ld_bytes; b++)
      m[r * ld_bytes + b] = b < row_bytes ? (unsigned char)tg_rng_next(rng) : 0xA5;
  return m;
}

static void ref_gather_rows(tg_rng *rng) {
  static const int NS_[] = {1, 2, 3, 5, 17};
  static const size_t ES[] = {4, 2};
  for (int ie = 0; ie < 2; ie++)
    for (size_t in_ = 0; in_ < sizeof NS_ / sizeof NS_[0]; in_++)
      for (int ir = 0; ir < NSIZES; ir++)
        for (int ic = 0; ic < NSIZES; ic++) {
          const int n = NS_[in_], rows = SIZES[ir], cols = SIZES[ic], ldo = cols + 1;
          const size_t es = ES[ie];
          const void **in = xmalloc(sizeof *in * (size_t)n);
          int *ld = xmalloc(sizeof *ld * (size_t)n), *rin = xmalloc(sizeof *rin * (size_t)n);
          unsigned char *out = byte_mat(rng, rows, 0, ldo * es); /* all 0xA5 */
          unsigned char *want = byte_mat(rng, rows, 0, ldo * es);
          for (int j = 0; j < n; j++) {
            int start = tg_split_start(rows, n, j, &rin[j]);
            ld[j] = cols + 2 * (j % 2);
            unsigned char *b = byte_mat(rng, rin[j], cols * es, ld[j] * es);
            for (int r = 0; r < rin[j]; r++)
              memcpy(want + (size_t)(start + r) * ldo * es, b + (size_t)r * ld[j] * es,
                     cols * es);
            in[j] = b;
          }
          tg_cpu_gather_rows(cols, es, n, in, rin, ld, out, ldo);
          int same = memcmp(out, want, (size_t)rows * ldo * es) == 0;
          ops_note_error(same ? 0 : INFINITY, -1.0);
          CHECK(same, "gather_rows n=%d %dx%d, %zu-byte elements: bytes differ from the "
                "stacked blocks (or the padding was written)", n, rows, cols, es);
          for (int j = 0; j < n; j++) free((void *)in[j]);
          free(in);
          free(ld);
          free(rin);
          free(out);
          free(want);
        }
}

static void exchange_ref(void) {
  tg_rng rng = {.s = 0x5EED0E8C4A46E5ULL};
  if (ops_row_is("sum_tree")) ref_sum_tree(&rng);
  else ref_gather_rows(&rng);
}

/* ---- pair: cpu, cuda, device ----------------------------------------------------- */

enum { LAYOUT_TENSORS, LAYOUT_HALVES, LAYOUT_BLOCKS };

typedef struct xctx {
  int n, rows, cols, layout;
  tg_tensor *t; /* the input tensors (LAYOUT_BLOCKS: t[0] holds them all) */
  int (*insert)(int, const starpu_data_handle_t *, starpu_data_handle_t, const tg_task_opts *);
} xctx;

static const char *layout_name(int layout) {
  return layout == LAYOUT_TENSORS ? "tensors"
         : layout == LAYOUT_HALVES ? "column halves (ld = 2 cols)"
                                   : "row blocks of one matrix";
}

/* the input handles of a context, partitioning what the layout needs */
static void inputs_of(const xctx *c, starpu_data_handle_t *h) {
  if (c->layout == LAYOUT_BLOCKS) {
    struct starpu_data_filter f;
    memset(&f, 0, sizeof f);
    f.filter_func = starpu_matrix_filter_vertical_block; /* along ny = rows */
    f.nchildren = (unsigned)c->n;
    starpu_data_partition(c->t[0].handle, &f);
    for (int i = 0; i < c->n; i++) h[i] = starpu_data_get_sub_data(c->t[0].handle, 1, i);
    return;
  }
  for (int i = 0; i < c->n; i++) {
    if (c->layout == LAYOUT_HALVES) split_columns(&c->t[i]);
    h[i] = c->layout == LAYOUT_HALVES ? left_half(&c->t[i]) : c->t[i].handle;
  }
}

static void inputs_done(const xctx *c) {
  if (c->layout == LAYOUT_BLOCKS) unsplit(&c->t[0]);
  else if (c->layout == LAYOUT_HALVES)
    for (int i = 0; i < c->n; i++) unsplit(&c->t[i]);
}

/* the insert wrapper of the context's op on its inputs */
static int exchange_submit(const void *vctx, const tg_task_opts *o, tg_tensor *out) {
  const xctx *c = vctx;
  starpu_data_handle_t h[TG_EXCHANGE_MAX];
  inputs_of(c, h);
  int rc = c->insert(c->n, h, out[0].handle, o);
  inputs_done(c);
  return rc;
}

/* compares a worker's result with the host reference, bit for bit */
static void against_ref(const char *what, const char *side, const void *got, const void *ref,
                        size_t bytes) {
  int same = memcmp(got, ref, bytes) == 0;
  ops_note_error(same ? 0 : INFINITY, -1.0);
  CHECK(same, "%s: the %s worker's result differs from the host reference", what, side);
}

/* one sum_tree case: n inputs of (rows, cols) in the layout */
static void pair_sum_tree_case(int n, int rows, int cols, int layout) {
  const int tcols = layout == LAYOUT_HALVES ? 2 * cols : cols;
  const int trows = layout == LAYOUT_BLOCKS ? n * rows : rows;
  const int ntensors = layout == LAYOUT_BLOCKS ? 1 : n;
  tg_tensor t[TG_EXCHANGE_MAX];
  float *host[TG_EXCHANGE_MAX];
  const float *in[TG_EXCHANGE_MAX];
  int ld[TG_EXCHANGE_MAX];
  for (int i = 0; i < ntensors; i++) {
    host[i] = rnd((size_t)trows * tcols, 1.0f);
    new_tensor(&t[i], trows, tcols, host[i]);
  }
  for (int i = 0; i < n; i++) {
    in[i] = layout == LAYOUT_BLOCKS ? host[0] + (size_t)i * rows * cols : host[i];
    ld[i] = tcols;
  }
  float *ref = sum_reference(n, in, ld, rows, cols, NULL);
  xctx c = {.n = n, .rows = rows, .cols = cols, .layout = layout, .t = t,
            .insert = tg_sum_tree_insert};
  outspec os = {.name = "out", .rows = rows, .cols = cols, .init = NULL, .redux = 0,
                .tol = PAIR_EXACT};
  char what[128];
  snprintf(what, sizeof what, "sum_tree n=%d %dx%d on %s", n, rows, cols, layout_name(layout));
  float *cpu = NULL, *second = NULL;
  run_pair(what, exchange_submit, &c, 1, &os, &cpu, &second);
  against_ref(what, "CPU", cpu, ref, sizeof(float) * (size_t)rows * cols);
  against_ref(what, pair_second_name(), second, ref, sizeof(float) * (size_t)rows * cols);
  free(cpu);
  free(second);
  free(ref);
  for (int i = 0; i < ntensors; i++) {
    tg_tensor_free(&t[i]);
    free(host[i]);
  }
}

/* tg_gather_rows_after_insert with a gate that a task wrote just before
 * (row gather_rows_after: the same cases, and the gate must not change
 * the bytes) */
static tg_tensor g_gate;
static int gather_after_insert(int n, const starpu_data_handle_t *in, starpu_data_handle_t out,
                               const tg_task_opts *o) {
  if (!g_gate.handle) {
    new_tensor(&g_gate, 3, 2, NULL);
    if (tg_fill_insert(g_gate.handle, 1.0f, NULL) != 0) die("tg_fill_insert");
  }
  return tg_gather_rows_after_insert(n, in, out, g_gate.handle, o);
}

/* one gather case: out (rows, cols) of dtype dt from n blocks in the layout
 * (LAYOUT_BLOCKS: the blocks of one (rows, cols) matrix, which the gather
 * copies back whole) */
static void pair_gather_case(int n, int rows, int cols, int layout, tg_dtype dt) {
  const size_t es = dt == TG_F32 ? 4 : 2, bytes = es * (size_t)rows * cols;
  const int tcols = layout == LAYOUT_HALVES ? 2 * cols : cols;
  const int ntensors = layout == LAYOUT_BLOCKS ? 1 : n;
  tg_tensor t[TG_EXCHANGE_MAX];
  unsigned char *want = xmalloc(bytes);
  for (int i = 0; i < ntensors; i++) {
    int brows = layout == LAYOUT_BLOCKS ? rows : block_rows(rows, n, i);
    size_t tb = es * (size_t)brows * tcols;
    unsigned char *b = xmalloc(tb + 1);
    for (size_t k = 0; k < tb; k++) b[k] = (unsigned char)tg_rng_next(&g_pair_rng);
    if (tg_tensor_alloc(&t[i], brows, tcols, dt) != 0 || tg_tensor_write(&t[i], b) != 0)
      die("tg_tensor_alloc");
    if (layout == LAYOUT_BLOCKS) {
      memcpy(want, b, bytes);
    } else {
      int start = tg_split_start(rows, n, i, NULL);
      for (int r = 0; r < brows; r++)
        memcpy(want + es * (size_t)(start + r) * cols, b + es * (size_t)r * tcols, es * cols);
    }
    free(b);
  }
  xctx c = {.n = n, .rows = rows, .cols = cols, .layout = layout, .t = t,
            .insert = ops_row_is("gather_rows_after") ? gather_after_insert
                                                        : tg_gather_rows_insert};
  char what[160];
  snprintf(what, sizeof what, "gather_rows n=%d %dx%d %s on %s", n, rows, cols,
           tg_dtype_name(dt), layout_name(layout));
  /* the pair by hand: the outputs' bytes, whatever the dtype */
  const int workers[2] = {g_cpu_worker, g_cuda_worker};
  tg_tensor out[2];
  unsigned char *got[2];
  for (int side = 0; side < 2; side++) {
    unsigned char *init = xmalloc(bytes);
    memset(init, 0xA5, bytes); /* write-only: whatever was there is overwritten */
    if (tg_tensor_alloc(&out[side], rows, cols, dt) != 0 || tg_tensor_write(&out[side], init))
      die("tg_tensor_alloc");
    free(init);
    tg_task_opts o = on_worker(workers[side]);
    int rc = exchange_submit(&c, &o, &out[side]);
    CHECK(rc == 0, "%s: submission on the %s worker failed: %s", what,
          side ? pair_second_name() : "CPU", tg_last_error());
  }
  for (int side = 0; side < 2; side++) {
    got[side] = xmalloc(bytes);
    if (tg_tensor_read(&out[side], got[side]) != 0) die("tg_tensor_read");
    against_ref(what, side ? pair_second_name() : "CPU", got[side], want, bytes);
    tg_tensor_free(&out[side]);
  }
  int same = memcmp(got[0], got[1], bytes) == 0;
  CHECK(same, "%s: the two workers' bytes differ", what);
  free(got[0]);
  free(got[1]);
  free(want);
  for (int i = 0; i < ntensors; i++) tg_tensor_free(&t[i]);
}

/* the insert wrappers refuse bad arguments before submitting anything */
static void refusals(void) {
  tg_tensor a, b, c, o, h16, o16, big;
  new_tensor(&a, 7, 5, NULL);
  new_tensor(&b, 7, 5, NULL);
  new_tensor(&c, 7, 4, NULL);
  new_tensor(&o, 7, 5, NULL);
  new_tensor(&big, 4, 5, NULL);
  new_low(&h16, TG_BF16, 7, 5, (float[35]){0});
  new_low(&o16, TG_BF16, 7, 5, (float[35]){0});
  starpu_data_handle_t many[TG_EXCHANGE_MAX + 1];
  for (int i = 0; i <= TG_EXCHANGE_MAX; i++) many[i] = a.handle;
  if (ops_row_is("sum_tree")) {
    const char *op = "tg_sum_tree";
    CHECK_REFUSED(tg_sum_tree_insert(0, many, o.handle, NULL), op, "n = 0");
    CHECK_REFUSED(tg_sum_tree_insert(TG_EXCHANGE_MAX + 1, many, o.handle, NULL), op,
                  "n = TG_EXCHANGE_MAX + 1");
    CHECK_REFUSED(tg_sum_tree_insert(2, (starpu_data_handle_t[]){a.handle, o.handle}, o.handle,
                                     NULL), op, "out among the inputs");
    CHECK_REFUSED(tg_sum_tree_insert(3, (starpu_data_handle_t[]){a.handle, b.handle, a.handle},
                                     o.handle, NULL), op, "an input twice");
    CHECK_REFUSED(tg_sum_tree_insert(2, (starpu_data_handle_t[]){a.handle, c.handle}, o.handle,
                                     NULL), op, "inputs of different shapes");
    CHECK_REFUSED(tg_sum_tree_insert(2, (starpu_data_handle_t[]){a.handle, h16.handle},
                                     o.handle, NULL), op, "a bf16 input");
    CHECK_REFUSED(tg_sum_tree_insert(2, (starpu_data_handle_t[]){a.handle, b.handle},
                                     o16.handle, NULL), op, "a bf16 output");
  } else {
    const char *op = "tg_gather_rows";
    /* rows 7 in 2 blocks: 4 and 3 */
    CHECK_REFUSED(tg_gather_rows_insert(0, many, o.handle, NULL), op, "n = 0");
    CHECK_REFUSED(tg_gather_rows_insert(TG_EXCHANGE_MAX + 1, many, o.handle, NULL), op,
                  "n = TG_EXCHANGE_MAX + 1");
    CHECK_REFUSED(tg_gather_rows_insert(2, (starpu_data_handle_t[]){big.handle, o.handle},
                                        o.handle, NULL), op, "out among the inputs");
    CHECK_REFUSED(tg_gather_rows_insert(2, (starpu_data_handle_t[]){big.handle, big.handle},
                                        o.handle, NULL), op, "an input twice");
    CHECK_REFUSED(tg_gather_rows_insert(2, (starpu_data_handle_t[]){big.handle, a.handle},
                                        o.handle, NULL), op, "a block of the wrong rows");
    CHECK_REFUSED(tg_gather_rows_insert(1, (starpu_data_handle_t[]){c.handle}, o.handle, NULL),
                  op, "a block of the wrong cols");
    CHECK_REFUSED(tg_gather_rows_insert(1, (starpu_data_handle_t[]){h16.handle}, o.handle, NULL),
                  op, "a bf16 block into an f32 output");
    CHECK_REFUSED(tg_gather_rows_insert(1, (starpu_data_handle_t[]){a.handle}, o16.handle, NULL),
                  op, "an f32 block into a bf16 output");
    if (ops_row_is("gather_rows_after")) {
      CHECK_REFUSED(tg_gather_rows_after_insert(2, (starpu_data_handle_t[]){big.handle, b.handle},
                                                o.handle, b.handle, NULL),
                    op, "the gate among the inputs");
      CHECK_REFUSED(tg_gather_rows_after_insert(1, (starpu_data_handle_t[]){a.handle}, o.handle,
                                                o.handle, NULL),
                    op, "the gate is the output");
      CHECK_REFUSED(tg_gather_rows_after_insert(TG_EXCHANGE_MAX, many, o.handle, b.handle, NULL),
                    op, "n = TG_EXCHANGE_MAX and a gate");
    }
  }
  tg_tensor *all[] = {&a, &b, &c, &o, &h16, &o16, &big};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
}

static void pair_exchange(void) {
  if (ops_row_is("sum_tree")) {
    static const int cases[][3] = {{1, 7, 5}, {2, 7, 5}, {3, 33, 7}, {5, 257, 33}, {17, 65, 9}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
      pair_sum_tree_case(cases[k][0], cases[k][1], cases[k][2], LAYOUT_TENSORS);
    pair_sum_tree_case(3, 7, 70, LAYOUT_HALVES);
    pair_sum_tree_case(5, 9, 7, LAYOUT_BLOCKS);
    pair_sum_tree_case(17, 3, 33, LAYOUT_BLOCKS);
  } else {
    /* rows 7 in 3 blocks: 3, 2, 2; 40 in 17: 3 x 6 and 2 x 11 */
    static const int cases[][3] = {{1, 7, 9}, {2, 5, 9}, {3, 7, 9}, {5, 33, 7}, {17, 40, 3}};
    static const tg_dtype dts[2] = {TG_F32, TG_BF16};
    for (int d = 0; d < 2; d++) {
      for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        pair_gather_case(cases[k][0], cases[k][1], cases[k][2], LAYOUT_TENSORS, dts[d]);
      pair_gather_case(3, 7, 5, LAYOUT_HALVES, dts[d]);
      pair_gather_case(3, 7, 9, LAYOUT_BLOCKS, dts[d]);
      pair_gather_case(17, 40, 3, LAYOUT_BLOCKS, dts[d]);
    }
  }
  if (ops_current_backend() == OPS_CPU) refusals();
  tg_tensor_free(&g_gate);
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ------------------------------------------------------------------ */

static void emu_sum_tree(void) {
  static const int NS_[] = {1, 2, 3, 5, 17, 64};
  for (int s = 0; s < NSHAPES; s++)
    for (size_t k = 0; k < sizeof NS_ / sizeof NS_[0]; k++) {
      FULL_ONLY(s != 1 || NS_[k] != 17);
      const int n = NS_[k], rows = g_shapes[s][0], cols = g_shapes[s][1], ldo = cols + 3;
      float *in[TG_CUDA_SUM_TREE_MAX];
      int ld[TG_CUDA_SUM_TREE_MAX];
      for (int i = 0; i < n; i++) {
        ld[i] = cols + i % 2;
        in[i] = input(rows, cols, ld[i], 1.0f);
      }
      float *o[2];
      outputs(o, rows, cols, ldo, 0);
      ok("tg_cuda_sum_tree", "",
         tg_cuda_sum_tree(rows, cols, n, (const float *const *)in, ld, o[0], ldo, NULL));
      tg_cpu_sum_tree(rows, cols, n, (const float *const *)in, ld, o[1], ldo);
      compare("tg_cuda_sum_tree", "out", o[0], o[1], (size_t)rows * ldo, EXACT);
      free2(o);
      for (int i = 0; i < n; i++) free(in[i]);
    }
  /* more inputs than the kernel's parameters hold */
  float x = 0;
  const float *many[TG_CUDA_SUM_TREE_MAX + 1];
  int ld[TG_CUDA_SUM_TREE_MAX + 1];
  for (int i = 0; i <= TG_CUDA_SUM_TREE_MAX; i++) many[i] = &x, ld[i] = 1;
  CHECK(tg_cuda_sum_tree(1, 1, TG_CUDA_SUM_TREE_MAX + 1, many, ld, &x, 1, NULL) != cudaSuccess,
        "tg_cuda_sum_tree accepted %d inputs", TG_CUDA_SUM_TREE_MAX + 1);
  tg_emu_reset();
}

static void emu_gather_rows(void) {
  static const int NS_[] = {1, 2, 3, 5, 17};
  for (int s = 0; s < NSHAPES; s++)
    for (size_t k = 0; k < sizeof NS_ / sizeof NS_[0]; k++)
      for (size_t es = 2; es <= 4; es += 2) {
        FULL_ONLY(s != 1 || NS_[k] != 3);
        const int n = NS_[k], rows = g_shapes[s][0], cols = g_shapes[s][1], ldo = cols + 3;
        /* bytes as floats: (rows, ldo) floats hold any 2-byte layout too */
        const void *in[TG_CUDA_SUM_TREE_MAX];
        int ld[TG_CUDA_SUM_TREE_MAX], rin[TG_CUDA_SUM_TREE_MAX];
        for (int j = 0; j < n; j++) {
          tg_split_start(rows, n, j, &rin[j]);
          ld[j] = cols + j % 3;
          in[j] = input(rin[j] > 0 ? rin[j] : 1, ld[j], ld[j], 1.0f);
        }
        float *o[2];
        outputs(o, rows, cols, ldo, 1);
        ok("tg_cuda_gather_rows", "",
           tg_cuda_gather_rows(cols, es, n, in, rin, ld, o[0], ldo, NULL));
        tg_cpu_gather_rows(cols, es, n, in, rin, ld, o[1], ldo);
        compare("tg_cuda_gather_rows", es == 4 ? "out f32" : "out 16-bit", o[0], o[1],
                (size_t)rows * ldo, EXACT);
        free2(o);
        for (int j = 0; j < n; j++) free((void *)in[j]);
      }
}

static void emu_exchange(void) {
  if (ops_row_is("sum_tree")) emu_sum_tree();
  else emu_gather_rows();
}
#endif /* OPS_EMU */

#define EXCHANGE_CASES                                                                      \
  .run = {[OPS_REF] = exchange_ref, [OPS_CPU] = pair_exchange, [OPS_CUDA] = pair_exchange,  \
          [OPS_DEVICE] = pair_exchange, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_exchange)},       \
  .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY,                                                \
              [OPS_LOWP] = "no low-precision adapter: the sum is f32 only (a 16-bit buffer " \
                           "is refused, cpu case) and the gather copies 16-bit bytes "       \
                           "natively (bf16 pair cases)"}

static const ops_row rows[] = {
    {.name = "sum_tree",
     .doc = "sum of n inputs in the fixed midpoint tree (the bits of the deterministic "
            "micro-batch sums), 1 <= n <= `TG_EXCHANGE_MAX`",
     .buffers = "out (W), in[0 .. n-1] (R)",
     .covers = "tg_sum_tree_cl tg_sum_tree_insert tg_cuda_sum_tree",
     .kernels = "tg_cpu_sum_tree",
     EXCHANGE_CASES},
    {.name = "gather_rows",
     .doc = "row blocks (`tg_split_start`) stacked into one matrix, f32 or 16-bit bytes",
     .buffers = "out (W), in[0 .. n-1] (R)",
     .covers = "tg_gather_rows_cl tg_gather_rows_insert tg_cuda_gather_rows",
     .kernels = "tg_cpu_gather_rows",
     EXCHANGE_CASES},
    {.name = "gather_rows_after",
     .doc = "gather_rows started once a gate's last writer is done (the gate is read, "
            "never touched: the same bytes)",
     .buffers = "out (W), in[0 .. n-1] (R), gate (R)",
     .covers = "tg_gather_rows_after_insert",
     .kernels = "tg_cpu_gather_rows",
     EXCHANGE_CASES},
};

OPS_ROWS(rows)
