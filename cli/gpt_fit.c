/*
 * Automatic fit of a GPT step (gpt_run_options.h): activation recompute
 * and the optimizer's offload to the CPU workers turned on when the step
 * does not fit in memory without them, and said.  Two budgets:
 * STARPU_LIMIT_CPU_MEM, against the memory StarPU allocates itself
 * (tg_gpt_managed_bytes), and one device's memory, against an estimate of
 * a whole step's working set there (tg_gpt_device_bytes; the sharded
 * optimizer's state divided among the devices).  Recompute comes first (it
 * costs FLOPs on the device), then the offload (PCIe traffic, CPU time).
 * A device still too small is left to StarPU, which evicts host-backed data
 * to make room; a CPU limit still too small is refused before the first
 * step (exit 2), as StarPU 1.3 could spin forever allocating.
 */
#include <stdio.h>

#include "cli.h"
#include "gpt_run_options.h"
#include "taskgrad/runtime.h"

/* The device estimate of run (tg_gpt_device_bytes), the model's state
 * divided among the devices that a sharded optimizer would spread over
 * (tg_gpt_create's rule). */
static double tg_cli_gpt_device_need(const tg_gpt_config *cfg, const tg_gpt_run_config *run) {
  int ndev = tg_ncuda_workers() + tg_nopencl_workers();
  if (run->data_parallel == TG_DP_REDUX || run->offload_optimizer || ndev < 2 ||
      run->nmicro < ndev)
    ndev = 1;
  double need = (double)tg_gpt_device_bytes(cfg, run);
  if (ndev > 1) {
    size_t sizes[TG_GPT_NPARAMS];
    double N = (double)tg_gpt_param_sizes(cfg, sizes);
    double lowp = tg_precision_lowp(run->amp.precision) ? 2 : 0;
    /* each device: its 1/ndev of the f32 state, a replica of the weights */
    need -= N * (16 + lowp) * (1 - 1.0 / ndev);
    need += N * (lowp ? lowp : 4);
  }
  return need;
}

/* Both choices, after the user's: keep_* when forced off.  Returns 1 when
 * a step still holds more than a device (StarPU evicts), else 0. */
static int tg_cli_gpt_choose(const tg_gpt_config *cfg, tg_gpt_run_config *run, int nworkers,
                              double device_bytes, int say, const char *what,
                              int keep_recompute, int keep_offload) {
  tg_gpt_run_config rec = *run;
  rec.recompute = 1;
  size_t limit = tg_cli_cpu_mem_limit_mib(); /* MiB */
  size_t need = tg_cli_mib(tg_gpt_managed_bytes(cfg, run, nworkers));
  if (need > limit) {
    size_t with = tg_cli_mib(tg_gpt_managed_bytes(cfg, keep_recompute ? run : &rec, nworkers));
    if (run->recompute || keep_recompute || with > limit)
      tg_cli_die("STARPU_LIMIT_CPU_MEM=%zu MiB is below the %zu MiB that %s needs in "
                 "StarPU-managed memory (activations in flight and reduction buffers)%s; "
                 "raise the limit or lower --batch",
                 limit, with, what,
                 run->recompute ? ", with activation recompute"
                 : keep_recompute ? " (with --no-recompute)" : " even with activation recompute");
    run->recompute = 1;
    if (say)
      fprintf(stderr, "taskgrad: activation recompute on (--recompute): %s needs %zu MiB of "
              "StarPU-managed memory without it, %zu MiB with it, and STARPU_LIMIT_CPU_MEM "
              "is %zu MiB\n", what, need, with, limit);
  }
  if (device_bytes <= 0) return 0;
  double dev = tg_cli_gpt_device_need(cfg, run);
  if (dev <= device_bytes) return 0;
  /* first recompute (FLOPs), then the optimizer to the host (PCIe traffic) */
  if (!run->recompute && !keep_recompute) {
    run->recompute = 1;
    double with = tg_cli_gpt_device_need(cfg, run);
    if (say)
      fprintf(stderr, "taskgrad: activation recompute on (--recompute): a step of %s holds "
              "about %.2f GB on a device without it, %.2f GB with it, and a device has "
              "%.2f GB\n", what, dev * 1e-9, with * 1e-9, device_bytes * 1e-9);
    dev = with;
  }
  if (dev > device_bytes && !run->offload_optimizer && !keep_offload && tg_ncpu_workers() > 0 &&
      run->data_parallel != TG_DP_SHARD) {
    run->offload_optimizer = 1;
    double with = tg_cli_gpt_device_need(cfg, run);
    /* more than sharded: the sharded state's replicas and gradient slots
     * are homed on each device, so StarPU could not evict them; offloaded,
     * everything is host-backed */
    if (say)
      fprintf(stderr, "taskgrad: optimizer offloaded to the %d CPU workers%s "
              "(--offload-optimizer): a step holds about %.2f GB on a device with the "
              "optimizer there, %.2f GB without it%s\n", tg_ncpu_workers(),
              tg_cpu_workers_capped()
                  ? " (beside GPUs at most 4 by default; --ncpus N for more)" : "",
              dev * 1e-9, with * 1e-9, with > dev ? " (host-backed, so evictable, where the "
              "sharded optimizer's replicas and gradient slots stay on each device)" : "");
    dev = with;
  }
  if (dev > device_bytes && say)
    fprintf(stderr, "taskgrad: a step holds about %.2f GB on a device of %.2f GB: StarPU "
            "evicts host-backed data to make room%s\n", dev * 1e-9, device_bytes * 1e-9,
            !run->offload_optimizer && tg_ncpu_workers() == 0
                ? " (with CPU workers, --ncpus, the optimizer could run on the host)" : "");
  return dev > device_bytes;
}

void tg_cli_gpt_fit(const tg_gpt_config *cfg, tg_gpt_run_config *run, int nworkers,
                    double device_bytes, int say, const char *what) {
  int keep_recompute = run->recompute == TG_CLI_FORCED_OFF;
  int keep_offload = run->offload_optimizer == TG_CLI_FORCED_OFF;
  if (keep_recompute) run->recompute = 0;
  if (keep_offload) run->offload_optimizer = 0;
  /* a step that evicts wants the clean buffers that tg_init turned off
   * (runtime.h): decided quietly first, so that the restart prints once */
  tg_gpt_run_config quiet = *run;
  if (tg_clean_buffers_disabled() &&
      tg_cli_gpt_choose(cfg, &quiet, nworkers, device_bytes, 0, what, keep_recompute,
                        keep_offload))
    tg_cli_restart_with_clean_buffers();
  tg_cli_gpt_choose(cfg, run, nworkers, device_bytes, say, what, keep_recompute, keep_offload);
}

double tg_cli_device_memory(void) {
  double least = 0;
  unsigned n = starpu_memory_nodes_get_count();
  for (unsigned node = 0; node < n; node++) {
    if (starpu_node_get_kind(node) == STARPU_CPU_RAM) continue;
    starpu_ssize_t total = starpu_memory_get_total(node);
    if (total > 0 && (least == 0 || (double)total < least)) least = (double)total;
  }
  return least;
}
