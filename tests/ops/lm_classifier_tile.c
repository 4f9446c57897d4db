/*
 * Rows lm_logits_tile, lm_softmax_combine and lm_dlogits_tile
 * (codelets/lm_classifier_tile.c): the tied classifier in vocabulary tiles.
 * Shapes: n 37 rows, C 33, Vp 256 split in 3 tiles (86, 85, 85 columns), V
 * 250 (the last tile partly padding) and V 150 (the last tile all padding).
 *  ref       the three kernels over the tiles against a float64 softmax
 *            cross-entropy of the whole row: lse, the loss and dlogits
 *            within 1e-5 (norm-relative), padding columns zero; a target
 *            of -1 or V: NaN loss and a zero gradient row;
 *  cpu       the codelets through column plans of one (n, Vp) logits
 *            tensor, on a CPU worker, equal to the kernels bit for bit;
 *            shapes that do not agree are refused; then the pair cases;
 *  pair      each codelet on the second worker (cuda, device, cpu) against
 *            a CPU worker: a middle tile of logits and stats, the combine
 *            (lse and a loss accumulated onto 0.25), a dlogits tile in
 *            place;
 *  cuda-emu  the three launchers against the CPU kernels.
 */
#include "pair.h"
#include "ref_util.h"
#include "taskgrad/taskgrad.h"

enum { N = 37, C = 33, VP = 256, NT = 3 };

/* ---- ref ----------------------------------------------------------------------- */

static void ref_case(int V) {
  tg_rng rng = {.s = 99u + (unsigned)V};
  float *lnf = malloc(sizeof(float) * N * C), *wte = malloc(sizeof(float) * VP * C);
  float *lg = malloc(sizeof(float) * N * VP), *st = malloc(sizeof(float) * N * 2 * NT);
  float *lse = malloc(sizeof(float) * N * 2);
  int32_t t[N];
  tg_rng_fill(&rng, lnf, (size_t)N * C, 1.0f);
  tg_rng_fill(&rng, wte, (size_t)VP * C, 0.5f);
  for (int i = 0; i < N; i++) t[i] = (int32_t)(tg_rng_next(&rng) % (uint64_t)V);
  const float scale = 1.0f / N, alpha = 2.0f / N;
  for (int j = 0; j < NT; j++) {
    int m, v0 = tg_split_start(VP, NT, j, &m);
    tg_cpu_lm_logits_tile(N, C, V, v0, m, lnf, C, wte, lg + v0, VP, st + 2 * j, 2 * NT);
  }
  float loss = 0.5f;
  tg_cpu_lm_softmax_combine(N, V, NT, st, 2 * NT, lg, VP, t, scale, lse, 2, &loss);
  /* float64 reference from the float logits the tiles wrote */
  double *dref = malloc(sizeof(double) * N * VP), lref = 0, *lseref = malloc(sizeof(double) * N);
  double *lse_got = malloc(sizeof(double) * N);
  for (int i = 0; i < N; i++) {
    const float *x = lg + (size_t)i * VP;
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int v = 0; v < V; v++) s += exp((double)x[v] - mx);
    lseref[i] = mx + log(s);
    lse_got[i] = (double)lse[2 * i] + lse[2 * i + 1];
    lref += lseref[i] - x[t[i]];
    for (int v = 0; v < VP; v++)
      dref[(size_t)i * VP + v] = v < V ? alpha * (exp(x[v] - lseref[i]) - (v == t[i])) : 0;
  }
  /* the logits themselves against float64 products */
  double *lg64 = malloc(sizeof(double) * N * VP);
  for (int i = 0; i < N; i++)
    for (int v = 0; v < VP; v++) {
      double a = 0;
      for (int k = 0; k < C; k++) a += (double)lnf[i * C + k] * wte[v * C + k];
      lg64[(size_t)i * VP + v] = a;
    }
  char what[64];
  snprintf(what, sizeof what, "logits tiles, V %d", V);
  CHECK_REL(tg_rel_err_f64(lg, lg64, (size_t)N * VP), TOL_FWD, what);
  double e = 0, d = 0;
  for (int i = 0; i < N; i++) {
    e += (lse_got[i] - lseref[i]) * (lse_got[i] - lseref[i]);
    d += lseref[i] * lseref[i];
  }
  snprintf(what, sizeof what, "lse, V %d", V);
  CHECK_REL(sqrt(e / d), 1e-7, what);
  snprintf(what, sizeof what, "loss, V %d", V);
  CHECK_REL(fabs((double)loss - (0.5 + scale * lref)) / fabs(0.5 + scale * lref), TOL_FWD, what);
  for (int j = 0; j < NT; j++) {
    int m, v0 = tg_split_start(VP, NT, j, &m);
    tg_cpu_lm_dlogits_tile(N, V, v0, m, lse, 2, t, alpha, lg + v0, VP);
  }
  snprintf(what, sizeof what, "dlogits tiles, V %d", V);
  CHECK_REL(tg_rel_err_f64(lg, dref, (size_t)N * VP), TOL_FWD, what);
  int pad_zero = 1;
  for (int i = 0; i < N; i++)
    for (int v = V; v < VP; v++) pad_zero &= lg[(size_t)i * VP + v] == 0.0f;
  CHECK(pad_zero, "V %d: padding columns of dlogits not zero", V);
  /* bad targets: NaN loss, zero rows */
  int32_t bad[N];
  memcpy(bad, t, sizeof bad);
  bad[3] = -1;
  bad[5] = V;
  loss = 0.0f;
  tg_cpu_lm_softmax_combine(N, V, NT, st, 2 * NT, lg, VP, bad, scale, lse, 2, &loss);
  CHECK(isnan(loss), "V %d: bad targets give loss %g, not NaN", V, loss);
  for (int j = 0; j < NT; j++) {
    int m, v0 = tg_split_start(VP, NT, j, &m);
    tg_cpu_lm_dlogits_tile(N, V, v0, m, lse, 2, bad, alpha, lg + v0, VP);
  }
  int zero = 1;
  for (int v = 0; v < VP; v++) zero &= lg[3 * VP + v] == 0.0f && lg[5 * VP + v] == 0.0f;
  CHECK(zero, "V %d: the rows of bad targets are not zero", V);
  free(lnf); free(wte); free(lg); free(st); free(lse); free(dref); free(lseref);
  free(lse_got); free(lg64);
}

