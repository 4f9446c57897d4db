/*
 * taskgrad command-line tool: dispatches sub-commands.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "taskgrad/parallel.h"
#include "taskgrad/sched.h"
#include "taskgrad/sim.h"
#ifdef TG_SIMGRID
/* starpu.h (through parallel.h) renames main to starpu_main in a SimGrid build,
 * which would start the simulation, and load the platform, before main
 * runs.  Kept as main, StarPU starts SimGrid in starpu_init instead, after
 * `taskgrad simulate` has chosen the platform (STARPU_HOSTNAME). */
#undef main
#endif

static void tg_usage(FILE *f) {
  fputs("usage: taskgrad <command> [flags]\n"
        "\n"
        "Neural-network training steps as StarPU task graphs.\n"
        "\n"
        "commands:\n"
        "  train mlp     train a multi-layer perceptron on Fashion-MNIST\n"
        "  bench mlp     measure the MLP training step (samples/s, GFLOP/s,\n"
        "                GEMM share of worker time, runtime overhead per task)\n"
        "  train gpt     train a GPT-2 model (llm.c formats); with no files, a\n"
        "                KJV demonstration that ends with a text sample\n"
        "  bench gpt     measure the GPT training step (tokens/s, GFLOP/s),\n"
        "                optionally side by side with PyTorch\n"
        "  bench sched   compare StarPU scheduling policies on the mlp or gpt\n"
        "                step (CSV, PNG chart, Markdown table)\n"
        "  simulate      the gpt or mlp step on simulated GPUs (StarPU +\n"
        "                SimGrid build; predicted step time, scaling charts)\n"
        "  init gpt      write a randomly initialised GPT-2 checkpoint (llm.c\n"
        "                format)\n"
        "  prepare kjv   the King James Bible as byte-level llm.c token files\n"
        "                (needs Debian's bible-kjv)\n"
        "  info          the CPU and its features, the GEMM libraries and the\n"
        "                one chosen per shape class, StarPU's version\n"
        "  help          this text\n"
        "  --version     the version\n"
        "\n"
        "Run 'taskgrad <command> --help' for a command's flags.  StarPU's\n"
        "environment variables (STARPU_SCHED, STARPU_NCPU, STARPU_NCUDA,\n"
        "STARPU_CALIBRATE, ...) apply; --sched and --ncpus override them.\n",
        f);
}

/* OpenBLAS picks its kernels when it is loaded; if it picked kernels far
 * older than this CPU supports, start again with the right ones (once: the
 * variable is set in the new process). */
static void tg_fix_blas_kernels(char **argv) {
  const char *core = tg_blas_better_coretype();
  if (!core) return;
  /* what OpenBLAS had picked, for `taskgrad info` (the new process sees
   * only the variable) */
  if (setenv(TG_BLAS_PICKED_ENV, tg_blas_corename(), 1) != 0) return;
  if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) {
    unsetenv(TG_BLAS_PICKED_ENV);
    return;
  }
  tg_cli_exec_self(argv);
  /* exec failed: carry on with the slow kernels */
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(TG_BLAS_PICKED_ENV);
}

/* "taskgrad train --help": the models of a command that takes one */
static int tg_is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

static int tg_group_help(const char *cmd) {
  if (!strcmp(cmd, "train"))
    fputs("usage: taskgrad train mlp|gpt [flags]\n"
          "\n"
          "  train mlp     a multi-layer perceptron on Fashion-MNIST\n"
          "  train gpt     a GPT-2 model (llm.c formats); with no files, a KJV\n"
          "                demonstration that ends with a text sample\n",
          stdout);
  else if (!strcmp(cmd, "bench"))
    fputs("usage: taskgrad bench mlp|gpt|sched [flags]\n"
          "\n"
          "  bench mlp     measure the MLP training step\n"
          "  bench gpt     measure the GPT training step, optionally beside PyTorch\n"
          "  bench sched   compare StarPU scheduling policies on the mlp or gpt step\n",
          stdout);
  else if (!strcmp(cmd, "init"))
    fputs("usage: taskgrad init gpt [flags]\n"
          "\n"
          "  init gpt      write a randomly initialised GPT-2 checkpoint (llm.c format)\n",
          stdout);
  else
    fputs("usage: taskgrad prepare kjv [flags]\n"
          "\n"
          "  prepare kjv   the King James Bible as byte-level llm.c token files\n",
          stdout);
  fprintf(stdout, "\nRun 'taskgrad %s <%s> --help' for its flags.\n", cmd,
          !strcmp(cmd, "prepare") ? "data set" : "model");
  return 0;
}

