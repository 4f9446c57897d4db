/*
 * Rows attention_fwd and attention_bwd (codelets/attention.c): causal
 * self-attention, naive and chunked, forward and backward; each case
 * checks its row's op (the split of the ref checks: attention_ref.c).
 *
 * ref (was test_attention.c; in attention_ref.c), on the kernels of
 * kernels/cpu/attention.c:
 *
 *  1. naive forward against a float64 reference written here (out and the
 *     probabilities att, whose upper triangle must be exact zeros), for
 *     b in {1, 2}, T in {1, 5, 17}, (C, NH) in {(8, 2), (12, 3), (64, 4)};
 *     norm-relative error <= 1e-5.  Naive backward against central finite
 *     differences (double, h = 1e-4) of L = sum(G .* out) over every element
 *     of qkv, norm-relative error <= 1e-4; dqkv starts as NaN, so every
 *     element of the (n, 3C) block must be written.
 *  2. chunked against naive, b = 2, C = 64, NH = 4 (hs 16), T in {1, 17, 64,
 *     100, 256}, chunk in {16, 64} (partial last chunks, chunk > T), plus
 *     padded leading dimensions, sharp score distributions (scores far
 *     apart, so that the running max moves and exp's clamp is reached), and
 *     odd head sizes and chunk (hs 12 and 4, chunk 7): out
 *     and the dq, dk, dv stripes of dqkv against the naive kernels given the
 *     same dout, lse against log-sum-exp of the float64 scores; all <= 1e-5.
 *     Outputs start as NaN, the scratch as NaN with a guard after it,
 *     padding of outputs is a sentinel that must survive bit for bit.
 *  3. tg_attention_chunked_scratch_floats is linear in T: s(2T) <= 2 s(T) +
 *     64 for T = 256, 1024, 4096 (chunk 64), and s(4096) << 4096^2.
 *  4. causality, bit for bit, of the chunked kernels: changing qkv at
 *     position t2 leaves out, lse (t < t2) and dq (t < t2) unchanged;
 *     changing dout at t2 leaves dq (t != t2) and dk, dv (t > t2)
 *     unchanged.  Skipping: NaN in k and v of the key chunks to the right of
 *     a query chunk must not reach it (a kernel that computes the skipped
 *     chunks and masks them afterwards multiplies 0 by NaN).
 *
 * Inputs q, k are scaled so that scores spread over a few units (softmax far
 * from uniform).
 *
 * pair: the five kinds (gemm and cudnn in f32: the cuBLAS path on a GPU), T
 * in {1, 17, 64, 100} (not a multiple of the chunk 16); on a GPU (cuda)
 * also the cudnn kind on bf16 and fp16 tensors, cuDNN against the CPU's
 * 16-bit kernels (pair_attention_cudnn says the tolerances).
 * lowp: every kind on bf16 and fp16 tensors through StarPU, against the f32
 * codelet on the widened inputs, rounded, bit for bit (the chunked kinds run
 * the 16-bit kernels; naive the adapter); ref checks the 16-bit kernels
 * against the f32 ones at padded strides and odd shapes.
 * cuda-emu: the cudnn kind's launchers without cuDNN (the stub refuses, the
 * fallback runs the gemm or flash kernels: emu_attention_cudnn), the lse
 * permutation, and the six launchers (naive, chunked and cuBLAS), T = 1 and T not a multiple of the tile or
 * above the naive kernels' 256-wide chunks, head sizes 8 to 256; dqkv
 * compared per q / k / v third.
 */

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"

/* the ref case (attention_ref.c) */
void attention_ref(void);

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int attn_fwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_attention_fwd_insert((tg_attention_kind)c->kind, c->T, c->NH, c->chunk, c->h[0],
                                 out[0].handle, out[1].handle, o);
}

static int attn_bwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_attention_bwd_insert((tg_attention_kind)c->kind, c->T, c->NH, c->chunk, c->h[0],
                                 c->h[1], c->h[2], c->h[3], out[0].handle, o);
}

static void pair_attention(void) {
  static const int Ts[] = {1, 17, 64, 100};
  const int b = 2, C = 32, NH = 4, chunk = 16;
  for (int kind = 0; kind < 5; kind++)
    for (int t = 0; t < 4; t++) {
      int T = Ts[t], n = b * T;
      size_t srows = kind == TG_ATTN_NAIVE ? (size_t)b * NH * T : (size_t)n;
      int scols = kind == TG_ATTN_NAIVE ? T : NH;
      float *qkv = rnd((size_t)n * 3 * C, 2), *dout = rnd((size_t)n * C, 1);
      float *out = xmalloc(sizeof(float) * n * C), *state = xmalloc(sizeof(float) * srows * scols);
      float *scratch = xmalloc(tg_attention_scratch_bytes(kind, b, T, C, NH, chunk));
      if (kind == TG_ATTN_NAIVE)
        tg_cpu_attention_naive_fwd(b, T, C, NH, qkv, 3 * C, state, out, C);
      else
        tg_cpu_attention_chunked_fwd(b, T, C, NH, chunk, qkv, 3 * C, out, C, state, scratch);
      tg_tensor Q, O, S, DO;
      new_tensor(&Q, n, 3 * C, qkv); new_tensor(&O, n, C, out);
      new_tensor(&S, (int)srows, scols, state); new_tensor(&DO, n, C, dout);
      char what[64];
      static const char *const names[] = {"naive", "chunked", "gemm", "flash", "cudnn"};
      const char *kn = names[kind];
      gctx c = {.h = {Q.handle, O.handle, S.handle, DO.handle},
                .T = T,
                .NH = NH,
                .chunk = chunk,
                .V = 0,
                .kind = kind,
                .accum = TG_OVERWRITE};
      outspec fo[2] = {{.name = "out", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL},
                       {.name = "state",
                        .rows = (int)srows,
                        .cols = scols,
                        .init = NULL,
                        .redux = 0,
                        .tol = TOL}};
      snprintf(what, sizeof what, "attention_fwd %s T=%d", kn, T);
      if (ops_row_is("attention_fwd")) run_pair(what, attn_fwd, &c, 2, fo, NULL, NULL);
      outspec bo = {.name = "dqkv", .rows = n, .cols = 3 * C, .init = NULL, .redux = 0, .tol = TOL};
      snprintf(what, sizeof what, "attention_bwd %s T=%d", kn, T);
      if (ops_row_is("attention_bwd")) run_pair(what, attn_bwd, &c, 1, &bo, NULL, NULL);
      free(qkv); free(dout); free(out); free(state); free(scratch);
      tg_tensor_free(&Q); tg_tensor_free(&O); tg_tensor_free(&S); tg_tensor_free(&DO);
    }
}

