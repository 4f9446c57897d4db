/*
 * Rows linear_fwd and linear_bwd_data (codelets/linear.c), each case
 * checking the op of its row: the fused linear layer, forward
 * Z = X W^T + b, H = act(Z) for ReLU, GELU and no activation, backward
 * dX = (dZ W) * act'(Zprev).
 *  ref       the kernels against float64 compositions of the definitions
 *            (the activation derivatives are checked against finite
 *            differences in the activation row), sizes from {1, 7, 33, 257},
 *            leading dimensions larger than the rows;
 *  cpu       the codelets on a CPU worker equal the kernels bit for bit;
 *            shape errors and an unknown activation are refused; then the
 *            pair cases below;
 *  pair      every activation, with and without bias, odd shapes; and the
 *            low-precision adapter on bf16 / fp16 X, W, Z, H within half an
 *            ulp of the type (on cuda; bit for bit on device and cpu);
 *            The backward-data likewise (dZ, W, Zprev, dX 16-bit).  On a GPU
 *            these run cuBLASLt (gemm_lt.c) where the bias and outputs are
 *            16-bit and the activation is GELU or none, else the
 *            tensor-core path (linear_lowp.cu);
 *  cuda-emu  both launchers (cuBLAS on OpenBLAS + the epilogue kernels), and
 *            their 16-bit twins against the CPU kernels on the same values:
 *            outputs 16-bit or f32, bias 16-bit or f32, within one ulp of
 *            the type norm-relative (each side rounds its own f32 sum once);
 *            the cuBLASLt twins (gemm_lt.c: bias, GELU with the
 *            pre-activation as aux, dGELU, in the GEMM's epilogue, on the
 *            emulated cuBLASLt) likewise with every output 16-bit, each run
 *            through one matmul with its epilogue, the heuristic asked once
 *            per problem; ReLU and an aux ld not a multiple of 8 handed
 *            back (NOT_SUPPORTED, nothing run), and the emulated library's
 *            own refusals (aux ld, bias type, missing bias, mixed types);
 *  lowp      the forward with GELU (X, W, Z, H 16-bit, b f32), the
 *            backward-data through GELU (dZ, W, Zprev, dX 16-bit): equal to
 *            the f32 codelets' results rounded once, bit for bit, with 1
 *            and 2 CPU workers; the backward refused without opts.lowp (the
 *            GEMM with a 16-bit C: the gemm row).
 */

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"
#include "taskgrad/taskgrad.h"

/* ---- ref --------------------------------------------------------------------- */

static double gelu64(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(u));
}
static double gelu64_grad(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  double du = 0.7978845608028654 * (1.0 + 3 * 0.044715 * x * x);
  double t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}
static double act64(int act, double z) {
  return act == 0 ? (z > 0 ? z : 0) : act == 1 ? gelu64(z) : z;
}
static double act64_grad(int act, double z) {
  return act == 0 ? (z > 0 ? 1 : 0) : act == 1 ? gelu64_grad(z) : 1;
}

/* The kernels against float64.  path 0: tg_cpu_linear_fwd and
 * tg_cpu_linear_bwd_data on f32; 1 and 2: tg_cpu_linear_fwd_lowp and
 * tg_cpu_linear_bwd_data_lowp with bf16 X, dZ and W (the rest f32), on the
 * widened path (1) and the native one (2), against float64 on the bf16
 * values. */
