/*
 * Perfmodels of the SimGrid build (issue 13; include/taskgrad/sim.h).
 *
 * Each codelet's model there is STARPU_PER_ARCH with an arch cost function
 * (TG_PERFMODEL in codelets/codelet_common.h) that calls tg_sim_cost.  It looks
 * first in the codelet's calibrated history (the taskgrad_<op> file a real
 * run wrote for the simulated host name, STARPU_HOSTNAME): a calibrated
 * entry for the task's footprint on that arch wins.  Otherwise a roofline:
 * max(flops / peak, bytes / bandwidth) + launch, with the peak of the task's
 * precision (GEMM-class codelets on tensor cores, the rest on CUDA cores).
 * The history is read by walking the public per-arch list rather than
 * through starpu_perfmodel_history_based_expected_perf, which in SimGrid
 * mode prints a warning for every miss.
 *
 * In other builds only tg_sim_available (0) exists.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "codelet_common.h"
#include "taskgrad/sim.h"

#ifndef TG_SIMGRID
int tg_sim_available(void) { return 0; }
int tg_sim_set_roofline(const tg_sim_roofline *r) {
  (void)r;
  return tg_fail(ENOTSUP, "this build of taskgrad has no SimGrid (configure with -DTG_SIMGRID=ON)");
}
void tg_sim_counts(long *h, long *r) {
  if (h) *h = 0;
  if (r) *r = 0;
}
#else

int tg_sim_available(void) { return 1; }

void tg_sim_cuda_body(void *buffers[], void *cl_arg) {
  (void)buffers;
  (void)cl_arg;
}

/* H100 SXM figures until a platform sets its own (platforms/h100x1.roofline) */
static tg_sim_roofline tg_roof = {
    .gpu_fp32 = 67e12, .gpu_tf32 = 494.7e12, .gpu_bf16 = 989.4e12, .gpu_bw = 3.35e12,
    .cpu_flops = 50e9, .cpu_bw = 10e9, .launch_us = 4.0, .tensor_f32 = 0};
static atomic_long tg_hits, tg_misses;

static int tg_fraction_ok(double f) { return f > 0 && f <= 1; }

int tg_sim_set_roofline(const tg_sim_roofline *r) {
  if (!(r->gpu_fp32 > 0 && r->gpu_tf32 > 0 && r->gpu_bf16 > 0 && r->gpu_bw > 0 &&
        r->cpu_flops > 0 && r->cpu_bw > 0 && r->launch_us > 0))
    return tg_fail(EINVAL, "roofline: every rate and the launch cost must be positive");
  if (r->expected && !(tg_fraction_ok(r->gemm_fraction) && tg_fraction_ok(r->memory_fraction) &&
                       tg_fraction_ok(r->core_fraction) && tg_fraction_ok(r->flash_fraction) &&
                       tg_fraction_ok(r->cudnn_fraction) &&
                       r->gemm_tile >= 1 && r->gpu_sms >= 1))
    return tg_fail(EINVAL, "expected cost model: fractions must lie in (0, 1], the GEMM tile "
                           "and the SM count be >= 1");
  tg_roof = *r;
  return 0;
}

void tg_sim_counts(long *h, long *r) {
  if (h) *h = atomic_load(&tg_hits);
  if (r) *r = atomic_load(&tg_misses);
}

/* Codelets whose flops are a GEMM's (tensor-core eligible on GPUs). */
static int tg_gemm_class(const char *name) {
  static const char *const gemms[] = {"tg_gemm", "tg_gemm_lowp", "tg_linear_fwd",
                                      "tg_linear_bwd_weight", "tg_linear_bwd",
                                      "tg_linear_bwd_data", "tg_lm_classifier",
                                      "tg_linear_fwd_tile", "tg_linear_bwd_data_tile",
                                      "tg_lm_logits_tile"};
  for (size_t i = 0; i < sizeof gemms / sizeof gemms[0]; i++)
    if (name && !strcmp(name, gemms[i])) return 1;
  return 0;
}