/* ---- cuda: the cudnn kind in 16-bit, a CPU worker against a CUDA one ---------- */

typedef struct cudnn_ctx {
  tg_dtype t;
  int T, NH;
  starpu_data_handle_t qkv, out, state, dout;
} cudnn_ctx;

static int cudnn_fwd16(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const cudnn_ctx *c = v;
  tg_task_opts w = *o;
  w.lowp = c->t;
  return tg_attention_fwd_insert(TG_ATTN_CUDNN, c->T, c->NH, 16, c->qkv, out[0].handle,
                                 out[1].handle, &w);
}

static int cudnn_bwd16(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const cudnn_ctx *c = v;
  tg_task_opts w = *o;
  w.lowp = c->t;
  return tg_attention_bwd_insert(TG_ATTN_CUDNN, c->T, c->NH, 16, c->qkv, c->out, c->state,
                                 c->dout, out[0].handle, &w);
}

/* The cudnn kind on 16-bit tensors: the CPU worker runs the chunked 16-bit
 * kernels (f32 arithmetic on the 16-bit values, each output rounded once),
 * the CUDA worker cuDNN's fused attention (or, without cuDNN, the gemm
 * kind's kernels, and stderr says so).  cuDNN rounds P to the 16-bit type
 * before P V, and dS and P before the gradients' products, as
 * FlashAttention-2 does: out within 2^-8 normwise (P rounded, then out:
 * two bf16 half-ulps; fp16's are 8 times smaller), dqkv 2^-7 (one rounding
 * more); lse is f32 from f32 scores of the same 16-bit values: 1e-4 (the
 * device's exp, and the order of its sums).  The backward starts from the
 * CPU forward's out and lse, so it checks the backward alone.  Head sizes
 * 64 and 128. */
static void pair_attention_cudnn(void) {
  static const struct { int T, C, NH; } shapes[] = {{17, 128, 2}, {64, 128, 2}, {33, 256, 2}};
  const int b = 2;
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
      const tg_dtype t = LOWP[k];
      const int T = shapes[i].T, C = shapes[i].C, NH = shapes[i].NH, n = b * T;
      float *qkv = rnd((size_t)n * 3 * C, 2), *dout = rnd((size_t)n * C, 1);
      float *lse = xmalloc(sizeof(float) * n * NH), *out = xmalloc(sizeof(float) * n * C);
      tg_tensor Q, O, S, DO;
      new_low(&Q, t, n, 3 * C, qkv);
      new_low(&DO, t, n, C, dout);
      /* out and lse as the CPU's 16-bit forward writes them */
      float *q16 = read_as_f32(&Q, t);
      float *scratch = xmalloc(tg_attention_chunked_scratch_floats(T, C, NH, 16) * sizeof(float));
      tg_cpu_attention_chunked_fwd(b, T, C, NH, 16, q16, 3 * C, out, C, lse, scratch);
      new_low(&O, t, n, C, out);
      new_tensor(&S, n, NH, lse);
      cudnn_ctx c = {.t = t, .T = T, .NH = NH, .qkv = Q.handle, .out = O.handle,
                     .state = S.handle, .dout = DO.handle};
      char what[96];
      if (ops_row_is("attention_fwd")) {
        out16 fo[2] = {{.name = "out", .rows = n, .cols = C, .dt = t, .init = NULL, .tol = 0x1p-8},
                       {.name = "state", .rows = n, .cols = NH, .dt = TG_F32, .init = NULL,
                        .tol = 1e-4}};
        snprintf(what, sizeof what, "attention_fwd cudnn %s T=%d hs=%d", tg_dtype_name(t), T,
                 C / NH);
        run_pair16(what, cudnn_fwd16, &c, 2, fo);
      } else {
        out16 bo = {.name = "dqkv", .rows = n, .cols = 3 * C, .dt = t, .init = NULL,
                    .tol = 0x1p-7};
        snprintf(what, sizeof what, "attention_bwd cudnn %s T=%d hs=%d", tg_dtype_name(t), T,
                 C / NH);
        run_pair16(what, cudnn_bwd16, &c, 1, &bo);
      }
      free(qkv); free(dout); free(lse); free(out); free(q16); free(scratch);
      tg_tensor_free(&Q); tg_tensor_free(&O); tg_tensor_free(&S); tg_tensor_free(&DO);
    }
}

/* cuda: the four f32 kinds, then the cudnn kind in 16-bit */
static void pair_attention_cuda(void) {
  pair_attention();
  pair_attention_cudnn();
}

/* ---- lowp: 16-bit tensors through the codelets ------------------------------- */

/* Each kind in bf16 and fp16, through StarPU: the forward's out and the
 * backward's dqkv are the f32 codelet's on the widened inputs, rounded, bit
 * for bit, and the state equal.  Chunked, gemm and flash run the 16-bit
 * kernels on the 16-bit buffers (tg_lowp_cpu_keep16), naive the adapter. */
