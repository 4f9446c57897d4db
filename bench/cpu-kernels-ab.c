/*
 * A/B of two builds' CPU kernels in one process, call by call:
 *   cpu_kernels_ab LIB_A LIB_B [--reps N] [--rows R] [--vocab V] [--params P]
 * (LIB_x: a build's lib/libtaskgrad.so; defaults: the 124M classifier's
 * 128 x 50257 softmax, AdamW over the 38.6M-float tied embedding, 15 reps).
 *
 * Why: on a machine shared with other jobs, two runs a minute apart see
 * different loads, and a 30% change hides in the noise of whole steps.  Here
 * both libraries are loaded side by side (RTLD_LOCAL | RTLD_DEEPBIND, so each
 * resolves its own kernels) and their calls alternate A, B, A, B on the same
 * inputs, so a load change hits both alike.  Prints, per kernel, the median
 * and fastest call of each and their ratios A / B (above 1: B is faster).
 *
 * Kernels: tg_cpu_softmax_xent (the classifier's softmax, not in place, so
 * every call sees the same logits) and tg_cpu_adamw.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe_common.h"
typedef void (*softmax_xent_fn)(int rows, int cols, const float *logits, int ldl,
                                const int32_t *labels, float scale, float *dlogits, int ldd,
                                float *loss_acc);
typedef void (*adamw_fn)(size_t n, float *w, const float *grad, float *m, float *v, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float bc1,
                         float bc2, float grad_scale);

enum { MAX_REPS = 101 };

typedef struct build {
  softmax_xent_fn softmax_xent;
  adamw_fn adamw;
  double softmax_s[MAX_REPS], adamw_s[MAX_REPS];
} build;

static void *symbol(void *lib, const char *path, const char *name) {
  void *f = dlsym(lib, name);
  if (!f) {
    fprintf(stderr, "cpu_kernels_ab: error: %s has no %s\n", path, name);
    exit(2);
  }
  return f;
}

static void load(build *b, const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!lib) {
    fprintf(stderr, "cpu_kernels_ab: error: cannot load %s: %s\n", path, dlerror());
    exit(2);
  }
  b->softmax_xent = (softmax_xent_fn)symbol(lib, path, "tg_cpu_softmax_xent");
  b->adamw = (adamw_fn)symbol(lib, path, "tg_cpu_adamw");
}

static long positive(const char *flag, const char *text, long max) {
  char *end;
  errno = 0;
  long v = text ? strtol(text, &end, 10) : 0;
  if (!text || errno || *end || v < 1 || v > max) {
    fprintf(stderr, "cpu_kernels_ab: error: %s wants an integer in [1, %ld]\n", flag, max);
    exit(2);
  }
  return v;
}

static float *alloc_floats(size_t n) {
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fputs("cpu_kernels_ab: error: out of memory\n", stderr);
    exit(1);
  }
  return p;
}

static void summary(const char *name, double *a, double *b, int reps) {
  qsort(a, (size_t)reps, sizeof *a, probe_by_value);
  qsort(b, (size_t)reps, sizeof *b, probe_by_value);
  double am = a[reps / 2], bm = b[reps / 2];
  printf("%-26s A median %8.2f ms best %8.2f | B median %8.2f ms best %8.2f | "
         "A/B median %.2f best %.2f\n",
         name, am * 1e3, a[0] * 1e3, bm * 1e3, b[0] * 1e3, am / bm, a[0] / b[0]);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fputs("usage: cpu_kernels_ab LIB_A LIB_B [--reps N] [--rows R] [--vocab V] "
          "[--params P]\n", stderr);
    return 2;
  }
  long reps = 15, rows = 128, vocab = 50257, params = 50257L * 768;
  for (int i = 3; i < argc; i += 2) {
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--reps")) reps = positive("--reps", value, MAX_REPS);
    else if (!strcmp(argv[i], "--rows")) rows = positive("--rows", value, 1 << 20);
    else if (!strcmp(argv[i], "--vocab")) vocab = positive("--vocab", value, 1 << 20);
    else if (!strcmp(argv[i], "--params")) params = positive("--params", value, 1L << 32);
    else {
      fprintf(stderr, "cpu_kernels_ab: error: unknown flag '%s'\n", argv[i]);
      return 2;
    }
  }
  static build ab[2];
  load(&ab[0], argv[1]);
  load(&ab[1], argv[2]);

  size_t nl = (size_t)rows * (size_t)vocab, np = (size_t)params;
  float *logits = alloc_floats(nl), *dlogits = alloc_floats(nl);
  int32_t *labels = malloc(sizeof *labels * (size_t)rows);
  if (!labels) return 1;
  for (size_t i = 0; i < nl; i++) logits[i] = (float)((i * 2654435761u) % 1000) * 0.01f - 5.0f;
  for (long r = 0; r < rows; r++) labels[r] = (int32_t)((r * 391) % vocab);
  float *w = alloc_floats(np), *g = alloc_floats(np), *m = alloc_floats(np),
        *v = alloc_floats(np);
  for (size_t i = 0; i < np; i++) {
    w[i] = 0.01f * (float)(i % 100);
    g[i] = 0.001f * (float)(i % 77);
    m[i] = 0.0f;
    v[i] = 1e-4f;
  }
  for (long r = 0; r < reps; r++)
    for (int k = 0; k < 2; k++) {
      float loss = 0.0f;
      double t0 = probe_now_s();
      ab[k].softmax_xent((int)rows, (int)vocab, logits, (int)vocab, labels, 1.0f, dlogits,
                         (int)vocab, &loss);
      double t1 = probe_now_s();
      ab[k].adamw(np, w, g, m, v, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.3f, 1.0f);
      ab[k].softmax_s[r] = t1 - t0;
      ab[k].adamw_s[r] = probe_now_s() - t1;
    }
  char name[64];
  snprintf(name, sizeof name, "softmax_xent %ldx%ld", rows, vocab);
  summary(name, ab[0].softmax_s, ab[1].softmax_s, (int)reps);
  snprintf(name, sizeof name, "adamw %ld floats", params);
  summary(name, ab[0].adamw_s, ab[1].adamw_s, (int)reps);
  return 0;
}
