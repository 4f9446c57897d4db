/*
 * The CPU GEMM's back end per shape class (gemm_choice.h): forced by name,
 * or measured once and cached.
 *
 * Why here: the back ends and their table are kernels (kernels/cpu/gemm.c,
 * pure); the base starts the runtime but calls no layer above it.  This
 * file registers a start-up hook with the base (tg_at_init, src/hooks.h)
 * from a constructor, so tg_init fills the kernels' table before StarPU
 * starts, for the CLI and for any program that links the library.
 *
 * The probe: for each class the GPT step's own GEMMs of that class (GPT-2
 * 124M at B4 T64, 128 rows per micro-batch task: the qkv, MLP-up and
 * MLP-down layers, whose shapes differ most; and d4's 1024 rows at C 256;
 * the classifier a 2048-column slice of the vocabulary): one square shape
 * per class had picked OpenBLAS for a forward that oneDNN ran 18% faster at
 * the step's shapes (bench/results/2026-11-26-cpu-bf16-native.md).  Each
 * library is run once to warm up (JIT, page
 * faults), then the libraries in turn, at least 5 rounds and 60 ms, the
 * best time of each kept.  The fastest wins if it beats OpenBLAS by 3%
 * (kMargin), else OpenBLAS stays: the probe's noise on a shared machine is
 * of that order, and a call libxsmm cannot do is timed on its OpenBLAS
 * fallback (the forward's transposed B), a tie that must not switch.  One
 * thread: StarPU runs one kernel per core.  It takes a second or two, once
 * per machine and library versions.
 *
 * The cache: one text file, written atomically (src/atomic_file.c), its
 * first line the key (format, CPU model, library versions, the value of
 * OPENBLAS_CORETYPE), then one line per class: its name, the chosen
 * library and each library's GFLOP/s.  Any mismatch or parse failure means
 * measuring again; a directory that cannot be created or written means no
 * cache, silently (a read-only home must not stop training).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "atomic_file.h"
#include "check.h"
#include "hooks.h"
#include "taskgrad/clock.h"
#include "taskgrad/gemm_choice.h"
#include "taskgrad/precision_kernels.h"

#define CACHE_FORMAT "taskgrad-gemm-choice 3"

static tg_gemm_choice g_choice;

const tg_gemm_choice *tg_gemm_current_choice(void) { return &g_choice; }

static void cache_key(char *out, size_t n) {
  char cpu[256], v[TG_GEMM_NLIBS][256];
  tg_cpu_model_name(cpu, sizeof cpu);
  for (int l = 0; l < TG_GEMM_NLIBS; l++) tg_gemm_lib_version(l, v[l], sizeof v[l]);
  const char *core = getenv("OPENBLAS_CORETYPE");
  snprintf(out, n, "%s|cpu=%s|openblas=%s|onednn=%s|libxsmm=%s|OPENBLAS_CORETYPE=%s",
           CACHE_FORMAT, cpu, v[TG_GEMM_OPENBLAS], v[TG_GEMM_ONEDNN], v[TG_GEMM_LIBXSMM],
           core ? core : "(unset)");
}

int tg_gemm_cache_path(char *out, size_t n) {
  char saved[1024]; /* no cache is no error: keep the caller's message */
  snprintf(saved, sizeof saved, "%s", tg_last_error());
  char dir[4096];
  if (tg_cache_dir(dir, sizeof dir) != 0) {
    tg_fail(EIO, "%s", saved);
    return -1;
  }
  int w = snprintf(out, n, "%s/gemm-choice.txt", dir);
  return w > 0 && (size_t)w < n ? 0 : -1;
}

/* ---- the probe ------------------------------------------------------------- */

typedef struct probe_gemm {
  int ta, tb, m, n, k;
  float alpha, beta;
} probe_gemm;