static void tile_ref(void) {
  ref_case(250);
  ref_case(150);
}

/* ---- cpu: the codelets on column plans against the kernels ----------------------- */

static void tile_codelets(void) {
  const int V = 250;
  tg_tensor LNF, WTE, LG, ST, LSE, T, LOSS;
  float *lnf = rnd((size_t)N * C, 1.0f), *wte = rnd((size_t)VP * C, 0.5f);
  int32_t t[N];
  for (int i = 0; i < N; i++) t[i] = (int32_t)(tg_rng_next(&g_pair_rng) % (uint64_t)V);
  new_tensor(&LNF, N, C, lnf);
  new_tensor(&WTE, VP, C, wte);
  new_tensor(&LG, N, VP, NULL);
  new_tensor(&ST, N, 2 * NT, NULL);
  new_tensor(&LSE, N, 2, NULL);
  new_tensor(&LOSS, 1, 1, NULL);
  new_labels(&T, N, t);
  tg_split lgs = {0}, sts = {0};
  CHECK(tg_split_plan_cols(&LG, NT, &lgs) == 0 && tg_split_plan_cols(&ST, NT, &sts) == 0,
        "plans: %s", tg_last_error());
  tg_task_opts o = on_worker(g_cpu_worker);
  tg_split_write(&LG, &lgs);
  tg_split_write(&ST, &sts);
  for (int j = 0; j < NT; j++)
    CHECK(tg_lm_logits_tile_insert(V, tg_split_start(VP, NT, j, NULL), LNF.handle, WTE.handle,
                                   lgs.parts[j], sts.parts[j], &o) == 0,
          "logits tile: %s", tg_last_error());
  tg_split_join(&LG, &lgs);
  tg_split_join(&ST, &sts);
  CHECK(tg_lm_softmax_combine_insert(V, 0.5f, ST.handle, LG.handle, T.handle, LSE.handle,
                                     LOSS.handle, TG_ACCUMULATE, &o) == 0,
        "combine: %s", tg_last_error());
  tg_split_write(&LG, &lgs);
  for (int j = 0; j < NT; j++)
    CHECK(tg_lm_dlogits_tile_insert(V, tg_split_start(VP, NT, j, NULL), 0.25f, LSE.handle,
                                    T.handle, lgs.parts[j], &o) == 0,
          "dlogits tile: %s", tg_last_error());
  tg_split_join(&LG, &lgs);
  /* the kernels on the same inputs */
  float *lg = xmalloc(sizeof(float) * N * VP), *st = xmalloc(sizeof(float) * N * 2 * NT);
  float *lse = xmalloc(sizeof(float) * N * 2), loss = 0.0f;
  for (int j = 0; j < NT; j++) {
    int m, v0 = tg_split_start(VP, NT, j, &m);
    tg_cpu_lm_logits_tile(N, C, V, v0, m, lnf, C, wte, lg + v0, VP, st + 2 * j, 2 * NT);
  }
  tg_cpu_lm_softmax_combine(N, V, NT, st, 2 * NT, lg, VP, t, 0.5f, lse, 2, &loss);
  for (int j = 0; j < NT; j++) {
    int m, v0 = tg_split_start(VP, NT, j, &m);
    tg_cpu_lm_dlogits_tile(N, V, v0, m, lse, 2, t, 0.25f, lg + v0, VP);
  }
  float *got = xmalloc(sizeof(float) * N * VP), gl;
  tg_tensor_read(&LG, got);
  tg_tensor_read(&LOSS, &gl);
  if (ops_row_is("lm_dlogits_tile"))
    CHECK(memcmp(got, lg, sizeof(float) * N * VP) == 0, "dlogits differ from the kernels'");
  if (ops_row_is("lm_softmax_combine"))
    CHECK(memcmp(&gl, &loss, sizeof gl) == 0, "loss %g, kernels %g", gl, loss);
  if (ops_row_is("lm_logits_tile")) {
    float *gst = xmalloc(sizeof(float) * N * 2 * NT);
    tg_tensor_read(&ST, gst);
    CHECK(memcmp(gst, st, sizeof(float) * N * 2 * NT) == 0, "stats differ from the kernels'");
    free(gst);
    CHECK(tg_lm_logits_tile_insert(V, VP - 10, LNF.handle, WTE.handle, LG.handle, LSE.handle,
                                   &o) == -EINVAL, "a tile past wte's rows accepted");
    CHECK(tg_lm_logits_tile_insert(VP + 1, 0, LNF.handle, WTE.handle, LSE.handle, LSE.handle,
                                   &o) == -EINVAL, "V > Vp accepted");
  }
  if (ops_row_is("lm_softmax_combine"))
    CHECK(tg_lm_softmax_combine_insert(V, 1.0f, ST.handle, LG.handle, T.handle, LSE.handle,
                                       LOSS.handle, TG_OVERWRITE, &o) == -EINVAL,
          "an overwritten loss accepted");
  if (ops_row_is("lm_dlogits_tile"))
    CHECK(tg_lm_dlogits_tile_insert(V, 0, NAN, LSE.handle, T.handle, LG.handle, &o) == -EINVAL,
          "a NaN factor accepted");
  tg_split_free(&LG, &lgs);
  tg_split_free(&ST, &sts);
  tg_tensor *all[] = {&LNF, &WTE, &LG, &ST, &LSE, &T, &LOSS};
  for (int i = 0; i < 7; i++) tg_tensor_free(all[i]);
  free(lnf); free(wte); free(lg); free(st); free(lse); free(got);
}

