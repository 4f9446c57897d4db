/*
 * Exhaustive check of tg_cpu_expf_row (kernels/cpu/expf_row.c) against this
 * machine's libm: every one of the 2^32 float bit patterns goes through the
 * row function, in rows of 2^20 - 3 elements (so the vector loop, its
 * scalar fallback for |x| >= 88 and the row tail all run), and each result
 * is compared bit for bit with expf, each row's double sum with the left to
 * right sum of the expf values.  Slow: 2^32 calls of each function.
 *   expf_row_check            exit 0: no difference; 1: differences (listed)
 * Run it after a glibc upgrade: the row function's self-check samples 8192
 * inputs only, this one all of them.  It first times both on softmax-like
 * inputs in [-20, 0]: when the self-check has turned the vector path off,
 * the two times are alike and the comparison proves nothing about that path.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expf_row.h"
#include "probe_common.h"

enum { ROW = (1 << 20) - 3, SHOWN = 5 };

int main(void) {
  float *in = malloc(sizeof(float) * ROW), *out = malloc(sizeof(float) * ROW);
  if (!in || !out) {
    fputs("expf_row_check: error: out of memory\n", stderr);
    return 1;
  }
  for (int i = 0; i < ROW; i++) in[i] = -20.0f * (float)i / (float)ROW;
  /* the first call makes the row function's one-time choice and touches
   * out's pages; then the fastest of 5 alternating calls of each */
  double row_sum = tg_cpu_expf_row(ROW, in, 0.0f, out, 0.0), libm_sum = 0.0;
  double row_s = 1e30, libm_s = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = probe_now_s();
    row_sum = tg_cpu_expf_row(ROW, in, 0.0f, out, 0.0);
    double t1 = probe_now_s();
    libm_sum = 0.0;
    for (int i = 0; i < ROW; i++) {
      out[i] = expf(in[i]);
      libm_sum += (double)out[i];
    }
    double t2 = probe_now_s();
    row_s = t1 - t0 < row_s ? t1 - t0 : row_s;
    libm_s = t2 - t1 < libm_s ? t2 - t1 : libm_s;
  }
  printf("expf_row_check: %.2f ns per element in the row function, %.2f in an expf loop "
         "(inputs in [-20, 0], fastest of 5%s)\n", row_s / ROW * 1e9, libm_s / ROW * 1e9,
         row_sum == libm_sum ? "" : ", sums differ");
  fflush(stdout); /* the exhaustive pass takes a while */
  uint64_t differences = row_sum != libm_sum;
  for (uint64_t first = 0; first < (1ull << 32); first += ROW) {
    int n = (1ull << 32) - first < ROW ? (int)((1ull << 32) - first) : ROW;
    for (int i = 0; i < n; i++) {
      uint32_t bits = (uint32_t)(first + (uint64_t)i);
      memcpy(&in[i], &bits, sizeof bits);
    }
    double sum = tg_cpu_expf_row(n, in, 0.0f, out, 0.0), expected = 0.0;
    for (int i = 0; i < n; i++) expected += (double)expf(in[i]);
    for (int i = 0; i < n; i++) {
      float e = expf(in[i]);
      if (memcmp(&e, &out[i], sizeof e) != 0 && differences++ < SHOWN)
        printf("expf(%a) = %a, row function %a\n", (double)in[i], (double)e, (double)out[i]);
    }
    if (memcmp(&sum, &expected, sizeof sum) != 0 && !(isnan(sum) && isnan(expected)) &&
        differences++ < SHOWN)
      printf("row from bits %#llx: sum %a, expected %a\n", (unsigned long long)first, sum,
             expected);
  }
  printf("expf_row_check: %llu differences over 2^32 inputs\n",
         (unsigned long long)differences);
  free(in);
  free(out);
  return differences != 0;
}