/* each class's GEMMs (the classifier: its chunk's three) */
enum { kProbeN = 4 };
static const probe_gemm kProbe[TG_GEMM_NCLASSES][kProbeN] = {
    /* X W^T: qkv, MLP up, MLP down at 128 rows; d4's MLP up */
    [TG_GEMM_FORWARD] = {{0, 1, 128, 2304, 768, 1.0f, 0.0f},
                         {0, 1, 128, 3072, 768, 1.0f, 0.0f},
                         {0, 1, 128, 768, 3072, 1.0f, 0.0f},
                         {0, 1, 1024, 1024, 256, 1.0f, 0.0f}},
    /* dY W: the same layers' input gradients */
    [TG_GEMM_DATA_GRAD] = {{0, 0, 128, 768, 2304, 1.0f, 0.0f},
                           {0, 0, 128, 768, 3072, 1.0f, 0.0f},
                           {0, 0, 128, 3072, 768, 1.0f, 0.0f},
                           {0, 0, 1024, 256, 1024, 1.0f, 0.0f}},
    /* dW += dY^T X */
    [TG_GEMM_WEIGHT_GRAD] = {{1, 0, 2304, 768, 128, 1.0f, 1.0f},
                             {1, 0, 3072, 768, 128, 1.0f, 1.0f},
                             {1, 0, 768, 3072, 128, 1.0f, 1.0f},
                             {1, 0, 1024, 256, 1024, 1.0f, 1.0f}},
    [TG_GEMM_CLASSIFIER] = {{0, 1, 256, 2048, 768, 1.0f, 0.0f},
                            {0, 0, 256, 768, 2048, 0.5f, 0.0f},
                            {1, 0, 2048, 768, 256, 0.5f, 1.0f}},
};

/* how much faster than OpenBLAS another library must be to be chosen */
static const double kMargin = 0.03;

/* seconds of one pass over a class's GEMMs on lib */
static double probe_once(tg_gemm_lib lib, tg_gemm_class cls, const probe_gemm *g, float *A,
                         float *B, float *C) {
  double t0 = tg_monotonic_us();
  for (int i = 0; i < kProbeN && g[i].m; i++) {
    const probe_gemm *p = &g[i];
    /* compact operands: A (m, k) or (k, m), B (k, n) or (n, k), C (m, n) */
    tg_cpu_gemm_on(lib, cls, p->ta, p->tb, p->m, p->n, p->k, p->alpha, A, p->ta ? p->m : p->k,
                   B, p->tb ? p->k : p->n, p->beta, C, p->n);
  }
  return (tg_monotonic_us() - t0) * 1e-6;
}

/* the largest operand, in elements, of the first `per` GEMMs of the first
 * `classes` classes */
static size_t probe_most(int classes, int per) {
  size_t most = 0;
  for (int c = 0; c < classes; c++)
    for (int i = 0; i < per && kProbe[c][i].m; i++) {
      const probe_gemm *p = &kProbe[c][i];
      size_t s[3] = {(size_t)p->m * p->k, (size_t)p->k * p->n, (size_t)p->m * p->n};
      for (int j = 0; j < 3; j++) most = s[j] > most ? s[j] : most;
    }
  return most;
}