static void check_kernels(tg_rng *rng, int rows, int in, int out, int act, int path) {
  int ldx = in + 3, ldw = in + 1, ldz = out + 2, ldh = out + 5, ldd = in + 4;
  float *X = malloc(sizeof(float) * rows * ldx), *W = malloc(sizeof(float) * out * ldw);
  float *b = malloc(sizeof(float) * out), *Z = malloc(sizeof(float) * rows * ldz);
  float *H = malloc(sizeof(float) * rows * ldh), *dZ = malloc(sizeof(float) * rows * ldz);
  float *Zp = malloc(sizeof(float) * rows * ldd), *dX = malloc(sizeof(float) * rows * ldd);
  double *zr = malloc(sizeof(double) * rows * out), *hr = malloc(sizeof(double) * rows * out);
  double *dxr = malloc(sizeof(double) * rows * in);
  float *zg = malloc(sizeof(float) * rows * out), *hg = malloc(sizeof(float) * rows * out);
  float *dxg = malloc(sizeof(float) * rows * in);
  tg_rng_fill(rng, X, (size_t)rows * ldx, 1.0f);
  tg_rng_fill(rng, W, (size_t)out * ldw, 0.5f);
  tg_rng_fill(rng, b, out, 0.5f);
  tg_rng_fill(rng, dZ, (size_t)rows * ldz, 1.0f);
  tg_rng_fill(rng, Zp, (size_t)rows * ldd, 2.0f);
  for (size_t i = 0; i < (size_t)rows * ldz; i++) Z[i] = NAN; /* write-only */
  for (size_t i = 0; i < (size_t)rows * ldd; i++) dX[i] = NAN;
  if (path == 0) {
    tg_cpu_linear_fwd(rows, in, out, X, ldx, W, ldw, b, act, Z, ldz, H, ldh);
    tg_cpu_linear_bwd_data(rows, in, out, dZ, ldz, W, ldw, act, Zp, ldd, dX, ldd);
  } else { /* X, W, dZ rounded to bf16: the reference below reads those values */
    uint16_t *X16 = malloc(2 * (size_t)rows * ldx), *W16 = malloc(2 * (size_t)out * ldw);
    uint16_t *dZ16 = malloc(2 * (size_t)rows * ldz);
    tg_cpu_to_lowp(TG_BF16, rows, ldx, X, ldx, X16, ldx);
    tg_cpu_to_lowp(TG_BF16, out, ldw, W, ldw, W16, ldw);
    tg_cpu_to_lowp(TG_BF16, rows, ldz, dZ, ldz, dZ16, ldz);
    tg_cpu_from_lowp(TG_BF16, rows, ldx, X16, ldx, X, ldx);
    tg_cpu_from_lowp(TG_BF16, out, ldw, W16, ldw, W, ldw);
    tg_cpu_from_lowp(TG_BF16, rows, ldz, dZ16, ldz, dZ, ldz);
    size_t wn = tg_cpu_gemm_lowp_work_floats(rows, out, in);
    size_t wb = tg_cpu_gemm_lowp_work_floats(rows, in, out);
    float *work = malloc(sizeof(float) * (wn > wb ? wn : wb));
    tg_cpu_gemm_bf16_set_native(path == 2);
    tg_cpu_linear_fwd_lowp(TG_BF16, rows, in, out, X16, ldx, W16, ldw, b, act, Z, ldz, H, ldh,
                           work);
    tg_cpu_linear_bwd_data_lowp(TG_BF16, rows, in, out, dZ16, ldz, W16, ldw, act, Zp, ldd, dX,
                                ldd, work);
    free(X16); free(W16); free(dZ16); free(work);
  }
  for (int r = 0; r < rows; r++) {
    for (int o = 0; o < out; o++) {
      double z = b[o];
      for (int i = 0; i < in; i++) z += (double)X[r * ldx + i] * W[o * ldw + i];
      zr[r * out + o] = z;
      hr[r * out + o] = act64(act, z);
      zg[r * out + o] = Z[r * ldz + o];
      hg[r * out + o] = H[r * ldh + o];
    }
    for (int i = 0; i < in; i++) {
      double g = 0;
      for (int o = 0; o < out; o++) g += (double)dZ[r * ldz + o] * W[o * ldw + i];
      dxr[r * in + i] = g * act64_grad(act, Zp[r * ldd + i]);
      dxg[r * in + i] = dX[r * ldd + i];
    }
  }
  static const char *const kPath[3] = {"", "_lowp widened", "_lowp native"};
  char what[112];
  snprintf(what, sizeof what, "linear_fwd%s Z act=%d (%d,%d,%d)", kPath[path], act, rows, in,
           out);
  if (ops_row_is("linear_fwd")) CHECK_REL(tg_rel_err_f64(zg, zr, (size_t)rows * out), 1e-5, what);
  if (act != 2 && ops_row_is("linear_fwd")) {
    snprintf(what, sizeof what, "linear_fwd%s H act=%d (%d,%d,%d)", kPath[path], act, rows, in,
             out);
    CHECK_REL(tg_rel_err_f64(hg, hr, (size_t)rows * out), 1e-5, what);
  }
  snprintf(what, sizeof what, "linear_bwd_data%s act=%d (%d,%d,%d)", kPath[path], act, rows,
           in, out);
  if (ops_row_is("linear_bwd_data")) CHECK_REL(tg_rel_err_f64(dxg, dxr, (size_t)rows * in), 1e-5, what);
  free(X); free(W); free(b); free(Z); free(H); free(dZ); free(Zp); free(dX);
  free(zr); free(hr); free(dxr); free(zg); free(hg); free(dxg);
}

static void linear_ref(void) {
  tg_rng rng = {.s = 12345};
  static const int sizes[] = {1, 7, 33, 257};
  for (int act = 0; act < 3; act++)
    for (int a = 0; a < 4; a++)
      for (int c = 0; c < 4; c++)
        check_kernels(&rng, sizes[a], sizes[c], sizes[(a + c + act) % 4], act, 0);
  /* the bf16 kernels: widened, and native where the CPU has it */
  const int had = tg_cpu_gemm_bf16_native();
  for (int path = 1; path <= 1 + tg_cpu_gemm_bf16_supported(); path++)
    for (int act = 0; act < 3; act++)
      for (int a = 0; a < 4; a += 2)
        check_kernels(&rng, sizes[a + 1], sizes[3 - a], sizes[(a + act) % 4], act, path);
  if (!tg_cpu_gemm_bf16_supported() && ops_row_is("linear_fwd"))
    printf("linear_fwd_lowp, linear_bwd_data_lowp: no AVX512-BF16 here, widened path only\n");
  tg_cpu_gemm_bf16_set_native(had);
}

/* ---- cpu: the codelets against the kernels ----------------------------------- */

