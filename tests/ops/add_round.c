/*
 * Row add_round (codelets/add_round.c): one level of the ranks'
 * reduce-scatter by recursive halving (parallel/halving.c): v = a[a_off ..]
 * + widen(recv), a range of v kept in f32 (out), another rounded into the
 * next message (send).
 *  ref       tg_cpu_add_round bit for bit against the definition written
 *            with the scalar conversions (tg_bf16_to_f32, tg_f32_to_f16,
 *            ...), for messages in f32, bf16 and fp16, with and without
 *            recv, n = 1, 7, 512, 1100 (the kernel's 512-float chunks and
 *            remainders), out and send over disjoint, overlapping and
 *            whole ranges; the elements past each output range untouched;
 *            specials (Inf, NaN, ties, fp16 overflow) in the inputs;
 *  cpu       with 1 and 2 CPU workers: the wrapper on a (rows, 1) column
 *            and on the row blocks of a partitioned one (the way
 *            halving.c sends into its pieces), bit for bit against the
 *            kernel, and its refusals; then the pair cases;
 *  pair      the wrapper on both workers, out and send, every message
 *            type, bit for bit (the CUDA kernel rounds with the hardware's
 *            round to nearest even, which agrees with the CPU on every
 *            non-NaN value);
 *  cuda-emu  tg_cuda_add_round against the CPU kernel, exact.
 */

#include <errno.h>

#include "ref_util.h"
#include "pair.h"
#include "precision_testlib.h"

static const tg_dtype COMM[3] = {TG_F32, TG_BF16, TG_F16};

static size_t comm_bytes(tg_dtype c) { return c == TG_F32 ? sizeof(float) : 2; }

/* n values of type c from floats (rounded for 16-bit types); caller frees */
static void *to_comm(tg_dtype c, const float *x, size_t n) {
  void *m = xmalloc(comm_bytes(c) * n + 1);
  for (size_t i = 0; i < n; i++) {
    if (c == TG_F32) ((float *)m)[i] = x[i];
    else ((uint16_t *)m)[i] = c == TG_BF16 ? tg_f32_to_bf16(x[i]) : tg_f32_to_f16(x[i]);
  }
  return m;
}

static float scalar_widen(tg_dtype c, const void *m, size_t i) {
  if (c == TG_F32) return ((const float *)m)[i];
  uint16_t h = ((const uint16_t *)m)[i];
  return c == TG_BF16 ? tg_bf16_to_f32(h) : tg_f16_to_f32(h);
}

/* inputs with specials up front: Inf, NaN, a bf16 tie, fp16 overflow */
static float *specials_then_random(size_t n, float scale) {
  static const float sp[] = {INFINITY, -INFINITY, NAN, 1.00390625f, 65520.0f, -0.0f, 1e-40f};
  float *x = rnd(n, scale);
  for (size_t i = 0; i < n && i < sizeof sp / sizeof *sp; i++) x[i] = sp[i];
  return x;
}

/* ---- ref ----------------------------------------------------------------------- */

static void ref_case(tg_dtype c, size_t n, int with_recv, size_t out_off, size_t out_len,
                     size_t send_off, size_t send_len) {
  const size_t es = comm_bytes(c), a_off = 3;
  float *a = specials_then_random(n + a_off, 4.0f), *r = rnd(n, 4.0f);
  void *recv = to_comm(c, r, n);
  float *out = filled(out_len + 1, -7.0f);
  unsigned char *send = xmalloc(es * (send_len + 1));
  memset(send, 0x5a, es * (send_len + 1));
  tg_cpu_add_round(c, n, a + a_off, with_recv ? recv : NULL, out_len ? out : NULL, out_off,
                   out_len, send_len ? send : NULL, send_off, send_len);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float v = with_recv ? a[a_off + i] + scalar_widen(c, recv, i) : a[a_off + i];
    if (i - out_off < out_len && memcmp(&out[i - out_off], &v, sizeof v) &&
        !(isnan(v) && isnan(out[i - out_off])))
      bad++;
    if (i - send_off < send_len) {
      void *want = to_comm(c, &v, 1);
      if (memcmp(send + (i - send_off) * es, want, es) && !isnan(v)) bad++;
      free(want);
    }
  }
  float sentinel = -7.0f;
  unsigned char pad[4];
  memset(pad, 0x5a, sizeof pad);
  bad += memcmp(&out[out_len], &sentinel, sizeof sentinel) != 0;
  bad += memcmp(send + send_len * es, pad, es) != 0;
  CHECK(bad == 0, "tg_cpu_add_round %s n=%zu recv=%d out [%zu,+%zu) send [%zu,+%zu): %d wrong",
        tg_dtype_name(c), n, with_recv, out_off, out_len, send_off, send_len, bad);
  free(a); free(r); free(recv); free(out); free(send);
}

