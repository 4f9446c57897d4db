/*
 * taskgrad layer 1: GEMMs on oneDNN's matmul primitive,
 * C(m, n) = alpha op(A) op(B) (+ bias) + beta C, row-major:
 *  - native bf16 (tg_cpu_gemm_bf16): A and B in bf16, products and sums in
 *    fp32 (the AVX512-BF16 dot-product instruction, vdpbf16ps), C in f32 or
 *    bf16 (rounded once, after the whole k loop);
 *  - f32 (tg_cpu_matmul_onednn_f32): the oneDNN back end's forward class,
 *    X W^T, with the layer's bias added in the same pass (gemm.c).
 *
 * Design note
 * -----------
 * The widening path (gemm_lowp.c) converts both operands to f32 and runs
 * sgemm: on a CPU with AVX512-BF16 that wastes half of the multiplier's
 * width and all of the conversion's time.  oneDNN's matmul primitive runs
 * bf16 operands on its brgemm kernels there (oneDNN 2.6: "brg:avx512_core_bf16"),
 * reading our row-major operands in place: a transpose is only a stride
 * (src (m, k) strides {lda, 1} or {1, lda}; weights (k, n) {ldb, 1} or
 * {1, ldb}; dst (m, n) {ldc, 1}).  alpha is the primitive's output scale and
 * beta a sum post-op, so C = alpha AB + beta C in one pass.
 *
 * In f32, oneDNN's sgemm (dnnl_sgemm) and its matmul primitive are two
 * kernel families: for the step's X W^T shapes the primitive is as fast or
 * faster (124M's MLP projection, k = 3072, by a sixth), for the plain and
 * A^T products mostly slower (bench/results/2026-11-27-cpu-step.md), and
 * only the primitive adds a bias (a (1, n) f32 row broadcast over the rows,
 * added to the products before C is stored), which saves the forward a
 * pass over Z.
 *
 * A primitive is made for one shape, leading dimensions, alpha, beta, types
 * and bias, so each thread keeps the primitives it made (kCacheSize, least
 * recently used replaced): a training step has a few dozen distinct GEMMs
 * and runs them every step.  Per thread, because a primitive with the
 * library's scratchpad is not safe to run from two threads at once, and a
 * StarPU worker is one thread; the cache is freed when its thread ends
 * (a pthread key's destructor).  One thread each, as for the fp32 path
 * (gemm.c): the OpenMP ICV is set to 1 in each calling thread.
 *
 * Both entries return nonzero, having touched nothing, for a call they do
 * not run: bf16 without AVX512-BF16 (oneDNN's ISA below avx512_core_bf16)
 * or with the native path off, a primitive oneDNN declines or would run on
 * its reference code, or out of memory.  The caller then widens (bf16) or
 * takes another kernel (f32).  Degenerate sizes (m, n == 0; k == 0 or
 * alpha == 0) are the caller's, as in gemm_lowp.c and gemm.c.
 *
 * bf16 rounding differs from the widening path only in the order of the
 * fp32 sums (and vdpbf16ps flushes subnormal inputs and results to zero):
 * both are fp32 accumulations of exact products.  For one machine and one
 * back end the result is deterministic (one thread, fixed blocking per
 * shape).
 */
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul_onednn.h"
#include "taskgrad/precision_kernels.h"

void omp_set_num_threads(int n); /* libgomp's: see gemm.c */

enum { kCacheSize = 48 };

typedef struct mm_key {
  int transa, transb, m, n, k, lda, ldb, ldc;
  int ab_bf16, c_bf16, bias; /* operand types; bias: a (1, n) f32 row */
  float alpha, beta;
} mm_key;

typedef struct mm_entry {
  mm_key key;
  dnnl_primitive_t prim; /* NULL: an empty slot */
  dnnl_memory_t a, b, c, bias; /* the operands' descriptions; pointers set per call */
  unsigned long used;    /* the call count at its last use (least recent goes) */
} mm_entry;

typedef struct mm_cache {
  struct mm_cache *next, *prev; /* g_caches: every live thread's */
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  mm_entry e[kCacheSize];
  unsigned long calls;
} mm_cache;

static volatile int g_native; /* set by the codelets layer's choice */
static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
/* every thread's cache, so that a cache stays reachable from a global
 * (leak checkers do not all scan a thread's pthread keys; the main
 * thread's is never destroyed, it lives until exit) */
static pthread_mutex_t g_caches_lock = PTHREAD_MUTEX_INITIALIZER;
static mm_cache *g_caches;