/* The codelets on a CPU worker equal the kernels; shape errors are refused. */
static void check_codelets(tg_rng *rng) {
  const int rows = 33, in = 7, out = 257;
  tg_tensor X, W, B, Z, H, dX;
  if (tg_tensor_alloc(&X, rows, in, TG_F32) || tg_tensor_alloc(&W, out, in, TG_F32) ||
      tg_tensor_alloc(&B, 1, out, TG_F32) || tg_tensor_alloc(&Z, rows, out, TG_F32) ||
      tg_tensor_alloc(&H, rows, out, TG_F32) || tg_tensor_alloc(&dX, rows, in, TG_F32)) {
    CHECK(0, "allocation: %s", tg_last_error());
    return;
  }
  tg_rng_fill(rng, X.host, tg_tensor_numel(&X), 1.0f);
  tg_rng_fill(rng, W.host, tg_tensor_numel(&W), 0.5f);
  tg_rng_fill(rng, B.host, tg_tensor_numel(&B), 0.5f);
  float *zk = malloc(sizeof(float) * rows * out), *hk = malloc(sizeof(float) * rows * out);
  float *dk = malloc(sizeof(float) * rows * in);
  tg_cpu_linear_fwd(rows, in, out, X.host, in, W.host, in, B.host, TG_ACT_GELU, zk, out, hk, out);
  /* backward through gelu with dZ := H (any values do) */
  tg_cpu_linear_bwd_data(rows, in, out, hk, out, W.host, in, TG_ACT_GELU, X.host, in, dk, in);
  CHECK(tg_linear_fwd_insert(X.handle, W.handle, B.handle, TG_ACT_GELU, Z.handle, H.handle,
                             NULL) == 0, "linear_fwd insert: %s", tg_last_error());
  CHECK(tg_linear_bwd_data_insert(H.handle, W.handle, TG_ACT_GELU, X.handle, dX.handle,
                                  NULL) == 0, "linear_bwd insert: %s", tg_last_error());
  float *zc = malloc(sizeof(float) * rows * out), *hc = malloc(sizeof(float) * rows * out);
  float *dc = malloc(sizeof(float) * rows * in);
  tg_tensor_read(&Z, zc);
  tg_tensor_read(&H, hc);
  tg_tensor_read(&dX, dc);
  if (ops_row_is("linear_fwd")) {
    CHECK(memcmp(zc, zk, sizeof(float) * rows * out) == 0, "codelet Z differs from kernel");
    CHECK(memcmp(hc, hk, sizeof(float) * rows * out) == 0, "codelet H differs from kernel");
    /* shape errors: W with the wrong inner dimension, b of the wrong width */
    CHECK(tg_linear_fwd_insert(X.handle, dX.handle, B.handle, TG_ACT_RELU, Z.handle, H.handle,
                               NULL) == -EINVAL, "mismatched W accepted");
    CHECK(strstr(tg_last_error(), "tg_linear_fwd") != NULL, "message: %s", tg_last_error());
    CHECK(tg_linear_fwd_insert(X.handle, W.handle, X.handle, TG_ACT_RELU, Z.handle, H.handle,
                               NULL) == -EINVAL, "mismatched b accepted");
    CHECK(tg_linear_fwd_insert(X.handle, W.handle, B.handle, (tg_activation)7, Z.handle,
                               H.handle, NULL) == -EINVAL, "unknown activation accepted");
  } else {
    CHECK(memcmp(dc, dk, sizeof(float) * rows * in) == 0, "codelet dX differs from kernel");
    CHECK(tg_linear_bwd_data_insert(H.handle, W.handle, TG_ACT_RELU, Z.handle, dX.handle,
                                    NULL) == -EINVAL, "mismatched Zprev accepted");
    CHECK(strstr(tg_last_error(), "tg_linear_bwd_data") != NULL, "message: %s", tg_last_error());
  }
  free(zk); free(hk); free(dk); free(zc); free(hc); free(dc);
  tg_tensor *all[] = {&X, &W, &B, &Z, &H, &dX};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

/* h[0] = X (rows, in), h[1] = W (out, in), h[2] = b (1, out) */
static int linear_fwd_submit(const void *vctx, const tg_task_opts *o,
                             tg_tensor *out) {
  const hctx *c = vctx;
  int none = c->act == TG_ACT_NONE;
  return tg_linear_fwd_insert(c->h[0], c->h[1], c->h[2], (tg_activation)c->act,
                              out[0].handle, none ? NULL : out[1].handle, o);
}

/* h[0] = dZ (rows, out), h[1] = W (out, in), h[2] = Zprev (rows, in) */
static int linear_bwd_submit(const void *vctx, const tg_task_opts *o,
                             tg_tensor *out) {
  const hctx *c = vctx;
  return tg_linear_bwd_data_insert(c->h[0], c->h[1], (tg_activation)c->act,
                                   c->act == TG_ACT_NONE ? NULL : c->h[2],
                                   out[0].handle, o);
}

static void pair_linear(void) {
  static const int shapes[][3] = {{1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 257, 7}};
  for (int act = 0; act < 3; act++)
    for (int s = 0; s < 4; s++) {
      const int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
      float *x = rnd((size_t)rows * in, 1.0f), *w = rnd((size_t)out * in, 0.5f);
      float *b = rnd((size_t)out, 0.5f), *dz = rnd((size_t)rows * out, 1.0f);
      float *zp = rnd((size_t)rows * in, 2.0f);
      tg_tensor X, W, B, DZ, ZP;
      new_tensor(&X, rows, in, x);
      new_tensor(&W, out, in, w);
      new_tensor(&B, 1, out, b);
      new_tensor(&DZ, rows, out, dz);
      new_tensor(&ZP, rows, in, zp);
      double tol = in > 100 || out > 100 ? TOL_LARGE_K : TOL;
      char what[128];
      hctx fctx = {.h = {X.handle, W.handle, B.handle},
                   .accum = TG_OVERWRITE,
                   .act = act,
                   .f = 0,
                   .ld_test = 0};
      outspec fo[2] = {
          {.name = "Z", .rows = rows, .cols = out, .init = NULL, .redux = 0, .tol = tol},
          {.name = "H", .rows = rows, .cols = out, .init = NULL, .redux = 0, .tol = tol}};
      snprintf(what, sizeof what, "linear_fwd act=%d %dx%d->%d", act, rows, in, out);
      if (ops_row_is("linear_fwd"))
        run_pair(what, linear_fwd_submit, &fctx, act == TG_ACT_NONE ? 1 : 2, fo, NULL, NULL);
      hctx bctx = {.h = {DZ.handle, W.handle, ZP.handle},
                   .accum = TG_OVERWRITE,
                   .act = act,
                   .f = 0,
                   .ld_test = 0};
      outspec bo = {.name = "dX", .rows = rows, .cols = in, .init = NULL, .redux = 0, .tol = tol};
      snprintf(what, sizeof what, "linear_bwd_data act=%d %dx%d<-%d", act, rows, in, out);
      if (ops_row_is("linear_bwd_data")) run_pair(what, linear_bwd_submit, &bctx, 1, &bo, NULL, NULL);
      free(x); free(w); free(b); free(dz); free(zp);
      tg_tensor_free(&X); tg_tensor_free(&W); tg_tensor_free(&B);
      tg_tensor_free(&DZ); tg_tensor_free(&ZP);
    }
}

typedef struct adapt_ctx {
  tg_dtype t;
  starpu_data_handle_t X, W, b;
} adapt_ctx;

static int linear16_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const adapt_ctx *c = v;
  tg_task_opts lo = *o;
  lo.lowp = c->t;
  return tg_linear_fwd_insert(c->X, c->W, c->b, TG_ACT_GELU, out[0].handle, out[1].handle, &lo);
}