static int probe(tg_gemm_choice *ch) {
  size_t most = probe_most(TG_GEMM_NCLASSES, kProbeN);
  float *buf = malloc(3 * most * sizeof(float));
  if (!buf) return tg_fail(ENOMEM, "gemm probe: out of memory");
  float *A = buf, *B = buf + most, *C = buf + 2 * most;
  /* one thread, as tg_init sets it for the workers (the probe may run
   * before that, or without tg_init: taskgrad info) */
  openblas_set_num_threads(1);
  for (size_t i = 0; i < 3 * most; i++) buf[i] = (float)((i * 7919u) % 1000) * 1e-3f - 0.5f;
  for (int c = 0; c < TG_GEMM_NCLASSES; c++) {
    double flops = 0;
    for (int i = 0; i < kProbeN && kProbe[c][i].m; i++)
      flops += 2.0 * kProbe[c][i].m * kProbe[c][i].n * kProbe[c][i].k;
    double t[TG_GEMM_NLIBS], spent = 0;
    for (int l = 0; l < TG_GEMM_NLIBS; l++) {
      probe_once(l, (tg_gemm_class)c, kProbe[c], A, B, C); /* warm: JIT, page faults */
      t[l] = 1e30;
    }
    /* the libraries in turn, round after round, so that a change of load
     * hits them alike */
    for (int r = 0; r < 5 || (spent < 0.06 && r < 50); r++)
      for (int l = 0; l < TG_GEMM_NLIBS; l++) {
        double s = probe_once(l, (tg_gemm_class)c, kProbe[c], A, B, C);
        spent += s;
        t[l] = s < t[l] ? s : t[l];
      }
    int best = TG_GEMM_OPENBLAS;
    for (int l = 0; l < TG_GEMM_NLIBS; l++) ch->gflops[c][l] = flops / t[l] * 1e-9;
    for (int l = 0; l < TG_GEMM_NLIBS; l++)
      if (ch->gflops[c][l] > ch->gflops[c][best]) best = l;
    /* another library only when it is clearly faster than OpenBLAS (the
     * default, and what a library falls back to for the calls it cannot
     * do): within the probe's noise, OpenBLAS stays */
    if (ch->gflops[c][best] < ch->gflops[c][TG_GEMM_OPENBLAS] * (1 + kMargin))
      best = TG_GEMM_OPENBLAS;
    ch->lib[c] = best;
  }
  free(buf);
  return 0;
}

/* bf16 operands at the forward, data- and weight-gradient probe shapes,
 * widened (the fp32 back ends as chosen) and native, in turn as above;
 * native only when it is clearly faster */
static int probe_bf16(tg_gemm_choice *ch) {
  size_t most = probe_most(TG_GEMM_CLASSIFIER, 1);
  size_t work = 0;
  for (int c = 0; c < TG_GEMM_CLASSIFIER; c++) {
    size_t w = tg_cpu_gemm_lowp_work_floats(kProbe[c][0].m, kProbe[c][0].n, kProbe[c][0].k);
    work = w > work ? w : work;
  }
  uint16_t *ab = malloc(2 * most * sizeof(uint16_t));
  float *cw = malloc((most + work) * sizeof(float));
  if (!ab || !cw) {
    free(ab);
    free(cw);
    return tg_fail(ENOMEM, "gemm probe: out of memory");
  }
  for (size_t i = 0; i < 2 * most; i++)
    ab[i] = tg_f32_to_bf16((float)((i * 7919u) % 1000) * 1e-3f - 0.5f);
  double flops = 0, t[2] = {1e30, 1e30}, spent = 0;
  for (int c = 0; c < TG_GEMM_CLASSIFIER; c++)
    flops += 2.0 * kProbe[c][0].m * kProbe[c][0].n * kProbe[c][0].k;
  for (int r = -1; r < 5 || (spent < 0.06 && r < 50); r++) /* r = -1: warm */
    for (int native = 0; native < 2; native++) {
      tg_cpu_gemm_bf16_set_native(native);
      double t0 = tg_monotonic_us();
      for (int c = 0; c < TG_GEMM_CLASSIFIER; c++) {
        const probe_gemm *p = &kProbe[c][0];
        tg_cpu_gemm_lowp(TG_BF16, p->ta, p->tb, p->m, p->n, p->k, p->alpha, ab,
                         p->ta ? p->m : p->k, ab + most, p->tb ? p->k : p->n, p->beta,
                         TG_F32, cw, p->n, cw + most);
      }
      double sec = (tg_monotonic_us() - t0) * 1e-6;
      if (r < 0) continue;
      spent += sec;
      t[native] = sec < t[native] ? sec : t[native];
    }
  for (int i = 0; i < 2; i++) ch->bf16_gflops[i] = flops / t[i] * 1e-9;
  ch->bf16_native = ch->bf16_gflops[1] > ch->bf16_gflops[0] * (1 + kMargin);
  free(ab);
  free(cw);
  return 0;
}

/* ---- the cache ------------------------------------------------------------- */

