/*
 * The exp sweep of a softmax row, bitwise equal to libm's expf (see
 * expf_row.c): out[c] = expf(x[c] - shift) for c in [0, n), and the return
 * value is sum + (double)out[0] + ... + (double)out[n-1], added left to
 * right as a scalar loop would.  out may be x (in place).
 */
#ifndef TASKGRAD_KERNELS_CPU_EXPF_ROW_H
#define TASKGRAD_KERNELS_CPU_EXPF_ROW_H

double tg_cpu_expf_row(int n, const float *x, float shift, float *out, double sum);

#endif
