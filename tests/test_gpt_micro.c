/*
 * GPT-2 gradients do not depend on how the step is cut into tasks, and the
 * chunked attention's memory grows linearly with T.
 *
 * 1. One random model (tg_gpt_init_params, then LayerNorm weights and all
 *    biases moved off 1 and 0 a little, so that they act on the numbers):
 *    L = 2, C = 32, NH = 4, maxT = 16, V = Vp = 64; one batch of B = 4
 *    sequences of T = 16 random tokens.  For M in {1, 2, 4} micro-batches,
 *    attention naive and chunked (chunk 8: two chunks per sequence), and
 *    attn_splits S in {1, 2} where S divides B / M: step 1
 *    (tg_gpt_forward_backward) gives every one of the 16 gradient tensors
 *    within 1e-5 (norm-relative) of the M = 1, naive, S = 1 reference, and
 *    the loss within 1e-6 relative.  Then tg_gpt_update and a second
 *    forward_backward (the per-(layer, micro-batch) attention buffers and
 *    their partition plans are reused): the step-2 loss within 1e-6 and the
 *    gradients within STEP2_TOL of the reference's step 2.
 * 2. Attention memory, from the sizes the attention tasks really register
 *    (captured with a submission hook on a forward task of b = 1 sequence,
 *    C = 32, NH = 4, for T = 256, 512, 1024, 2048): the chunked scratch
 *    handle is exactly tg_attention_scratch_bytes(TG_ATTN_CHUNKED, 1, T, C,
 *    NH, 64) bytes and at most doubles when T doubles, its state (lse) is
 *    T * NH floats; the naive state is b * NH * T * T floats and quadruples.
 *    tg_attention_scratch_bytes(TG_ATTN_CHUNKED, 4, T, ...) also at most
 *    doubles.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "hooks.h"
#include "taskgrad/gpt.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

enum { L = 2, C = 32, NH = 4, MAXT = 16, V = 64, B = 4, T = 16, CHUNK = 8 };
#define GRAD_TOL 1e-5
#define LOSS_TOL 1e-6
#define STEP2_TOL 1e-4
#define LR 1e-3f

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static const tg_gpt_config CFG = {.max_seq_len = MAXT, .vocab_size = V, .num_layers = L,
                                  .num_heads = NH, .channels = C, .padded_vocab_size = V};

typedef struct result {
  double loss[2];
  float *grads[2];
} result;

/* run.fused_backward of the next run_case (0: auto, off on CPU workers) */
static int g_fused;

/* Two steps of one configuration; 0 or -1 (with a message). */
static int run_case(const float *params, const int32_t *tokens, size_t np, int M,
                    tg_attention_kind kind, int S, result *res) {
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_gpt_run_config run = tg_gpt_run_default(B, T);
  run.nmicro = M;
  run.attention = kind;
  run.chunk = CHUNK;
  run.attn_splits = S;
  run.fused_backward = g_fused;
  tg_gpt g;
  if (tg_gpt_create(&g, &CFG, params, &run, &opt) < 0) {
    fprintf(stderr, "tg_gpt_create: %s\n", tg_last_error());
    return -1;
  }
  tg_tensor x, y;
  tg_split xs = {0}, ys = {0};
  int rc = 0;
  if (tg_tensor_alloc(&x, B * T, 1, TG_I32) < 0 || tg_tensor_alloc(&y, B * T, 1, TG_I32) < 0) {
    fprintf(stderr, "batch: %s\n", tg_last_error());
    exit(1);
  }
  memcpy(x.host, tokens, sizeof(int32_t) * B * T);
  memcpy(y.host, tokens + 1, sizeof(int32_t) * B * T);
  if (tg_tensor_split_static(&x, M, &xs) < 0 || tg_tensor_split_static(&y, M, &ys) < 0) {
    fprintf(stderr, "split: %s\n", tg_last_error());
    exit(1);
  }
  tg_batch tb = {.rows = B * T, .nmicro = M, .x = xs.parts, .y = ys.parts};
  for (int k = 0; k < 2 && rc == 0; k++) {
    res->grads[k] = xmalloc(sizeof(float) * np);
    if (k == 1 && tg_gpt_update(&g, LR) < 0) rc = -1;
    if (rc == 0 && (tg_gpt_forward_backward(&g, &tb) < 0 ||
                    tg_gpt_loss(&g, &res->loss[k], 1) < 0 ||
                    tg_gpt_read_grads(&g, res->grads[k]) < 0))
      rc = -1;
  }
  if (rc < 0) fprintf(stderr, "step: %s\n", tg_last_error());
  starpu_task_wait_for_all();
  tg_split_free(&x, &xs);
  tg_split_free(&y, &ys);
  tg_tensor_free(&x);
  tg_tensor_free(&y);
  tg_gpt_destroy(&g);
  return rc;
}