static void attention_lowp_body(void) {
  static const char *const names[] = {"naive", "chunked", "gemm", "flash", "cudnn"};
  static const struct { int T, C, NH; } shapes[] = {{17, 24, 2}, {64, 64, 4}};
  const int b = 2, chunk = 16;
  tg_rng rng = {.s = 77};
  const int fwd = ops_row_is("attention_fwd");
  for (int k = 0; k < 2; k++)
    for (int kind = 0; kind < 5; kind++)
      for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const tg_dtype t = LOWP[k];
        const int T = shapes[i].T, C = shapes[i].C, NH = shapes[i].NH, n = b * T;
        const int srows = kind == TG_ATTN_NAIVE ? b * NH * T : n;
        const int scols = kind == TG_ATTN_NAIVE ? T : NH;
        float *qkv = rounded_rand(&rng, t, n, 3 * C, 2.0f);
        float *dout = rounded_rand(&rng, t, n, C, 1.0f);
        tg_tensor Q, O, S, Q32, O32, S32, DO = {0}, DQ = {0}, DO32 = {0}, DQ32 = {0};
        new_low(&Q, t, n, 3 * C, qkv);
        new_f32(&Q32, n, 3 * C, qkv);
        if (tg_tensor_alloc(&O, n, C, t) != 0) fatal_error("alloc");
        new_f32(&O32, n, C, NULL);
        new_f32(&S, srows, scols, NULL);
        new_f32(&S32, srows, scols, NULL);
        tg_task_opts o = {.priority = 0, .worker = -1, .name = NULL, .lowp = t};
        CHECK(tg_attention_fwd_insert((tg_attention_kind)kind, T, NH, chunk, Q.handle, O.handle,
                                      S.handle, &o) == 0, "fwd 16-bit: %s", tg_last_error());
        CHECK(tg_attention_fwd_insert((tg_attention_kind)kind, T, NH, chunk, Q32.handle,
                                      O32.handle, S32.handle, NULL) == 0, "fwd f32: %s",
              tg_last_error());
        char what[80];
        snprintf(what, sizeof what, "attention_fwd %s T=%d C=%d out", names[kind], T, C);
        if (fwd) expect_rounded(t, &O, &O32, what);
        float *s16 = read_as_f32(&S, TG_F32), *s32 = read_as_f32(&S32, TG_F32);
        if (fwd)
          CHECK(!memcmp(s16, s32, sizeof(float) * (size_t)srows * scols),
                "%s attention_fwd %s T=%d: the state differs from f32's", tg_dtype_name(t),
                names[kind], T);
        /* backward from the 16-bit out, the f32 one from its widening */
        float *o16 = fwd ? NULL : read_as_f32(&O, t);
        if (!fwd) {
          if (tg_tensor_write(&O32, o16) != 0) fatal_error("tg_tensor_write");
          new_low(&DO, t, n, C, dout);
          new_f32(&DO32, n, C, dout);
          if (tg_tensor_alloc(&DQ, n, 3 * C, t) != 0) fatal_error("alloc");
          new_f32(&DQ32, n, 3 * C, NULL);
          CHECK(tg_attention_bwd_insert((tg_attention_kind)kind, T, NH, chunk, Q.handle,
                                        O.handle, S.handle, DO.handle, DQ.handle, &o) == 0,
                "bwd 16-bit: %s", tg_last_error());
          CHECK(tg_attention_bwd_insert((tg_attention_kind)kind, T, NH, chunk, Q32.handle,
                                        O32.handle, S.handle, DO32.handle, DQ32.handle,
                                        NULL) == 0,
                "bwd f32: %s", tg_last_error());
          snprintf(what, sizeof what, "attention_bwd %s T=%d C=%d dqkv", names[kind], T, C);
          expect_rounded(t, &DQ, &DQ32, what);
        }
        free(qkv), free(dout), free(s16), free(s32), free(o16);
        tg_tensor *all[] = {&Q, &O, &S, &DO, &DQ, &Q32, &O32, &S32, &DO32, &DQ32};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) tg_tensor_free(all[j]);
      }
}

static void attention_lowp(void) { ops_run_worker_counts(attention_lowp_body); }

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

/* ||x|| over the C columns [c0, c0 + C) of (rows, ld) */
static double cols_norm(const float *x, int rows, int ld, int c0, int C) {
  double s = 0;
  for (int r = 0; r < rows; r++)
    for (int j = c0; j < c0 + C; j++) s += (double)x[(size_t)r * ld + j] * x[(size_t)r * ld + j];
  return sqrt(s);
}

/* dqkv compared per third (q, k, v gradients): their magnitudes differ by
 * orders (dk is ~400 times smaller than dv here), and one normwise error
 * over the whole buffer would hide a dk wrong by 1e-4.  With T == 1 the
 * softmax has one key, P = 1, and dq = dk = 0 exactly: both sides return
 * rounding noise, which is measured against ||dv|| instead (a noise of
 * ~1e-8 relative; a real error would be O(1)). */
static void compare_qkv_tol(const char *launcher, const float *emu, const float *cpu, int rows,
                            int C, int ld, int T, double tol) {
  static const char *const names[3] = {"dq", "dk", "dv"};
  float *e = tg_test_malloc(sizeof(float) * (size_t)rows * C);
  float *c = tg_test_malloc(sizeof(float) * (size_t)rows * C);
  const double dv = cols_norm(cpu, rows, ld, 2 * C, C);
  for (int third = 0; third < 3; third++) {
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < C; j++) {
        e[(size_t)r * C + j] = emu[(size_t)r * ld + third * C + j];
        c[(size_t)r * C + j] = cpu[(size_t)r * ld + third * C + j];
      }
    if (T == 1 && third < 2) {
      const double ne = cols_norm(emu, rows, ld, third * C, C) / dv;
      const double nc = cols_norm(cpu, rows, ld, third * C, C) / dv;
      CHECK(ne <= tol && nc <= tol, "%s T 1: %s not zero: %.3e (cpu %.3e) of ||dv||",
            launcher, names[third], ne, nc);
      record(launcher, ne);
    } else {
      compare(launcher, names[third], e, c, (size_t)rows * C, tol);
    }
  }
  free(e);
  free(c);
  /* the padding columns must be untouched */
  for (int r = 0; r < rows; r++)
    for (int j = 3 * C; j < ld; j++)
      CHECK(emu[(size_t)r * ld + j] == kSentinel, "%s: padding (%d, %d) overwritten", launcher, r, j);
}