static int cache_read(const char *path, const char *key, tg_gemm_choice *ch) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[2048];
  int ok = fgets(line, sizeof line, f) != NULL;
  if (ok) {
    line[strcspn(line, "\n")] = '\0';
    ok = strcmp(line, key) == 0;
  }
  for (int c = 0; ok && c < TG_GEMM_NCLASSES; c++) {
    char cls[32], lib[32];
    double g[TG_GEMM_NLIBS];
    ok = fgets(line, sizeof line, f) &&
         sscanf(line, "%31s %31s %lf %lf %lf", cls, lib, &g[0], &g[1], &g[2]) == 5 &&
         strcmp(cls, tg_gemm_class_name(c)) == 0 && tg_gemm_lib_parse(lib) >= 0;
    if (ok) {
      ch->lib[c] = tg_gemm_lib_parse(lib);
      for (int l = 0; l < TG_GEMM_NLIBS; l++) ch->gflops[c][l] = g[l];
    }
  }
  char mode[32];
  ok = ok && fgets(line, sizeof line, f) &&
       sscanf(line, "bf16 %31s %lf %lf", mode, &ch->bf16_gflops[0], &ch->bf16_gflops[1]) ==
           3 &&
       (strcmp(mode, "native") == 0 || strcmp(mode, "widen") == 0);
  if (ok) ch->bf16_native = strcmp(mode, "native") == 0;
  fclose(f);
  return ok ? 0 : -1;
}

/* best effort: a failure leaves no file and no message */
static int cache_write(const char *path, const char *key, const tg_gemm_choice *ch) {
  char text[4096];
  int w = snprintf(text, sizeof text, "%s\n", key);
  for (int c = 0; c < TG_GEMM_NCLASSES && w > 0 && (size_t)w < sizeof text; c++)
    w += snprintf(text + w, sizeof text - w, "%s %s %.17g %.17g %.17g\n",
                  tg_gemm_class_name(c), tg_gemm_lib_name(ch->lib[c]),
                  ch->gflops[c][0], ch->gflops[c][1], ch->gflops[c][2]);
  if (w > 0 && (size_t)w < sizeof text)
    w += snprintf(text + w, sizeof text - w, "bf16 %s %.17g %.17g\n",
                  ch->bf16_native ? "native" : "widen", ch->bf16_gflops[0],
                  ch->bf16_gflops[1]);
  if (w <= 0 || (size_t)w >= sizeof text) return -1;
  char saved[1024]; /* the caller's message: a failure here sets none */
  snprintf(saved, sizeof saved, "%s", tg_last_error());
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  tg_atomic_file af = {0};
  int rc = -1;
  if ((slash && tg_make_dirs(dir) != 0) || tg_atomic_open(&af, path) != 0)
    rc = -1;
  else if (tg_atomic_write(&af, text, (size_t)w) != 0)
    tg_atomic_abort(&af);
  else
    rc = tg_atomic_commit(&af);
  if (rc != 0) tg_fail(EIO, "%s", saved);
  return rc;
}

/* ---- the choice ------------------------------------------------------------ */