static void compare(const result *ref, const result *got, const size_t sizes[TG_GPT_NPARAMS],
                    const char *name) {
  for (int k = 0; k < 2; k++) {
    double le = fabs(got->loss[k] - ref->loss[k]) / fabs(ref->loss[k]);
    CHECK(le <= LOSS_TOL, "%s: step-%d loss %.8f vs reference %.8f (rel err %.2e)", name,
          k + 1, got->loss[k], ref->loss[k], le);
    double tol = k == 0 ? GRAD_TOL : STEP2_TOL, worst = 0;
    int wp = 0;
    size_t off = 0;
    for (int p = 0; p < TG_GPT_NPARAMS; p++) {
      double e = tg_rel_err_f32(got->grads[k] + off, ref->grads[k] + off, sizes[p]);
      if (e > worst) {
        worst = e;
        wp = p;
      }
      CHECK(e <= tol, "%s: step-%d gradient %s: rel err %.2e > %.0e", name, k + 1,
            tg_gpt_param_names[p], e, tol);
      off += sizes[p];
    }
    printf("%-18s step %d: loss %.7f (rel err %.1e), gradients max rel err %.2e (%s)\n",
           name, k + 1, got->loss[k], le, worst, tg_gpt_param_names[wp]);
  }
}

/* ---- attention memory ---------------------------------------------------- */

static size_t hook_bytes[4];
static int hook_seen;

static void capture(struct starpu_task *task) {
  if (task->cl != &tg_attention_fwd_cl) return;
  for (unsigned i = 0; i < 4 && i < STARPU_TASK_GET_NBUFFERS(task); i++)
    hook_bytes[i] = starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
  hook_seen++;
}

/* Submits one attention forward of b = 1 sequence of Tn tokens and returns
 * the sizes of its state (buffer 2) and scratch (buffer 3). */
static int attn_sizes(tg_attention_kind kind, int Tn, size_t *state, size_t *scratch) {
  tg_tensor qkv, out, st;
  if (tg_tensor_alloc(&qkv, Tn, 3 * C, TG_F32) < 0 || tg_tensor_temp(&out, Tn, C, TG_F32) < 0 ||
      (kind == TG_ATTN_NAIVE ? tg_tensor_temp(&st, NH * Tn, Tn, TG_F32)
                             : tg_tensor_temp(&st, Tn, NH, TG_F32)) < 0) {
    fprintf(stderr, "attention tensors: %s\n", tg_last_error());
    return -1;
  }
  hook_seen = 0;
  memset(hook_bytes, 0, sizeof hook_bytes);
  int rc = tg_add_submit_hook(capture);
  if (rc == 0)
    rc = tg_attention_fwd_insert(kind, Tn, NH, 64, qkv.handle, out.handle, st.handle, NULL);
  tg_remove_submit_hook(capture);
  if (rc < 0) fprintf(stderr, "tg_attention_fwd_insert: %s\n", tg_last_error());
  tg_tensor_release(&out);
  tg_tensor_release(&st);
  tg_tensor_free(&qkv); /* waits for the task */
  if (rc < 0 || hook_seen != 1) return -1;
  *state = hook_bytes[2];
  *scratch = hook_bytes[3];
  return 0;
}