static void entry_free(mm_entry *e) {
  if (e->prim) dnnl_primitive_destroy(e->prim);
  if (e->a) dnnl_memory_destroy(e->a);
  if (e->b) dnnl_memory_destroy(e->b);
  if (e->c) dnnl_memory_destroy(e->c);
  if (e->bias) dnnl_memory_destroy(e->bias);
  memset(e, 0, sizeof *e);
}

static void cache_free(void *p) {
  mm_cache *cache = p;
  if (!cache) return;
  pthread_mutex_lock(&g_caches_lock);
  if (cache->prev) cache->prev->next = cache->next;
  else if (g_caches == cache) g_caches = cache->next;
  if (cache->next) cache->next->prev = cache->prev;
  pthread_mutex_unlock(&g_caches_lock);
  for (int i = 0; i < kCacheSize; i++) entry_free(&cache->e[i]);
  if (cache->stream) dnnl_stream_destroy(cache->stream);
  if (cache->engine) dnnl_engine_destroy(cache->engine);
  free(cache);
}

static void key_make(void) { pthread_key_create(&g_key, cache_free); }

/* this thread's cache, NULL when it cannot be made */
static mm_cache *thread_cache(void) {
  if (pthread_once(&g_key_once, key_make) != 0) return NULL;
  mm_cache *cache = pthread_getspecific(g_key);
  if (cache) return cache;
  cache = calloc(1, sizeof *cache);
  if (!cache) return NULL;
  omp_set_num_threads(1); /* this thread's OpenMP ICV: no team of its own */
  if (dnnl_engine_create(&cache->engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&cache->stream, cache->engine, dnnl_stream_default_flags) !=
          dnnl_success ||
      pthread_setspecific(g_key, cache) != 0) {
    cache_free(cache);
    return NULL;
  }
  pthread_mutex_lock(&g_caches_lock);
  cache->next = g_caches;
  if (g_caches) g_caches->prev = cache;
  g_caches = cache;
  pthread_mutex_unlock(&g_caches_lock);
  return cache;
}

int tg_cpu_gemm_bf16_supported(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

void tg_cpu_gemm_bf16_set_native(int on) { g_native = on && tg_cpu_gemm_bf16_supported(); }
int tg_cpu_gemm_bf16_native(void) { return g_native; }

/* a memory object of a 2-D (rows, cols) matrix with these strides, no data */
static int md_memory(dnnl_memory_t *mem, dnnl_engine_t eng, dnnl_data_type_t dt,
                     int rows, int cols, int64_t s0, int64_t s1) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {rows, cols}, strides = {s0, s1};
  if (dnnl_memory_desc_init_by_strides(&md, 2, dims, dt, strides) != dnnl_success) return -1;
  return dnnl_memory_create(mem, &md, eng, DNNL_MEMORY_NONE) == dnnl_success ? 0 : -1;
}

static const dnnl_memory_desc_t *md_of(dnnl_memory_t mem) {
  const dnnl_memory_desc_t *md = NULL;
  return dnnl_memory_get_memory_desc(mem, &md) == dnnl_success ? md : NULL;
}

/* makes e's primitive for e->key; 0 on success (else e is left empty) */
static int entry_make(mm_entry *e, dnnl_engine_t eng) {
  const mm_key *k = &e->key;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_matmul_desc_t desc;
  const dnnl_data_type_t ab = k->ab_bf16 ? dnnl_bf16 : dnnl_f32;
  int ok =
      md_memory(&e->a, eng, ab, k->m, k->k, k->transa ? 1 : k->lda, k->transa ? k->lda : 1) ==
          0 &&
      md_memory(&e->b, eng, ab, k->k, k->n, k->transb ? 1 : k->ldb, k->transb ? k->ldb : 1) ==
          0 &&
      md_memory(&e->c, eng, k->c_bf16 ? dnnl_bf16 : dnnl_f32, k->m, k->n, k->ldc, 1) == 0 &&
      (!k->bias || md_memory(&e->bias, eng, dnnl_f32, 1, k->n, k->n, 1) == 0) &&
      dnnl_matmul_desc_init(&desc, md_of(e->a), md_of(e->b), k->bias ? md_of(e->bias) : NULL,
                            md_of(e->c)) == dnnl_success &&
      dnnl_primitive_attr_create(&attr) == dnnl_success;
  if (ok && k->alpha != 1.0f)
    ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
  if (ok && k->beta != 0.0f)
    ok = dnnl_post_ops_create(&po) == dnnl_success &&
         dnnl_post_ops_append_sum(po, k->beta) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
  ok = ok && dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL) == dnnl_success;
  if (ok) { /* oneDNN's reference code would be slower than the other paths */
    const char *impl = NULL;
    ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) ==
             dnnl_success &&
         impl && strncmp(impl, "ref", 3) != 0 &&
         dnnl_primitive_create(&e->prim, pd) == dnnl_success;
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) entry_free(e);
  return ok ? 0 : -1;
}

