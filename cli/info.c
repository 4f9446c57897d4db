/*
 * taskgrad info: what this machine and this build run on, in four
 * sections (each a "name:" line, then indented "key: value" lines, so that
 * tests and scripts can read them):
 *   cpu:             the model name, family/model, cores, and the features
 *                    the GEMMs care about (AVX2, FMA, AVX-512, AVX512-BF16,
 *                    AMX);
 *   gemm libraries:  each back end of the CPU GEMM (gemm_libs.h), its
 *                    version and kernel set, and for OpenBLAS where the
 *                    kernel set came from (OPENBLAS_CORETYPE or OpenBLAS's
 *                    own pick for this CPU);
 *   gemm choice:     the back end of each shape class and its measured
 *                    GFLOP/s (gemm_choice.h: forced, cached or measured now),
 *                    and whether bf16 GEMMs run natively or widened;
 *   starpu:          StarPU's version and its compiled-in limits.
 * The bench commands print the one-line form (tg_cli_machine_line) in
 * their header.
 *
 * Design note: the features come from __builtin_cpu_supports (which also
 * checks that the OS saves the registers) where GCC knows the name, and
 * from cpuid leaf 7 for AVX512-BF16 and AMX, which GCC 12 does not name.
 * Nothing here starts StarPU: the GEMM choice is the same call tg_init's
 * start-up hook makes.
 */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>

#include "cli.h"
#include "taskgrad/gemm_choice.h"

typedef struct cpu_info {
  char model[256];
  unsigned family, model_id;
  long cores;
  int avx2, fma, avx512f, avx512bw, avx512vl, avx512dq, avx512_bf16, amx;
} cpu_info;

static void cpu_read(cpu_info *c) {
  memset(c, 0, sizeof *c);
  tg_cpu_model_name(c->model, sizeof c->model);
  c->cores = sysconf(_SC_NPROCESSORS_ONLN);
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, cx, d;
  if (__get_cpuid(1, &a, &b, &cx, &d)) {
    unsigned fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
    c->family = fam == 0xf ? fam + ((a >> 20) & 0xff) : fam;
    c->model_id = fam == 0x6 || fam == 0xf ? mod | ((a >> 12) & 0xf0) : mod;
  }
  __builtin_cpu_init();
  c->avx2 = __builtin_cpu_supports("avx2");
  c->fma = __builtin_cpu_supports("fma");
  c->avx512f = __builtin_cpu_supports("avx512f");
  c->avx512bw = __builtin_cpu_supports("avx512bw");
  c->avx512vl = __builtin_cpu_supports("avx512vl");
  c->avx512dq = __builtin_cpu_supports("avx512dq");
  if (__get_cpuid_count(7, 1, &a, &b, &cx, &d)) c->avx512_bf16 = c->avx512f && (a >> 5) & 1;
  if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) c->amx = (d >> 24) & 1; /* AMX-TILE */
#endif
}

static const char *yes_no(int v) { return v ? "yes" : "no"; }

/* where OpenBLAS's kernel set came from */
static void openblas_origin(char *out, size_t n) {
  const char *core = getenv("OPENBLAS_CORETYPE");
  const char *picked = getenv(TG_BLAS_PICKED_ENV);
  if (core && *core && picked && *picked)
    snprintf(out, n, "from OPENBLAS_CORETYPE=%s, set by taskgrad: OpenBLAS had picked %s "
             "for this CPU", core, picked);
  else if (core && *core)
    snprintf(out, n, "from OPENBLAS_CORETYPE=%s", core);
  else
    snprintf(out, n, "chosen by OpenBLAS for this CPU");
}

void tg_cli_machine_line(FILE *f) {
  cpu_info c;
  cpu_read(&c);
  char lib[TG_GEMM_NLIBS][512], gemm[512], origin[128];
  for (int l = 0; l < TG_GEMM_NLIBS; l++) tg_gemm_lib_describe(l, lib[l], sizeof lib[l]);
  openblas_origin(origin, sizeof origin);
  int maj = 0, min = 0, rel = 0;
  starpu_get_version(&maj, &min, &rel);
  fprintf(f, "machine: %s, %ld cores, %s; %s (%s); %s; %s; StarPU %d.%d.%d\n", c.model,
          c.cores,
          c.avx512_bf16 ? "AVX512-BF16"
          : c.avx512f   ? "AVX-512"
          : c.avx2      ? "AVX2"
                        : "no AVX2",
          lib[TG_GEMM_OPENBLAS], origin, lib[TG_GEMM_ONEDNN], lib[TG_GEMM_LIBXSMM], maj, min,
          rel);
  fprintf(f, "%s\n", tg_gemm_choice_summary(gemm, sizeof gemm));
}