static void check_attention_memory(void) {
  enum { NT = 4 };
  const int Ts[NT] = {256, 512, 1024, 2048};
  size_t cs[NT], cst[NT], ns[NT], nsc[NT];
  for (int i = 0; i < NT; i++) {
    int ok = attn_sizes(TG_ATTN_CHUNKED, Ts[i], &cst[i], &cs[i]) == 0 &&
             attn_sizes(TG_ATTN_NAIVE, Ts[i], &ns[i], &nsc[i]) == 0;
    CHECK(ok, "T = %d: submitting the attention tasks failed", Ts[i]);
    if (!ok) return;
    size_t want = tg_attention_scratch_bytes(TG_ATTN_CHUNKED, 1, Ts[i], C, NH, 64);
    CHECK(cs[i] == want, "T = %d: the chunked task registers %zu scratch bytes, "
          "tg_attention_scratch_bytes says %zu", Ts[i], cs[i], want);
    CHECK(cst[i] == (size_t)Ts[i] * NH * sizeof(float),
          "T = %d: chunked state %zu bytes, expected T * NH floats", Ts[i], cst[i]);
    CHECK(ns[i] == (size_t)NH * Ts[i] * Ts[i] * sizeof(float),
          "T = %d: naive state %zu bytes, expected b * NH * T * T floats", Ts[i], ns[i]);
    printf("T = %4d: chunked scratch %8zu + state %6zu bytes; naive state %10zu bytes\n",
           Ts[i], cs[i], cst[i], ns[i]);
  }
  for (int i = 1; i < NT; i++) {
    CHECK(cs[i] + cst[i] <= 2 * (cs[i - 1] + cst[i - 1]),
          "chunked memory grows more than 2x from T = %d to %d (%zu -> %zu bytes)",
          Ts[i - 1], Ts[i], cs[i - 1] + cst[i - 1], cs[i] + cst[i]);
    CHECK(ns[i] == 4 * ns[i - 1], "naive state does not quadruple from T = %d to %d",
          Ts[i - 1], Ts[i]);
    size_t a = tg_attention_scratch_bytes(TG_ATTN_CHUNKED, B, Ts[i - 1], C, NH, 64);
    size_t b = tg_attention_scratch_bytes(TG_ATTN_CHUNKED, B, Ts[i], C, NH, 64);
    CHECK(b <= 2 * a, "chunked scratch for b = %d grows more than 2x from T = %d to %d "
          "(%zu -> %zu bytes)", B, Ts[i - 1], Ts[i], a, b);
  }
  CHECK(cs[NT - 1] + cst[NT - 1] < ns[NT - 1] / 100,
        "chunked attention at T = %d uses %zu bytes, not far below naive's %zu",
        Ts[NT - 1], cs[NT - 1] + cst[NT - 1], ns[NT - 1]);
}