static void pair_adapter(void) {
  const int rows = 37, in = 29, outf = 23;
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    float *x = rnd((size_t)rows * in, 1), *w = rnd((size_t)outf * in, 0.3f), *b = rnd(outf, 0.1f);
    tg_tensor X, W, B;
    new_low(&X, t, rows, in, x);
    new_low(&W, t, outf, in, w);
    new_tensor(&B, 1, outf, b);
    adapt_ctx c = {.t = t, .X = X.handle, .W = W.handle, .b = B.handle};
    /* one rounding of an f32 result on each side: at most half an ulp apart
     * after a sum that lands on either side of a rounding boundary */
    out16 o2[2] = {
        {.name = "Z", .rows = rows, .cols = outf, .dt = t, .init = NULL, .tol = half_ulp(t)},
        {.name = "H", .rows = rows, .cols = outf, .dt = t, .init = NULL, .tol = half_ulp(t)}};
    char what[64];
    snprintf(what, sizeof what, "adapted linear fwd + GELU, %s buffers", tg_dtype_name(t));
    run_pair16(what, linear16_submit, &c, 2, o2);
    tg_tensor_free(&X);
    tg_tensor_free(&W);
    tg_tensor_free(&B);
    free(x);
    free(w);
    free(b);
  }
}

static int linear_bwd16_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const adapt_ctx *c = v; /* X: dZ, W: W, b: Zprev */
  tg_task_opts lo = *o;
  lo.lowp = c->t;
  return tg_linear_bwd_data_insert(c->X, c->W, TG_ACT_GELU, c->b, out[0].handle, &lo);
}

/* the backward-data through GELU with dZ, W, Zprev and dX 16-bit: on a GPU
 * the tensor-core path (linear_lowp.cu), on the CPU the adapter */
static void pair_adapter_bwd(void) {
  const int rows = 37, in = 29, outf = 23;
  for (int d = 0; d < 2; d++) {
    tg_dtype t = LOWP[d];
    float *dz = rnd((size_t)rows * outf, 1), *w = rnd((size_t)outf * in, 0.3f);
    float *zp = rnd((size_t)rows * in, 2);
    tg_tensor DZ, W, ZP;
    new_low(&DZ, t, rows, outf, dz);
    new_low(&W, t, outf, in, w);
    new_low(&ZP, t, rows, in, zp);
    adapt_ctx c = {.t = t, .X = DZ.handle, .W = W.handle, .b = ZP.handle};
    out16 o = {.name = "dX", .rows = rows, .cols = in, .dt = t, .init = NULL, .tol = half_ulp(t)};
    char what[64];
    snprintf(what, sizeof what, "adapted linear bwd-data + GELU, %s buffers", tg_dtype_name(t));
    run_pair16(what, linear_bwd16_submit, &c, 1, &o);
    tg_tensor_free(&DZ);
    tg_tensor_free(&W);
    tg_tensor_free(&ZP);
    free(dz);
    free(w);
    free(zp);
  }
}

static void linear_pair(void) {
  pair_linear();
  if (ops_row_is("linear_fwd")) pair_adapter();
  if (ops_row_is("linear_bwd_data")) pair_adapter_bwd();
}

