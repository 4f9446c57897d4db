/*
 * Example: using taskgrad's codelets from a plain StarPU application.
 *
 * Shows the three things an application does: start the runtime, register
 * tensors, submit tasks through the typed insert wrappers (which choose the
 * access modes), and read a result back.  Here: two chained GEMMs and a
 * ReLU, D = relu((A B^T) C), checked against a direct computation.  Then
 * the same three tasks fused into one (tg_fuse_begin / tg_fuse_end: one
 * task runs their functions in order, saving the runtime's cost per task
 * where they would run one after the other anyway), bit for bit the same.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <taskgrad/taskgrad.h>

#define CHECK_TG(call)                                                      \
  do {                                                                      \
    if ((call) < 0) {                                                       \
      fprintf(stderr, "%s failed: %s\n", #call, tg_last_error());           \
      return 1;                                                             \
    }                                                                       \
  } while (0)

int main(void) {
  enum { M = 33, K = 17, N = 29, P = 7 };
  CHECK_TG(tg_init(NULL));
  tg_tensor A, B, C, AB, D;
  CHECK_TG(tg_tensor_alloc(&A, M, K, TG_F32));  /* (M, K) */
  CHECK_TG(tg_tensor_alloc(&B, N, K, TG_F32));  /* (N, K) */
  CHECK_TG(tg_tensor_alloc(&C, N, P, TG_F32));  /* (N, P) */
  CHECK_TG(tg_tensor_temp(&AB, M, N, TG_F32));  /* (M, N), no home node */
  CHECK_TG(tg_tensor_alloc(&D, M, P, TG_F32));  /* (M, P) */
  float *a = A.host, *b = B.host, *c = C.host;
  for (int i = 0; i < M * K; i++) a[i] = sinf((float)i);
  for (int i = 0; i < N * K; i++) b[i] = cosf((float)i);
  for (int i = 0; i < N * P; i++) c[i] = sinf(0.5f * (float)i);

  CHECK_TG(tg_gemm_insert(0, 1, 1.0f, A.handle, B.handle, 0.0f, AB.handle, TG_OVERWRITE, NULL));
  CHECK_TG(tg_gemm_insert(0, 0, 1.0f, AB.handle, C.handle, 0.0f, D.handle, TG_OVERWRITE, NULL));
  CHECK_TG(tg_act_fwd_insert(TG_ACT_RELU, D.handle, D.handle, NULL));
  tg_tensor_release(&AB); /* freed by StarPU after the second GEMM ran */

  float d[M * P];
  CHECK_TG(tg_tensor_read(&D, d));

  /* fused: the same inserts between tg_fuse_begin and tg_fuse_end; the
   * temporary released inside is freed after the fused task */
  CHECK_TG(tg_tensor_temp(&AB, M, N, TG_F32));
  CHECK_TG(tg_fuse_begin());
  CHECK_TG(tg_gemm_insert(0, 1, 1.0f, A.handle, B.handle, 0.0f, AB.handle, TG_OVERWRITE, NULL));
  CHECK_TG(tg_gemm_insert(0, 0, 1.0f, AB.handle, C.handle, 0.0f, D.handle, TG_OVERWRITE, NULL));
  CHECK_TG(tg_act_fwd_insert(TG_ACT_RELU, D.handle, D.handle, NULL));
  tg_tensor_release(&AB);
  CHECK_TG(tg_fuse_end(1));
  float fused[M * P];
  CHECK_TG(tg_tensor_read(&D, fused));
  int same = memcmp(d, fused, sizeof d) == 0;
  printf("fused into one task: %s\n", same ? "the same bits" : "DIFFERENT bits");
  double max_err = 0;
  for (int i = 0; i < M; i++)
    for (int p = 0; p < P; p++) {
      double acc = 0;
      for (int j = 0; j < N; j++) {
        double ab = 0;
        for (int k = 0; k < K; k++) ab += (double)a[i * K + k] * b[j * K + k];
        acc += ab * c[j * P + p];
      }
      acc = acc > 0 ? acc : 0;
      max_err = fmax(max_err, fabs(acc - d[i * P + p]) / (1 + fabs(acc)));
    }
  printf("relu((A B^T) C): max relative error vs float64 = %.2e\n", max_err);
  tg_tensor_free(&A);
  tg_tensor_free(&B);
  tg_tensor_free(&C);
  tg_tensor_free(&D);
  tg_shutdown();
  return max_err < 1e-4 && same ? 0 : 1;
}
