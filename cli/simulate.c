/*
 * taskgrad simulate gpt|mlp --platform NAME --gpus N (issue 13): the real
 * graph builders on simulated GPUs, through StarPU's SimGrid mode (a build
 * configured with -DTG_SIMGRID=ON).
 *
 * A platform NAME is four files in platforms/ (TG_PLATFORM_DIR overrides):
 * NAME.platform.v4.xml, NAME.latency, NAME.bandwidth (what StarPU reads for
 * host NAME) and NAME.roofline (our peak rates).  A run links them into a
 * private perfmodel directory (STARPU_PERF_MODEL_DIR, with
 * STARPU_HOSTNAME=NAME), together with the codelets/ of --perfmodels DIR
 * when given: calibrated history files from a real machine, which then take
 * precedence over the roofline (codelets/sim_cost.c).  A platform whose
 * roofline file names a `history` manifest (platforms/h100.history) ships
 * such histories: without --perfmodels or --cost, a run takes them (--cost
 * calibrated), each codelet's only while the sources it was measured with
 * are unchanged (prepare_history).
 *
 * Lists (--gpus 1,2,4,8 or --sched A,B) run each combination in a child
 * process of this binary (SimGrid's engine runs once per process), then
 * print a table and write a CSV and a gnuplot PNG chart.
 *
 * Flags are checked, and platform files looked up, before anything starts,
 * in every build: a build without SimGrid refuses only once they are valid.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "simulate.h"

#define MAX_LIST 16
#define MAX_PASS 96

static void simulate_usage(void) {
  fputs("usage: taskgrad simulate gpt|mlp --platform NAME [flags]\n"
       "\n"
       "Runs the training step on a simulated machine (StarPU + SimGrid; needs a\n"
       "build configured with -DTG_SIMGRID=ON).  Task times come from calibrated\n"
       "histories where they match (the H100 platforms ship some; --perfmodels),\n"
       "otherwise from a model of each task's flops and bytes: GPU figures are\n"
       "predictions until calibrated on real hardware.\n"
       "\n"
       "  --platform NAME      platforms/NAME.* (h100x1, h100x2, h100x4, h100x8, ...;\n"
       "                       TG_PLATFORM_DIR overrides the directory)\n"
       "  --gpus N|LIST        simulated GPUs (default 1; 0 with --ncpus: a CPU\n"
       "                       machine); a list (1,2,4,8) runs a sweep and\n"
       "                       writes a scaling chart\n"
       "  --ncpus N            CPU workers (default 0: every task on the GPUs)\n"
       "  --sched A[,B...]     scheduling policy; a list compares them (chart)\n"
       "  --perfmodels DIR     a StarPU sampling directory (DIR/codelets/45/...)\n"
       "                       whose calibrated histories take precedence (over\n"
       "                       the platform's own, if it has them)\n"
       "  --steps N            measured steps (default 3)\n"
       "  --warmup N|auto      untimed steps before them (default auto: 2 to 6,\n"
       "                       until a step is within 2% of the one before)\n"
       "  --chart FILE.png     chart of a sweep or comparison (default\n"
       "                       simulate-<model>.png in the current directory)\n"
       "  --csv FILE           the sweep's or comparison's rows\n"
       "  --trace FILE.json    Chrome trace in simulated time (single run)\n"
       "  --cost calibrated|peak|expected|both  task times from calibrated\n"
       "                       histories (--perfmodels, or the platform's: the H100\n"
       "                       platforms ship those of a real H100) and the\n"
       "                       expected model for the tasks they miss; from the\n"
       "                       peak roofline (an upper bound); from the expected\n"
       "                       model (per-class fractions of the peaks in\n"
       "                       platforms/NAME.roofline); or both: peak, then a\n"
       "                       second simulation with the expected model (default:\n"
       "                       calibrated where histories exist, else both for a\n"
       "                       single run on a platform with the factors, else peak)\n"
       "  --no-priorities      every task at priority 0\n"
       "  --host-memory GB     the host's memory, against which the model's\n"
       "                       host-backed state is checked (default: the\n"
       "                       platform's host_mem_bytes; none: no check)\n"
       "\n"
       "gpt (the GPT run options of train gpt and bench gpt):\n",
       stdout);
  tg_cli_gpt_run_help(stdout, TG_RUN_SIMULATE_GPT, TG_RUN_SIMULATE_MLP);
  fputs("mlp:\n", stdout);
  tg_cli_gpt_run_help(stdout, TG_RUN_SIMULATE_MLP, TG_RUN_SIMULATE_GPT);
  fputs("  --hidden LIST        hidden widths (default 512,256)\n"
        "  --activation NAME    relu or gelu (default relu)\n"
        "both:\n",
        stdout);
  tg_cli_gpt_run_help(stdout, TG_RUN_SIMULATE_GPT | TG_RUN_SIMULATE_MLP, 0);
}

/* ---- platform files ------------------------------------------------------- */

static void platform_dir(char *out, size_t n) {
  const char *env = getenv("TG_PLATFORM_DIR");
  const char *src = getenv("TG_SOURCE_DIR");
  if (env && *env) snprintf(out, n, "%s", env);
  else snprintf(out, n, "%s/platforms", src && *src ? src : TG_SOURCE_DIR_DEFAULT);
}

static noreturn void unknown_platform(const char *dir, const char *name) {
  char known[1024] = "";
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    const char *dot = strstr(e->d_name, ".platform.v4.xml");
    if (!dot || dot[16]) continue;
    size_t len = strlen(known);
    snprintf(known + len, sizeof known - len, "%s%.*s", len ? ", " : "", (int)(dot - e->d_name),
             e->d_name);
  }
  if (d) closedir(d);
  tg_cli_die("--platform: no platform '%s' in %s (known: %s)", name, dir,
             *known ? known : "none");
}

