/*
 * The worker pair for outputs of any dtype (f32 or 16-bit): the
 * mixed-precision rows' cases (was in test_cuda_precision.c).  Inputs are
 * rounded to the 16-bit type on the host; outputs are read back as f32 and
 * compared by pair_compare (bit for bit on the device and cpu backends).
 */
#include "pair.h"
#include "precision_testlib.h"

void run_pair16(const char *what, submit16_fn fn, const void *ctx, int nout,
                       const out16 *spec) {
  tg_tensor out[2][MAX_OUT16];
  const int workers[2] = {g_cpu_worker, g_cuda_worker};
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < nout; i++) {
      size_t n = (size_t)spec[i].rows * spec[i].cols;
      float *nan_init = spec[i].init ? NULL : filled(n, NAN);
      const float *init = spec[i].init ? spec[i].init : nan_init;
      if (spec[i].dt == TG_F32) new_tensor(&out[side][i], spec[i].rows, spec[i].cols, init);
      else new_low(&out[side][i], spec[i].dt, spec[i].rows, spec[i].cols, init);
      free(nan_init);
    }
  for (int side = 0; side < 2; side++) {
    tg_task_opts o = on_worker(workers[side]);
    int rc = fn(ctx, &o, out[side]);
    CHECK(rc == 0, "%s: submission on the %s worker failed: %s", what, side ? pair_second_name() : "CPU",
          tg_last_error());
  }
  for (int i = 0; i < nout; i++) {
    size_t n = (size_t)spec[i].rows * spec[i].cols;
    float *cpu = read_as_f32(&out[0][i], spec[i].dt), *gpu = read_as_f32(&out[1][i], spec[i].dt);
    char label[256];
    snprintf(label, sizeof label, "%s [%s]", what, spec[i].name);
    pair_compare(label, cpu, gpu, n, spec[i].tol);
    free(cpu);
    free(gpu);
  }
  for (int side = 0; side < 2; side++)
    for (int i = 0; i < nout; i++) tg_tensor_free(&out[side][i]);
}

double half_ulp(tg_dtype t) { return ldexp(1.0, -(mant_bits(t) + 1)); }