/* ---- pair: cpu, cuda, device -------------------------------------------------- */

typedef struct tctx {
  starpu_data_handle_t a, b, c; /* per row: lnf, wte | stats, logits, targets | lse, targets */
  int V, v0;
} tctx;

static int logits_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const tctx *c = v;
  return tg_lm_logits_tile_insert(c->V, c->v0, c->a, c->b, out[0].handle, out[1].handle, o);
}

static int combine_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const tctx *c = v;
  return tg_lm_softmax_combine_insert(c->V, 0.5f, c->a, c->b, c->c, out[0].handle,
                                      out[1].handle, TG_ACCUMULATE, o);
}

static int dlogits_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const tctx *c = v;
  return tg_lm_dlogits_tile_insert(c->V, c->v0, 0.25f, c->a, c->c, out[0].handle, o);
}

static void tile_pair(void) {
  const int V = 250;
  int m, v0 = tg_split_start(VP, NT, 1, &m); /* the middle tile */
  float *lnf = rnd((size_t)N * C, 1.0f), *wte = rnd((size_t)VP * C, 0.5f);
  float *lg = xmalloc(sizeof(float) * N * VP), *st = xmalloc(sizeof(float) * N * 2 * NT);
  float *lse = xmalloc(sizeof(float) * N * 2), loss = 0.0f;
  int32_t t[N];
  for (int i = 0; i < N; i++) t[i] = (int32_t)(tg_rng_next(&g_pair_rng) % (uint64_t)V);
  for (int j = 0; j < NT; j++) {
    int mj, vj = tg_split_start(VP, NT, j, &mj);
    tg_cpu_lm_logits_tile(N, C, V, vj, mj, lnf, C, wte, lg + vj, VP, st + 2 * j, 2 * NT);
  }
  tg_cpu_lm_softmax_combine(N, V, NT, st, 2 * NT, lg, VP, t, 0.5f, lse, 2, &loss);
  float *tile = xmalloc(sizeof(float) * N * m); /* the middle tile's logits */
  for (int i = 0; i < N; i++) memcpy(tile + i * m, lg + (size_t)i * VP + v0, sizeof(float) * m);
  tg_tensor LNF, WTE, ST, LG, T, LSE;
  new_tensor(&LNF, N, C, lnf);
  new_tensor(&WTE, VP, C, wte);
  new_tensor(&ST, N, 2 * NT, st);
  new_tensor(&LG, N, VP, lg);
  new_tensor(&LSE, N, 2, lse);
  new_labels(&T, N, t);
  const float quarter = 0.25f;
  char what[80];
  if (ops_row_is("lm_logits_tile")) {
    tctx c = {.a = LNF.handle, .b = WTE.handle, .V = V, .v0 = v0};
    outspec o[2] = {{.name = "logits", .rows = N, .cols = m, .tol = TOL},
                    {.name = "stats", .rows = N, .cols = 2, .tol = TOL}};
    snprintf(what, sizeof what, "lm_logits_tile [%d, %d) of %d", v0, v0 + m, VP);
    run_pair(what, logits_submit, &c, 2, o, NULL, NULL);
  } else if (ops_row_is("lm_softmax_combine")) {
    tctx c = {.a = ST.handle, .b = LG.handle, .c = T.handle, .V = V};
    outspec o[2] = {{.name = "lse", .rows = N, .cols = 2, .tol = TOL},
                    {.name = "loss", .rows = 1, .cols = 1, .init = &quarter, .tol = TOL}};
    run_pair("lm_softmax_combine of 3 tiles", combine_submit, &c, 2, o, NULL, NULL);
  } else {
    tctx c = {.a = LSE.handle, .c = T.handle, .V = V, .v0 = v0};
    outspec o = {.name = "dl", .rows = N, .cols = m, .init = tile, .tol = TOL};
    snprintf(what, sizeof what, "lm_dlogits_tile [%d, %d) in place", v0, v0 + m);
    run_pair(what, dlogits_submit, &c, 1, &o, NULL, NULL);
  }
  tg_tensor *all[] = {&LNF, &WTE, &ST, &LG, &T, &LSE};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
  free(lnf); free(wte); free(lg); free(st); free(lse); free(tile);
}