static void ref_add_round(void) {
  static const size_t sizes[4] = {1, 7, 512, 1100};
  for (int ci = 0; ci < 3; ci++)
    for (int s = 0; s < 4; s++)
      for (int with_recv = 0; with_recv < 2; with_recv++) {
        size_t n = sizes[s], h = n / 2;
        ref_case(COMM[ci], n, with_recv, 0, h, h, n - h);     /* kept low, sent high */
        ref_case(COMM[ci], n, with_recv, h, n - h, 0, h);     /* kept high, sent low */
        ref_case(COMM[ci], n, with_recv, 0, 0, 0, n);         /* the last level */
        ref_case(COMM[ci], n, with_recv, 0, n, n / 3, n - n / 3); /* overlapping */
      }
}

/* ---- cpu: the wrapper, with 1 and 2 CPU workers ------------------------------- */

/* a (rows, 1) column of type c holding x (rounded), or nothing (x NULL) */
static void new_comm(tg_tensor *t, tg_dtype c, int rows, const float *x) {
  if (c == TG_F32) new_f32(t, rows, 1, x);
  else if (x) new_low(t, c, rows, 1, x);
  else if (tg_tensor_alloc(t, rows, 1, c) != 0) fatal_error("tg_tensor_alloc");
}

/* the wrapper on separate columns and on the pieces of a partitioned send
 * column, against the kernel on host copies */
static void cpu_add_round_body(void) {
  enum { A = 1031, OFF = 5, N = 1000 };
  float *a = specials_then_random(A, 8.0f), *r = rnd(N, 8.0f);
  for (int ci = 0; ci < 3; ci++) {
    tg_dtype c = COMM[ci];
    size_t es = comm_bytes(c);
    tg_tensor ta, tr, tout, tsend, whole;
    new_f32(&ta, A, 1, a);
    new_comm(&tr, c, N, r);
    new_f32(&tout, 400, 1, NULL);
    new_comm(&tsend, c, 600, NULL);
    /* the whole sum rounded into piece 1 of 4 of a partitioned column */
    new_comm(&whole, c, 4 * N, NULL);
    tg_split sp;
    CHECK(tg_split_plan(&whole, 4, &sp) == 0, "split: %s", tg_last_error());
    tg_split_write(&whole, &sp);
    CHECK(tg_add_round_insert(c, ta.handle, OFF, N, tr.handle, tout.handle, 600, tsend.handle, 0,
                              NULL) == 0, "add_round: %s", tg_last_error());
    CHECK(tg_add_round_insert(c, ta.handle, OFF, N, tr.handle, NULL, 0, sp.parts[1], 0, NULL) == 0,
          "add_round into a piece: %s", tg_last_error());
    tg_split_join(&whole, &sp);
    void *rh = to_comm(c, r, N);
    float want_out[400];
    unsigned char *want_send = xmalloc(es * 600), *want_whole = xmalloc(es * N);
    tg_cpu_add_round(c, N, a + OFF, rh, want_out, 600, 400, want_send, 0, 600);
    tg_cpu_add_round(c, N, a + OFF, rh, NULL, 0, 0, want_whole, 0, N);
    float got_out[400];
    unsigned char *got_send = xmalloc(es * 600), *got_whole = xmalloc(es * 4 * N);
    CHECK(tg_tensor_read(&tout, got_out) == 0 && tg_tensor_read(&tsend, got_send) == 0 &&
          tg_tensor_read(&whole, got_whole) == 0, "read: %s", tg_last_error());
    CHECK(!memcmp(got_out, want_out, sizeof got_out), "add_round %s: out differs",
          tg_dtype_name(c));
    CHECK(!memcmp(got_send, want_send, es * 600), "add_round %s: send differs", tg_dtype_name(c));
    CHECK(!memcmp(got_whole + es * N, want_whole, es * N), "add_round %s: piece 1 differs",
          tg_dtype_name(c));
    tg_split_free(&whole, &sp);
    tg_tensor *all[] = {&ta, &tr, &tout, &tsend, &whole};
    for (int i = 0; i < 5; i++) tg_tensor_free(all[i]);
    free(rh); free(want_send); free(want_whole); free(got_send); free(got_whole);
  }
  free(a);
  free(r);
}