static void compare_qkv(const char *launcher, const float *emu, const float *cpu, int rows,
                        int C, int ld, int T) {
  compare_qkv_tol(launcher, emu, cpu, rows, C, ld, T, kTolRed);
}

/* a bf16 (rows, ld) output widened, its padding columns [cols, ld) read as
 * kSentinel where they still hold to16's 0xabcd (NaN otherwise) */
static float *widen_out16(const uint16_t *h, int rows, int cols, int ld) {
  float *f = widen16(TG_BF16, h, (size_t)rows * ld);
  for (int r = 0; r < rows; r++)
    for (int j = cols; j < ld; j++)
      f[(size_t)r * ld + j] = h[(size_t)r * ld + j] == 0xabcd ? kSentinel : NAN;
  return f;
}

/* The bf16 cuBLAS path (attention_gemm_lowp.cu) against the CPU's chunked
 * kernels on the same bf16 values (qkv, dout, and out as the forward
 * rounded it), its scratch NaN-filled, its outputs NaN with 0xabcd
 * padding.  lse is f32 from f32 scores (kTolRed).  out is P16 V rounded
 * once: each probability rounded to bf16 (2^-9 relative at most) and the
 * output once more (2^-9), so normwise within 2^-8.  The gradients come
 * from dS or P rounded to bf16, then rounded once themselves: 2^-7. */
static void attention_lowp_case_pad(int b, int T, int C, int NH, int padq, int pado) {
  const int fwd = ops_row_is("attention_fwd");
  const int n = b * T, chunk = 16, ldq = 3 * C + padq, ldo = C + pado;
  float *qkv = input(n, 3 * C, ldq, 2.0f), *dout = input(n, C, ldo, 1.0f);
  uint16_t *Q16 = to16(TG_BF16, qkv, n, 3 * C, ldq, padq);
  uint16_t *D16 = to16(TG_BF16, dout, n, C, ldo, pado);
  float *out = fmalloc((size_t)n * ldo), *lse = fmalloc((size_t)n * NH), *glse = fmalloc((size_t)n * NH);
  float *cpu_scratch = fmalloc(tg_attention_chunked_scratch_floats(T, C, NH, chunk));
  const size_t ns = tg_attn_gemm_lowp_scratch_floats(b, T, NH);
  float *gs = tg_const_mat(1, (int)ns, (int)ns, NAN, NAN);
  tg_cpu_attention_chunked_fwd(b, T, C, NH, chunk, qkv, ldq, out, ldo, lse, cpu_scratch);
  float *nan_out = tg_const_mat(n, C, ldo, NAN, NAN);
  uint16_t *O16 = to16(TG_BF16, nan_out, n, C, ldo, pado); /* NaN, padding 0xabcd */
  cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
  if (fwd) {
    const char *L = "tg_cuda_attention_gemm_fwd_lowp";
    ok(L, "", tg_cuda_attention_gemm_fwd_lowp(g_blas, b, T, C, NH, Q16, ldq, O16, ldo, glse, gs,
                                              NULL, &cs));
    ok(L, "cublas", cs);
    float *got = widen_out16(O16, n, C, ldo), *a = fmalloc((size_t)n * C), *w = fmalloc((size_t)n * C);
    int pad = 1;
    for (int r = 0; r < n; r++) {
      for (int j = 0; j < C; j++) {
        a[(size_t)r * C + j] = got[(size_t)r * ldo + j];
        w[(size_t)r * C + j] = out[(size_t)r * ldo + j];
      }
      for (int j = C; j < ldo; j++) pad &= got[(size_t)r * ldo + j] == kSentinel;
    }
    compare(L, "out", a, w, (size_t)n * C, 0x1p-8);
    CHECK(pad, "%s: padding of out overwritten", L);
    compare(L, "lse", glse, lse, (size_t)n * NH, kTolRed);
    free(got);
    /* the flash kernels (attention_flash_lowp.cu), same rounding points */
    const char *F = "tg_cuda_attention_flash_fwd_lowp";
    if (tg_cuda_attention_flash_lowp_supported(C, NH)) {
      uint16_t *F16 = to16(TG_BF16, nan_out, n, C, ldo, pado);
      float *flse = tg_const_mat(n, NH, NH, NAN, NAN);
      ok(F, "", tg_cuda_attention_flash_fwd_lowp(b, T, C, NH, Q16, ldq, F16, ldo, flse, NULL));
      float *fg = widen_out16(F16, n, C, ldo);
      pad = 1;
      for (int r = 0; r < n; r++) {
        for (int j = 0; j < C; j++) a[(size_t)r * C + j] = fg[(size_t)r * ldo + j];
        for (int j = C; j < ldo; j++) pad &= fg[(size_t)r * ldo + j] == kSentinel;
      }
      compare(F, "out", a, w, (size_t)n * C, 0x1p-8);
      CHECK(pad, "%s: padding of out overwritten", F);
      compare(F, "lse", flse, lse, (size_t)n * NH, kTolRed);
      free(F16); free(flse); free(fg);
    } else {
      CHECK(tg_cuda_attention_flash_fwd_lowp(b, T, C, NH, Q16, ldq, O16, ldo, glse, NULL) ==
                cudaErrorNotSupported,
            "%s: head size %d not refused", F, C / NH);
      tg_emu_reset();
    }
    free(a); free(w);
  } else {
    const char *L = "tg_cuda_attention_gemm_bwd_lowp";
    uint16_t *OUT16 = to16(TG_BF16, out, n, C, ldo, pado); /* out as the forward stores it */
    float *nan_dq = tg_const_mat(n, 3 * C, ldq, NAN, NAN), *dq = fmalloc((size_t)n * ldq);
    uint16_t *DQ16 = to16(TG_BF16, nan_dq, n, 3 * C, ldq, padq);
    tg_cpu_attention_chunked_bwd(b, T, C, NH, chunk, qkv, ldq, out, ldo, lse, dout, ldo, dq, ldq,
                                 cpu_scratch);
    ok(L, "", tg_cuda_attention_gemm_bwd_lowp(g_blas, b, T, C, NH, Q16, ldq, OUT16, ldo, lse,
                                              D16, ldo, DQ16, ldq, gs, NULL, &cs));
    ok(L, "cublas", cs);
    float *got = widen_out16(DQ16, n, 3 * C, ldq);
    compare_qkv_tol(L, got, dq, n, C, ldq, T, 0x1p-7);
    free(got);
    const char *F = "tg_cuda_attention_flash_bwd_lowp";
    if (tg_cuda_attention_flash_lowp_supported(C, NH)) {
      uint16_t *FQ16 = to16(TG_BF16, nan_dq, n, 3 * C, ldq, padq);
      float *fs = tg_const_mat(1, n * NH, n * NH, NAN, NAN); /* D */
      ok(F, "", tg_cuda_attention_flash_bwd_lowp(b, T, C, NH, Q16, ldq, OUT16, ldo, lse, D16, ldo,
                                                 FQ16, ldq, fs, NULL));
      float *fg = widen_out16(FQ16, n, 3 * C, ldq);
      compare_qkv_tol(F, fg, dq, n, C, ldq, T, 0x1p-7);
      free(FQ16); free(fs); free(fg);
    }
    free(OUT16); free(nan_dq); free(dq); free(DQ16);
  }
  free(qkv); free(dout); free(Q16); free(D16); free(out); free(lse); free(glse);
  free(cpu_scratch); free(gs); free(nan_out); free(O16);
}