static void linear_cpu(void) {
  tg_rng rng = {.s = 12345};
  check_codelets(&rng);
  linear_pair();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_linear(void) {
  static const int shapes[][3] = {{1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 257, 7}};
  for (int s = 0; s < 4; s++)
    for (int act = 0; act < 3; act++)
      for (int bias = 0; bias < 2; bias++) {
        FULL_ONLY(s != 1);
        const int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *X = input(rows, in, in + 1, 1.0f), *W = input(out, in, in, 1.0f);
        float *b = bias ? input(1, out, out, 1.0f) : NULL, *Z[2], *H[2];
        outputs(Z, rows, out, out + 2, 0);
        outputs(H, rows, out, out + 2, 0);
        cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
        if (ops_row_is("linear_fwd")) {
        ok("tg_cuda_linear_fwd", "",
           tg_cuda_linear_fwd(g_blas, rows, in, out, X, in + 1, W, in, b, act, Z[0], out + 2,
                              act == 2 ? NULL : H[0], out + 2, NULL, &cs));
        ok("tg_cuda_linear_fwd", "cublas", cs);
        tg_cpu_linear_fwd(rows, in, out, X, in + 1, W, in, b, act, Z[1], out + 2,
                          act == 2 ? NULL : H[1], out + 2);
        compare("tg_cuda_linear_fwd", "Z", Z[0], Z[1], (size_t)rows * (out + 2), kTolRed);
        compare("tg_cuda_linear_fwd", "H", H[0], H[1], (size_t)rows * (out + 2), kTolRed);
        }
        free2(Z);
        free2(H);

        float *dZ = input(rows, out, out, 1.0f), *Zp = input(rows, in, in + 3, 1.0f), *dX[2];
        outputs(dX, rows, in, in + 1, 0);
        if (ops_row_is("linear_bwd_data")) {
        ok("tg_cuda_linear_bwd_data", "",
           tg_cuda_linear_bwd_data(g_blas, rows, in, out, dZ, out, W, in, act,
                                   act == 2 ? NULL : Zp, in + 3, dX[0], in + 1, NULL, &cs));
        ok("tg_cuda_linear_bwd_data", "cublas", cs);
        tg_cpu_linear_bwd_data(rows, in, out, dZ, out, W, in, act, act == 2 ? NULL : Zp, in + 3,
                               dX[1], in + 1);
        compare("tg_cuda_linear_bwd_data", "dX", dX[0], dX[1], (size_t)rows * (in + 1), kTolRed);
        }
        free2(dX);
        free(X); free(W); free(b); free(dZ); free(Zp);
      }
}
/* 16-bit copy (ld cols + pad, padding 0xabcd) of a float matrix, and the
 * floats replaced by the values the copy holds (exact in f32) */
/* an emulated 16-bit (or f32) output against the CPU's f32 result: rounded
 * once to the type, the two may differ by one ulp where the f32 sums land on
 * either side of a rounding boundary, so the norm-relative error is at most
 * one ulp of the type; the padding must survive */
static void compare_out(const char *launcher, const char *what, tg_dtype t, int is16,
                        const void *emu, float *cpu, int rows, int cols, int ld) {
  float *got = fmalloc((size_t)rows * cols), *want = fmalloc((size_t)rows * cols);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) {
      float v = cpu[(size_t)r * ld + c];
      if (is16) {
        uint16_t h;
        tg_cpu_to_lowp(t, 1, 1, &v, 1, &h, 1);
        tg_cpu_from_lowp(t, 1, 1, &h, 1, &v, 1);
        tg_cpu_from_lowp(t, 1, 1, (const uint16_t *)emu + (size_t)r * ld + c, 1,
                         &got[(size_t)r * cols + c], 1);
        if (c == cols - 1)
          CHECK(((const uint16_t *)emu)[(size_t)r * ld + cols] == 0xabcd, "%s %s: padding "
                "overwritten", launcher, what);
      } else {
        got[(size_t)r * cols + c] = ((const float *)emu)[(size_t)r * ld + c];
      }
      want[(size_t)r * cols + c] = v;
    }
  compare(launcher, what, got, want, (size_t)rows * cols, t == TG_BF16 ? 0x1p-8 : 0x1p-11);
  free(got);
  free(want);
}

/* tg_cuda_linear_fwd_lowp / _bwd_data_lowp: 16-bit operands, the outputs
 * 16-bit (through the f32 workspace) or f32 (in place), the bias 16-bit or
 * f32, against tg_cpu_linear_* on the same values */
static void emu_linear_lowp(void) {
  static const int shapes[][3] = {{7, 33, 257}, {33, 257, 7}, {1, 1, 1}};
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < 3; s++)
      for (int act = 0; act < 3; act++)
        for (int o16 = 0; o16 < 2; o16++) {
          FULL_ONLY(s != 0 || d != 0);
          const tg_dtype t = g_lowp[d];
          const int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2], pad = 2;
          const int b16 = o16; /* the bias 16-bit with the outputs */
          float *x = input(rows, in, in + 1, 1.0f), *w = input(out, in, in, 0.5f);
          float *b = input(1, out, out, 1.0f);
          uint16_t *X = to16(t, x, rows, in, in + 1, 1), *W = to16(t, w, out, in, in, 0);
          uint16_t *B16 = to16(t, b, 1, out, out, 0);
          const int ld = out + pad;
          float *zc = fmalloc((size_t)rows * ld), *hc = fmalloc((size_t)rows * ld);
          float *work = fmalloc((size_t)rows * (out > in ? out : in));
          void *Z = o16 ? (void *)to16(t, zc, rows, 0, ld, ld) : (void *)fmalloc((size_t)rows * ld);
          void *H = o16 ? (void *)to16(t, hc, rows, 0, ld, ld) : (void *)fmalloc((size_t)rows * ld);
          cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
          if (ops_row_is("linear_fwd")) {
            ok("tg_cuda_linear_fwd_lowp", "",
               tg_cuda_linear_fwd_lowp(g_blas, t, rows, in, out, X, in + 1, W, in,
                                       b16 ? (void *)B16 : (void *)b, b16, act, Z, ld, o16,
                                       act == 2 ? NULL : H, ld, o16, work, NULL, &cs));
            ok("tg_cuda_linear_fwd_lowp", "cublas", cs);
            tg_cpu_linear_fwd(rows, in, out, x, in + 1, w, in, b, act, zc, ld,
                              act == 2 ? NULL : hc, ld);
            compare_out("tg_cuda_linear_fwd_lowp", "Z", t, o16, Z, zc, rows, out, ld);
            if (act != 2)
              compare_out("tg_cuda_linear_fwd_lowp", "H", t, o16, H, hc, rows, out, ld);
          }
          if (ops_row_is("linear_bwd_data")) {
            float *dz = input(rows, out, out, 1.0f), *zp = input(rows, in, in + 3, 2.0f);
            uint16_t *DZ = to16(t, dz, rows, out, out, 0), *ZP = to16(t, zp, rows, in, in + 3, 0);
            const int ldx = in + pad;
            float *dxc = fmalloc((size_t)rows * ldx);
            void *DX = o16 ? (void *)to16(t, dxc, rows, 0, ldx, ldx)
                           : (void *)fmalloc((size_t)rows * ldx);
            ok("tg_cuda_linear_bwd_data_lowp", "",
               tg_cuda_linear_bwd_data_lowp(g_blas, t, rows, in, out, DZ, out, W, in, act,
                                            act == 2 ? NULL : (void *)ZP, in, 1, DX, ldx,
                                            o16, work, NULL, &cs));
            ok("tg_cuda_linear_bwd_data_lowp", "cublas", cs);
            tg_cpu_linear_bwd_data(rows, in, out, dz, out, w, in, act, act == 2 ? NULL : zp,
                                   in + 3, dxc, ldx);
            compare_out("tg_cuda_linear_bwd_data_lowp", "dX", t, o16, DX, dxc, rows, in, ldx);
            free(dz); free(zp); free(DZ); free(ZP); free(dxc); free(DX);
          }
          free(x); free(w); free(b); free(X); free(W); free(B16);
          free(zc); free(hc); free(work); free(Z); free(H);
        }
}