/* Number of simulated GPUs (CUDA hosts) in the platform; *cpus gets the
 * number of CPU hosts (StarPU's SimGrid mode asserts on a worker without one). */
static int platform_hosts(const char *dir, const char *name, int *cpus) {
  static const char *const exts[] = {".platform.v4.xml", ".latency", ".bandwidth", ".roofline"};
  if (strlen(name) > 64) unknown_platform(dir, name);
  for (int i = 0; name[i]; i++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", name[i]))
      unknown_platform(dir, name);
  char path[4096];
  for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
    snprintf(path, sizeof path, "%.2000s/%.64s%s", dir, name, exts[i]);
    if (access(path, R_OK) != 0) {
      if (i == 0) unknown_platform(dir, name);
      tg_cli_die("--platform %s: %s is missing", name, path);
    }
  }
  snprintf(path, sizeof path, "%.2000s/%.64s.platform.v4.xml", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) tg_cli_die("--platform %s: cannot read %s", name, path);
  char line[1024];
  int n = 0;
  *cpus = 0;
  while (fgets(line, sizeof line, f)) {
    n += strstr(line, "<host id=\"CUDA") != NULL;
    *cpus += strstr(line, "<host id=\"CPU") != NULL;
  }
  if (ferror(f)) tg_cli_die("--platform %s: cannot read %s: %s", name, path, strerror(errno));
  fclose(f);
  return n;
}

static void read_roofline(const char *dir, const char *name, tg_sim_roofline *r,
                          double *host_mem, char *history, size_t history_size) {
  char path[4096], line[512], key[64];
  snprintf(path, sizeof path, "%.2000s/%.64s.roofline", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) tg_cli_die("--platform %s: cannot read %s", name, path);
  struct { const char *key; double *v; } keys[] = {
      {.key = "gpu_fp32_flops", .v = &r->gpu_fp32},
      {.key = "gpu_tf32_flops", .v = &r->gpu_tf32},
      {.key = "gpu_bf16_flops", .v = &r->gpu_bf16},
      {.key = "gpu_mem_bytes_per_s", .v = &r->gpu_bw},
      {.key = "cpu_core_flops", .v = &r->cpu_flops},
      {.key = "cpu_core_bytes_per_s", .v = &r->cpu_bw},
      {.key = "launch_us", .v = &r->launch_us},
      /* optional: the expected model's factors (all or none) */
      {.key = "expected_gemm_fraction", .v = &r->gemm_fraction},
      {.key = "expected_memory_fraction", .v = &r->memory_fraction},
      {.key = "expected_core_fraction", .v = &r->core_fraction},
      {.key = "expected_flash_fraction", .v = &r->flash_fraction},
      {.key = "expected_cudnn_fraction", .v = &r->cudnn_fraction},
      {.key = "gemm_tile", .v = &r->gemm_tile},
      {.key = "gpu_sms", .v = &r->gpu_sms}};
  enum { REQUIRED = 7 };
  int nkeys = (int)(sizeof keys / sizeof keys[0]), seen = 0;
  while (fgets(line, sizeof line, f)) {
    double v;
    if (line[0] == '#' || line[0] == '\n') continue;
    int k = 0;
    /* optional, not a rate: the manifest of the platform's calibrated
     * histories, a file of the same directory (prepare_history) */
    char file[128];
    if (sscanf(line, "%63s %127s", key, file) == 2 && !strcmp(key, "history")) {
      if (strchr(file, '/') || strchr(file, '\''))
        tg_cli_die("%s: bad history file name '%s'", path, file);
      snprintf(history, history_size, "%.2000s/%s", dir, file);
      continue;
    }
    /* optional, not a rate: the host's memory (bytes) */
    if (sscanf(line, "%63s %lf", key, &v) == 2 && !strcmp(key, "host_mem_bytes") && v > 0) {
      *host_mem = v;
      continue;
    }
    if (sscanf(line, "%63s %lf", key, &v) == 2)
      for (k = 0; k < nkeys && strcmp(key, keys[k].key); k++) {}
    if (k == nkeys || !(v > 0)) {
      fclose(f);
      tg_cli_die("%s: bad line '%.*s' (want '<key> <positive number>')", path,
                 (int)strcspn(line, "\n"), line);
    }
    *keys[k].v = v;
    seen |= 1 << k;
  }
  fclose(f);
  if ((seen & ((1 << REQUIRED) - 1)) != (1 << REQUIRED) - 1)
    tg_cli_die("%s: a rate is missing (see platforms/gen-h100.py)", path);
  int optional = seen >> REQUIRED, all = (1 << (nkeys - REQUIRED)) - 1;
  if (optional && optional != all)
    tg_cli_die("%s: the expected model needs all of expected_gemm_fraction, "
               "expected_memory_fraction, expected_core_fraction, expected_flash_fraction, "
               "expected_cudnn_fraction, "
               "gemm_tile and gpu_sms", path);
  if (optional && !(r->gemm_fraction <= 1 && r->memory_fraction <= 1 && r->core_fraction <= 1 &&
                   r->flash_fraction <= 1 && r->cudnn_fraction <= 1))
    tg_cli_die("%s: an expected_*_fraction above 1", path);
}

/* 1 when the platform's roofline file has the expected model's factors */
static int has_expected(const tg_sim_roofline *r) { return r->gemm_fraction > 0; }

/* A private perfmodel directory for StarPU: bus/NAME.* linked to the
 * platform files, codelets/ linked to --perfmodels DIR/codelets. */
static char tg_sim_tmp[64];
static void remove_tmp(void) {
  if (!*tg_sim_tmp) return;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tg_sim_tmp);
  if (system(cmd) != 0) fprintf(stderr, "taskgrad: warning: could not remove %s\n", tg_sim_tmp);
}

