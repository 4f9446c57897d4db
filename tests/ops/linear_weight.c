/*
 * Row linear_bwd_weight (codelets/linear_weight.c): a linear layer's
 * weight and bias gradients in one task, dW (+)= dZ^T X, db (+)= column
 * sums of dZ, the GPT backward's fusion of the rows gemm / gemm_lowp and
 * bias_grad.
 *  ref       tg_cpu_bias_grad_lowp (the 16-bit column sums it adds) against
 *            float64 on the widened values and bit for bit against
 *            tg_cpu_bias_grad on the widened dZ, beta 0 over NaN and beta
 *            1, padded leading dimensions, more columns than one tile;
 *  cpu       f32 dZ and X bit for bit against tg_gemm then tg_bias_grad,
 *            overwritten and accumulated; then the pair cases;
 *  pair      f32 dZ and X, rows 33 and 64 (remainder tiles), overwritten
 *            (NaN before) and accumulated;
 *  cuda-emu  tg_cuda_bias_grad_lowp against the CPU kernel, bf16 and fp16,
 *            beta 0 over NaN and beta 1;
 *  lowp      16-bit dZ and X, TG_OVERWRITE and TG_ACCUMULATE: equal bit
 *            for bit to tg_gemm_lowp then tg_bias_grad (the two tasks it
 *            replaces), with 1 and 2 CPU workers; dZ and X of different
 *            types and 16-bit without opts.lowp refused.
 */

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/precision_kernels.h"

/* ---- ref --------------------------------------------------------------------- */

/* (rows, ld) 16-bit matrix of rounded uniform values and its f32 widening
 * (compact); padding NaN patterns */
static uint16_t *rand16(tg_rng *rng, tg_dtype t, int rows, int cols, int ld, float **wide) {
  uint16_t *m = tg_test_malloc(sizeof(uint16_t) * (size_t)rows * ld);
  *wide = tg_test_malloc(sizeof(float) * (size_t)rows * cols);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < ld; c++) {
      float x = tg_rng_uniform(rng);
      uint16_t h = t == TG_BF16 ? tg_f32_to_bf16(x) : tg_f32_to_f16(x);
      m[(size_t)r * ld + c] = c < cols ? h : (t == TG_BF16 ? 0x7fc0 : 0x7e00);
      if (c < cols)
        (*wide)[(size_t)r * cols + c] = t == TG_BF16 ? tg_bf16_to_f32(h) : tg_f16_to_f32(h);
    }
  return m;
}

static void bias_lowp_case(tg_rng *rng, tg_dtype t, int rows, int cols, float beta) {
  char what[96];
  int ld = cols + 3;
  float *wide;
  uint16_t *dY = rand16(rng, t, rows, cols, ld, &wide);
  float *db = tg_pad_mat(rng, 1, cols, cols, 1.0f, 0.0f, 0.0f), *db2 = tg_copy_f(db, cols);
  double *ref = tg_test_malloc(sizeof(double) * cols);
  for (int c = 0; c < cols; c++) {
    double s = 0;
    for (int r = 0; r < rows; r++) s += wide[(size_t)r * cols + c];
    ref[c] = beta == 0.0f ? s : beta * (double)db[c] + s;
    if (beta == 0.0f) db[c] = db2[c] = NAN; /* write-only */
  }
  tg_cpu_bias_grad_lowp(t, rows, cols, dY, ld, beta, db);
  tg_cpu_bias_grad(rows, cols, wide, cols, beta, db2);
  snprintf(what, sizeof what, "bias_grad_lowp %s %dx%d beta %g", tg_dtype_name(t), rows, cols,
           (double)beta);
  CHECK_REL(tg_rel_err_f64(db, ref, cols), TOL_FWD, what);
  CHECK(same_bits(db, db2, (size_t)cols), "%s differs from tg_cpu_bias_grad on the widened dY",
        what);
  free(dY); free(wide); free(db); free(db2); free(ref);
}

static void linear_weight_ref(void) {
  tg_rng rng = {.s = 0x2545F4914F6CDD1DULL};
  static const int shapes[][2] = {{1, 1}, {7, 33}, {100, 64}, {33, 600}};
  for (int k = 0; k < 2; k++)
    for (int s = 0; s < 4; s++)
      for (int b = 0; b < 2; b++)
        bias_lowp_case(&rng, LOWP[k], shapes[s][0], shapes[s][1], b ? 1.0f : 0.0f);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int lw_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_linear_bwd_weight_insert(c->h[0], c->h[1], out[0].handle, out[1].handle, c->accum,
                                     o);
}