/* The expected model's GEMM efficiency from the shape: the output, the
 * task's largest written matrix (m, n), is cut in gemm_tile x gemm_tile
 * tiles that run in waves of gpu_sms; a partly filled last wave idles the
 * rest.  With fewer tiles than SMs, K (flops / 2mn) is split into at most
 * gpu_sms / tiles parts of >= 2 tiles' depth each (split-K, as cuBLAS does
 * for such shapes), filling more SMs.  Assumptions, stated in
 * platforms/gen-h100.py and docs/simulation.md. */
static double tg_wave_efficiency(struct starpu_task *task) {
  double m = 0, n = 0, best = 0;
  for (int i = 0; i < task->nbuffers; i++) {
    enum starpu_data_access_mode md = STARPU_TASK_GET_MODE(task, i);
    starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
    if ((md & STARPU_SCRATCH) || !((md & STARPU_W) || (md & STARPU_REDUX))) continue;
    if (starpu_data_get_interface_id(h) != STARPU_MATRIX_INTERFACE_ID) continue;
    double sz = (double)starpu_data_get_size(h);
    if (sz > best) {
      best = sz;
      m = starpu_matrix_get_ny(h);
      n = starpu_matrix_get_nx(h);
    }
  }
  if (!(m > 0 && n > 0 && task->flops > 0)) return 1;
  double tile = tg_roof.gemm_tile, sms = tg_roof.gpu_sms;
  double tiles = ceil(m / tile) * ceil(n / tile), k = task->flops / (2 * m * n);
  if (tiles < sms) {
    double split = floor(sms / tiles), deepest = floor(k / (2 * tile));
    tiles *= split < deepest ? split : deepest > 1 ? deepest : 1;
  }
  double waves = ceil(tiles / sms);
  return tiles / (waves * sms);
}