static void link_or_die(const char *target, const char *link) {
  if (symlink(target, link) != 0)
    tg_cli_die("simulate: cannot link %s to %s: %s", link, target, strerror(errno));
}

/* ---- shipped histories ------------------------------------------------------- */

/* FNV-1a, 64 bits, of each file's path and bytes (each followed by a 0),
 * as platforms/gen-history.py computes it; 0 when a file cannot be read. */
static unsigned long long hash_sources(const char *root, char **files, int nfiles) {
  unsigned long long h = 1469598103934665603ULL;
  for (int i = 0; i < nfiles; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%.2000s/%.2000s", root, files[i]);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    for (const char *c = files[i];; c++) {
      h = (h ^ (unsigned char)*c) * 1099511628211ULL;
      if (!*c) break;
    }
    int ch;
    while ((ch = getc(f)) != EOF) h = (h ^ (unsigned char)ch) * 1099511628211ULL;
    h *= 1099511628211ULL; /* the 0 after the bytes */
    int bad = ferror(f);
    fclose(f);
    if (bad) return 0;
  }
  return h;
}

/* The platform's calibrated histories, as platforms/gen-history.py lists
 * them in the manifest (platforms/h100.history):
 *   source ID TARBALL HOST COMMIT LABEL...   a tarball of a StarPU sampling
 *                                            directory (bench/results/...)
 *   codelet SYMBOL ID HASH FILE...           SYMBOL's history of source ID,
 *                                            measured with FILE... whose
 *                                            hash was HASH
 * A codelet's history is linked into the run's codelets/45/ (renamed for
 * host NAME) only while the hash of its FILE... in this source tree is
 * still HASH: a kernel changed since the measurement is refused, with a
 * note, and its tasks take the expected model.  The first accepted line
 * of a SYMBOL wins (the manifest lists the newest lease first).  Sets
 * TG_SIM_HISTORY to the sources used, for the report's cost-model line. */
#define MAX_SOURCES 8
static void prepare_history(const char *manifest, const char *name, const char *codelets) {
  const char *src_env = getenv("TG_SOURCE_DIR");
  const char *root = src_env && *src_env ? src_env : TG_SOURCE_DIR_DEFAULT;
  FILE *f = fopen(manifest, "r");
  if (!f) tg_cli_die("--platform %s: cannot read %s: %s", name, manifest, strerror(errno));
  struct { char id[32], tar[1024], host[64], commit[64], label[256]; int used, unpacked; }
      src[MAX_SOURCES];
  int nsrc = 0, accepted = 0;
  char line[4096], refused[2048] = "", placed[4096] = " ";
  while (fgets(line, sizeof line, f)) {
    char *tok[64];
    int n = 0;
    line[strcspn(line, "\n")] = 0;
    if (line[0] == '#' || !line[0]) continue;
    char *label = NULL;
    for (char *p = strtok(line, " "); p && n < 64; p = strtok(NULL, " ")) {
      tok[n++] = p;
      if (n == 5 && !strcmp(tok[0], "source")) {
        label = strtok(NULL, "");
        break;
      }
    }
    if (n == 5 && label && nsrc < MAX_SOURCES) {
      snprintf(src[nsrc].id, sizeof src[0].id, "%s", tok[1]);
      snprintf(src[nsrc].tar, sizeof src[0].tar, "%s", tok[2]);
      snprintf(src[nsrc].host, sizeof src[0].host, "%s", tok[3]);
      snprintf(src[nsrc].commit, sizeof src[0].commit, "%s", tok[4]);
      snprintf(src[nsrc].label, sizeof src[0].label, "%s", label);
      src[nsrc].used = src[nsrc].unpacked = 0;
      nsrc++;
      continue;
    }
    int k = 0;
    if (n >= 5 && !strcmp(tok[0], "codelet"))
      for (k = 0; k < nsrc && strcmp(src[k].id, tok[2]); k++) {}
    if (n < 5 || strcmp(tok[0], "codelet") || k == nsrc || strchr(tok[1], '/') ||
        strchr(src[k].tar, '\''))
      tg_cli_die("%s: bad line '%s' (see platforms/gen-history.py)", manifest, line);
    char key[80];
    snprintf(key, sizeof key, " %.64s ", tok[1]);
    if (strstr(placed, key)) continue; /* an earlier source's history stands */
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", hash_sources(root, tok + 4, n - 4));
    if (strcmp(hex, tok[3])) {
      size_t len = strlen(refused);
      snprintf(refused + len, sizeof refused - len, "%s%s (%s)", len ? ", " : "", tok[1],
               src[k].commit);
      continue;
    }
    char dir[128], from[4400], to[4200];
    snprintf(dir, sizeof dir, "%s/src-%s", tg_sim_tmp, src[k].id);
    if (!src[k].unpacked) {
      char cmd[4400];
      snprintf(cmd, sizeof cmd, "mkdir -p '%s' && tar -xJf '%.2000s/%s' -C '%s'", dir, root,
               src[k].tar, dir);
      if (system(cmd) != 0)
        tg_cli_die("%s: cannot unpack %s/%s (tar with xz)", manifest, root, src[k].tar);
      src[k].unpacked = 1;
    }
    snprintf(from, sizeof from, "%s/sampling/codelets/45/%s.%s", dir, tok[1], src[k].host);
    snprintf(to, sizeof to, "%s/%s.%s", codelets, tok[1], name);
    if (access(from, R_OK) != 0)
      tg_cli_die("%s: %s has no %s.%s", manifest, src[k].tar, tok[1], src[k].host);
    link_or_die(from, to);
    src[k].used = 1;
    accepted++;
    size_t len = strlen(placed);
    snprintf(placed + len, sizeof placed - len, "%s", key + 1);
  }
  fclose(f);
  char used[1024] = "";
  for (int k = 0; k < nsrc; k++) {
    if (!src[k].used) continue;
    size_t len = strlen(used);
    snprintf(used + len, sizeof used - len, "%s%s, commit %s", len ? "; " : "", src[k].label,
             src[k].commit);
  }
  printf("calibrated history: %d codelets from %s (%s)\n", accepted, *used ? used : "none",
         manifest);
  if (*refused)
    printf("calibrated history refused (their sources changed since the commit measured; "
           "the expected model times them): %s\n", refused);
  if (setenv("TG_SIM_HISTORY", *used ? used : "none", 1) != 0)
    tg_cli_die("simulate: setenv failed");
}