/* odd leading dimensions (one value a load), and rows 16-byte aligned
 * (eight a load in the flash kernels' tiles) */
static void attention_lowp_case(int b, int T, int C, int NH) {
  attention_lowp_case_pad(b, T, C, NH, 1, 2);
  if (C % 8 == 0) attention_lowp_case_pad(b, T, C, NH, 8, 8);
}

/* One attention shape through the four launchers.  The naive kernels run a
 * 256-thread block per (sequence, head, query), so the large shapes use
 * the chunked kernels only (naive = 0) to keep the test fast. */
static void attention_case(int b, int T, int C, int NH, int naive) {
  const int fwd = ops_row_is("attention_fwd");
  const int n = b * T, chunk = 16, ldq = 3 * C + 1, ldo = C + 2;
  float *qkv = input(n, 3 * C, ldq, 2.0f), *dout = input(n, C, ldo, 1.0f);
  float *out[2], *dqkv[2];
  if (naive) {
    float *att[2];
    float *cpu_scratch = fmalloc((size_t)T);
    outputs(att, b * NH * T, T, T, 0);
    outputs(out, n, C, ldo, 0);
    tg_cpu_attention_naive_fwd(b, T, C, NH, qkv, ldq, att[1], out[1], ldo);
    if (fwd) {
      ok("tg_cuda_attention_naive_fwd", "",
         tg_cuda_attention_naive_fwd(b, T, C, NH, qkv, ldq, att[0], out[0], ldo, NULL));
      compare("tg_cuda_attention_naive_fwd", "att", att[0], att[1], (size_t)b * NH * T * T,
              kTolRed);
      compare("tg_cuda_attention_naive_fwd", "out", out[0], out[1], (size_t)n * ldo, kTolRed);
    }
    outputs(dqkv, n, 3 * C, ldq, 0);
    if (!fwd) ok("tg_cuda_attention_naive_bwd", "",
       tg_cuda_attention_naive_bwd(b, T, C, NH, qkv, ldq, att[1], dout, ldo, dqkv[0], ldq, NULL,
                                   NULL));
    tg_cpu_attention_naive_bwd(b, T, C, NH, qkv, ldq, att[1], dout, ldo, dqkv[1], ldq,
                               cpu_scratch);
    if (!fwd) compare_qkv("tg_cuda_attention_naive_bwd", dqkv[0], dqkv[1], n, C, ldq, T);
    free2(att); free2(out); free2(dqkv); free(cpu_scratch);
  }
  float *lse[2];
  const size_t ncpu = tg_attention_chunked_scratch_floats(T, C, NH, chunk);
  const size_t ncuda = tg_cuda_attention_chunked_scratch_floats(b, T, C, NH, chunk);
  float *cpu_scratch = fmalloc(ncpu), *scratch = tg_const_mat(1, (int)ncuda, (int)ncuda, NAN, NAN);
  outputs(out, n, C, ldo, 0);
  outputs(lse, n, NH, NH, 0);
  tg_cpu_attention_chunked_fwd(b, T, C, NH, chunk, qkv, ldq, out[1], ldo, lse[1], cpu_scratch);
  if (fwd) {
    ok("tg_cuda_attention_chunked_fwd", "",
       tg_cuda_attention_chunked_fwd(b, T, C, NH, chunk, qkv, ldq, out[0], ldo, lse[0], NULL,
                                     NULL));
    compare("tg_cuda_attention_chunked_fwd", "out", out[0], out[1], (size_t)n * ldo, kTolRed);
    compare("tg_cuda_attention_chunked_fwd", "lse", lse[0], lse[1], (size_t)n * NH, kTolRed);
  }
  outputs(dqkv, n, 3 * C, ldq, 0);
  if (!fwd) ok("tg_cuda_attention_chunked_bwd", "",
     tg_cuda_attention_chunked_bwd(b, T, C, NH, chunk, qkv, ldq, out[1], ldo, lse[1], dout, ldo,
                                   dqkv[0], ldq, scratch, NULL));
  tg_cpu_attention_chunked_bwd(b, T, C, NH, chunk, qkv, ldq, out[1], ldo, lse[1], dout, ldo,
                               dqkv[1], ldq, cpu_scratch);
  if (!fwd) compare_qkv("tg_cuda_attention_chunked_bwd", dqkv[0], dqkv[1], n, C, ldq, T);
  /* the cuBLAS path (attention_gemm.cu) against the same CPU results; its
   * scratch NaN-filled, as every output before it is written */
  const size_t ngemm = tg_attn_gemm_scratch_floats(b, T, NH);
  float *gs = tg_const_mat(1, (int)ngemm, (int)ngemm, NAN, NAN), *gout[2], *glse[2], *gdq[2];
  outputs(gout, n, C, ldo, 0);
  outputs(glse, n, NH, NH, 0);
  outputs(gdq, n, 3 * C, ldq, 0);
  if (fwd) {
    ok("tg_cuda_attention_gemm_fwd", "",
       tg_cuda_attention_gemm_fwd(g_blas, b, T, C, NH, qkv, ldq, gout[0], ldo, glse[0], gs, NULL));
    compare("tg_cuda_attention_gemm_fwd", "out", gout[0], out[1], (size_t)n * ldo, kTolRed);
    compare("tg_cuda_attention_gemm_fwd", "lse", glse[0], lse[1], (size_t)n * NH, kTolRed);
  } else {
    ok("tg_cuda_attention_gemm_bwd", "",
       tg_cuda_attention_gemm_bwd(g_blas, b, T, C, NH, qkv, ldq, out[1], ldo, lse[1], dout, ldo,
                                  gdq[0], ldq, gs, NULL));
    compare_qkv("tg_cuda_attention_gemm_bwd", gdq[0], dqkv[1], n, C, ldq, T);
  }
  free2(gout); free2(glse); free2(gdq); free(gs);
  free2(out); free2(lse); free2(dqkv);
  free(cpu_scratch); free(scratch); free(qkv); free(dout);
}