static void pair_linear_weight(void) {
  static const int shapes[][3] = {{33, 17, 40}, {64, 257, 33}}; /* rows, out, in */
  for (int s = 0; s < 2; s++) {
    int rows = shapes[s][0], out = shapes[s][1], in = shapes[s][2];
    float *dz = rnd((size_t)rows * out, 1), *x = rnd((size_t)rows * in, 1);
    float *dw0 = rnd((size_t)out * in, 1), *db0 = rnd(out, 1);
    tg_tensor DZ, X;
    new_tensor(&DZ, rows, out, dz);
    new_tensor(&X, rows, in, x);
    for (int acc = 0; acc < 2; acc++) {
      gctx c = {.h = {DZ.handle, X.handle}, .accum = acc ? TG_ACCUMULATE : TG_OVERWRITE};
      outspec o[2] = {{.name = "dW", .rows = out, .cols = in, .init = acc ? dw0 : NULL,
                       .redux = 0, .tol = rows >= 257 ? TOL_LARGE_K : TOL},
                      {.name = "db", .rows = 1, .cols = out, .init = acc ? db0 : NULL,
                       .redux = 0, .tol = TOL}};
      char what[80];
      snprintf(what, sizeof what, "linear_bwd_weight %dx%dx%d %s", rows, out, in,
               acc ? "accumulated" : "overwritten");
      run_pair(what, lw_submit, &c, 2, o, NULL, NULL);
    }
    free(dz); free(x); free(dw0); free(db0);
    tg_tensor_free(&DZ);
    tg_tensor_free(&X);
  }
}

/* cpu: f32 dZ and X against tg_gemm then tg_bias_grad, bit for bit (both
 * on the CPU worker), then the pair cases */
static void cpu_linear_weight(void) {
  const int rows = 41, out = 23, in = 300;
  for (int acc = 0; acc < 2; acc++) {
    tg_accum accum = acc ? TG_ACCUMULATE : TG_OVERWRITE;
    float *dz = rnd((size_t)rows * out, 1), *x = rnd((size_t)rows * in, 1);
    float *dw0 = rnd((size_t)out * in, 1), *db0 = rnd(out, 1);
    tg_tensor DZ, X, dW, db, dW2, db2;
    new_tensor(&DZ, rows, out, dz);
    new_tensor(&X, rows, in, x);
    new_tensor(&dW, out, in, dw0);
    new_tensor(&db, 1, out, db0);
    new_tensor(&dW2, out, in, dw0);
    new_tensor(&db2, 1, out, db0);
    tg_task_opts o = on_worker(g_cpu_worker);
    CHECK(tg_linear_bwd_weight_insert(DZ.handle, X.handle, dW.handle, db.handle, accum, &o) ==
              0,
          "fused: %s", tg_last_error());
    CHECK(tg_gemm_insert(1, 0, 1.0f, DZ.handle, X.handle, 1.0f, dW2.handle, accum, &o) == 0,
          "gemm: %s", tg_last_error());
    CHECK(tg_bias_grad_insert(DZ.handle, db2.handle, accum, &o) == 0, "bias_grad: %s",
          tg_last_error());
    tg_tensor *got[] = {&dW, &db, &dW2, &db2};
    float *v[4];
    for (int i = 0; i < 4; i++) {
      v[i] = xmalloc(sizeof(float) * (size_t)got[i]->rows * got[i]->cols);
      CHECK(tg_tensor_read(got[i], v[i]) == 0, "read: %s", tg_last_error());
    }
    CHECK(same_bits(v[0], v[2], (size_t)out * in) && same_bits(v[1], v[3], (size_t)out),
          "f32 linear_bwd_weight (%s) differs from gemm then bias_grad",
          acc ? "accumulate" : "overwrite");
    for (int i = 0; i < 4; i++) free(v[i]);
    tg_tensor *all[] = {&DZ, &X, &dW, &db, &dW2, &db2};
    for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
    free(dz); free(x); free(dw0); free(db0);
  }
  pair_linear_weight();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"
#include "taskgrad/kernels_cuda_precision.h"
#include "scratch_sizes.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_linear_weight(void) {
  /* 1000 x 96: the launcher's row slices (scratch partials) */
  static const int shapes[][2] = {{1, 1}, {7, 33}, {130, 40}, {33, 600}, {1000, 96}};
  for (int s = 0; s < 5; s++) {
    FULL_ONLY(s != 1 && s != 2 && s != 4);
    const int rows = shapes[s][0], cols = shapes[s][1], ld = cols + 2;
    for (int k = 0; k < 2; k++)
      for (int b = 0; b < 2; b++) {
        float *wide;
        uint16_t *dY = rand16(&g_rng, LOWP[k], rows, cols, ld, &wide);
        float *db[2];
        outputs(db, 1, cols, cols, b);
        if (!b)
          for (int c = 0; c < cols; c++) db[0][c] = db[1][c] = NAN;
        const size_t wf = tg_bias_grad_scratch_floats(rows, cols);
        float *work = wf ? tg_test_malloc(sizeof(float) * wf) : NULL;
        ok("tg_cuda_bias_grad_lowp", tg_dtype_name(LOWP[k]),
           tg_cuda_bias_grad_lowp(LOWP[k], rows, cols, dY, ld, (float)b, db[0], work,
                                  sizeof(float) * wf, NULL));
        free(work);
        tg_cpu_bias_grad_lowp(LOWP[k], rows, cols, dY, ld, (float)b, db[1]);
        compare("tg_cuda_bias_grad_lowp", b ? "accumulated" : "overwritten", db[0], db[1],
                (size_t)cols, kTolRed);
        free2(db);
        free(dY);
        free(wide);
      }
  }
}
#endif /* OPS_EMU */

