/*
 * Rows embedding_fwd and embedding_bwd (codelets/embedding.c): token +
 * position embedding, forward and backward; each case checks its row's op.
 *  ref       against float64, n in {1, 7, 33, 100}, C in {1, 7, 33, 64}, T
 *            dividing n or not; the backward against finite differences,
 *            accumulated outputs compared by their increment, dwte rows no
 *            token references and dwpe rows >= T untouched, and equal to the
 *            sequential float sums bit for bit (fixed row order);
 *  pair      forward, backward accumulated and into REDUX targets;
 *  cuda-emu  both launchers, exact (the same float adds in the same order).
 */

#include "ref_util.h"
#include "pair.h"

/* ---- ref --------------------------------------------------------------------- */

typedef struct {
  int n, T, C, Vp;
  const int32_t *tok;
  const double *G; /* (n, C) */
} emb_ctx;

/* L(wte, wpe) = sum G .* X, x = [wte (Vp, C) | wpe (T, C)] */
static double emb_loss(const double *x, const void *vctx) {
  const emb_ctx *c = vctx;
  const double *wte = x, *wpe = x + (size_t)c->Vp * c->C;
  double L = 0;
  for (int i = 0; i < c->n; i++)
    for (int j = 0; j < c->C; j++)
      L += c->G[(size_t)i * c->C + j] *
           (wte[(size_t)c->tok[i] * c->C + j] +
            wpe[(size_t)(i % c->T) * c->C + j]);
  return L;
}

static void ref_embedding(tg_rng *rng) {
  char what[128];
  const int V = 30, Vp = 37, SKIP = 5; /* token 5 and rows >= 30 unused */
  for (int in = 0; in < NN; in++)
    for (int ic = 0; ic < NC; ic++)
      for (int it = 0; it < 3; it++) {
        int n = NS[in], C = CS[ic];
        int T = it == 0 ? 1 : it == 1 ? 7 : n; /* 7 does not divide 33, 100 */
        int maxT = T + 3, ldx = C + 3;
        int32_t *tok = rand_tokens(rng, n, V, SKIP);
        float *wte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
        float *wpe = tg_pad_mat(rng, maxT, C, C, 1.0f, 0.0f, 0.0f);
        for (int v = V; v < Vp; v++) /* never referenced: poison */
          for (int j = 0; j < C; j++) wte[(size_t)v * C + j] = NAN;
        for (int t = T; t < maxT; t++)
          for (int j = 0; j < C; j++) wpe[(size_t)t * C + j] = NAN;

        /* forward */
        double *ref = tg_test_malloc(sizeof(double) * n * C);
        for (int i = 0; i < n; i++)
          for (int j = 0; j < C; j++)
            ref[(size_t)i * C + j] = (double)wte[(size_t)tok[i] * C + j] +
                                     (double)wpe[(size_t)(i % T) * C + j];
        float *X = tg_const_mat(n, C, ldx, NAN, OUT_PAD);
        tg_cpu_embedding_fwd(n, T, C, tok, wte, wpe, X, ldx);
        snprintf(what, sizeof what, "embedding_fwd n=%d T=%d C=%d", n, T, C);
        const int bwd = ops_row_is("embedding_bwd");
        if (!bwd) {
          CHECK_REL(mat_err(X, n, C, ldx, ref), TOL_FWD, what);
          CHECK(pad_intact(X, n, C, ldx, OUT_PAD), "%s wrote padding", what);
        }

        /* backward: G = dX, accumulated onto random tables */
        float *dX = tg_pad_mat(rng, n, C, ldx, 1.0f, 0.0f, NAN);
        float *dwte = tg_pad_mat(rng, Vp, C, C, 1.0f, 0.0f, 0.0f);
        float *dwpe = tg_pad_mat(rng, maxT, C, C, 1.0f, 0.0f, 0.0f);
        for (int j = 0; j < C; j++) dwte[(size_t)SKIP * C + j] = UNTOUCHED;
        for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++)
          dwte[k] = UNTOUCHED;
        for (size_t k = (size_t)T * C; k < (size_t)maxT * C; k++)
          dwpe[k] = UNTOUCHED;
        float *dwte0 = tg_copy_f(dwte, (size_t)Vp * C);
        float *dwpe0 = tg_copy_f(dwpe, (size_t)maxT * C);
        tg_cpu_embedding_bwd(n, T, C, tok, dX, ldx, dwte, dwpe);

        /* FD of L = sum dX .* X(wte, wpe) */
        double *G = tg_compact_f64(dX, n, C, ldx);
        size_t nv = (size_t)(Vp + T) * C;
        double *x = tg_test_malloc(sizeof(double) * (nv + 1));
        for (size_t k = 0; k < (size_t)Vp * C; k++) x[k] = wte[k];
        for (size_t k = 0; k < (size_t)T * C; k++)
          x[(size_t)Vp * C + k] = wpe[k];
        for (size_t k = (size_t)V * C; k < (size_t)Vp * C; k++) x[k] = 0.0;
        emb_ctx ctx = {.n = n, .T = T, .C = C, .Vp = Vp, .tok = tok, .G = G};
        double *g = bwd ? tg_fd_grad(emb_loss, &ctx, x, nv, FD_H) : NULL;
        snprintf(what, sizeof what, "embedding_bwd dwte vs FD n=%d T=%d C=%d",
                 n, T, C);
        if (bwd) CHECK_REL(delta_err(dwte, dwte0, V, C, C, g), TOL_FD, what);
        snprintf(what, sizeof what, "embedding_bwd dwpe vs FD n=%d T=%d C=%d",
                 n, T, C);
        if (bwd) CHECK_REL(delta_err(dwpe, dwpe0, T, C, C, g + (size_t)Vp * C), TOL_FD, what);
        if (bwd) CHECK(same_bits(dwte + (size_t)SKIP * C, dwte0 + (size_t)SKIP * C, C) &&
                  same_bits(dwte + (size_t)V * C, dwte0 + (size_t)V * C,
                            (size_t)(Vp - V) * C) &&
                  same_bits(dwpe + (size_t)T * C, dwpe0 + (size_t)T * C,
                            (size_t)(maxT - T) * C),
              "embedding_bwd touched unreferenced rows n=%d T=%d C=%d", n, T,
              C);

        /* deterministic order: bit-identical to the sequential float sums */
        for (int i = 0; i < n; i++)
          for (int j = 0; j < C; j++) {
            float d = dX[(size_t)i * ldx + j];
            dwte0[(size_t)tok[i] * C + j] += d;
            dwpe0[(size_t)(i % T) * C + j] += d;
          }
        if (bwd) CHECK(same_bits(dwte, dwte0, (size_t)Vp * C) &&
                  same_bits(dwpe, dwpe0, (size_t)maxT * C),
              "embedding_bwd not the sequential row order n=%d T=%d C=%d", n,
              T, C);
        free(g);
        free(x);
        free(G);
        free(dwte0);
        free(dwpe0);
        free(dwte);
        free(dwpe);
        free(dX);
        free(X);
        free(ref);
        free(wte);
        free(wpe);
        free(tok);
      }
}

