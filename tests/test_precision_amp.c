/*
 * test_precision_amp: the loss-scaling codelets of precision.h under StarPU
 * (1 and 2 CPU workers, one child process each; see precision_testlib.h),
 * and the insert wrappers' refusals.
 *
 *  - refusals: a wrong 16-bit type, f32 where 16-bit is expected (and the
 *    reverse for tg_gemm_insert, tg_fill_insert, tg_scale_insert),
 *    mismatched shapes, a 16-bit C in TG_REDUCE, a flag that is not (1, 1)
 *    f32, AdamW step 0: each -EINVAL with a message naming the wrapper, and
 *    nothing submitted;
 *  - nonfinite: several gradients checked into one flag (RW) leave it 0
 *    when all are finite (FLT_MAX, subnormals included) and raise it when
 *    any holds a NaN or +-Inf, wherever (first, middle, last element);
 *    tg_fill_insert resets a raised flag;
 *  - adamw_amp, graph-level: fill(flag, 0) -> nonfinite(grad) -> AMP AdamW,
 *    no host wait in between.  A gradient with an Inf makes the step a
 *    no-op: w, m, v bit-identical (memcmp); the 16-bit copy is still
 *    written (lowp(w)).  A finite gradient gives tg_cpu_adamw's result on
 *    the same inputs (scaled gradients, grad_scale = 1 / 512, relative error
 *    <= 1e-6) and the copy equal to the conversion of the new weights, bit
 *    for bit; without a copy (w_low NULL) the weights are the same.
 */
#include <errno.h>
#include <float.h>
#include <math.h>

#include "precision_testlib.h"
#include "taskgrad/kernels_cpu.h"

static void test_refusals(void) {
  tg_tensor a16, b16, c16, f32, f32b, flag, flag2;
  new_low(&a16, TG_BF16, 4, 3, (float[12]){0});
  new_low(&b16, TG_BF16, 3, 5, (float[15]){0});
  new_low(&c16, TG_BF16, 4, 5, (float[20]){0});
  new_f32(&f32, 4, 5, NULL);
  new_f32(&f32b, 3, 5, NULL);
  new_f32(&flag, 1, 1, NULL);
  new_f32(&flag2, 2, 1, NULL);
  tg_adamw_hyper h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 1};
  CHECK(tg_gemm_lowp_insert(TG_BF16, 0, 0, 1, a16.handle, b16.handle, 0, f32.handle,
                            TG_OVERWRITE, NULL) == 0, "a valid gemm_lowp: %s", tg_last_error());
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_F32, 0, 0, 1, a16.handle, b16.handle, 0, f32.handle,
                                    TG_OVERWRITE, NULL), "tg_gemm_lowp", "lowp = f32");
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_BF16, 0, 0, 1, a16.handle, f32b.handle, 0, f32.handle,
                                    TG_OVERWRITE, NULL), "tg_gemm_lowp", "an f32 B");
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_BF16, 1, 0, 1, a16.handle, b16.handle, 0, f32.handle,
                                    TG_OVERWRITE, NULL), "tg_gemm_lowp", "inner dimensions");
  CHECK_REFUSED(tg_gemm_lowp_insert(TG_BF16, 0, 0, 1, a16.handle, b16.handle, 0, c16.handle,
                                    TG_REDUCE, NULL), "tg_gemm_lowp", "a 16-bit C reduced");
  CHECK_REFUSED(tg_gemm_insert(0, 0, 1, a16.handle, f32b.handle, 0, f32.handle, TG_OVERWRITE,
                               NULL), "tg_gemm", "a bf16 A in the f32 GEMM");
  CHECK_REFUSED(tg_convert_insert(TG_F16, f32.handle, f32.handle, NULL), "tg_convert",
                "f32 -> f32");
  CHECK_REFUSED(tg_convert_insert(TG_F16, f32.handle, a16.handle, NULL), "tg_convert",
                "shapes differ");
  CHECK_REFUSED(tg_convert_insert(TG_I32, f32.handle, c16.handle, NULL), "tg_convert",
                "lowp = i32");
  CHECK_REFUSED(tg_nonfinite_insert(f32.handle, flag2.handle, NULL), "tg_nonfinite",
                "a (2, 1) flag");
  CHECK_REFUSED(tg_nonfinite_insert(c16.handle, flag.handle, NULL), "tg_nonfinite",
                "a bf16 gradient");
  CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                    f32.handle, flag.handle, &h, NULL), "tg_adamw_amp",
                "an f32 w_low");
  CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                    a16.handle, flag.handle, &h, NULL), "tg_adamw_amp",
                "w_low of another shape");
  CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                    c16.handle, flag2.handle, &h, NULL), "tg_adamw_amp",
                "a (2, 1) flag");
  /* the f32 codelets refuse 16-bit tensors (they would overrun them) */
  CHECK_REFUSED(tg_fill_insert(c16.handle, 0.0f, NULL), "tg_fill", "fill of a bf16 tensor");
  CHECK_REFUSED(tg_scale_insert(c16.handle, 2.0f, NULL), "tg_scale", "scale of a bf16 tensor");
  h.step = 0;
  CHECK_REFUSED(tg_adamw_amp_insert(TG_BF16, f32.handle, f32.handle, f32.handle, f32.handle,
                                    c16.handle, flag.handle, &h, NULL), "tg_adamw_amp",
                "step 0");
  tg_tensor *all[] = {&a16, &b16, &c16, &f32, &f32b, &flag, &flag2};
  for (int i = 0; i < 7; i++) tg_tensor_free(all[i]);
}