static void prepare_model_dir(const char *dir, const char *name, const char *perfmodels,
                              const char *history) {
  snprintf(tg_sim_tmp, sizeof tg_sim_tmp, "/tmp/taskgrad-sim-XXXXXX");
  if (!mkdtemp(tg_sim_tmp)) tg_cli_die("simulate: cannot create a temporary directory");
  atexit(remove_tmp);
  char bus[128], from[4096], to[4096];
  snprintf(bus, sizeof bus, "%s/bus", tg_sim_tmp);
  if (mkdir(bus, 0700) != 0) tg_cli_die("simulate: mkdir %s: %s", bus, strerror(errno));
  static const char *const exts[] = {".platform.v4.xml", ".latency", ".bandwidth"};
  char *abs_dir = realpath(dir, NULL);
  if (!abs_dir) tg_cli_die("simulate: %s: %s", dir, strerror(errno));
  for (int i = 0; i < 3; i++) {
    snprintf(from, sizeof from, "%.2000s/%.64s%s", abs_dir, name, exts[i]);
    snprintf(to, sizeof to, "%s/%.64s%s", bus, name, exts[i]);
    link_or_die(from, to);
  }
  free(abs_dir);
  snprintf(to, sizeof to, "%s/codelets", tg_sim_tmp);
  if (perfmodels) {
    char *abs = realpath(perfmodels, NULL);
    if (!abs) tg_cli_die("--perfmodels %s: %s", perfmodels, strerror(errno));
    snprintf(from, sizeof from, "%s/codelets", abs);
    free(abs);
    link_or_die(from, to);
  } else if (mkdir(to, 0700) != 0) {
    tg_cli_die("simulate: mkdir %s: %s", to, strerror(errno));
  } else if (history) {
    strcat(to, "/45"); /* StarPU's perfmodel format version */
    if (mkdir(to, 0700) != 0) tg_cli_die("simulate: mkdir %s: %s", to, strerror(errno));
    prepare_history(history, name, to);
  }
  /* big host tensors are folded mappings of one file (src/tensor.c), one
   * mapping per fold: 16 MiB folds keep GPT 350M on 8 GPUs far below
   * Linux's default 65530 mappings per process (1 MiB, StarPU's default:
   * about 55000) */
  /* STARPU_SIMGRID_GPU_GPU_CONCURRENT (read by the SimGrid StarPU that
   * scripts/build-starpu-simgrid patches: scripts/patches/README.md): the
   * committed GPU platforms are NVSwitch machines, where copies between
   * different GPU pairs run at once and share only the links the platform
   * describes; StarPU's own rules serialise them as on PCIe.  0 keeps
   * StarPU's rules; an unpatched StarPU ignores it. */
  /* STARPU_CUDA_PIPELINE 1 unless set: the codelets are STARPU_CUDA_ASYNC
   * as in the CUDA build (codelet_common.h), and StarPU's SimGrid mode runs
   * the tasks queued on a simulated CUDA worker side by side, where on a GPU
   * they follow each other on the worker's one stream.  With one task in
   * flight, the simulation of histories calibrated on an H100 came 1-7%
   * under or over the measured GPT-2 124M and 350M steps of two versions of
   * the code; StarPU's default of 2 was 13-23% under them, the synchronous
   * model 7-16% under
   * (bench/results/2026-11-27-h100-native-bf16.md). */
  if (setenv("STARPU_PERF_MODEL_DIR", tg_sim_tmp, 1) != 0 ||
      setenv("STARPU_HOSTNAME", name, 1) != 0 ||
      setenv("STARPU_MALLOC_SIMULATION_FOLD", "16", 0) != 0 ||
      setenv("STARPU_SIMGRID_GPU_GPU_CONCURRENT", "1", 0) != 0 ||
      setenv("STARPU_CUDA_PIPELINE", "1", 0) != 0)
    tg_cli_die("simulate: setenv failed");
}

/* ---- sweeps and comparisons (child processes) ------------------------------ */

typedef struct sim_row {
  int gpus;
  char sched[64];
  double step_ms, rate, gpu_bytes, mfu;
  int ok;
} sim_row;

