/*
 * test_cuda_gpt_codelets: the transformer codelets (embedding, layer norm,
 * residual, naive and chunked attention, tied LM classifier) run once on a
 * CPU worker and once on a CUDA worker on identical inputs, outputs compared
 * (relative error <= 1e-5; 1e-4 where cuBLAS sums long products).  Odd
 * sizes, T not a multiple of the attention chunk, a padded vocabulary whose
 * padded rows hold huge values (using them would show), and accumulating
 * outputs that start non-zero.  SKIP (77) without a CUDA worker.
 */
#include "cuda_pair.h"
#include "taskgrad/kernels_cpu.h"

typedef struct gctx {
  starpu_data_handle_t h[6];
  int T, NH, chunk, V, kind;
  tg_accum accum;
} gctx;

static int emb_fwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_embedding_fwd_insert(c->T, c->h[0], c->h[1], c->h[2], out[0].handle, o);
}
static int emb_bwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_embedding_bwd_insert(c->T, c->h[0], c->h[1], out[0].handle, out[1].handle,
                                 c->accum, o);
}
static int ln_fwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_layernorm_fwd_insert(c->h[0], c->h[1], c->h[2], out[0].handle, out[1].handle,
                                 out[2].handle, o);
}
static int ln_bwd(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_layernorm_bwd_insert(c->h[0], c->h[1], c->h[2], c->h[3], c->h[4], out[0].handle,
                                 out[1].handle, out[2].handle, c->accum, o);
}
static int residual(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_residual_insert(c->h[0], c->h[1], out[0].handle, o);
}
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
static int classifier(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  return tg_lm_classifier_insert(c->V, c->chunk, 1.0f / 37.0f, c->h[0], c->h[1], c->h[2],
                                 out[1].handle, out[2].handle, c->accum, out[0].handle,
                                 c->accum, o);
}

static void tokens_tensor(tg_tensor *t, int n, int V) {
  int32_t *tok = xmalloc(sizeof(int32_t) * n);
  for (int i = 0; i < n; i++) tok[i] = (int32_t)(tg_rng_next(&g_rng) % (uint64_t)V);
  new_labels(t, n, tok);
  free(tok);
}

static void test_embedding(void) {
  const int T = 7, n = 21, C = 33, V = 50, maxT = 9;
  tg_tensor tok, wte, wpe, dx;
  tokens_tensor(&tok, n, V);
  float *a = rnd((size_t)V * C, 1), *b = rnd((size_t)maxT * C, 1), *d = rnd((size_t)n * C, 1);
  new_tensor(&wte, V, C, a);
  new_tensor(&wpe, maxT, C, b);
  new_tensor(&dx, n, C, d);
  gctx c = {{tok.handle, wte.handle, wpe.handle}, T, 0, 0, 0, 0, TG_ACCUMULATE};
  outspec fo = {"X", n, C, NULL, 0, TOL};
  run_pair("embedding_fwd", emb_fwd, &c, 1, &fo, NULL, NULL);
  for (int r = 0; r < 2; r++) {
    c.h[1] = dx.handle;
    c.accum = r ? TG_REDUCE : TG_ACCUMULATE;
    outspec bo[2] = {{"dwte", V, C, a, r, TOL}, {"dwpe", maxT, C, b, r, TOL}};
    run_pair(r ? "embedding_bwd redux" : "embedding_bwd", emb_bwd, &c, 2, bo, NULL, NULL);
  }
  free(a); free(b); free(d);
  tg_tensor_free(&tok); tg_tensor_free(&wte); tg_tensor_free(&wpe); tg_tensor_free(&dx);
}