/* Every environment variable StarPU or taskgrad reads, before any work
 * (tg_init checks them again): a value StarPU would crash on, ignore or
 * misread is one message and exit 2, e.g. STARPU_WORKERS_CPUID=abc,
 * STARPU_SCHED=nosuch.  Not for a command's --help. */
static void tg_check_env_first(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (tg_is_help(argv[i])) return;
  if (tg_check_environment(tg_sched_policy_names()) < 0) tg_cli_die("%s", tg_last_error());
}

int main(int argc, char **argv) {
  tg_cli_argv = argv;
  tg_fix_blas_kernels(argv);
  if (argc < 2) {
    fputs("taskgrad: error: no command given\n\n", stderr);
    tg_usage(stderr);
    return TG_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "help") || tg_is_help(cmd)) {
    tg_usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    printf("taskgrad 0.1.0 (CUDA codelets: %s, StarPU-MPI: %s, SimGrid: %s)\n",
           tg_built_with_cuda() ? "yes" : "no", tg_dist_available() ? "yes" : "no",
           tg_sim_available() ? "yes" : "no");
    return 0;
  }
  const int grouped = !strcmp(cmd, "train") || !strcmp(cmd, "bench") || !strcmp(cmd, "init") ||
                      !strcmp(cmd, "prepare");
  if (grouped && argc >= 3 && tg_is_help(argv[2])) return tg_group_help(cmd);
  /* under mpirun only the training commands know what to do with ranks */
  if (tg_dist_launched() &&
      !(!strcmp(cmd, "train") && argc >= 3 && (!strcmp(argv[2], "mlp") || !strcmp(argv[2], "gpt"))))
    tg_cli_die("'taskgrad %s' does not run under MPI (only 'train mlp' and 'train gpt' do); "
               "launch it without mpirun", cmd);
  if (!strcmp(cmd, "train") || !strcmp(cmd, "bench") || !strcmp(cmd, "simulate"))
    tg_check_env_first(argc, argv);
  if (!strcmp(cmd, "train") || !strcmp(cmd, "bench")) {
    if (argc < 3)
      tg_cli_die("'taskgrad %s' needs a model: mlp or gpt%s", cmd,
                 !strcmp(cmd, "bench") ? " (or sched)" : "");
    const char *model = argv[2];
    if (!strcmp(cmd, "bench") && !strcmp(model, "sched"))
      return tg_cmd_bench_sched(argc - 2, argv + 2);
    if (!strcmp(model, "mlp"))
      return !strcmp(cmd, "train") ? tg_cmd_train_mlp(argc - 2, argv + 2)
                                   : tg_cmd_bench_mlp(argc - 2, argv + 2);
    if (!strcmp(model, "gpt"))
      return !strcmp(cmd, "train") ? tg_cmd_train_gpt(argc - 2, argv + 2)
                                   : tg_cmd_bench_gpt(argc - 2, argv + 2);
    tg_cli_die("unknown model '%s' for '%s' (known: mlp, gpt)", model, cmd);
  }
  if (!strcmp(cmd, "info")) return tg_cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "simulate")) return tg_cmd_simulate(argc - 1, argv + 1);
  if (!strcmp(cmd, "init")) {
    if (argc < 3) tg_cli_die("'taskgrad init' needs a model: gpt");
    if (!strcmp(argv[2], "gpt")) return tg_cmd_init_gpt(argc - 2, argv + 2);
    tg_cli_die("unknown model '%s' for 'init' (known: gpt)", argv[2]);
  }
  if (!strcmp(cmd, "prepare")) {
    if (argc < 3) tg_cli_die("'taskgrad prepare' needs a data set: kjv");
    if (!strcmp(argv[2], "kjv")) return tg_cmd_prepare_kjv(argc - 2, argv + 2);
    tg_cli_die("unknown data set '%s' for 'prepare' (known: kjv)", argv[2]);
  }
  fprintf(stderr, "taskgrad: error: unknown command '%s'\n\n", cmd);
  tg_usage(stderr);
  return TG_EXIT_USAGE;
}