static float read_flag(tg_tensor *flag) {
  float f = -1.0f;
  if (tg_tensor_read(flag, &f) != 0) fatal_error("read flag");
  return f;
}

static void test_nonfinite(void) {
  enum { R = 33, C = 257, NF = 8 };
  const size_t n = (size_t)R * C;
  tg_rng rng = {2024};
  float *g = tg_test_malloc(sizeof(float) * n);
  tg_rng_fill(&rng, g, n, 1e30f);
  g[0] = FLT_MAX;
  g[n / 2] = -FLT_MAX;
  g[n - 1] = 1e-45f;
  tg_tensor fin1, fin2, bad[9], flag[NF];
  new_f32(&fin1, R, C, g);
  new_f32(&fin2, R, C, g); /* the same finite data in another tensor */
  const float vals[3] = {NAN, INFINITY, -INFINITY};
  const size_t where[3] = {0, n / 2, n - 1};
  for (int i = 0; i < 9; i++) {
    float keep = g[where[i % 3]];
    g[where[i % 3]] = vals[i / 3];
    new_f32(&bad[i], R, C, g);
    g[where[i % 3]] = keep;
  }
  for (int i = 0; i < NF; i++) {
    new_f32(&flag[i], 1, 1, NULL);
    CHECK(tg_fill_insert(flag[i].handle, 0.0f, NULL) == 0, "fill: %s", tg_last_error());
  }
  /* flag 0: finite only; flag 1: finite, bad, finite; flags 2..: one bad each */
  tg_nonfinite_insert(fin1.handle, flag[0].handle, NULL);
  tg_nonfinite_insert(fin2.handle, flag[0].handle, NULL);
  tg_nonfinite_insert(fin1.handle, flag[1].handle, NULL);
  tg_nonfinite_insert(bad[4].handle, flag[1].handle, NULL);
  tg_nonfinite_insert(fin2.handle, flag[1].handle, NULL);
  CHECK(read_flag(&flag[0]) == 0.0f, "nonfinite: finite gradients raised the flag");
  CHECK(read_flag(&flag[1]) == 1.0f, "nonfinite: an Inf among finite gradients was missed");
  for (int i = 0; i < 9; i++) {
    tg_tensor *fl = &flag[2 + i % (NF - 2)];
    CHECK(tg_fill_insert(fl->handle, 0.0f, NULL) == 0, "fill: %s", tg_last_error());
    CHECK(tg_nonfinite_insert(bad[i].handle, fl->handle, NULL) == 0, "nonfinite: %s",
          tg_last_error());
    CHECK(read_flag(fl) == 1.0f, "nonfinite: %g at element %zu missed", vals[i / 3],
          where[i % 3]);
  }
  tg_fill_insert(flag[1].handle, 0.0f, NULL); /* reset after a raise */
  tg_nonfinite_insert(fin1.handle, flag[1].handle, NULL);
  CHECK(read_flag(&flag[1]) == 0.0f, "nonfinite: tg_fill_insert did not reset the flag");
  free(g);
  tg_tensor_free(&fin1);
  tg_tensor_free(&fin2);
  for (int i = 0; i < 9; i++) tg_tensor_free(&bad[i]);
  for (int i = 0; i < NF; i++) tg_tensor_free(&flag[i]);
}