int main(void) {
  if (tg_init(NULL) < 0) {
    fprintf(stderr, "tg_init: %s\n", tg_last_error());
    return 1;
  }
  size_t sizes[TG_GPT_NPARAMS];
  size_t np = tg_gpt_param_sizes(&CFG, sizes);
  float *params = xmalloc(sizeof(float) * np);
  tg_gpt_init_params(&CFG, 20240611, params);
  tg_rng rng = {0x9E3779B97F4A7C15ULL};
  size_t off = 0;
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    int is_ln_w = p == TG_LN1W || p == TG_LN2W || p == TG_LNFW;
    int is_bias = p == TG_LN1B || p == TG_QKVB || p == TG_ATTPROJB || p == TG_LN2B ||
                  p == TG_FCB || p == TG_FCPROJB || p == TG_LNFB;
    for (size_t i = 0; i < sizes[p] && (is_ln_w || is_bias); i++)
      params[off + i] += (is_ln_w ? 0.1f : 0.02f) * tg_rng_uniform(&rng);
    off += sizes[p];
  }
  int32_t tokens[B * T + 1];
  for (int i = 0; i <= B * T; i++) tokens[i] = (int32_t)(tg_rng_next(&rng) % V);

  result ref;
  memset(&ref, 0, sizeof ref);
  int ok = run_case(params, tokens, np, 1, TG_ATTN_NAIVE, 1, &ref) == 0;
  CHECK(ok, "the reference run (M = 1, naive, S = 1) failed");
  if (ok) {
    printf("reference M=1 naive S=1: losses %.7f %.7f\n", ref.loss[0], ref.loss[1]);
    CHECK(fabs(ref.loss[0] - log((double)V)) < 0.5, "reference loss %.4f far from log V",
          ref.loss[0]);
    CHECK(ref.loss[1] < ref.loss[0], "the update did not lower the loss (%.7f -> %.7f)",
          ref.loss[0], ref.loss[1]);
    const int Ms[3] = {1, 2, 4};
    for (int mi = 0; mi < 3; mi++)
      for (int kind = 0; kind < 2; kind++)
        for (int S = 1; S <= 2; S++) {
          int M = Ms[mi];
          if ((B / M) % S) continue;
          if (M == 1 && kind == TG_ATTN_NAIVE && S == 1) continue;
          char name[64];
          snprintf(name, sizeof name, "M=%d %s S=%d", M,
                   kind == TG_ATTN_NAIVE ? "naive" : "chunked", S);
          result got;
          memset(&got, 0, sizeof got);
          int r = run_case(params, tokens, np, M, (tg_attention_kind)kind, S, &got);
          CHECK(r == 0, "%s: the run failed", name);
          if (r == 0) compare(&ref, &got, sizes, name);
          free(got.grads[0]);
          free(got.grads[1]);
        }
  }
  /* each linear layer's backward as one task (tg_linear_bwd, forced on
   * here: auto keeps it for CUDA workers): the same bits as two tasks, in
   * deterministic mode (the micro-batches' gradients otherwise add in any
   * order, which changes step 2's bits from run to run either way) */
  tg_set_deterministic(1);
  for (int M = 1; M <= 2 && ok; M++) {
    result two, one;
    memset(&two, 0, sizeof two);
    memset(&one, 0, sizeof one);
    g_fused = -1;
    int r = run_case(params, tokens, np, M, TG_ATTN_CHUNKED, 1, &two);
    g_fused = 1;
    r = r == 0 ? run_case(params, tokens, np, M, TG_ATTN_CHUNKED, 1, &one) : r;
    g_fused = 0;
    CHECK(r == 0, "fused backward M=%d: the run failed", M);
    for (int k = 0; r == 0 && k < 2; k++)
      CHECK(one.loss[k] == two.loss[k] && !memcmp(one.grads[k], two.grads[k], sizeof(float) * np),
            "fused backward M=%d: step-%d loss or gradients differ from two tasks per layer", M,
            k + 1);
    if (r == 0) printf("fused backward M=%d: losses and gradients bit for bit\n", M);
    for (int k = 0; k < 2; k++) {
      free(one.grads[k]);
      free(two.grads[k]);
    }
  }
  tg_set_deterministic(0);
  {
    tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
    tg_gpt_run_config run = tg_gpt_run_default(B, T);
    run.fused_backward = 2;
    tg_gpt g;
    CHECK(tg_gpt_create(&g, &CFG, params, &run, &opt) < 0 &&
              strstr(tg_last_error(), "fused_backward"),
          "fused_backward 2 accepted");
  }
  free(ref.grads[0]);
  free(ref.grads[1]);
  free(params);

  check_attention_memory();

  tg_shutdown();
  return tg_test_finish("test_gpt_micro");
}