/* Runs argv (this binary), parses its report into row. */
static void run_child(char **argv, sim_row *row) {
  int fd[2];
  if (pipe(fd) != 0) tg_cli_die("simulate: pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) tg_cli_die("simulate: fork: %s", strerror(errno));
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    tg_cli_exec_self(argv);
    _exit(127);
  }
  close(fd[1]);
  tg_cli_forward_signals(pid); /* SIGINT/SIGTERM end the child too */
  FILE *f = fdopen(fd[0], "r");
  if (!f) tg_cli_die("simulate: fdopen: %s", strerror(errno));
  char line[1024];
  int seen = 0;
  while (fgets(line, sizeof line, f)) {
    seen += sscanf(line, "simulated step ms: %lf", &row->step_ms) == 1;
    seen += sscanf(line, "simulated tokens/s: %lf", &row->rate) == 1;
    seen += sscanf(line, "simulated samples/s: %lf", &row->rate) == 1;
    sscanf(line, "bytes between GPUs: %lf", &row->gpu_bytes);
    sscanf(line, "simulated MFU: %lf", &row->mfu);
  }
  fclose(f);
  int status;
  if (waitpid(pid, &status, 0) < 0) tg_cli_die("simulate: waitpid: %s", strerror(errno));
  tg_cli_forward_signals(0); /* exits 128 + the signal after one */
  row->ok = seen == 2 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* A sweep (ngpus > 1): tokens/s against GPUs, one line per scheduler,
 * plus linear scaling from the first scheduler's first point.  Otherwise a
 * bar per scheduler.  rows[g * nsched + s]. */
static void write_chart(const char *path, const char *model, const char *platform,
                        const sim_row *rows, int ngpus, int nsched, const char *unit) {
  FILE *gp = popen("gnuplot 2>&1", "w");
  if (!gp) tg_cli_die("simulate: cannot start gnuplot (apt-get install gnuplot-nox)");
  fprintf(gp, "set terminal pngcairo size 800,500\nset output '%s'\n", path);
  fprintf(gp, "set title \"simulated %s on %s (roofline predictions unless calibrated)\"\n",
          model, platform);
  fprintf(gp, "set ylabel '%s'\nset grid\nset key left top\n", unit);
  if (ngpus > 1) {
    fprintf(gp, "set xlabel 'GPUs'\nset logscale x 2\nplot ");
    for (int s = 0; s < nsched; s++)
      fprintf(gp, "'-' using 1:2 with linespoints lw 2 title '%s', ", rows[s].sched);
    fprintf(gp, "'-' using 1:2 with lines dt 2 title 'linear from %d GPU'\n", rows[0].gpus);
    for (int s = 0; s <= nsched; s++) {
      for (int g = 0; g < ngpus; g++) {
        const sim_row *r = &rows[g * nsched + (s < nsched ? s : 0)];
        double base = rows[0].ok ? rows[0].rate / rows[0].gpus : 0;
        if (r->ok) fprintf(gp, "%d %g\n", r->gpus, s < nsched ? r->rate : base * r->gpus);
      }
      fprintf(gp, "e\n");
    }
  } else {
    fprintf(gp, "set style data histograms\nset style fill solid 0.7\nset boxwidth 0.7\n"
                "set yrange [0:*]\nset xtics rotate by -30\n"
                "plot '-' using 2:xtic(1) title '%s'\n", unit);
    /* quoted: a data line starting with "e" (eager) would end the data */
    for (int i = 0; i < nsched; i++)
      if (rows[i].ok) fprintf(gp, "\"%s\" %g\n", rows[i].sched, rows[i].rate);
    fprintf(gp, "e\n");
  }
  if (pclose(gp) != 0) tg_cli_die("simulate: gnuplot failed writing %s", path);
}

static int run_many(const tg_sim_options *o, char **pass, int npass, const int *gpus,
                    int ngpus, char sched[][64], int nsched, const char *chart,
                    const char *csv) {
  sim_row rows[MAX_LIST * MAX_LIST];
  int n = 0, failed = 0;
  const char *unit = o->is_gpt ? "tokens/s" : "samples/s";
  printf("| GPUs | scheduler | step ms | %s | scaling efficiency (vs the scheduler's first row) | "
         "GB between GPUs per step |\n"
         "|---:|---|---:|---:|---:|---:|\n", unit);
  fflush(stdout);
  for (int g = 0; g < ngpus; g++)
    for (int s = 0; s < nsched; s++) {
      char gbuf[16], *argv[MAX_PASS + 8];
      int a = 0;
      argv[a++] = "taskgrad";
      argv[a++] = "simulate";
      argv[a++] = o->is_gpt ? "gpt" : "mlp";
      for (int i = 0; i < npass; i++) argv[a++] = pass[i];
      snprintf(gbuf, sizeof gbuf, "%d", gpus[g]);
      argv[a++] = "--gpus";
      argv[a++] = gbuf;
      if (*sched[s]) {
        argv[a++] = "--sched";
        argv[a++] = sched[s];
      }
      argv[a] = NULL;
      sim_row *r = &rows[n++];
      *r = (sim_row){.gpus = gpus[g]};
      snprintf(r->sched, sizeof r->sched, "%.63s", *sched[s] ? sched[s] : "default");
      run_child(argv, r);
      /* against the same scheduler's first (fewest GPUs) row */
      const sim_row *base = &rows[s];
      double eff = ngpus > 1 && r->ok && base->ok && base->gpus > 0 && r->gpus > 0
                       ? r->rate / (base->rate / base->gpus * r->gpus)
                       : 0;
      if (!r->ok) {
        failed++;
        printf("| %d | %s | failed | | | |\n", r->gpus, r->sched);
      } else if (eff > 0) {
        printf("| %d | %s | %.2f | %.0f | %.0f%% | %.3f |\n", r->gpus, r->sched, r->step_ms,
               r->rate, 100 * eff, r->gpu_bytes * 1e-9);
      } else {
        printf("| %d | %s | %.2f | %.0f | | %.3f |\n", r->gpus, r->sched, r->step_ms, r->rate,
               r->gpu_bytes * 1e-9);
      }
      fflush(stdout);
    }
  if (csv) {
    FILE *f = fopen(csv, "w");
    if (!f) tg_cli_die("--csv %s: %s", csv, strerror(errno));
    fprintf(f, "gpus,scheduler,step_ms,%s,gpu_gpu_bytes_per_step,ok\n", unit);
    for (int i = 0; i < n; i++)
      fprintf(f, "%d,%s,%.4f,%.1f,%.0f,%d\n", rows[i].gpus, rows[i].sched, rows[i].step_ms,
              rows[i].rate, rows[i].gpu_bytes, rows[i].ok);
    if (fclose(f) != 0) tg_cli_die("--csv %s: write failed", csv);
  }
  if (n - failed > 0) {
    write_chart(chart, o->is_gpt ? "GPT" : "MLP", o->platform, rows, ngpus, nsched, unit);
    printf("chart: %s\n", chart);
  }
  return failed ? 1 : 0;
}

/* Runs this command again in taskgrad-sim (next to this binary), whose
 * StarPU starts SimGrid on the prepared platform; returns its exit status
 * once it is done (the temporary directory is removed at exit). */
static int run_in_sim_process(int argc, char **argv) {
  char self[4096], prog[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) tg_cli_die("simulate: cannot find this program: %s", strerror(errno));
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(prog, sizeof prog, "%s/taskgrad-sim", self);
  if (access(prog, X_OK) != 0)
    tg_cli_die("simulate: %s is missing (it is built with -DTG_SIMGRID=ON)", prog);
  if (setenv("TG_SIM_PREPARED", "1", 1) != 0) tg_cli_die("simulate: setenv failed");
  char *args[MAX_PASS + 16];
  int a = 0;
  args[a++] = "taskgrad-sim";
  args[a++] = "--log=root.thres:warning"; /* SimGrid strips it: no info chatter */
  for (int i = 0; i < argc && a < MAX_PASS + 15; i++) args[a++] = argv[i];
  args[a] = NULL;
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) tg_cli_die("simulate: fork: %s", strerror(errno));
  if (pid == 0) {
    execv(prog, args);
    fprintf(stderr, "taskgrad: error: simulate: cannot run %s: %s\n", prog, strerror(errno));
    _exit(TG_EXIT_USAGE);
  }
  tg_cli_forward_signals(pid); /* SIGINT/SIGTERM end the simulation too */
  int status;
  if (waitpid(pid, &status, 0) < 0) tg_cli_die("simulate: waitpid: %s", strerror(errno));
  tg_cli_forward_signals(0); /* exits 128 + the signal after one (atexit: tmp removed) */
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "taskgrad: error: the simulation died of signal %d\n", WTERMSIG(status));
    return 1;
  }
  return WEXITSTATUS(status);
}