static void tile_cpu(void) {
  tile_codelets();
  tile_pair();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ------------------------------------------------------------------- */

static void emu_tiles(void) {
  const int V = 250, ldl = C + 1, lds = 2 * NT;
  float *lnf = input(N, C, ldl, 1.0f), *wte = input(VP, C, C, 1.0f);
  int32_t *tok = tokens(N, V);
  float *lg[2], *st[2], *lse[2], loss[2] = {0.5f, 0.5f};
  outputs(lg, N, VP, VP + 3, 0);
  outputs(st, N, 2 * NT, lds, 0);
  outputs(lse, N, 2, 2, 0);
  for (int j = 0; j < NT; j++) {
    int m, v0 = tg_split_start(VP, NT, j, &m);
    ok("tg_cuda_lm_logits_tile", "",
       tg_cuda_lm_logits_tile(g_blas, N, C, V, v0, m, lnf, ldl, wte, lg[0] + v0, VP + 3,
                              st[0] + 2 * j, lds, NULL));
    tg_cpu_lm_logits_tile(N, C, V, v0, m, lnf, ldl, wte, lg[1] + v0, VP + 3, st[1] + 2 * j,
                          lds);
  }
  if (ops_row_is("lm_logits_tile")) {
    compare("tg_cuda_lm_logits_tile", "logits", lg[0], lg[1], (size_t)N * (VP + 3), kTolRed);
    compare("tg_cuda_lm_logits_tile", "stats", st[0], st[1], (size_t)N * lds, kTolRed);
  }
  /* the next passes from the same (CPU) inputs on both sides */
  memcpy(lg[0], lg[1], sizeof(float) * N * (VP + 3));
  memcpy(st[0], st[1], sizeof(float) * N * lds);
  ok("tg_cuda_lm_softmax_combine", "",
     tg_cuda_lm_softmax_combine(N, V, NT, st[0], lds, lg[0], VP + 3, tok, 0.5f, lse[0], 2,
                                &loss[0], NULL));
  tg_cpu_lm_softmax_combine(N, V, NT, st[1], lds, lg[1], VP + 3, tok, 0.5f, lse[1], 2,
                            &loss[1]);
  if (ops_row_is("lm_softmax_combine")) {
    compare("tg_cuda_lm_softmax_combine", "lse", lse[0], lse[1], (size_t)N * 2, kTolEw);
    compare("tg_cuda_lm_softmax_combine", "loss", &loss[0], &loss[1], 1, kTolRed);
  }
  memcpy(lse[0], lse[1], sizeof(float) * N * 2);
  for (int j = 0; j < NT; j++) {
    int m, v0 = tg_split_start(VP, NT, j, &m);
    ok("tg_cuda_lm_dlogits_tile", "",
       tg_cuda_lm_dlogits_tile(N, V, v0, m, lse[0], 2, tok, 0.25f, lg[0] + v0, VP + 3, NULL));
    tg_cpu_lm_dlogits_tile(N, V, v0, m, lse[1], 2, tok, 0.25f, lg[1] + v0, VP + 3);
  }
  if (ops_row_is("lm_dlogits_tile"))
    compare("tg_cuda_lm_dlogits_tile", "dlogits", lg[0], lg[1], (size_t)N * (VP + 3), kTolEw);
  free2(lg); free2(st); free2(lse);
  free(lnf); free(wte); free(tok);
}
#endif /* OPS_EMU */

#define TILE_ROW(nm, dc, buf, cov, kern)                                                    \
  {.name = nm, .doc = dc, .buffers = buf, .covers = cov, .kernels = kern,                 \
   .run = {[OPS_REF] = tile_ref, [OPS_CPU] = tile_cpu, [OPS_CUDA] = tile_pair,             \
           [OPS_DEVICE] = tile_pair, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_tiles)},            \
   .why_not = {[OPS_LOWP] = "logits and the loss stay f32 in every precision mode",        \
               [OPS_CUDA_EMU] = OPS_EMU_ONLY}}

static const ops_row rows[] = {
    TILE_ROW("lm_logits_tile",
             "classifier vocabulary tile: `logits = lnf wte[v0:v0+m]^T` and its softmax stats",
             "lnf, wte (R), logits (W), stats (W)",
             "tg_lm_logits_tile_cl tg_lm_logits_tile_insert tg_cuda_lm_logits_tile",
             "tg_cpu_lm_logits_tile"),
    TILE_ROW("lm_softmax_combine",
             "the tiles' stats into `lse` and the cross-entropy loss",
             "stats, logits, targets (R), lse (W), loss (RW / REDUX)",
             "tg_lm_softmax_combine_cl tg_lm_softmax_combine_insert tg_cuda_lm_softmax_combine",
             "tg_cpu_lm_softmax_combine"),
    TILE_ROW("lm_dlogits_tile",
             "a tile's `dlogits = alpha (softmax - onehot)` in place, zero past V",
             "lse, targets (R), dl (RW)",
             "tg_lm_dlogits_tile_cl tg_lm_dlogits_tile_insert tg_cuda_lm_dlogits_tile",
             "tg_cpu_lm_dlogits_tile"),
};

OPS_ROWS(rows)