int tg_gemm_choose(const char *name, const char *how) {
  const char *from = how ? how : "forced by the caller";
  if (!name || !*name) {
    name = getenv("TG_GEMM_LIB");
    from = "forced by TG_GEMM_LIB";
    if (!name || !*name) name = "auto";
  }
  tg_gemm_choice ch = {.made = 1};
  const char *bf16 = getenv("TG_GEMM_BF16");
  if (!bf16 || !*bf16) bf16 = "auto";
  if (strcmp(bf16, "auto") != 0 && strcmp(bf16, "native") != 0 && strcmp(bf16, "widen") != 0)
    return tg_fail(EINVAL, "unknown TG_GEMM_BF16 '%s': use native, widen or auto", bf16);
  const int bf16_auto = strcmp(bf16, "auto") == 0;
  if (strcmp(name, "auto") != 0) {
    int lib = tg_gemm_lib_parse(name);
    if (lib < 0 || strcmp(name, tg_gemm_lib_name(lib)) != 0)
      return tg_fail(EINVAL, "unknown GEMM library '%s' (%s): use openblas, onednn, "
                             "libxsmm or auto", name, from);
    for (int c = 0; c < TG_GEMM_NCLASSES; c++) ch.lib[c] = lib;
    snprintf(ch.how, sizeof ch.how, "%s", from);
    if (bf16_auto && tg_cpu_gemm_bf16_supported()) { /* measured, not cached */
      for (int c = 0; c < TG_GEMM_NCLASSES; c++) tg_cpu_gemm_set_lib(c, ch.lib[c]);
      TG_TRY(probe_bf16(&ch));
    }
  } else {
    char key[2048];
    cache_key(key, sizeof key);
    int have_path = tg_gemm_cache_path(ch.cache, sizeof ch.cache) == 0;
    if (!have_path) ch.cache[0] = '\0';
    if (have_path && cache_read(ch.cache, key, &ch) == 0) {
      snprintf(ch.how, sizeof ch.how, "measured, from the cache");
    } else {
      TG_TRY(probe(&ch));
      for (int c = 0; c < TG_GEMM_NCLASSES; c++) tg_cpu_gemm_set_lib(c, ch.lib[c]);
      if (tg_cpu_gemm_bf16_supported()) TG_TRY(probe_bf16(&ch));
      int cached = have_path && cache_write(ch.cache, key, &ch) == 0;
      if (!cached) ch.cache[0] = '\0';
      snprintf(ch.how, sizeof ch.how, "measured now%s", cached ? ", cached" : "");
    }
  }
  for (int c = 0; c < TG_GEMM_NCLASSES; c++) tg_cpu_gemm_set_lib(c, ch.lib[c]);
  if (!tg_cpu_gemm_bf16_supported()) {
    ch.bf16_native = 0;
    snprintf(ch.bf16_how, sizeof ch.bf16_how, "widened: no AVX512-BF16 (oneDNN ISA)");
  } else if (!bf16_auto) {
    ch.bf16_native = strcmp(bf16, "native") == 0;
    ch.bf16_gflops[0] = ch.bf16_gflops[1] = 0; /* not this choice's measure */
    snprintf(ch.bf16_how, sizeof ch.bf16_how, "forced by TG_GEMM_BF16");
  } else {
    snprintf(ch.bf16_how, sizeof ch.bf16_how, "measured");
  }
  tg_cpu_gemm_bf16_set_native(ch.bf16_native);
  g_choice = ch;
  return 0;
}

char *tg_gemm_choice_summary(char *out, size_t n) {
  const tg_gemm_choice *ch = &g_choice;
  if (!ch->made) {
    snprintf(out, n, "gemm: openblas (no choice made)");
    return out;
  }
  size_t w = (size_t)snprintf(out, n, "gemm:");
  for (int c = 0; c < TG_GEMM_NCLASSES && w < n; c++) {
    double g = ch->gflops[c][ch->lib[c]];
    if (g > 0)
      w += (size_t)snprintf(out + w, n - w, " %s=%s(%.0f GF/s)", tg_gemm_class_name(c),
                            tg_gemm_lib_name(ch->lib[c]), g);
    else
      w += (size_t)snprintf(out + w, n - w, " %s=%s", tg_gemm_class_name(c),
                            tg_gemm_lib_name(ch->lib[c]));
  }
  if (w < n)
    w += (size_t)snprintf(out + w, n - w, " bf16=%s", ch->bf16_native ? "native" : "widened");
  if (w < n && ch->bf16_gflops[ch->bf16_native] > 0)
    w += (size_t)snprintf(out + w, n - w, "(%.0f GF/s)", ch->bf16_gflops[ch->bf16_native]);
  if (w < n) snprintf(out + w, n - w, " [%s]", ch->how);
  return out;
}

static int gemm_init_hook(const tg_runtime_config *cfg) {
  return tg_gemm_choose(cfg->gemm_lib, "forced by the program (--gemm-lib)");
}

__attribute__((constructor)) static void gemm_choice_register(void) {
  tg_at_init(gemm_init_hook);
}