/* ---- flags ------------------------------------------------------------------- */

/* What one command line asks for, beyond the run's options. */
typedef struct sim_cmd {
  tg_sim_options o;
  unsigned cmd;                  /* TG_RUN_SIMULATE_GPT or _MLP */
  tg_runtime_config rt;
  const char *gpus_text, *sched_text, *chart, *csv, *perfmodels, *cost_text;
  char *pass[MAX_PASS];          /* the flags a child of a sweep gets */
  int npass;
  char dir[4096];                /* the platform files' directory */
  char history[4200];            /* the platform's history manifest, or "" */
  int gpus[MAX_LIST], ngpus;
  char sched[MAX_LIST][64];
  int nsched;
} sim_cmd;

/* The flags after the model; returns 1 after printing the help. */
static int parse_flags(int argc, char **argv, sim_cmd *c) {
  tg_sim_options *o = &c->o;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    int start = i, keep = 1;
#define VAL tg_cli_value(argc, argv, &i)
#define INT(lo, hi) (int)tg_cli_int(a, VAL, lo, hi)
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      simulate_usage();
      return 1;
    } else if (tg_cli_gpt_run_flag(argc, argv, &i, c->cmd, &o->run)) {
    } else if (!strcmp(a, "--platform")) o->platform = VAL;
    else if (!strcmp(a, "--gpus")) c->gpus_text = VAL, keep = 0;
    else if (!strcmp(a, "--sched")) c->sched_text = VAL, keep = 0;
    else if (!strcmp(a, "--chart")) c->chart = VAL, keep = 0;
    else if (!strcmp(a, "--csv")) c->csv = VAL, keep = 0;
    else if (!strcmp(a, "--trace")) tg_cli_instr.trace = VAL, keep = 0;
    else if (!strcmp(a, "--perfmodels")) c->perfmodels = VAL;
    else if (!strcmp(a, "--cost")) c->cost_text = VAL, keep = 0;
    else if (!strcmp(a, "--ncpus")) o->ncpus = INT(0, 4096);
    else if (!strcmp(a, "--steps")) o->steps = INT(1, 1 << 20);
    else if (!strcmp(a, "--warmup")) {
      const char *v = VAL;
      o->warmup = !strcmp(v, "auto") ? TG_SIM_WARMUP_AUTO : (int)tg_cli_int(a, v, 0, 1 << 20);
    }
    else if (!strcmp(a, "--no-priorities")) c->rt.no_priorities = 1;
    else if (!strcmp(a, "--host-memory")) o->host_mem = tg_cli_double(a, VAL, 1e-3, 1e7) * 1e9;
    else if (!o->is_gpt && !strcmp(a, "--hidden")) {
      o->mlp.nlayers = 1 + tg_cli_int_list(a, VAL, o->mlp.widths + 1, TG_MLP_MAX_LAYERS - 1, 1,
                                           1 << 16);
    } else if (!o->is_gpt && !strcmp(a, "--activation")) {
      const char *v = VAL;
      if (!strcmp(v, "relu")) o->mlp.act = TG_ACT_RELU;
      else if (!strcmp(v, "gelu")) o->mlp.act = TG_ACT_GELU;
      else tg_cli_die("--activation: '%s' is not relu or gelu", v);
    } else {
      tg_cli_die("unknown flag '%s' for 'simulate %s' (see --help)", a, argv[1]);
    }
#undef INT
#undef VAL
    for (int k = start; keep && k <= i && c->npass < MAX_PASS; k++) c->pass[c->npass++] = argv[k];
  }
  if (c->npass >= MAX_PASS) tg_cli_die("simulate: too many flags");
  tg_cli_gpt_run_finish(&o->run, c->cmd);
  if (o->run.prec.dynamic)
    tg_cli_die("simulate: loss scaling reads computed values, which a simulation does not "
               "have; use --precision bf16 without loss-scale flags");
  if (!o->platform) tg_cli_die("simulate: --platform NAME is required (see --help)");
  return 0;
}