/* one AMP step through the graph fill -> nonfinite -> adamw_amp */
static void amp_case(tg_dtype t, int overflow, int with_low) {
  enum { R = 37, C = 65 };
  const size_t n = (size_t)R * C;
  tg_rng rng = {777 + (uint64_t)t};
  float *w0 = tg_test_malloc(sizeof(float) * n), *g = tg_test_malloc(sizeof(float) * n);
  float *m0 = tg_test_malloc(sizeof(float) * n), *v0 = tg_test_malloc(sizeof(float) * n);
  tg_rng_fill(&rng, w0, n, 1.0f);
  tg_rng_fill(&rng, g, n, 512.0f); /* loss scale 512 */
  tg_rng_fill(&rng, m0, n, 0.1f);
  for (size_t i = 0; i < n; i++) v0[i] = 0.01f * fabsf(tg_rng_uniform(&rng));
  if (overflow) g[n - 2] = INFINITY;
  tg_adamw_hyper h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f / 512, 3};
  tg_tensor W, G, M, V, WL, F;
  new_f32(&W, R, C, w0); new_f32(&G, R, C, g); new_f32(&M, R, C, m0); new_f32(&V, R, C, v0);
  new_f32(&F, 1, 1, NULL);
  if (tg_tensor_alloc(&WL, R, C, t) != 0) fatal_error("alloc");
  int rc = tg_fill_insert(F.handle, 0.0f, NULL);
  if (rc == 0) rc = tg_nonfinite_insert(G.handle, F.handle, NULL);
  if (rc == 0)
    rc = tg_adamw_amp_insert(t, W.handle, G.handle, M.handle, V.handle,
                             with_low ? WL.handle : NULL, F.handle, &h, NULL);
  CHECK(rc == 0, "AMP step submission: %s", tg_last_error());
  float *w = read_as_f32(&W, TG_F32), *m = read_as_f32(&M, TG_F32);
  float *v = read_as_f32(&V, TG_F32);
  uint16_t *low = tg_test_malloc(sizeof(uint16_t) * n);
  uint16_t *lowref = tg_test_malloc(sizeof(uint16_t) * n);
  if (tg_tensor_read(&WL, low) != 0) fatal_error("read");
  const char *tn = tg_dtype_name(t);
  if (overflow) {
    CHECK(!memcmp(w, w0, sizeof(float) * n) && !memcmp(m, m0, sizeof(float) * n) &&
              !memcmp(v, v0, sizeof(float) * n),
          "%s AMP step with an Inf gradient was not skipped", tn);
  } else {
    CHECK(memcmp(w, w0, sizeof(float) * n) != 0, "%s AMP step: nothing was updated", tn);
    float bc1 = (float)(1.0 - pow(h.beta1, h.step)), bc2 = (float)(1.0 - pow(h.beta2, h.step));
    tg_cpu_adamw(n, w0, g, m0, v0, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, bc1, bc2,
                 h.grad_scale);
    double ew = tg_rel_err_f32(w, w0, n), em = tg_rel_err_f32(m, m0, n);
    double ev = tg_rel_err_f32(v, v0, n);
    CHECK(ew <= 1e-6 && em <= 1e-6 && ev <= 1e-6,
          "%s AMP step vs tg_cpu_adamw: rel err w %.2e m %.2e v %.2e", tn, ew, em, ev);
  }
  if (with_low) {
    tg_cpu_to_lowp(t, 1, (int)n, w, (int)n, lowref, (int)n);
    CHECK(!memcmp(low, lowref, sizeof(uint16_t) * n),
          "%s AMP step (overflow %d): copy != lowp(w)", tn, overflow);
  }
  free(w0); free(g); free(m0); free(v0); free(w); free(m); free(v); free(low); free(lowref);
  tg_tensor *all[] = {&W, &G, &M, &V, &WL, &F};
  for (int i = 0; i < 6; i++) tg_tensor_free(all[i]);
}

static void body(void) {
  test_refusals();
  test_nonfinite();
  for (int d = 0; d < 2; d++)
    for (int overflow = 0; overflow < 2; overflow++)
      for (int with_low = 0; with_low < 2; with_low++) amp_case(LOWP[d], overflow, with_low);
}

int main(int argc, char **argv) {
  return precision_run_configs(argc, argv, "test_precision_amp", body);
}