static void test_layernorm(void) {
  static const int shapes[][2] = {{1, 1}, {7, 33}, {33, 257}, {64, 768}};
  for (int s = 0; s < 4; s++) {
    int n = shapes[s][0], C = shapes[s][1];
    float *x = rnd((size_t)n * C, 2), *w = rnd(C, 1), *b = rnd(C, 1), *dy = rnd((size_t)n * C, 1);
    for (size_t i = 0; i < (size_t)n * C; i++) x[i] += 3.0f; /* a non-zero mean */
    float *y = xmalloc(sizeof(float) * n * C), *mean = xmalloc(sizeof(float) * n);
    float *rstd = xmalloc(sizeof(float) * n), *dx0 = rnd((size_t)n * C, 1);
    float *dw0 = rnd(C, 1), *db0 = rnd(C, 1);
    tg_cpu_layernorm_fwd(n, C, x, C, w, b, y, C, mean, rstd);
    tg_tensor X, Wt, B, DY, M, R;
    new_tensor(&X, n, C, x); new_tensor(&Wt, 1, C, w); new_tensor(&B, 1, C, b);
    new_tensor(&DY, n, C, dy); new_tensor(&M, n, 1, mean); new_tensor(&R, n, 1, rstd);
    char what[64];
    gctx c = {{X.handle, Wt.handle, B.handle}, 0, 0, 0, 0, 0, TG_ACCUMULATE};
    outspec fo[3] = {{"Y", n, C, NULL, 0, TOL}, {"mean", n, 1, NULL, 0, TOL},
                     {"rstd", n, 1, NULL, 0, TOL}};
    snprintf(what, sizeof what, "layernorm_fwd %dx%d", n, C);
    run_pair(what, ln_fwd, &c, 3, fo, NULL, NULL);
    gctx cb = {{DY.handle, X.handle, Wt.handle, M.handle, R.handle}, 0, 0, 0, 0, 0,
               TG_ACCUMULATE};
    outspec bo[3] = {{"dX", n, C, dx0, 0, TOL}, {"dw", 1, C, dw0, 0, TOL},
                     {"db", 1, C, db0, 0, TOL}};
    snprintf(what, sizeof what, "layernorm_bwd %dx%d", n, C);
    run_pair(what, ln_bwd, &cb, 3, bo, NULL, NULL);
    free(x); free(w); free(b); free(dy); free(y); free(mean); free(rstd);
    free(dx0); free(dw0); free(db0);
    tg_tensor *all[] = {&X, &Wt, &B, &DY, &M, &R};
    for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
  }
}

static void test_residual(void) {
  const int n = 33, C = 257;
  float *a = rnd((size_t)n * C, 1), *b = rnd((size_t)n * C, 1);
  tg_tensor A, B;
  new_tensor(&A, n, C, a);
  new_tensor(&B, n, C, b);
  gctx c = {{A.handle, B.handle}, 0, 0, 0, 0, 0, TG_OVERWRITE};
  outspec o = {"Y", n, C, NULL, 0, TOL};
  run_pair("residual", residual, &c, 1, &o, NULL, NULL);
  free(a); free(b);
  tg_tensor_free(&A); tg_tensor_free(&B);
}

static void test_attention(void) {
  static const int Ts[] = {1, 17, 64, 100};
  const int b = 2, C = 32, NH = 4, chunk = 16;
  for (int kind = 0; kind < 2; kind++)
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
      const char *kn = kind == TG_ATTN_NAIVE ? "naive" : "chunked";
      gctx c = {{Q.handle, O.handle, S.handle, DO.handle}, T, NH, chunk, 0, kind, TG_OVERWRITE};
      outspec fo[2] = {{"out", n, C, NULL, 0, TOL},
                       {"state", (int)srows, scols, NULL, 0, TOL}};
      snprintf(what, sizeof what, "attention_fwd %s T=%d", kn, T);
      run_pair(what, attn_fwd, &c, 2, fo, NULL, NULL);
      outspec bo = {"dqkv", n, 3 * C, NULL, 0, TOL};
      snprintf(what, sizeof what, "attention_bwd %s T=%d", kn, T);
      run_pair(what, attn_bwd, &c, 1, &bo, NULL, NULL);
      free(qkv); free(dout); free(out); free(state); free(scratch);
      tg_tensor_free(&Q); tg_tensor_free(&O); tg_tensor_free(&S); tg_tensor_free(&DO);
    }
}

static void test_classifier(void) {
  const int n = 37, C = 33, V = 250, Vp = 256;
  float *lnf = rnd((size_t)n * C, 1), *wte = rnd((size_t)Vp * C, 1);
  for (int i = V * C; i < Vp * C; i++) wte[i] = 1e30f; /* padded rows: never used */
  float *dwte0 = rnd((size_t)Vp * C, 0.01f), *loss0 = filled(1, 0.5f);
  tg_tensor L, Wt, tok;
  new_tensor(&L, n, C, lnf);
  new_tensor(&Wt, Vp, C, wte);
  tokens_tensor(&tok, n, V);
  for (int chunk = 7; chunk <= 64; chunk *= 9) {
    gctx c = {{L.handle, Wt.handle, tok.handle}, 0, 0, chunk, V, 0, TG_ACCUMULATE};
    outspec o[3] = {{"loss", 1, 1, loss0, 0, TOL}, {"dlnf", n, C, NULL, 0, TOL_LARGE_K},
                    {"dwte", Vp, C, dwte0, 0, TOL}};
    char what[64];
    snprintf(what, sizeof what, "lm_classifier chunk=%d", chunk);
    run_pair(what, classifier, &c, 3, o, NULL, NULL);
  }
  free(lnf); free(wte); free(dwte0); free(loss0);
  tg_tensor_free(&L); tg_tensor_free(&Wt); tg_tensor_free(&tok);
}

int main(void) {
  int rc = cuda_pair_start();
  if (rc) return rc;
  test_embedding();
  test_layernorm();
  test_residual();
  test_attention();
  test_classifier();
  tg_shutdown();
  return tg_test_finish("test_cuda_gpt_codelets");
}
