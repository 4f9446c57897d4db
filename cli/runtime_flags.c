/*
 * The runtime flags every training and bench command shares (--sched,
 * --ncpus, --emulated-devices, --ncuda, --calibrate, --no-priorities,
 * --deterministic, --gemm-lib) and the CLI's instrumentation flags (--trace, --stats).
 *
 * Design note: this dispatcher sits above both the value parsers
 * (args.c) and the instrumentation state (instrument.c), so that neither
 * of those files calls the other back: the CLI's files depend one way
 * (scripts/check-file-cycles build cli).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <starpu.h>

#include "cli.h"
#include "taskgrad/gemm_libs.h"
#include "taskgrad/sched.h"

void tg_cli_check_sched_for(const char *flag, const char *name) {
  if (tg_sched_policy_find(name)) return; /* taskgrad's own policies */
  struct starpu_sched_policy **all = starpu_sched_get_predefined_policies();
  for (int i = 0; all[i]; i++)
    if (strcmp(all[i]->policy_name, name) == 0) return;
  fprintf(stderr, "taskgrad: error: %s: unknown scheduling policy '%s'; known:", flag, name);
  for (const char *const *p = tg_sched_policy_names(); *p; p++) fprintf(stderr, " %s", *p);
  for (int i = 0; all[i]; i++) fprintf(stderr, " %s", all[i]->policy_name);
  fputc('\n', stderr);
  exit(TG_EXIT_USAGE);
}

void tg_cli_check_sched(const char *name) { tg_cli_check_sched_for("--sched", name); }

int tg_cli_runtime_flag(int argc, char **argv, int *i, tg_runtime_config *rc) {
  if (strcmp(argv[*i], "--sched") == 0) {
    rc->sched = tg_cli_value(argc, argv, i);
    tg_cli_check_sched(rc->sched);
    return 1;
  }
  if (strcmp(argv[*i], "--ncpus") == 0) {
    /* 0 only with devices: tg_init refuses it otherwise.  More workers than
     * cores share them (the tests do), but above STARPU_MAXCPUS StarPU would
     * start its ceiling's worth without a word. */
    rc->ncpus = (int)tg_cli_int("--ncpus", tg_cli_value(argc, argv, i), 0, 4096);
    if (rc->ncpus > STARPU_MAXCPUS)
      tg_cli_die("--ncpus %d: this StarPU runs at most %d CPU workers (STARPU_MAXCPUS; "
                 "scripts/build-starpu builds one without that limit), and this machine has "
                 "%ld cores", rc->ncpus, STARPU_MAXCPUS, sysconf(_SC_NPROCESSORS_ONLN));
    return 1;
  }
  if (strcmp(argv[*i], "--emulated-devices") == 0) {
    rc->emulated_devices = (int)tg_cli_int("--emulated-devices", tg_cli_value(argc, argv, i),
                                           0, TG_MAX_EMULATED_DEVICES);
    return 1;
  }
  if (strcmp(argv[*i], "--ncuda") == 0) {
    rc->ncuda = (int)tg_cli_int("--ncuda", tg_cli_value(argc, argv, i), 0, 64);
    return 1;
  }
  if (strcmp(argv[*i], "--calibrate") == 0) {
    rc->calibrate = 1;
    return 1;
  }
  if (strcmp(argv[*i], "--no-priorities") == 0) {
    rc->no_priorities = 1;
    return 1;
  }
  /* CLI instrumentation, not runtime settings */
  if (strcmp(argv[*i], "--trace") == 0) {
    tg_cli_instr.trace = tg_cli_value(argc, argv, i);
    return 1;
  }
  if (strcmp(argv[*i], "--stats") == 0) {
    tg_cli_instr.stats = 1;
    return 1;
  }
  if (strcmp(argv[*i], "--gemm-lib") == 0) {
    const char *v = tg_cli_value(argc, argv, i);
    int lib = tg_gemm_lib_parse(v);
    if (strcmp(v, "auto") != 0 && (lib < 0 || strcmp(v, tg_gemm_lib_name(lib)) != 0))
      tg_cli_die("--gemm-lib: unknown GEMM library '%s' (openblas, onednn, libxsmm, auto)", v);
    rc->gemm_lib = v;
    return 1;
  }
  if (strcmp(argv[*i], "--deterministic") == 0) {
    rc->deterministic = 1;
    return 1;
  }
  return 0;
}

char **tg_cli_argv;

void tg_cli_exec_self(char *const argv[]) {
  /* the program's own path, not /proc/self/exe: through it the new process
   * would be named "exe" (its comm, which ps, pgrep and top show) */
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) {
    self[len] = 0;
    execv(self, argv);
  }
  execv("/proc/self/exe", argv);
}

void tg_cli_restart_with_clean_buffers(void) {
  if (!tg_cli_argv || tg_dist_launched()) return; /* under mpirun: carry on as is */
  fprintf(stderr, "taskgrad: the step evicts from device memory: restarting with StarPU's "
          "clean-buffer thresholds (STARPU_MINIMUM_CLEAN_BUFFERS=5, "
          "STARPU_TARGET_CLEAN_BUFFERS=10)\n");
  fflush(NULL);
  tg_shutdown();
  /* StarPU's defaults, set: this run's tg_init leaves the user's values */
  if (setenv("STARPU_MINIMUM_CLEAN_BUFFERS", "5", 1) != 0 ||
      setenv("STARPU_TARGET_CLEAN_BUFFERS", "10", 1) != 0 ||
      unsetenv("TG_CLEAN_BUFFERS_OURS") != 0)
    tg_cli_die("restart: setenv failed");
  tg_cli_exec_self(tg_cli_argv);
  tg_cli_die("restart: cannot run this program again: %s", strerror(errno));
}