/* a leading dimension >= n + 2 that cuBLASLt takes for the aux matrix */
static int ld8(int n) { return (n + 2 + 7) / 8 * 8; }

/* tg_cuda_linear_fwd_lt / _bwd_data_lt: cuBLASLt's BIAS, GELU_AUX_BIAS and
 * DGELU epilogues (the emulated library, tests/cuda_emu/emu_cublaslt.cpp)
 * against tg_cpu_linear_* on the same 16-bit values: every output 16-bit,
 * within one ulp of the type norm-relative as compare_out says (the CPU's
 * f32 result rounded once here; the GELU formulas, tanhf in the emulator
 * and the CPU's exp form, differ by a few f32 ulp, far below that).  Each
 * call must really run one cuBLASLt matmul with the expected epilogue, and
 * the second call of a problem must not ask the heuristic again (the
 * launchers' cache). */
static void emu_linear_lt(void) {
  cublasLtHandle_t lt;
  ok("tg_cuda_linear_fwd_lt", "cublasLtCreate", cublasLtCreate(&lt));
  static const int shapes[][3] = {{7, 33, 257}, {33, 257, 7}, {1, 1, 1}, {64, 48, 40}};
  const size_t wbytes = 1 << 16;
  void *work = malloc(wbytes);
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < 4; s++)
      for (int act = 1; act < 3; act++) /* GELU, none */
        for (int bias = 0; bias < 2; bias++) {
          FULL_ONLY(s != 0 || d != 0);
          const tg_dtype t = g_lowp[d];
          const int rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
          float *x = input(rows, in, in + 1, 1.0f), *w = input(out, in, in, 0.5f);
          float *b = input(1, out, out, 1.0f);
          uint16_t *X = to16(t, x, rows, in, in + 1, 1), *W = to16(t, w, out, in, in, 0);
          uint16_t *B16 = to16(t, b, 1, out, out, 0);
          const int ld = ld8(out);
          float *zc = fmalloc((size_t)rows * ld), *hc = fmalloc((size_t)rows * ld);
          uint16_t *Z = to16(t, zc, rows, 0, ld, ld), *H = to16(t, hc, rows, 0, ld, ld);
          if (ops_row_is("linear_fwd")) {
            const int calls = tg_emu_lt_matmul_calls(), heur = tg_emu_lt_heuristic_calls();
            for (int rep = 0; rep < 2; rep++)
              ok("tg_cuda_linear_fwd_lt", "",
                 tg_cuda_linear_fwd_lt(lt, t, rows, in, out, X, in + 1, W, in,
                                       bias ? B16 : NULL, act, Z, ld, act == 2 ? NULL : H, ld,
                                       work, wbytes, NULL));
            const int want = act == 1 ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                              : CUBLASLT_EPILOGUE_GELU_AUX)
                                      : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
            CHECK(tg_emu_lt_matmul_calls() == calls + 2 && tg_emu_lt_last_epilogue() == want,
                  "tg_cuda_linear_fwd_lt: %d matmuls, epilogue %d (want 2, %d)",
                  tg_emu_lt_matmul_calls() - calls, tg_emu_lt_last_epilogue(), want);
            CHECK(tg_emu_lt_heuristic_calls() <= heur + 1,
                  "tg_cuda_linear_fwd_lt: the heuristic asked %d times for one problem",
                  tg_emu_lt_heuristic_calls() - heur);
            tg_cpu_linear_fwd(rows, in, out, x, in + 1, w, in, bias ? b : NULL, act, zc, ld,
                              act == 2 ? NULL : hc, ld);
            compare_out("tg_cuda_linear_fwd_lt", "Z", t, 1, Z, zc, rows, out, ld);
            if (act != 2) compare_out("tg_cuda_linear_fwd_lt", "H", t, 1, H, hc, rows, out, ld);
          }
          if (ops_row_is("linear_bwd_data")) {
            const int ldzp = ld8(in), ldx = ld8(in);
            float *dz = input(rows, out, out, 1.0f), *zp = input(rows, in, ldzp, 2.0f);
            uint16_t *DZ = to16(t, dz, rows, out, out, 0);
            uint16_t *ZP = to16(t, zp, rows, in, ldzp, ldzp - in);
            float *dxc = fmalloc((size_t)rows * ldx);
            uint16_t *DX = to16(t, dxc, rows, 0, ldx, ldx);
            const int calls = tg_emu_lt_matmul_calls();
            ok("tg_cuda_linear_bwd_data_lt", "",
               tg_cuda_linear_bwd_data_lt(lt, t, rows, in, out, DZ, out, W, in, act,
                                          act == 2 ? NULL : ZP, ldzp, DX, ldx, work, wbytes,
                                          NULL));
            const int want = act == 1 ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
            CHECK(tg_emu_lt_matmul_calls() == calls + 1 && tg_emu_lt_last_epilogue() == want,
                  "tg_cuda_linear_bwd_data_lt: %d matmuls, epilogue %d (want 1, %d)",
                  tg_emu_lt_matmul_calls() - calls, tg_emu_lt_last_epilogue(), want);
            tg_cpu_linear_bwd_data(rows, in, out, dz, out, w, in, act, act == 2 ? NULL : zp,
                                   ldzp, dxc, ldx);
            compare_out("tg_cuda_linear_bwd_data_lt", "dX", t, 1, DX, dxc, rows, in, ldx);
            free(dz); free(zp); free(DZ); free(ZP); free(dxc); free(DX);
          }
          free(x); free(w); free(b); free(X); free(W); free(B16);
          free(zc); free(hc); free(Z); free(H);
        }
  free(work);
  cublasLtDestroy(lt);
}