/* The cudnn kind on a CUDA worker (attention_sdpa.c).  cuDNN is absent
 * here (the stub of attention_cudnn_stub.c: the emulator has no cuDNN), so
 * the launchers must refuse with a reason and nothing written, and the
 * fallback must run the gemm kind's bf16 kernels when the scratch holds
 * their scores (the codelet's cudnn scratch does), the flash kernels when
 * it holds only cuDNN's part, and nothing in fp16 (the codelet then widens
 * to f32).  The fallback's outputs against the CPU's chunked kernels with
 * the gemm kind's bf16 tolerances (attention_lowp_case_pad: out 2^-8,
 * dqkv 2^-7, lse f32).  cuDNN itself needs a GPU: the op table's cuda case
 * (test_ops_cuda) runs the cudnn kind through StarPU there. */
static void attention_cudnn_case(int b, int T, int C, int NH) {
  const int fwd = ops_row_is("attention_fwd");
  const int n = b * T, chunk = 16, ldq = 3 * C + 8, ldo = C + 8;
  float *qkv = input(n, 3 * C, ldq, 2.0f), *dout = input(n, C, ldo, 1.0f);
  uint16_t *Q16 = to16(TG_BF16, qkv, n, 3 * C, ldq, 8);
  uint16_t *D16 = to16(TG_BF16, dout, n, C, ldo, 8);
  float *out = fmalloc((size_t)n * ldo), *lse = fmalloc((size_t)n * NH);
  float *cpu_scratch = fmalloc(tg_attention_chunked_scratch_floats(T, C, NH, chunk));
  /* the codelet's cudnn scratch, and cuDNN's part alone */
  size_t full = tg_attn_gemm_lowp_scratch_floats(b, T, NH);
  const size_t own = tg_attn_cudnn_scratch_floats(b, T, C, NH);
  if (own > full) full = own;
  float *gs = tg_const_mat(1, (int)full, (int)full, NAN, NAN);
  tg_cpu_attention_chunked_fwd(b, T, C, NH, chunk, qkv, ldq, out, ldo, lse, cpu_scratch);
  float *nan_out = tg_const_mat(n, C, ldo, NAN, NAN);
  float *nan_dq = tg_const_mat(n, 3 * C, ldq, NAN, NAN);
  char why[256];
  int path = -1;
  cublasStatus_t cs;
  const char *L = fwd ? "tg_cuda_attention_sdpa_fwd" : "tg_cuda_attention_sdpa_bwd";
  const char *R = fwd ? "tg_cuda_attention_cudnn_fwd" : "tg_cuda_attention_cudnn_bwd";
  /* the stub: refused, a reason, nothing written */
  {
    uint16_t *O16 = to16(TG_BF16, nan_out, n, C, ldo, 8);
    float *glse = tg_const_mat(n, NH, NH, NAN, NAN);
    why[0] = 0;
    cudaError_t e =
        fwd ? tg_cuda_attention_cudnn_fwd(TG_BF16, b, T, C, NH, Q16, ldq, O16, ldo, glse, gs,
                                          full, NULL, why, sizeof why)
            : tg_cuda_attention_cudnn_bwd(TG_BF16, b, T, C, NH, Q16, ldq, O16, ldo, lse, D16,
                                          ldo, O16, ldo, gs, full, NULL, why, sizeof why);
    int untouched = 1;
    for (size_t i = 0; i < (size_t)n * NH; i++) untouched &= isnan(glse[i]);
    for (size_t i = 0; i < (size_t)n * ldo; i++) untouched &= O16[i] == (i % ldo < (size_t)C ? O16[0] : 0xabcd);
    CHECK(e == cudaErrorNotSupported && why[0] && untouched,
          "%s: without cuDNN: status %d, reason '%s', outputs untouched %d", R, (int)e, why,
          untouched);
    record(R, 0.0);
    free(O16); free(glse);
  }
  for (int small = 0; small < 2; small++) {
    /* small: cuDNN's part of the scratch only: no room for the scores */
    const size_t ns = small ? own : full;
    if (small && ns >= tg_attn_gemm_lowp_scratch_floats(b, T, NH)) continue;
    const int want = small ? (tg_cuda_attention_flash_lowp_supported(C, NH) ? TG_SDPA_FLASH : 0)
                           : TG_SDPA_GEMM;
    char what[48];
    snprintf(what, sizeof what, "%s scratch", small ? "cuDNN's" : "the codelet's");
    if (fwd) {
      uint16_t *O16 = to16(TG_BF16, nan_out, n, C, ldo, 8);
      float *glse = tg_const_mat(n, NH, NH, NAN, NAN);
      cudaError_t e = tg_cuda_attention_sdpa_fwd(g_blas, TG_BF16, b, T, C, NH, Q16, ldq, O16,
                                                 ldo, glse, gs, ns, NULL, &path, &cs, why,
                                                 sizeof why);
      CHECK(path == want, "%s (%s): path %d, %d expected (reason '%s')", L, what, path, want, why);
      if (want) {
        ok(L, what, e);
        float *got = widen_out16(O16, n, C, ldo), *a = fmalloc((size_t)n * C), *w = fmalloc((size_t)n * C);
        for (int r = 0; r < n; r++)
          for (int j = 0; j < C; j++) {
            a[(size_t)r * C + j] = got[(size_t)r * ldo + j];
            w[(size_t)r * C + j] = out[(size_t)r * ldo + j];
            CHECK(j || got[(size_t)r * ldo + C] == kSentinel, "%s: padding of out overwritten", L);
          }
        compare(L, "out", a, w, (size_t)n * C, 0x1p-8);
        compare(L, "lse", glse, lse, (size_t)n * NH, kTolRed);
        free(got); free(a); free(w);
      }
      free(O16); free(glse);
    } else {
      uint16_t *OUT16 = to16(TG_BF16, out, n, C, ldo, 8);
      uint16_t *DQ16 = to16(TG_BF16, nan_dq, n, 3 * C, ldq, 8);
      float *dq = fmalloc((size_t)n * ldq);
      tg_cpu_attention_chunked_bwd(b, T, C, NH, chunk, qkv, ldq, out, ldo, lse, dout, ldo, dq,
                                   ldq, cpu_scratch);
      cudaError_t e = tg_cuda_attention_sdpa_bwd(g_blas, TG_BF16, b, T, C, NH, Q16, ldq, OUT16,
                                                 ldo, lse, D16, ldo, DQ16, ldq, gs, ns, NULL,
                                                 &path, &cs, why, sizeof why);
      CHECK(path == want, "%s (%s): path %d, %d expected (reason '%s')", L, what, path, want, why);
      if (want) {
        ok(L, what, e);
        float *got = widen_out16(DQ16, n, 3 * C, ldq);
        compare_qkv_tol(L, got, dq, n, C, ldq, T, 0x1p-7);
        free(got);
      }
      free(OUT16); free(DQ16); free(dq);
    }
  }
  /* fp16: no 16-bit gemm kernels; refused with nothing written, the codelet widens */
  {
    uint16_t *O16 = to16(TG_F16, nan_out, n, C, ldo, 8), *Q = to16(TG_F16, qkv, n, 3 * C, ldq, 8);
    float *glse = tg_const_mat(n, NH, NH, NAN, NAN);
    cudaError_t e =
        fwd ? tg_cuda_attention_sdpa_fwd(g_blas, TG_F16, b, T, C, NH, Q, ldq, O16, ldo, glse, gs,
                                         full, NULL, &path, &cs, why, sizeof why)
            : tg_cuda_attention_sdpa_bwd(g_blas, TG_F16, b, T, C, NH, Q, ldq, O16, ldo, lse, O16,
                                         ldo, Q, ldq, gs, full, NULL, &path, &cs, why, sizeof why);
    int untouched = 1;
    for (size_t i = 0; i < (size_t)n * NH; i++) untouched &= isnan(glse[i]);
    CHECK(e == cudaErrorNotSupported && path == 0 && untouched,
          "%s fp16 without cuDNN: status %d, path %d, untouched %d", L, (int)e, path, untouched);
    free(O16); free(Q); free(glse);
  }
  free(qkv); free(dout); free(Q16); free(D16); free(out); free(lse); free(cpu_scratch); free(gs);
  free(nan_out); free(nan_dq);
}
/* lse (b T, NH) to cuDNN's (b, NH, T) and back (attention_cudnn_stats.cu) */
static void attention_lse_permute_case(int b, int T, int NH) {
  const size_t n = (size_t)b * T * NH;
  float *lse = fmalloc(n), *bhs = tg_const_mat(1, (int)n, (int)n, NAN, NAN);
  float *back = tg_const_mat(1, (int)n, (int)n, NAN, NAN);
  for (size_t i = 0; i < n; i++) lse[i] = (float)i;
  const char *P = "tg_cuda_attention_lse_permute";
  ok(P, "to", tg_cuda_attention_lse_permute(b, T, NH, lse, bhs, 1, NULL));
  ok(P, "from", tg_cuda_attention_lse_permute(b, T, NH, back, bhs, 0, NULL));
  int bad = 0;
  for (int s = 0; s < b; s++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const size_t i = ((size_t)s * T + t) * NH + h, j = ((size_t)s * NH + h) * T + t;
        bad += bhs[j] != lse[i] || back[i] != lse[i];
      }
  CHECK(!bad, "%s b %d T %d NH %d: %d elements misplaced", P, b, T, NH, bad);
  record(P, bad ? INFINITY : 0.0);
  free(lse); free(bhs); free(back);
}
static void emu_attention_cudnn(void) {
  tg_cuda_attention_cudnn_release(); /* nothing to release: the stub */
  record("tg_cuda_attention_cudnn_release", 0.0);
  attention_lse_permute_case(2, 17, 3);
  attention_cudnn_case(2, 33, 128, 2); /* hs 64 */
  if (!g_quick) {
    attention_lse_permute_case(1, 1, 1);
    attention_cudnn_case(1, 100, 256, 2); /* hs 128 */
    attention_cudnn_case(2, 17, 48, 2);   /* hs 24: no flash kernels */
  }
}
static void emu_attention(void) {
  emu_attention_cudnn();
  /* the codelet's choice: GPT-2's 4 x 1024 tokens of 12 heads on cuBLAS, a
   * 64-head sequence of 8192 (2 x 64 x 8192^2 floats of scores) on the flash
   * kernels */
  CHECK(tg_attn_gemm_fits(4, 1024, 12) && !tg_attn_gemm_fits(1, 8192, 64),
        "tg_attn_gemm_fits: %d for GPT-2, %d for T 8192", tg_attn_gemm_fits(4, 1024, 12),
        tg_attn_gemm_fits(1, 8192, 64));
  /* the flash kernels' head sizes: multiples of 16 up to 128, those four */
  static const int hs_ok[] = {16, 32, 64, 128}, hs_no[] = {8, 40, 48, 256};
  int sup = 1;
  for (int i = 0; i < 4; i++)
    sup &= tg_cuda_attention_flash_lowp_supported(2 * hs_ok[i], 2) &&
           !tg_cuda_attention_flash_lowp_supported(2 * hs_no[i], 2);
  CHECK(sup, "tg_cuda_attention_flash_lowp_supported: head sizes 16, 32, 64, 128 only");
  record("tg_cuda_attention_flash_lowp_supported", sup ? 0.0 : INFINITY);
  if (g_quick) { /* two query tiles, the last partial; DPL 1, 2 and 4 */
    attention_case(1, 33, 16, 2, 0);
    attention_case(1, 9, 16, 2, 1);
    attention_case(1, 17, 128, 2, 0);
    attention_case(1, 1, 128, 1, 1);
    attention_lowp_case(2, 33, 64, 2);
    return;
  }
  /* emu_cuda_gpt_codelets' shapes (hs = 8): T = 1, 17, 64 and 100 (not
   * multiples of the 32-query tile, nor of the CPU's 16-row chunk) */
  static const int Ts[] = {1, 17, 64, 100};
  for (int t = 0; t < 4; t++) attention_case(2, Ts[t], 32, 4, Ts[t] <= 64);
  /* head sizes 32, 64 and 128 (DPL 1, 2, 4) */
  attention_case(1, 33, 64, 2, 1);
  attention_case(1, 45, 128, 2, 0);
  attention_case(2, 1, 128, 1, 1);
  attention_case(1, 40, 128, 1, 0);
  /* T > 256: the naive kernels' loops over 256-query and 256-key chunks */
  attention_case(1, 300, 8, 1, 1);
  /* hs = 40, not a multiple of the 32 lanes (masked channels); hs = 256,
   * the largest head (DPL 8, > 96 KiB of shared memory: the opt-in) */
  attention_case(2, 20, 80, 2, 1);
  attention_case(1, 33, 256, 1, 0);
  /* bf16 on the tensor cores: T = 1, odd T, head sizes 8, 40 and 64 */
  attention_lowp_case(2, 1, 32, 4);
  attention_lowp_case(2, 17, 32, 4);
  attention_lowp_case(1, 100, 80, 2);
  attention_lowp_case(2, 64, 128, 2);
  /* the flash kernels' head sizes 16, 64 and 128: one partial tile, three
   * tiles with the last partial, T = 1 */
  attention_lowp_case(1, 100, 128, 2);
  attention_lowp_case(2, 130, 64, 4);
  attention_lowp_case(1, 70, 256, 2);
  attention_lowp_case(1, 1, 64, 1);
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "attention_fwd",
     .doc = "causal attention, naive (reference), chunked (flash-style), gemm (chunked; products on cuBLAS on CUDA), flash (chunked; in bf16 on CUDA flash kernels on the tensor cores) or cudnn (chunked; in 16-bit on CUDA cuDNN's fused attention, else gemm's kernels)",
     .buffers = "qkv (R), out (W), state: probabilities or log-sum-exp (W), scratch",
     .covers = "tg_attention_fwd_cl tg_attention_fwd_insert tg_cuda_attention_naive_fwd "
               "tg_cuda_attention_chunked_fwd tg_cuda_attention_gemm_fwd tg_cuda_attention_gemm_fwd_lowp "
               "tg_cuda_attention_flash_fwd_lowp tg_cuda_attention_flash_lowp_supported "
               "tg_cuda_attention_sdpa_fwd tg_cuda_attention_cudnn_fwd "
               "tg_cuda_attention_cudnn_release tg_cuda_attention_lse_permute",
     .kernels = "tg_cpu_attention_naive_fwd tg_cpu_attention_chunked_fwd "
                "tg_cpu_attention_chunked_fwd16 tg_attention_chunked_scratch_floats",
     .run = {[OPS_REF] = attention_ref, [OPS_CPU] = pair_attention,
             [OPS_CUDA] = pair_attention_cuda, [OPS_DEVICE] = pair_attention,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_attention), [OPS_LOWP] = attention_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "attention_bwd",
     .doc = "attention backward",
     .buffers = "qkv, out, state, dout (R), dqkv (W), scratch",
     .covers = "tg_attention_bwd_cl tg_attention_bwd_insert tg_cuda_attention_naive_bwd "
               "tg_cuda_attention_chunked_bwd tg_cuda_attention_gemm_bwd tg_cuda_attention_gemm_bwd_lowp "
               "tg_cuda_attention_flash_bwd_lowp tg_cuda_attention_sdpa_bwd "
               "tg_cuda_attention_cudnn_bwd",
     .kernels = "tg_cpu_attention_naive_bwd tg_cpu_attention_chunked_bwd "
                "tg_cpu_attention_chunked_bwd16",
     .run = {[OPS_REF] = attention_ref, [OPS_CPU] = pair_attention,
             [OPS_CUDA] = pair_attention_cuda, [OPS_DEVICE] = pair_attention,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_attention), [OPS_LOWP] = attention_lowp},
     .why_not = {[OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
