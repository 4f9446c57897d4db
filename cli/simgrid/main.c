/*
 * taskgrad-sim (SimGrid build only): the process in which `taskgrad
 * simulate` runs one simulation.
 *
 * starpu.h renames this main to starpu_main; StarPU's own main then starts
 * SimGrid with its fast context switching (ucontext) and runs us as the
 * simulated main thread.  It loads the platform of STARPU_HOSTNAME from
 * STARPU_PERF_MODEL_DIR before anything of ours runs, so `taskgrad simulate`
 * (cli/simulate.c) prepares both and starts this program; `taskgrad` itself
 * keeps a plain main (cli/main.c), so that its other commands and its flag
 * checks work without a platform, and StarPU would otherwise fall back to
 * one thread per simulated actor (several times slower).
 */
#include <stdlib.h>

#include <starpu.h>

#include "cli.h"

int main(int argc, char **argv) {
  /* SimGrid took its --log option out of argv before this main: a restart
   * (tg_cli_restart_with_clean_buffers) passes it again, so that SimGrid
   * stays quiet there too */
  char **again = malloc(sizeof *again * (size_t)(argc + 2));
  if (again) {
    again[0] = argv[0];
    again[1] = "--log=root.thres:warning";
    for (int i = 1; i <= argc; i++) again[i + 1] = argv[i]; /* and the NULL */
    tg_cli_argv = again;
  }
  return tg_cmd_simulate(argc - 1, argv + 1);
}
