/*
 * Fused softmax + cross-entropy, and the accuracy count, over the rows of a
 * (rows, cols) logits matrix with int32 labels.
 *
 * softmax_xent, per row x with label l (p = softmax(x)):
 *   dlogits = scale * (p - onehot(l)),   loss row = -log p_l = lse(x) - x_l.
 * Numerically stable: with mx = max(x), e_c = exp(x_c - mx) <= 1, sum >= 1
 * (summed in double), lse = mx + log(sum).  The loss row is formed in double
 * as log(sum) - (x_l - mx), and the label entry of dlogits as
 * scale * (e_l - sum) / sum in double, so that p_l - 1 does not cancel when
 * the prediction is confident.  The row losses are summed in double and
 * scale * total is added to *loss_acc once per call (one rounding, and a
 * single write to the accumulator).
 *
 * The row is swept three times while it is in cache: max, exp (stored into
 * dlogits) and normalise.  x_l is read before dlogits is written, and every
 * other element is read before being overwritten at the same index, so
 * dlogits may be the logits buffer itself (in-place, ldd == ldl).  All three
 * sweeps are vectorised without changing a bit of the result: the max in
 * lanes (a max does not depend on the order), the exp through
 * tg_cpu_expf_row (libm's expf, evaluated four at a time, with the double
 * sum still left to right), the normalise sweep blocked for the vectoriser.
 * The scalar sweeps' times on the 124M classifier (128 x 50257 logits) are
 * in bench/results/2026-11-24-cpu-perf.md (the classifier's softmax).
 *
 * Labels are validated upstream.  Still, a label outside [0, cols) is never
 * used as an index: that row gets a zero gradient and makes the loss NaN, so
 * that the bad input shows instead of silently training on garbage.
 *
 * accuracy_count: argmax per row, ties resolved to the first maximum (strict
 * >), compared with the label; an out-of-range label never matches.
 */
#include <math.h>

#include "expf_row.h"
#include "taskgrad/kernels_cpu.h"

enum { VB = 8 };

/* max of x[0..n), n >= 1, in VB lanes so that it vectorises.  Every lane
 * starts from x[0] and the lanes combine with the same strict compare, so
 * the result is the scalar loop's, NaN included: a NaN x[0] is kept by every
 * lane, a later NaN never wins a compare. */
static inline float row_max(int n, const float *x) {
  float lane[VB];
  for (int j = 0; j < VB; j++) lane[j] = x[0];
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) lane[j] = x[c + j] > lane[j] ? x[c + j] : lane[j];
  float mx = lane[0];
  for (int j = 1; j < VB; j++)
    if (lane[j] > mx) mx = lane[j];
  for (; c < n; c++)
    if (x[c] > mx) mx = x[c];
  return mx;
}

static inline void scale_row(int n, float *restrict x, float f) {
  int c = 0;
  for (; c + VB <= n; c += VB)
    for (int j = 0; j < VB; j++) x[c + j] *= f;
  for (; c < n; c++) x[c] *= f;
}

void tg_cpu_softmax_xent(int rows, int cols,
                         const float *logits, int ldl, // (rows, ldl)
                         const int32_t *labels,        // (rows)
                         float scale,
                         float *dlogits, int ldd,      // (rows, ldd)
                         float *loss_acc)              // (1)
{
  double total = 0.0; /* sum of the row losses, unscaled */
  for (int r = 0; r < rows; r++) {
    const float *x = logits + (size_t)r * ldl;
    float *d = dlogits + (size_t)r * ldd;
    int32_t l = labels[r];
    if (l < 0 || l >= cols) { /* defensive: never index with a bad label */
      for (int c = 0; c < cols; c++) d[c] = 0.0f;
      total = NAN;
      continue;
    }
    float mx = row_max(cols, x);
    double xl = (double)x[l] - (double)mx; /* read before d overwrites x */
    double sum = tg_cpu_expf_row(cols, x, mx, d, 0.0);
    float el = d[l];
    scale_row(cols, d, (float)((double)scale / sum));
    d[l] = (float)((double)scale * ((double)el - sum) / sum);
    total += log(sum) - xl;
  }
  if (rows > 0) *loss_acc = (float)((double)*loss_acc + (double)scale * total);
}

void tg_cpu_accuracy_count(int rows, int cols,
                           const float *logits, int ldl, // (rows, ldl)
                           const int32_t *labels,        // (rows)
                           float *correct_acc)           // (1)
{
  if (cols <= 0) return;
  long count = 0;
  for (int r = 0; r < rows; r++) {
    const float *x = logits + (size_t)r * ldl;
    int best = 0;
    for (int c = 1; c < cols; c++)
      if (x[c] > x[best]) best = c;
    count += best == labels[r];
  }
  *correct_acc = (float)((double)*correct_acc + (double)count);
}