static void info_usage(FILE *f) {
  fputs("usage: taskgrad info [flags]\n"
        "\n"
        "What this machine and build run on: the CPU and its features, each\n"
        "GEMM library with its version and kernel set, the library chosen for\n"
        "each GEMM shape class with its measured GFLOP/s, StarPU's version and\n"
        "limits.  The first run on a machine measures the libraries (about a\n"
        "second) and caches the choice (TG_GEMM_LIB or --gemm-lib forces one).\n"
        "\n"
        "  --gemm-lib NAME      openblas, onednn, libxsmm or auto (default:\n"
        "                       TG_GEMM_LIB or auto)\n",
        f);
}

int tg_cmd_info(int argc, char **argv) {
  const char *gemm_lib = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      info_usage(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--gemm-lib")) {
      tg_runtime_config rc = tg_runtime_config_default();
      tg_cli_runtime_flag(argc, argv, &i, &rc); /* validates the name */
      gemm_lib = rc.gemm_lib;
      continue;
    }
    tg_cli_die("info: unknown flag '%s' (see 'taskgrad info --help')", argv[i]);
  }
  /* the choice first: an unknown TG_GEMM_LIB stops here, before any output */
  if (tg_gemm_choose(gemm_lib, gemm_lib ? "forced by --gemm-lib" : NULL) < 0)
    tg_cli_die_last("choosing the GEMM library");

  cpu_info c;
  cpu_read(&c);
  printf("cpu:\n");
  printf("  model: %s\n", c.model);
  printf("  family/model: %u/%u\n", c.family, c.model_id);
  printf("  cores: %ld\n", c.cores);
  printf("  avx2: %s\n  fma: %s\n", yes_no(c.avx2), yes_no(c.fma));
  printf("  avx512f: %s\n  avx512bw: %s\n  avx512vl: %s\n  avx512dq: %s\n", yes_no(c.avx512f),
         yes_no(c.avx512bw), yes_no(c.avx512vl), yes_no(c.avx512dq));
  printf("  avx512_bf16: %s\n  amx: %s\n", yes_no(c.avx512_bf16), yes_no(c.amx));

  char desc[512], origin[128];
  printf("gemm libraries:\n");
  for (int l = 0; l < TG_GEMM_NLIBS; l++) {
    tg_gemm_lib_describe(l, desc, sizeof desc);
    if (l == TG_GEMM_OPENBLAS) {
      openblas_origin(origin, sizeof origin);
      printf("  %s: %s (%s)\n", tg_gemm_lib_name(l), desc, origin);
    } else {
      printf("  %s: %s\n", tg_gemm_lib_name(l), desc);
    }
  }

  const tg_gemm_choice *ch = tg_gemm_current_choice();
  printf("gemm choice:\n");
  printf("  how: %s%s%s\n", ch->how, ch->cache[0] ? ", " : "", ch->cache);
  for (int k = 0; k < TG_GEMM_NCLASSES; k++) {
    printf("  %s: %s", tg_gemm_class_name(k), tg_gemm_lib_name(ch->lib[k]));
    if (ch->gflops[k][ch->lib[k]] > 0) {
      printf(", %.1f GFLOP/s (", ch->gflops[k][ch->lib[k]]);
      for (int l = 0; l < TG_GEMM_NLIBS; l++)
        printf("%s%s %.1f", l ? ", " : "", tg_gemm_lib_name(l), ch->gflops[k][l]);
      printf(")");
    }
    printf("\n");
  }
  printf("  bf16: %s, %s", ch->bf16_native ? "native (oneDNN, AVX512-BF16)" : "widened to f32",
         ch->bf16_how);
  if (ch->bf16_gflops[0] > 0)
    printf(", %.1f GFLOP/s (widened %.1f, native %.1f)", ch->bf16_gflops[ch->bf16_native],
           ch->bf16_gflops[0], ch->bf16_gflops[1]);
  printf("\n");

  int maj = 0, min = 0, rel = 0;
  starpu_get_version(&maj, &min, &rel);
  printf("starpu:\n");
  printf("  version: %d.%d.%d\n", maj, min, rel);
  printf("  max CPU workers (STARPU_MAXCPUS): %d\n", STARPU_MAXCPUS);
  printf("  max buffers per task (STARPU_NMAXBUFS): %d\n", STARPU_NMAXBUFS);
#ifdef STARPU_USE_CUDA
  printf("  CUDA: yes\n");
#else
  printf("  CUDA: no\n");
#endif
#ifdef STARPU_USE_OPENCL
  printf("  OpenCL: yes\n");
#else
  printf("  OpenCL: no\n");
#endif
  return 0;
}