static void refusals(void) {
  static const char op[] = "tg_add_round";
  tg_tensor a, r16, out, s16, wide;
  new_f32(&a, 64, 1, NULL);
  new_comm(&r16, TG_BF16, 32, NULL);
  new_f32(&out, 16, 1, NULL);
  new_comm(&s16, TG_BF16, 16, NULL);
  new_f32(&wide, 64, 2, NULL);
  starpu_data_handle_t A = a.handle, R = r16.handle, O = out.handle, S = s16.handle;
  CHECK_REFUSED(tg_add_round_insert(TG_I32, A, 0, 32, R, O, 0, S, 16, NULL), op, "int messages");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, A, 0, 32, R, NULL, 0, NULL, 0, NULL), op,
                "no output");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, A, 40, 32, R, O, 0, S, 16, NULL), op,
                "a's range past its end");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, A, 0, 31, R, O, 0, S, 16, NULL), op,
                "recv's rows != n");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, A, 0, 32, R, O, 20, S, 16, NULL), op,
                "out's range past n");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, A, 0, 32, R, O, 0, S, 17, NULL), op,
                "send's range past n");
  CHECK_REFUSED(tg_add_round_insert(TG_F32, A, 0, 32, R, O, 0, NULL, 0, NULL), op,
                "16-bit recv with f32 messages");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, A, 0, 32, R, A, 0, S, 16, NULL), op,
                "a passed as out");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, wide.handle, 0, 32, R, O, 0, S, 16, NULL), op,
                "a with 2 columns");
  CHECK_REFUSED(tg_add_round_insert(TG_BF16, A, 0, 0, NULL, NULL, 0, S, 0, NULL), op,
                "n = 0");
  tg_tensor *all[] = {&a, &r16, &out, &s16, &wide};
  for (int i = 0; i < 5; i++) tg_tensor_free(all[i]);
}

static void cpu_body(void) {
  cpu_add_round_body();
  refusals();
}

/* ---- pair ---------------------------------------------------------------------- */

typedef struct ar_ctx {
  tg_dtype c;
  starpu_data_handle_t a, recv;
  int a_off, n, out_off, send_off;
} ar_ctx;

static int ar_submit(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const ar_ctx *x = v;
  return tg_add_round_insert(x->c, x->a, x->a_off, x->n, x->recv, out[0].handle, x->out_off,
                             out[1].handle, x->send_off, o);
}

