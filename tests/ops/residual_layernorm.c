/*
 * Row residual_layernorm_fwd (codelets/layernorm.c): Y = A + B and the
 * LayerNorm of Y in one task, the fusion of the rows residual and
 * layernorm_fwd, which the GPT's forward uses between blocks.
 *  ref       against float64 (Y, Z, mean, rstd), padded leading
 *            dimensions; and bit for bit against the two kernels it fuses
 *            (tg_cpu_residual_fwd, then tg_cpu_layernorm_fwd on Y), with Y
 *            rounded to bf16 and fp16 values first when sum_type says so;
 *  pair      33 x 257 and 64 x 768 (Y, Z, mean and rstd, in two runs: the
 *            pair engine compares at most 3 outputs at once);
 *  cuda-emu  the launcher for f32, bf16 and fp16 sums against the CPU
 *            kernel: Y exact (one addition, one rounding), Z, mean, rstd
 *            within the LayerNorm's reduction tolerance;
 *  lowp      16-bit A, B, Y, Z through the adapter: equal bit for bit to
 *            the residual and layernorm_fwd codelets run one after the
 *            other in the same precision, with 1 and 2 CPU workers.
 */

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/precision_kernels.h"

/* ---- ref --------------------------------------------------------------------- */

static float round_to(tg_dtype t, float x) {
  if (t == TG_BF16) return tg_bf16_to_f32(tg_f32_to_bf16(x));
  if (t == TG_F16) return tg_f16_to_f32(tg_f32_to_f16(x));
  return x;
}

static void res_ln_case(tg_rng *rng, int n, int C, tg_dtype sum_type) {
  char what[128];
  int lda = C + 1, ldb = C + 4, ldy = C + 2, ldz = C + 3;
  float *A = tg_pad_mat(rng, n, C, lda, 1.0f, 2.0f, NAN); /* a non-zero mean */
  float *B = tg_pad_mat(rng, n, C, ldb, 1.0f, 0.0f, NAN);
  float *w = tg_pad_mat(rng, 1, C, C, 1.0f, 0.0f, 0.0f);
  float *b = tg_pad_mat(rng, 1, C, C, 1.0f, 0.0f, 0.0f);
  float *Y = tg_const_mat(n, C, ldy, NAN, OUT_PAD), *Z = tg_const_mat(n, C, ldz, NAN, OUT_PAD);
  float *mean = tg_const_mat(1, n, n, NAN, NAN), *rstd = tg_const_mat(1, n, n, NAN, NAN);
  tg_cpu_residual_layernorm_fwd(sum_type, n, C, A, lda, B, ldb, Y, ldy, w, b, Z, ldz, mean,
                                rstd);
  snprintf(what, sizeof what, "residual_layernorm_fwd n=%d C=%d %s", n, C,
           tg_dtype_name(sum_type));
  CHECK(pad_intact(Y, n, C, ldy, OUT_PAD) && pad_intact(Z, n, C, ldz, OUT_PAD),
        "%s wrote padding", what);

  /* float64: the sum (rounded as the kernel rounds it), then LayerNorm */
  double *y = tg_test_malloc(sizeof(double) * n * C), *z = tg_test_malloc(sizeof(double) * n * C);
  double *mref = tg_test_malloc(sizeof(double) * n), *rref = tg_test_malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++) {
    double m = 0, v = 0;
    for (int j = 0; j < C; j++) {
      double s = (double)A[(size_t)i * lda + j] + (double)B[(size_t)i * ldb + j];
      y[(size_t)i * C + j] = sum_type == TG_F32 ? s : (double)round_to(sum_type, (float)s);
      m += y[(size_t)i * C + j];
    }
    m /= C;
    for (int j = 0; j < C; j++) v += (y[(size_t)i * C + j] - m) * (y[(size_t)i * C + j] - m);
    v /= C;
    double r = 1.0 / sqrt(v + 1e-5);
    for (int j = 0; j < C; j++)
      z[(size_t)i * C + j] = (y[(size_t)i * C + j] - m) * r * w[j] + b[j];
    mref[i] = m;
    rref[i] = r;
  }
  CHECK_REL(mat_err(Y, n, C, ldy, y), sum_type == TG_F32 ? TOL_FWD : 1e-2, what);
  CHECK_REL(mat_err(Z, n, C, ldz, z), TOL_FWD, what);
  CHECK_REL(tg_rel_err_f64(mean, mref, n), TOL_FWD, "residual_layernorm_fwd mean");
  CHECK_REL(tg_rel_err_f64(rstd, rref, n), TOL_FWD, "residual_layernorm_fwd rstd");

  /* the two kernels it fuses, one after the other: the same bits */
  float *Y2 = tg_const_mat(n, C, ldy, NAN, OUT_PAD), *Z2 = tg_const_mat(n, C, ldz, NAN, OUT_PAD);
  float *mean2 = tg_const_mat(1, n, n, NAN, NAN), *rstd2 = tg_const_mat(1, n, n, NAN, NAN);
  tg_cpu_residual_fwd(n, C, A, lda, B, ldb, Y2, ldy);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < C; j++) Y2[(size_t)i * ldy + j] = round_to(sum_type, Y2[(size_t)i * ldy + j]);
  tg_cpu_layernorm_fwd(n, C, Y2, ldy, w, b, Z2, ldz, mean2, rstd2);
  CHECK(same_bits(Y, Y2, (size_t)n * ldy) && same_bits(Z, Z2, (size_t)n * ldz) &&
            same_bits(mean, mean2, (size_t)n) && same_bits(rstd, rstd2, (size_t)n),
        "%s differs from the residual and layernorm kernels one after the other", what);
  free(Y2); free(Z2); free(mean2); free(rstd2);
  free(y); free(z); free(mref); free(rref);
  free(A); free(B); free(w); free(b); free(Y); free(Z); free(mean); free(rstd);
}