/* --cost against the platform (after read_roofline and --gpus) */
static void check_cost(sim_cmd *c) {
  tg_sim_options *o = &c->o;
  int expected = has_expected(&o->roofline);
  int many = c->ngpus > 1 || (c->sched_text && strchr(c->sched_text, ','));
  /* histories to calibrate with: --perfmodels, or the platform's; in the
   * simulation process (TG_SIM_PREPARED), those its parent prepared
   * (TG_SIM_HISTORY; bench/sim-mpi.sh prepares none) */
  const char *prepared = getenv("TG_SIM_PREPARED");
  int calibrated = prepared ? getenv("TG_SIM_HISTORY") != NULL : c->perfmodels || *c->history;
  if (!c->cost_text) {
    o->cost = calibrated ? TG_SIM_COST_CALIBRATED
              : expected && !many ? TG_SIM_COST_BOTH : TG_SIM_COST_PEAK;
    return;
  }
  if (!strcmp(c->cost_text, "calibrated")) {
    if (!calibrated)
      tg_cli_die("--cost calibrated: platform %s ships no calibrated history (a 'history' line "
                 "in its .roofline) and no --perfmodels DIR was given", o->platform);
    o->cost = TG_SIM_COST_CALIBRATED;
    return;
  }
  if (!strcmp(c->cost_text, "peak")) o->cost = TG_SIM_COST_PEAK;
  else if (!strcmp(c->cost_text, "expected")) o->cost = TG_SIM_COST_EXPECTED;
  else if (!strcmp(c->cost_text, "both")) o->cost = TG_SIM_COST_BOTH;
  else tg_cli_die("--cost: '%s' is not calibrated, peak, expected or both", c->cost_text);
  if (o->cost != TG_SIM_COST_PEAK && !expected)
    tg_cli_die("--cost %s: platforms/%s.roofline has no expected model (expected_* factors, "
               "see platforms/gen-h100.py)", c->cost_text, o->platform);
  if (o->cost == TG_SIM_COST_BOTH && many)
    tg_cli_die("--cost both runs one configuration twice: give a sweep or a comparison "
               "--cost peak or --cost expected");
}

/* The platform's files and hosts against --ncpus and --gpus, the --sched
 * list and --perfmodels. */
static void check_machine(sim_cmd *c) {
  tg_sim_options *o = &c->o;
  platform_dir(c->dir, sizeof c->dir);
  int have_cpus = 0, have = platform_hosts(c->dir, o->platform, &have_cpus);
  if (o->ncpus > have_cpus)
    tg_cli_die("--ncpus %d: platform %s has %d CPU core(s)", o->ncpus, o->platform, have_cpus);
  double host_mem = 0;
  read_roofline(c->dir, o->platform, &o->roofline, &host_mem, c->history, sizeof c->history);
  if (o->host_mem == 0) o->host_mem = host_mem; /* --host-memory wins */
  c->ngpus = tg_cli_int_list("--gpus", c->gpus_text, c->gpus, MAX_LIST, 0, 64);
  check_cost(c);
  for (int g = 0; g < c->ngpus; g++) {
    if (c->gpus[g] > have)
      tg_cli_die("--gpus %d: platform %s has %d GPU(s)", c->gpus[g], o->platform, have);
    /* --gpus 0 simulates a CPU machine (bench/sim-validate.sh) */
    if (c->gpus[g] == 0 && o->ncpus == 0)
      tg_cli_die("--gpus 0 with --ncpus 0: no worker would run the tasks");
  }
  c->nsched = 1;
  if (c->sched_text) {
    c->nsched = 0;
    for (const char *p = c->sched_text; *p && c->nsched < MAX_LIST;) {
      size_t len = strcspn(p, ",");
      if (len == 0 || len >= sizeof c->sched[0])
        tg_cli_die("--sched: bad list '%s'", c->sched_text);
      memcpy(c->sched[c->nsched], p, len);
      c->sched[c->nsched][len] = 0;
      tg_cli_check_sched(c->sched[c->nsched++]);
      p += len + (p[len] == ',');
    }
  }
  if (c->perfmodels) {
    char sub[4096];
    struct stat sb;
    snprintf(sub, sizeof sub, "%s/codelets", c->perfmodels);
    if (stat(sub, &sb) != 0 || !S_ISDIR(sb.st_mode))
      tg_cli_die("--perfmodels %s: no codelets/ directory there (a StarPU sampling "
                 "directory, e.g. $STARPU_HOME/.starpu/sampling)", c->perfmodels);
  }
}

/* One run's batch, micro-batches and model, with their per-GPU defaults. */
static void check_single_run(sim_cmd *c) {
  tg_sim_options *o = &c->o;
  o->gpus = c->gpus[0];
  int per = o->gpus > 0 ? o->gpus : 1;
  tg_gpt_run_config *rc = &o->run.cfg;
  if (!rc->B) rc->B = (o->is_gpt ? 8 : 2048) * per;
  if (!rc->nmicro) rc->nmicro = 2 * per;
  if (rc->nmicro > rc->B || rc->B % rc->nmicro)
    tg_cli_die("--micro-batches %d does not divide --batch %d", rc->nmicro, rc->B);
  if (o->is_gpt) {
    if (tg_gpt_config_check(&o->run.model) < 0) tg_cli_die_last("model shape");
    if (rc->T > o->run.model.max_seq_len)
      tg_cli_die("--seq %d exceeds the model's maximum %d", rc->T, o->run.model.max_seq_len);
  } else {
    o->mlp.widths[o->mlp.nlayers] = 10;
    tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
    tg_cli_precision_mlp(&o->run.prec, &o->mlp, &opt);
  }
}