/* Bytes a task reads plus writes (scratch space is neither). */
static double tg_task_bytes(struct starpu_task *task) {
  double bytes = 0;
  for (int i = 0; i < task->nbuffers; i++) {
    enum starpu_data_access_mode m = STARPU_TASK_GET_MODE(task, i);
    if (m & STARPU_SCRATCH) continue;
    double sz = (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
    bytes += ((m & STARPU_R) ? sz : 0) + ((m & STARPU_W) || (m & STARPU_REDUX) ? sz : 0);
  }
  return bytes;
}

/* Loading a history model happens once per codelet (the first task); the
 * codelets without a history file are remembered so that it is looked for
 * once.
 *
 * The lock is StarPU's, not a pthread mutex: in SimGrid mode every worker is
 * a SimGrid actor and the actors share OS threads, and loading a history
 * takes StarPU's own (SimGrid) locks, which may switch to another actor.  A
 * pthread mutex held across that switch blocked the whole thread when the
 * next actor asked for it: a 124M simulation on 8 CPU workers hung for good
 * (bench/results/2026-11-24-many-core.md). */
static starpu_pthread_mutex_t tg_load_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;
#define TG_SIM_MAX_MODELS 64
static struct starpu_perfmodel *tg_absent[TG_SIM_MAX_MODELS];
static int tg_nabsent;

static int tg_hist_ready(struct starpu_perfmodel *hist) {
  if (starpu_pthread_mutex_lock(&tg_load_lock) != 0) TG_FATAL("simulation: cannot take a lock");
  int absent = 0;
  for (int i = 0; i < tg_nabsent; i++) absent |= tg_absent[i] == hist;
  if (!hist->is_loaded && !absent) {
    char path[1024];
    starpu_perfmodel_get_model_path(hist->symbol, path, sizeof path);
    if (access(path, R_OK) == 0 && starpu_perfmodel_load_symbol(hist->symbol, hist) == 0)
      hist->is_loaded = 1;
    else if (tg_nabsent < TG_SIM_MAX_MODELS)
      tg_absent[tg_nabsent++] = hist;
  }
  int ready = hist->is_loaded;
  if (starpu_pthread_mutex_unlock(&tg_load_lock) != 0) TG_FATAL("simulation: cannot release a lock");
  return ready;
}

static double tg_history_us(struct starpu_perfmodel *hist, struct starpu_task *task,
                            struct starpu_perfmodel_arch *arch, unsigned nimpl) {
  if (!tg_hist_ready(hist)) return -1;
  struct starpu_perfmodel_per_arch *pa = starpu_perfmodel_get_model_per_arch(hist, arch, nimpl);
  if (!pa) return -1;
  uint32_t fp = hist->footprint ? hist->footprint(task) : starpu_task_data_footprint(task);
  for (struct starpu_perfmodel_history_list *l = pa->list; l; l = l->next)
    if (l->entry && l->entry->footprint == fp && l->entry->nsample > 0 && l->entry->mean > 0)
      return l->entry->mean;
  return -1;
}

double tg_sim_history(struct starpu_perfmodel *hist, struct starpu_task *task,
                      struct starpu_perfmodel_arch *arch, unsigned nimpl) {
  double us = tg_history_us(hist, task, arch, nimpl);
  if (us > 0) atomic_fetch_add(&tg_hits, 1);
  return us;
}

double tg_sim_cost(struct starpu_perfmodel *hist, struct starpu_task *task,
                   struct starpu_perfmodel_arch *arch, unsigned nimpl) {
  double us = tg_sim_history(hist, task, arch, nimpl);
  if (us > 0) return us;
  atomic_fetch_add(&tg_misses, 1);
  double flops = task->flops > 0 ? task->flops : 0, bytes = tg_tile_task_bytes(task);
  if (bytes < 0) bytes = tg_task_bytes(task);
  double peak, bw;
  if (arch->ndevices > 0 && arch->devices[0].type == STARPU_CUDA_WORKER) {
    int lowp = tg_lowp_of_task(task, NULL) || tg_linear_bwd_weight_is_lowp(task) ||
               tg_linear_bwd_is_lowp(task) ||
               (task->cl && task->cl->name && !strcmp(task->cl->name, "tg_gemm_lowp"));
    int gemm = task->cl && tg_gemm_class(task->cl->name);
    int tc = tg_attention_on_tensor_cores(task);
    if (tc) { /* bf16 products: the whole T x T (gemm) or the causal blocks */
      gemm = lowp = 1;
      if (tc == TG_BF16_GEMM) flops *= 2;
    }
    peak = !gemm ? tg_roof.gpu_fp32
           : lowp ? tg_roof.gpu_bf16
           : tg_roof.tensor_f32 ? tg_roof.gpu_tf32 : tg_roof.gpu_fp32;
    bw = tg_roof.gpu_bw;
    bytes += tg_attention_scratch_traffic(task) + tg_lm_classifier_scratch_traffic(task);
    if (tg_roof.expected) {
      /* the flash kernels at their own measured rate, cuDNN's attention at
       * its published one: far from a GEMM's (platforms/gen-h100.py) */
      peak *= tc == TG_BF16_FLASH   ? tg_roof.flash_fraction
              : tc == TG_BF16_CUDNN ? tg_roof.cudnn_fraction
              : gemm                ? tg_roof.gemm_fraction * tg_wave_efficiency(task)
                                    : tg_roof.core_fraction;
      bw *= tg_roof.memory_fraction;
    }
  } else {
    int cores = arch->ndevices > 0 && arch->devices[0].ncores > 0 ? arch->devices[0].ncores : 1;
    peak = tg_roof.cpu_flops * cores;
    bw = tg_roof.cpu_bw * cores;
  }
  double t = flops / peak, tm = bytes / bw;
  /* a second kernel after the GEMM (not overlapped with it) */
  double serial =
      (tg_linear_bwd_weight_serial_bytes(task) + tg_linear_bwd_serial_bytes(task)) / bw;
  return ((t > tm ? t : tm) + serial) * 1e6 + tg_roof.launch_us;
}
#endif
