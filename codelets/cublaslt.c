/*
 * The CUDA workers' cuBLASLt handles, for the codelets that run their
 * 16-bit GEMMs on cuBLASLt (codelets/linear.c, linear_bwd.c; launchers in
 * kernels/cuda/gemm_lt.c).
 *
 * Design note
 * -----------
 * StarPU 1.3 gives each CUDA worker a cuBLAS handle bound to its stream
 * but no cuBLASLt one, so each worker thread creates its own on first use
 * (cublasLtCreate is host work; the stream is passed per call) and
 * tg_shutdown destroys them all.  A handle that cannot be created (the
 * library failed to initialise) makes tg_cublaslt_handle return NULL for
 * that thread from then on, and the codelets take their cuBLAS path: the
 * choice between the two is this, plus the launchers' NOT_SUPPORTED for a
 * problem cuBLASLt cannot do.  TG_CUBLASLT=0 in the environment turns the
 * cuBLASLt path off (to compare the two on one GPU).
 */
#include <stdlib.h>
#include <string.h>

#include "codelet_common.h"
#include "hooks.h"

#ifdef TG_HAVE_CUDA
#include "taskgrad/kernels_cuda_precision.h"

#define TG_LT_MAX_HANDLES 64 /* worker threads that may hold one */

static starpu_pthread_mutex_t g_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;
static cublasLtHandle_t g_handles[TG_LT_MAX_HANDLES];
static int g_nhandles;
static __thread cublasLtHandle_t t_handle;
static __thread int t_state; /* 0: not tried, 1: t_handle is ours, -1: none */

static void tg_cublaslt_destroy_all(void) {
  STARPU_PTHREAD_MUTEX_LOCK(&g_lock);
  for (int i = 0; i < g_nhandles; i++) cublasLtDestroy(g_handles[i]);
  g_nhandles = 0;
  STARPU_PTHREAD_MUTEX_UNLOCK(&g_lock);
}

/* registered before main, on one thread (tg_at_shutdown is not for worker
 * threads); destroys nothing until a worker has made a handle */
__attribute__((constructor)) static void tg_cublaslt_register(void) {
  tg_at_shutdown(tg_cublaslt_destroy_all);
}

static int tg_cublaslt_off(void) {
  const char *e = getenv("TG_CUBLASLT");
  return e && strcmp(e, "0") == 0;
}

cublasLtHandle_t tg_cublaslt_handle(void) {
  if (t_state == 0) {
    t_state = -1;
    cublasLtHandle_t h = NULL;
    if (!tg_cublaslt_off() && cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS) {
      STARPU_PTHREAD_MUTEX_LOCK(&g_lock);
      if (g_nhandles < TG_LT_MAX_HANDLES) {
        g_handles[g_nhandles++] = h;
        t_handle = h;
        t_state = 1;
      }
      STARPU_PTHREAD_MUTEX_UNLOCK(&g_lock);
      if (t_state != 1) cublasLtDestroy(h);
    }
  }
  return t_state == 1 ? t_handle : NULL;
}
#endif