/* --cost both: the same run again under the expected model, in a child
 * (no trace), and its figures beside the peak report printed above. */
static int run_expected(sim_cmd *c) {
  const tg_sim_options *o = &c->o;
  char gbuf[16], *argv[MAX_PASS + 10];
  int a = 0;
  argv[a++] = "taskgrad";
  argv[a++] = "simulate";
  argv[a++] = o->is_gpt ? "gpt" : "mlp";
  for (int i = 0; i < c->npass; i++) argv[a++] = c->pass[i];
  snprintf(gbuf, sizeof gbuf, "%d", o->gpus);
  argv[a++] = "--gpus";
  argv[a++] = gbuf;
  if (c->sched_text) {
    argv[a++] = "--sched";
    argv[a++] = c->sched[0];
  }
  argv[a++] = "--cost";
  argv[a++] = "expected";
  argv[a] = NULL;
  /* the child prepares its own simulation process */
  if (unsetenv("TG_SIM_PREPARED") != 0) tg_cli_die("simulate: unsetenv failed");
  sim_row r = {.gpus = o->gpus};
  run_child(argv, &r);
  if (!r.ok) {
    fprintf(stderr, "taskgrad: error: the expected model's simulation failed\n");
    return 1;
  }
  const tg_sim_roofline *rf = &o->roofline;
  printf("expected step ms: %.3f (the expected model: GEMMs at %.1f%% of peak times their "
         "wave quantization, memory at %.0f%% of the bandwidth, other kernels at %.0f%% of "
         "the CUDA-core peak, flash attention at %.2f%% and cuDNN's at %.0f%% of the bf16 "
         "peak, from "
         "platforms/%s.roofline; a prediction)\n",
         r.step_ms, 100 * rf->gemm_fraction, 100 * rf->memory_fraction,
         100 * rf->core_fraction, 100 * rf->flash_fraction, 100 * rf->cudnn_fraction,
         o->platform);
  printf("expected %s: %.0f\n", o->is_gpt ? "tokens/s" : "samples/s", r.rate);
  if (r.mfu > 0) printf("expected MFU: %.1f%%\n", r.mfu);
  return 0;
}

int tg_cmd_simulate(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    simulate_usage();
    return 0;
  }
  if (argc < 2 || (strcmp(argv[1], "gpt") && strcmp(argv[1], "mlp")))
    tg_cli_die("'taskgrad simulate' needs a model: gpt or mlp (see --help)");
  if (!getenv("TG_SIM_PREPARED") && unsetenv("TG_SIM_HISTORY") != 0)
    tg_cli_die("simulate: unsetenv failed"); /* set by prepare_history only */
  static sim_cmd c; /* zeroed */
  tg_sim_options *o = &c.o;
  *o = (tg_sim_options){
      .is_gpt = !strcmp(argv[1], "gpt"), .ncpus = 0, .steps = 3, .warmup = TG_SIM_WARMUP_AUTO,
      .mlp = {.nlayers = 3, .widths = {784, 512, 256, 10}, .act = TG_ACT_RELU, .tiles = 1}};
  c.cmd = o->is_gpt ? TG_RUN_SIMULATE_GPT : TG_RUN_SIMULATE_MLP;
  tg_cli_gpt_run_default(&o->run, c.cmd);
  c.rt = tg_runtime_config_default();
  c.gpus_text = "1";
  if (parse_flags(argc, argv, &c)) return 0;
  check_machine(&c);
  int many = c.ngpus > 1 || c.nsched > 1;
  if (many && tg_cli_instr.trace) tg_cli_die("--trace records one run: give one --gpus and one --sched");
  if (!tg_sim_available())
    tg_cli_die("this taskgrad was built without SimGrid: run scripts/build-starpu-simgrid, "
               "then configure with -DTG_SIMGRID=ON -DCMAKE_PREFIX_PATH=<its prefix>");
  if (many) {
    char def[64];
    snprintf(def, sizeof def, "simulate-%s.png", o->is_gpt ? "gpt" : "mlp");
    const char *chart = c.chart ? c.chart : def;
    tg_cli_check_output("--chart", chart);
    if (c.csv) tg_cli_check_output("--csv", c.csv);
    tg_cli_path_out("--chart", chart);
    tg_cli_path_out("--csv", c.csv);
    tg_cli_paths_check();
    c.pass[c.npass++] = "--cost";
    c.pass[c.npass++] = o->cost == TG_SIM_COST_EXPECTED     ? "expected"
                        : o->cost == TG_SIM_COST_CALIBRATED ? "calibrated"
                                                            : "peak";
    return run_many(o, c.pass, c.npass, c.gpus, c.ngpus, c.sched, c.nsched, chart, c.csv);
  }
  check_single_run(&c);
  if (c.sched_text) c.rt.sched = c.sched[0];
  c.rt.ncpus = o->ncpus;
  c.rt.ncuda = o->gpus;
  tg_cli_instrument_check(&c.rt);
  if (getenv("TG_SIM_PREPARED")) return tg_sim_run(o, &c.rt); /* in taskgrad-sim */
  int calibrated = o->cost == TG_SIM_COST_CALIBRATED;
  if (calibrated && c.perfmodels) {
    char label[4200];
    snprintf(label, sizeof label, "--perfmodels %.4000s", c.perfmodels);
    if (setenv("TG_SIM_HISTORY", label, 1) != 0) tg_cli_die("simulate: setenv failed");
  }
  prepare_model_dir(c.dir, o->platform, c.perfmodels, calibrated ? c.history : NULL);
  int rc = run_in_sim_process(argc, argv);
  if (rc != 0 || o->cost != TG_SIM_COST_BOTH) return rc;
  return run_expected(&c);
}