/* the cached primitive of key, made if needed; NULL when oneDNN declines */
static mm_entry *entry_get(mm_cache *cache, const mm_key *key) {
  mm_entry *victim = &cache->e[0];
  cache->calls++;
  for (int i = 0; i < kCacheSize; i++) {
    mm_entry *e = &cache->e[i];
    if (e->prim && memcmp(&e->key, key, sizeof *key) == 0) {
      e->used = cache->calls;
      return e;
    }
    if (!e->prim || (victim->prim && e->used < victim->used)) victim = e;
  }
  entry_free(victim);
  victim->key = *key;
  if (entry_make(victim, cache->engine) != 0) return NULL;
  victim->used = cache->calls;
  return victim;
}

/* runs key's primitive on A, B, bias, C; nonzero (nothing touched) when
 * oneDNN declines the call */
static int matmul_run(const mm_key *key, const void *A, const void *B, const float *bias,
                      void *C) {
  mm_cache *cache = thread_cache();
  if (!cache) return -1;
  mm_entry *e = entry_get(cache, key);
  if (!e) return -1;
  if (dnnl_memory_set_data_handle(e->a, (void *)A) != dnnl_success ||
      dnnl_memory_set_data_handle(e->b, (void *)B) != dnnl_success ||
      dnnl_memory_set_data_handle(e->c, C) != dnnl_success ||
      (key->bias && dnnl_memory_set_data_handle(e->bias, (void *)bias) != dnnl_success))
    return -1;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a},
                             {DNNL_ARG_WEIGHTS, e->b},
                             {DNNL_ARG_DST, e->c},
                             {DNNL_ARG_BIAS, e->bias}};
  /* a failure here may have written part of C: not a call to hand back */
  if (dnnl_primitive_execute(e->prim, cache->stream, key->bias ? 4 : 3, args) !=
          dnnl_success ||
      dnnl_stream_wait(cache->stream) != dnnl_success) {
    fprintf(stderr, "taskgrad: fatal: oneDNN %s matmul (%d x %d x %d) failed to run\n",
            key->ab_bf16 ? "bf16" : "f32", key->m, key->n, key->k);
    abort();
  }
  return 0;
}

/* the key of a call, zeroed first: keys are compared with memcmp */
static mm_key key_of(int transa, int transb, int m, int n, int k, float alpha, int lda,
                     int ldb, float beta, int ldc, int ab_bf16, int c_bf16, int bias) {
  mm_key key;
  memset(&key, 0, sizeof key);
  key.transa = !!transa;
  key.transb = !!transb;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = lda;
  key.ldb = ldb;
  key.ldc = ldc;
  key.ab_bf16 = ab_bf16;
  key.c_bf16 = !!c_bf16;
  key.bias = bias;
  key.alpha = alpha;
  key.beta = beta;
  return key;
}

int tg_cpu_gemm_bf16(int transa, int transb, int m, int n, int k, float alpha,
                     const uint16_t *A, int lda, // (m, lda) or, transposed, (k, lda)
                     const uint16_t *B, int ldb, // (k, ldb) or, transposed, (n, ldb)
                     float beta, int c_bf16,
                     void *C, int ldc)           // (m, ldc), f32 or bf16
{
  if (!g_native || m <= 0 || n <= 0 || k <= 0 || alpha == 0.0f) return -1;
  mm_key key = key_of(transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, 1, c_bf16, 0);
  return matmul_run(&key, A, B, NULL, C);
}

int tg_cpu_matmul_onednn_f32(int transa, int transb, int m, int n, int k, float alpha,
                             const float *A, int lda, // (m, lda) or, transposed, (k, lda)
                             const float *B, int ldb, // (k, ldb) or, transposed, (n, ldb)
                             const float *bias,       // (n) or NULL
                             float beta, float *C, int ldc) // (m, ldc)
{
  if (m <= 0 || n <= 0 || k <= 0 || alpha == 0.0f) return -1;
  mm_key key = key_of(transa, transb, m, n, k, alpha, lda, ldb, beta, ldc, 0, 0, bias != NULL);
  return matmul_run(&key, A, B, bias, C);
}