static void pair_add_round(void) {
  enum { A = 777, OFF = 9, N = 700, KEEP = 350 };
  float *a = rnd(A, 16.0f), *r = rnd(N, 16.0f);
  for (int ci = 0; ci < 3; ci++)
    for (int with_recv = 0; with_recv < 2; with_recv++) {
      tg_dtype c = COMM[ci];
      tg_tensor ta, tr;
      new_tensor(&ta, A, 1, a);
      new_comm(&tr, c, N, r);
      ar_ctx x = {.c = c, .a = ta.handle, .recv = with_recv ? tr.handle : NULL, .a_off = OFF,
                  .n = N, .out_off = KEEP, .send_off = 0};
      out16 o[2] = {{.name = "out", .rows = N - KEEP, .cols = 1, .dt = TG_F32, .init = NULL,
                     .tol = PAIR_EXACT},
                    {.name = "send", .rows = KEEP, .cols = 1, .dt = c, .init = NULL,
                     .tol = PAIR_EXACT}};
      char what[64];
      snprintf(what, sizeof what, "add_round %s%s", tg_dtype_name(c),
               with_recv ? "" : " without recv");
      run_pair16(what, ar_submit, &x, 2, o);
      tg_tensor_free(&ta);
      tg_tensor_free(&tr);
    }
  free(a);
  free(r);
}

static void add_round_cpu(void) {
  ops_run_worker_counts(cpu_body);
  pair_add_round();
}

#ifdef OPS_EMU
#include "cuda_emu/emu_test.h"

/* ---- cuda-emu ------------------------------------------------------------------ */

static void emu_add_round(void) {
  enum { N = 1500, KEEP = 700 };
  float *a = specials_then_random(N, 100.0f), *r = rnd(N, 100.0f);
  for (int ci = 0; ci < 3; ci++)
    for (int with_recv = 0; with_recv < 2; with_recv++) {
      tg_dtype c = COMM[ci];
      size_t es = comm_bytes(c);
      void *recv = to_comm(c, r, N);
      float *out[2];
      unsigned char *send[2];
      outputs(out, 1, N - KEEP, N - KEEP + 1, 0);
      for (int side = 0; side < 2; side++) {
        send[side] = xmalloc(es * (KEEP + 1));
        memset(send[side], 0x5a, es * (KEEP + 1));
      }
      ok("tg_cuda_add_round", "",
         tg_cuda_add_round(c, N, a, with_recv ? recv : NULL, out[0], KEEP, N - KEEP, send[0], 0,
                           KEEP, NULL));
      tg_cpu_add_round(c, N, a, with_recv ? recv : NULL, out[1], KEEP, N - KEEP, send[1], 0,
                       KEEP);
      compare("tg_cuda_add_round", "out", out[0], out[1], N - KEEP + 1, EXACT);
      if (c == TG_F32)
        compare("tg_cuda_add_round", "send", (float *)send[0], (float *)send[1], KEEP + 1, EXACT);
      else
        compare16("tg_cuda_add_round", "send", c, (uint16_t *)send[0], (uint16_t *)send[1],
                  KEEP + 1);
      free2(out);
      free(send[0]);
      free(send[1]);
      free(recv);
    }
  free(a);
  free(r);
}
#endif /* OPS_EMU */

static const ops_row rows[] = {
    {.name = "add_round",
     .doc = "one level of the ranks' reduce-scatter: a + widen(recv), one range kept in f32, "
            "another rounded into the next message (f32, bf16 or fp16)",
     .buffers = "a (R), recv (R, optional), out (W, optional), send (W, optional)",
     .covers = "tg_add_round_cl tg_add_round_insert tg_cuda_add_round",
     .kernels = "tg_cpu_add_round",
     .run = {[OPS_REF] = ref_add_round, [OPS_CPU] = add_round_cpu, [OPS_CUDA] = pair_add_round,
             [OPS_DEVICE] = pair_add_round, [OPS_CUDA_EMU] = OPS_EMU_CASE(emu_add_round)},
     .why_not = {[OPS_LOWP] = "the codelet takes its 16-bit buffers itself (no adapter)",
                 [OPS_CUDA_EMU] = OPS_EMU_ONLY}},
};

OPS_ROWS(rows)