/* What the launchers hand back to the caller (NOT_SUPPORTED, nothing run),
 * and what the emulated cuBLASLt itself refuses as the library documents:
 * an aux ld not a multiple of 8, a bias of a type other than D's, a
 * missing bias, an epilogue it does not emulate, mixed A and B types. */
static void emu_lt_refusals(void) {
  cublasLtHandle_t lt;
  ok("tg_cuda_linear_fwd_lt", "cublasLtCreate", cublasLtCreate(&lt));
  const int rows = 4, in = 8, out = 8, ld = 12;
  uint16_t X[4 * 8] = {0}, W[8 * 8] = {0}, b[8] = {0}, Z[4 * 16], H[4 * 16];
  const int calls = tg_emu_lt_matmul_calls();
  CHECK(tg_cuda_linear_fwd_lt(lt, TG_BF16, rows, in, out, X, in, W, in, b, 0, Z, ld, H, ld, NULL,
                              0, NULL) == CUBLAS_STATUS_NOT_SUPPORTED,
        "tg_cuda_linear_fwd_lt: ReLU not refused");
  CHECK(tg_cuda_linear_fwd_lt(lt, TG_BF16, rows, in, out, X, in, W, in, b, 1, Z, ld, H, ld, NULL,
                              0, NULL) == CUBLAS_STATUS_NOT_SUPPORTED,
        "tg_cuda_linear_fwd_lt: an aux ld of 12 not refused");
  CHECK(tg_cuda_linear_bwd_data_lt(lt, TG_BF16, rows, in, out, Z, ld, W, in, 0, X, in, H, ld,
                                   NULL, 0, NULL) == CUBLAS_STATUS_NOT_SUPPORTED,
        "tg_cuda_linear_bwd_data_lt: ReLU not refused");
  CHECK(tg_emu_lt_matmul_calls() == calls, "a refused launcher ran a matmul");

  /* the stand-in's own refusals, one descriptor at a time */
  typedef struct {
    const char *what;
    uint32_t epilogue;
    int64_t aux_ld;
    int32_t bias_type, b_type;
    int set_bias;
    cublasStatus_t want;
  } refusal;
  const refusal cases[] = {
      {"aux ld 12", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 12, -1, CUDA_R_16BF, 1,
       CUBLAS_STATUS_INVALID_VALUE},
      {"aux ld below D's rows", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 0, -1, CUDA_R_16BF, 1,
       CUBLAS_STATUS_INVALID_VALUE},
      {"f32 bias, bf16 D", CUBLASLT_EPILOGUE_BIAS, 0, CUDA_R_32F, CUDA_R_16BF, 1,
       CUBLAS_STATUS_INVALID_VALUE},
      {"no bias pointer", CUBLASLT_EPILOGUE_BIAS, 0, -1, CUDA_R_16BF, 0,
       CUBLAS_STATUS_INVALID_VALUE},
      {"ReLU bit mask", CUBLASLT_EPILOGUE_RELU_AUX, 16, -1, CUDA_R_16BF, 0,
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"bf16 A, fp16 B", CUBLASLT_EPILOGUE_DEFAULT, 0, -1, CUDA_R_16F, 0,
       CUBLAS_STATUS_NOT_SUPPORTED},
      {"the control", CUBLASLT_EPILOGUE_GELU_AUX_BIAS, 16, -1, CUDA_R_16BF, 1,
       CUBLAS_STATUS_SUCCESS},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const refusal *c = &cases[i];
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    ok("cublasLt", "desc", cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const void *bias = b;
    void *aux = Z;
    ok("cublasLt", "epilogue", cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                              &c->epilogue, sizeof c->epilogue));
    if (c->set_bias)
      ok("cublasLt", "bias", cublasLtMatmulDescSetAttribute(
                                 desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (c->bias_type != -1)
      ok("cublasLt", "bias type",
         cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &c->bias_type,
                                        sizeof c->bias_type));
    ok("cublasLt", "aux", cublasLtMatmulDescSetAttribute(
                              desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    ok("cublasLt", "aux ld", cublasLtMatmulDescSetAttribute(
                                 desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &c->aux_ld,
                                 sizeof c->aux_ld));
    ok("cublasLt", "A", cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 8, 8, 8));
    ok("cublasLt", "B", cublasLtMatrixLayoutCreate(&lb, (cudaDataType_t)c->b_type, 8, 4, 8));
    ok("cublasLt", "D", cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, 8, 4, 16));
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasLtMatmul(lt, desc, &one, W, la, X, lb, &zero, H, lc, H, lc,
                                             NULL, NULL, 0, NULL);
    CHECK(st == c->want, "emulated cublasLtMatmul, %s: status %d, want %d", c->what, (int)st,
          (int)c->want);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
  }
  cublasLtDestroy(lt);
}

static void emu_linear_all(void) {
  emu_linear();
  emu_linear_lowp();
  emu_linear_lt();
  if (ops_row_is("linear_fwd")) emu_lt_refusals();
}
#endif /* OPS_EMU */

/* ---- lowp -------------------------------------------------------------------- */

static void linear_case(tg_rng *rng, tg_dtype t) {
  int rows = 37, in = 29, out = 23;
  float *x = rounded_rand(rng, t, rows, in, 1.0f), *w = rounded_rand(rng, t, out, in, 0.3f);
  float *b = tg_rand_mat(rng, 1, out, out, 0.1f, 0.0f);
  tg_tensor X, Wt, Z, H, X32, W32, B32, Z32, H32;
  new_low(&X, t, rows, in, x);
  new_low(&Wt, t, out, in, w);
  new_f32(&B32, 1, out, b);
  CHECK(tg_tensor_alloc(&Z, rows, out, t) == 0, "alloc");
  CHECK(tg_tensor_alloc(&H, rows, out, t) == 0, "alloc");
  new_f32(&X32, rows, in, x);
  new_f32(&W32, out, in, w);
  new_f32(&Z32, rows, out, NULL);
  new_f32(&H32, rows, out, NULL);
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
  CHECK(tg_linear_fwd_insert(X.handle, Wt.handle, B32.handle, TG_ACT_GELU, Z.handle, H.handle,
                             &o) == 0, "linear 16-bit: %s", tg_last_error());
  CHECK(tg_linear_fwd_insert(X32.handle, W32.handle, B32.handle, TG_ACT_GELU, Z32.handle,
                             H32.handle, NULL) == 0, "linear f32: %s", tg_last_error());
  expect_rounded(t, &Z, &Z32, "linear forward Z");
  expect_rounded(t, &H, &H32, "linear forward GELU(Z)");

  tg_tensor *all[] = {&X, &Wt, &Z, &H, &X32, &W32, &B32, &Z32, &H32};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(x);
  free(w);
  free(b);
}

/* the backward to the input through GELU: dZ, W, Zprev, dX 16-bit */
static void linear_bwd_case(tg_rng *rng, tg_dtype t) {
  int rows = 37, in = 29, out = 23;
  float *dz = rounded_rand(rng, t, rows, out, 1.0f), *w = rounded_rand(rng, t, out, in, 0.3f);
  float *zp = rounded_rand(rng, t, rows, in, 2.0f);
  tg_tensor DZ, Wt, ZP, DX, DZ32, W32, ZP32, DX32;
  new_low(&DZ, t, rows, out, dz);
  new_low(&Wt, t, out, in, w);
  new_low(&ZP, t, rows, in, zp);
  CHECK(tg_tensor_alloc(&DX, rows, in, t) == 0, "alloc");
  new_f32(&DZ32, rows, out, dz);
  new_f32(&W32, out, in, w);
  new_f32(&ZP32, rows, in, zp);
  new_f32(&DX32, rows, in, NULL);
  tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
  CHECK(tg_linear_bwd_data_insert(DZ.handle, Wt.handle, TG_ACT_GELU, ZP.handle, DX.handle,
                                  &o) == 0, "linear_bwd_data 16-bit: %s", tg_last_error());
  CHECK(tg_linear_bwd_data_insert(DZ32.handle, W32.handle, TG_ACT_GELU, ZP32.handle,
                                  DX32.handle, NULL) == 0, "linear_bwd_data f32: %s",
        tg_last_error());
  expect_rounded(t, &DX, &DX32, "linear backward-data through GELU");
  CHECK_REFUSED(tg_linear_bwd_data_insert(DZ.handle, Wt.handle, TG_ACT_GELU, ZP.handle,
                                          DX.handle, NULL),
                "tg_linear_bwd_data", "2-byte buffers without opts.lowp");
  tg_tensor *all[] = {&DZ, &Wt, &ZP, &DX, &DZ32, &W32, &ZP32, &DX32};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tg_tensor_free(all[i]);
  free(dz);
  free(w);
  free(zp);
}

static void linear_lowp_body(void) {
  tg_rng rng = {.s = 2024};
  for (int k = 0; k < 2; k++)
    if (ops_row_is("linear_fwd"))
      linear_case(&rng, LOWP[k]);
    else
      linear_bwd_case(&rng, LOWP[k]);
}

static void linear_lowp(void) { ops_run_worker_counts(linear_lowp_body); }

static const ops_row rows[] = {
    {.name = "linear_fwd",
     .doc = "fused linear forward `Z = X W^T + b; H = act(Z)`",
     .buffers = "X (R), W (R), b (R), Z (W), H (W)",
     .covers = "tg_linear_fwd_cl tg_linear_fwd_insert tg_cuda_linear_fwd tg_cuda_linear_fwd_lowp "
               "tg_cuda_linear_fwd_lt",
     .kernels = "tg_cpu_linear_fwd tg_cpu_linear_fwd_lowp",
     .run = {[OPS_REF] = linear_ref, [OPS_CPU] = linear_cpu, [OPS_CUDA] = linear_pair,
             [OPS_DEVICE] = linear_pair, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_linear_all),
             [OPS_LOWP] = linear_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "linear_bwd_data",
     .doc = "fused linear backward-data `dX = (dZ W) * act'(Zprev)`",
     .buffers = "dZ (R), W (R), dX (W), Zprev (R)",
     .covers = "tg_linear_bwd_data_cl tg_linear_bwd_data_insert tg_cuda_linear_bwd_data "
               "tg_cuda_linear_bwd_data_lowp tg_cuda_linear_bwd_data_lt",
     .kernels = "tg_cpu_linear_bwd_data tg_cpu_linear_bwd_data_lowp",
     .run = {[OPS_REF] = linear_ref, [OPS_CPU] = linear_cpu, [OPS_CUDA] = linear_pair,
             [OPS_DEVICE] = linear_pair, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_linear_all),
             [OPS_LOWP] = linear_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