static void residual_layernorm_ref(void) {
  tg_rng rng = {.s = 0x2545F4914F6CDD1DULL};
  static const tg_dtype types[] = {TG_F32, TG_BF16, TG_F16};
  for (int t = 0; t < 3; t++)
    for (int in = 0; in < NN; in++)
      for (int ic = 0; ic < NC; ic++) res_ln_case(&rng, NS[in], CS[ic], types[t]);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

/* outputs named by ctx->kind: 0 Y, Z, mean (rstd a temporary); 1 rstd */
static int res_ln(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  int n = (int)starpu_matrix_get_ny(c->h[0]), C = (int)starpu_matrix_get_nx(c->h[0]);
  tg_tensor t[3];
  starpu_data_handle_t h[4];
  for (int i = 0; i < 3; i++)
    if (tg_tensor_temp(&t[i], n, i < 2 ? C : 1, TG_F32) != 0) return -1;
  if (c->kind == 0) {
    h[0] = out[0].handle, h[1] = out[1].handle, h[2] = out[2].handle, h[3] = t[2].handle;
  } else {
    h[0] = t[0].handle, h[1] = t[1].handle, h[2] = t[2].handle, h[3] = out[0].handle;
  }
  int rc = tg_residual_layernorm_fwd_insert(c->h[0], c->h[1], c->h[2], c->h[3], h[0], h[1],
                                            h[2], h[3], o);
  for (int i = 0; i < 3; i++) tg_tensor_release(&t[i]);
  return rc;
}

static void pair_residual_layernorm(void) {
  static const int shapes[][2] = {{33, 257}, {64, 768}};
  for (int s = 0; s < 2; s++) {
    int n = shapes[s][0], C = shapes[s][1];
    float *a = rnd((size_t)n * C, 2), *bb = rnd((size_t)n * C, 1), *w = rnd(C, 1),
          *b = rnd(C, 1);
    for (size_t i = 0; i < (size_t)n * C; i++) a[i] += 3.0f; /* a non-zero mean */
    tg_tensor A, B, Wt, Bt;
    new_tensor(&A, n, C, a); new_tensor(&B, n, C, bb);
    new_tensor(&Wt, 1, C, w); new_tensor(&Bt, 1, C, b);
    gctx c = {.h = {A.handle, B.handle, Wt.handle, Bt.handle}, .kind = 0,
              .accum = TG_OVERWRITE};
    outspec o3[3] = {{.name = "Y", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL},
                     {.name = "Z", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL},
                     {.name = "mean", .rows = n, .cols = 1, .init = NULL, .redux = 0,
                      .tol = TOL}};
    char what[64];
    snprintf(what, sizeof what, "residual_layernorm_fwd %dx%d", n, C);
    run_pair(what, res_ln, &c, 3, o3, NULL, NULL);
    c.kind = 1;
    outspec o1 = {.name = "rstd", .rows = n, .cols = 1, .init = NULL, .redux = 0, .tol = TOL};
    run_pair(what, res_ln, &c, 1, &o1, NULL, NULL);
    free(a); free(bb); free(w); free(b);
    tg_tensor *all[] = {&A, &B, &Wt, &Bt};
    for (int i = 0; i < 4; i++) tg_tensor_free(all[i]);
  }
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"
#include "taskgrad/kernels_cuda_precision.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_residual_layernorm(void) {
  static const int shapes[][2] = {{1, 1}, {7, 33}, {33, 257}, {130, 40}};
  static const tg_dtype types[] = {TG_F32, TG_BF16, TG_F16};
  for (int s = 0; s < 4; s++) {
    FULL_ONLY(s != 1 && s != 3);
    const int n = shapes[s][0], C = shapes[s][1], ld = C + 2;
    const size_t sz = (size_t)n * ld;
    for (int t = 0; t < 3; t++) {
      float *A = tg_pad_mat(&g_rng, n, C, ld, 2.0f, 3.0f, NAN), *B = input(n, C, ld, 1.0f);
      float *w = input(1, C, C, 1.0f), *b = input(1, C, C, 1.0f), *Y[2], *Z[2], *mean[2],
            *rstd[2];
      outputs(Y, n, C, ld, 0);
      outputs(Z, n, C, ld, 0);
      outputs(mean, 1, n, n, 0);
      outputs(rstd, 1, n, n, 0);
      ok("tg_cuda_residual_layernorm_fwd", tg_dtype_name(types[t]),
         tg_cuda_residual_layernorm_fwd(types[t], n, C, A, ld, B, ld, Y[0], ld, w, b, Z[0], ld,
                                        mean[0], rstd[0], NULL));
      tg_cpu_residual_layernorm_fwd(types[t], n, C, A, ld, B, ld, Y[1], ld, w, b, Z[1], ld,
                                    mean[1], rstd[1]);
      compare("tg_cuda_residual_layernorm_fwd", "Y", Y[0], Y[1], sz, EXACT);
      compare("tg_cuda_residual_layernorm_fwd", "Z", Z[0], Z[1], sz, kTolRed);
      compare("tg_cuda_residual_layernorm_fwd", "mean", mean[0], mean[1], n, kTolRed);
      compare("tg_cuda_residual_layernorm_fwd", "rstd", rstd[0], rstd[1], n, kTolRed);
      free2(Y); free2(Z); free2(mean); free2(rstd);
      free(A); free(B); free(w); free(b);
    }
  }
}
#endif /* OPS_EMU */

/* ---- lowp -------------------------------------------------------------------- */

/* 16-bit A, B, Y, Z (w, b, mean, rstd f32): the fused task against the
 * residual and layernorm_fwd codelets in the same precision, bit for bit */
static void residual_layernorm_case(tg_rng *rng, tg_dtype t) {
  int rows = 19, C = 45;
  float *a = rounded_rand(rng, t, rows, C, 1.0f), *bb = rounded_rand(rng, t, rows, C, 1.0f);
  for (int i = 0; i < rows * C; i++) a[i] = round16(t, a[i] + 2.0f);
  float *w = tg_rand_mat(rng, 1, C, C, 1.0f, 0.0f), *b = tg_rand_mat(rng, 1, C, C, 0.1f, 0.0f);
  tg_tensor A, B, Y, Z, Y2, Z2, Wt, Bt, m, r, m2, r2;
  new_low(&A, t, rows, C, a);
  new_low(&B, t, rows, C, bb);
  CHECK(tg_tensor_alloc(&Y, rows, C, t) == 0 && tg_tensor_alloc(&Z, rows, C, t) == 0 &&
            tg_tensor_alloc(&Y2, rows, C, t) == 0 && tg_tensor_alloc(&Z2, rows, C, t) == 0,
        "alloc");
  new_f32(&Wt, 1, C, w);
  new_f32(&Bt, 1, C, b);
  new_f32(&m, rows, 1, NULL);
  new_f32(&r, rows, 1, NULL);
  new_f32(&m2, rows, 1, NULL);
  new_f32(&r2, rows, 1, NULL);
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
  CHECK(tg_residual_layernorm_fwd_insert(A.handle, B.handle, Wt.handle, Bt.handle, Y.handle,
                                         Z.handle, m.handle, r.handle, &o) == 0,
        "fused 16-bit: %s", tg_last_error());
  CHECK(tg_residual_insert(A.handle, B.handle, Y2.handle, &o) == 0, "residual: %s",
        tg_last_error());
  CHECK(tg_layernorm_fwd_insert(Y2.handle, Wt.handle, Bt.handle, Z2.handle, m2.handle,
                                r2.handle, &o) == 0,
        "layernorm: %s", tg_last_error());
  const tg_tensor *got[] = {&Y, &Z, &m, &r}, *want[] = {&Y2, &Z2, &m2, &r2};
  const char *names[] = {"Y", "Z", "mean", "rstd"};
  for (int k = 0; k < 4; k++) {
    tg_dtype dt = k < 2 ? t : TG_F32;
    int cols = k < 2 ? C : 1;
    float *x = read_as_f32(got[k], dt), *y = read_as_f32(want[k], dt);
    CHECK(memcmp(x, y, sizeof(float) * (size_t)rows * cols) == 0,
          "%s residual_layernorm_fwd %s differs from residual then layernorm_fwd",
          tg_dtype_name(t), names[k]);
    free(x);
    free(y);
  }
  CHECK_REFUSED(tg_residual_layernorm_fwd_insert(A.handle, B.handle, Wt.handle, Bt.handle,
                                                 A.handle, Z.handle, m.handle, r.handle, &o),
                "tg_residual_layernorm_fwd", "Y aliasing A");
  tg_tensor *all[] = {&A, &B, &Y, &Z, &Y2, &Z2, &Wt, &Bt, &m, &r, &m2, &r2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(a); free(bb); free(w); free(b);
}

static void residual_layernorm_lowp_body(void) {
  tg_rng rng = {.s = 2026};
  for (int k = 0; k < 2; k++) residual_layernorm_case(&rng, LOWP[k]);
}

static void residual_layernorm_lowp(void) {
  ops_run_worker_counts(residual_layernorm_lowp_body);
}

static const ops_row rows[] = {
    {.name = "residual_layernorm_fwd",
     .doc = "residual add and the layer norm after it, one task",
     .buffers = "A, B, w, b (R), Y = A + B, Z, mean, rstd (W)",
     .covers = "tg_residual_layernorm_fwd_cl tg_residual_layernorm_fwd_insert "
               "tg_cuda_residual_layernorm_fwd",
     .kernels = "tg_cpu_residual_layernorm_fwd",
     .run = {[OPS_REF] = residual_layernorm_ref, [OPS_CPU] = pair_residual_layernorm,
             [OPS_CUDA] = pair_residual_layernorm, [OPS_DEVICE] = pair_residual_layernorm,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_residual_layernorm),
             [OPS_LOWP] = residual_layernorm_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