/* ---- lowp -------------------------------------------------------------------- */

/* the fused task against tg_gemm_lowp then tg_bias_grad, bit for bit */
static void linear_weight_case(tg_rng *rng, tg_dtype t, tg_accum accum) {
  int rows = 37, out = 29, in = 45;
  float *dz = rounded_rand(rng, t, rows, out, 1.0f), *x = rounded_rand(rng, t, rows, in, 1.0f);
  float *dw0 = tg_rand_mat(rng, out, in, in, 1.0f, 0.0f), *db0 = tg_rand_mat(rng, 1, out, out, 1.0f, 0.0f);
  tg_tensor DZ, X, DZ32, dW, db, dW2, db2;
  new_low(&DZ, t, rows, out, dz);
  new_low(&X, t, rows, in, x);
  new_f32(&DZ32, rows, out, dz);
  new_f32(&dW, out, in, dw0);
  new_f32(&db, 1, out, db0);
  new_f32(&dW2, out, in, dw0);
  new_f32(&db2, 1, out, db0);
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
  CHECK(tg_linear_bwd_weight_insert(DZ.handle, X.handle, dW.handle, db.handle, accum, &o) == 0,
        "fused: %s", tg_last_error());
  CHECK(tg_gemm_lowp_insert(t, 1, 0, 1.0f, DZ.handle, X.handle, 1.0f, dW2.handle, accum, &o) ==
            0,
        "gemm_lowp: %s", tg_last_error());
  CHECK(tg_bias_grad_insert(DZ.handle, db2.handle, accum, &o) == 0, "bias_grad: %s",
        tg_last_error());
  float *a = read_as_f32(&dW, TG_F32), *b = read_as_f32(&dW2, TG_F32);
  float *c = read_as_f32(&db, TG_F32), *d = read_as_f32(&db2, TG_F32);
  CHECK(same_bits(a, b, (size_t)out * in) && same_bits(c, d, (size_t)out),
        "%s linear_bwd_weight (%s) differs from gemm_lowp then bias_grad", tg_dtype_name(t),
        accum == TG_OVERWRITE ? "overwrite" : "accumulate");
  CHECK_REFUSED(tg_linear_bwd_weight_insert(DZ.handle, DZ32.handle, dW.handle, db.handle, accum,
                                            &o),
                "tg_linear_bwd_weight", "a 16-bit dZ with an f32 X");
  CHECK_REFUSED(tg_linear_bwd_weight_insert(DZ.handle, X.handle, dW.handle, db.handle, accum,
                                            NULL),
                "tg_linear_bwd_weight", "16-bit dZ and X without opts.lowp");
  free(a); free(b); free(c); free(d);
  tg_tensor *all[] = {&DZ, &X, &DZ32, &dW, &db, &dW2, &db2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(dz); free(x); free(dw0); free(db0);
}

static void linear_weight_lowp_body(void) {
  tg_rng rng = {.s = 4242};
  for (int k = 0; k < 2; k++) {
    linear_weight_case(&rng, LOWP[k], TG_OVERWRITE);
    linear_weight_case(&rng, LOWP[k], TG_ACCUMULATE);
  }
}

static void linear_weight_lowp(void) { ops_run_worker_counts(linear_weight_lowp_body); }

static const ops_row rows[] = {
    {.name = "linear_bwd_weight",
     .doc = "a linear layer's weight and bias gradients, one task",
     .buffers = "dZ, X (R), dW, db (W / RW / REDUX), scratch",
     .covers = "tg_linear_bwd_weight_cl tg_linear_bwd_weight_insert tg_cuda_bias_grad_lowp",
     .kernels = "tg_cpu_bias_grad_lowp",
     .run = {[OPS_REF] = linear_weight_ref, [OPS_CPU] = cpu_linear_weight,
             [OPS_CUDA] = pair_linear_weight, [OPS_DEVICE] = pair_linear_weight,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_linear_weight), [OPS_LOWP] = linear_weight_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