static void embedding_ref(void) {
  tg_rng rng = {.s = 0x2545F4914F6CDD1DULL};
  ref_embedding(&rng);
}

/* ---- pair: cpu, cuda, device ------------------------------------------------- */

static int emb_fwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_embedding_fwd_insert(c->T, c->h[0], c->h[1], c->h[2], out[0].handle, o);
}

static int emb_bwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_embedding_bwd_insert(c->T, c->h[0], c->h[1], out[0].handle, out[1].handle,
                                 c->accum, o);
}

static void pair_embedding(void) {
  const int T = 7, n = 21, C = 33, V = 50, maxT = 9;
  tg_tensor tok, wte, wpe, dx;
  tokens_tensor(&tok, n, V);
  float *a = rnd((size_t)V * C, 1), *b = rnd((size_t)maxT * C, 1), *d = rnd((size_t)n * C, 1);
  new_tensor(&wte, V, C, a);
  new_tensor(&wpe, maxT, C, b);
  new_tensor(&dx, n, C, d);
  gctx c = {.h = {tok.handle, wte.handle, wpe.handle},
            .T = T,
            .NH = 0,
            .chunk = 0,
            .V = 0,
            .kind = 0,
            .accum = TG_ACCUMULATE};
  outspec fo = {.name = "X", .rows = n, .cols = C, .init = NULL, .redux = 0, .tol = TOL};
  if (ops_row_is("embedding_fwd")) run_pair("embedding_fwd", emb_fwd, &c, 1, &fo, NULL, NULL);
  for (int r = 0; r < 2 && ops_row_is("embedding_bwd"); r++) {
    c.h[1] = dx.handle;
    c.accum = r ? TG_REDUCE : TG_ACCUMULATE;
    outspec bo[2] = {{.name = "dwte", .rows = V, .cols = C, .init = a, .redux = r, .tol = TOL},
                     {.name = "dwpe", .rows = maxT, .cols = C, .init = b, .redux = r, .tol = TOL}};
    run_pair(r ? "embedding_bwd redux" : "embedding_bwd", emb_bwd, &c, 2, bo, NULL, NULL);
  }
  free(a); free(b); free(d);
  tg_tensor_free(&tok); tg_tensor_free(&wte); tg_tensor_free(&wpe); tg_tensor_free(&dx);
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ---------------------------------------------------------------- */

static void emu_embedding(void) {
  /* C = 300: two channel blocks of 256; n = 70: three 32-token words with
   * a partial last one; T > n: fewer positions than T */
  static const int shapes[][4] = {{21, 7, 33, 50}, {70, 9, 300, 130}, {5, 8, 40, 3}};
  for (int s = 0; s < 3; s++) {
    FULL_ONLY(s == 1);
    const int n = shapes[s][0], T = shapes[s][1], C = shapes[s][2], V = shapes[s][3];
    const int maxT = T + 2, ld = C + 5;
    int32_t *tok = tokens(n, V);
    float *wte = input(V, C, C, 1.0f), *wpe = input(maxT, C, C, 1.0f), *X[2];
    outputs(X, n, C, ld, 0);
    if (ops_row_is("embedding_fwd")) {
      ok("tg_cuda_embedding_fwd", "",
         tg_cuda_embedding_fwd(n, T, C, tok, wte, wpe, X[0], ld, NULL));
      tg_cpu_embedding_fwd(n, T, C, tok, wte, wpe, X[1], ld);
      compare("tg_cuda_embedding_fwd", "X", X[0], X[1], (size_t)n * ld, EXACT);
    }
    free2(X);
    float *dX = input(n, C, ld, 1.0f), *dwte[2], *dwpe[2];
    outputs(dwte, V, C, C, 1);
    outputs(dwpe, maxT, C, C, 1);
    if (ops_row_is("embedding_bwd")) {
      ok("tg_cuda_embedding_bwd", "",
         tg_cuda_embedding_bwd(n, T, C, tok, dX, ld, dwte[0], dwpe[0], NULL));
      tg_cpu_embedding_bwd(n, T, C, tok, dX, ld, dwte[1], dwpe[1]);
      /* the same adds in the same order, by design */
      compare("tg_cuda_embedding_bwd", "dwte", dwte[0], dwte[1], (size_t)V * C, EXACT);
      compare("tg_cuda_embedding_bwd", "dwpe", dwpe[0], dwpe[1], (size_t)maxT * C, EXACT);
    }
    free2(dwte);
    free2(dwpe);
    free(tok); free(wte); free(wpe); free(dX);
  }
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "embedding_fwd",
     .doc = "token + position embedding",
     .buffers = "tokens (R), wte (R), wpe (R), X (W)",
     .covers = "tg_embedding_fwd_cl tg_embedding_fwd_insert tg_cuda_embedding_fwd",
     .kernels = "tg_cpu_embedding_fwd",
     .run = {[OPS_REF] = embedding_ref, [OPS_CPU] = pair_embedding,
             [OPS_CUDA] = pair_embedding, [OPS_DEVICE] = pair_embedding,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_embedding)},
     .why_not = {[OPS_LOWP] = "the embedding tables stay f32", [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
    {.name = "embedding_bwd",
     .doc = "embedding backward (deterministic scatter-add)",
     .buffers = "tokens (R), dX (R), dwte, dwpe (RW / REDUX)",
     .covers = "tg_embedding_bwd_cl tg_embedding_bwd_insert tg_cuda_embedding_bwd",
     .kernels = "tg_cpu_embedding_bwd",
     .run = {[OPS_REF] = embedding_ref, [OPS_CPU] = pair_embedding,
             [OPS_CUDA] = pair_embedding, [OPS_DEVICE] = pair_embedding,
             [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_embedding)},
     .why_not = {[OPS_LOWP] = "the embedding gradients stay f32", [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
