/*
 * One simulated run of `taskgrad simulate` (cli/simulate.c parses the flags
 * and prepares the platform): the real graph builders on StarPU's SimGrid
 * workers, timed in simulated time (starpu_timing_now), then the figures the
 * issue asks for: step time, throughput, busy/idle per device, bytes per
 * link, device memory.
 *
 * Values computed in simulation are meaningless (no kernel runs); only the
 * times, transfers and allocations are simulated, so the batch is zeros.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "cli.h"
#include "simulate.h"
#include "taskgrad/gpt.h"
#include "taskgrad/mlp.h"
#include "taskgrad/parallel.h"
#include "taskgrad/sim.h"
#include "taskgrad/stats.h"

/* Device memory in use on every CUDA node, kept as a maximum over the
 * samples (taken after the warm-up and after each measured step: StarPU
 * keeps its allocations cached, so this is close to the peak). */
static void sample_memory(double *peak) {
  unsigned n = starpu_memory_nodes_get_count();
  for (unsigned node = 0; node < n && node < TG_SIM_MAX_NODES; node++) {
    starpu_ssize_t total = starpu_memory_get_total(node), avail = starpu_memory_get_available(node);
    if (total > 0 && avail >= 0 && (double)(total - avail) > peak[node])
      peak[node] = (double)(total - avail);
  }
}

/* 1 when the warm-up is over after k steps (lengths ms[0..k-1]).
 *
 * Why a warm-up that watches the steps (issue 53): the first steps pay
 * simulated cudaMalloc calls (StarPU's SimGrid mode charges each device
 * allocation, STARPU_SIMGRID_CUDA_MALLOC_COST), and StarPU keeps freed
 * buffers cached for reuse, so they stop once every buffer of a step has
 * been allocated.  With one device that is step 1 (93 ms, then 26.5 for
 * GPT-2 124M bf16); with 2-8 sharded devices step 2 allocates more device
 * memory again, for what step 1's sharded update and gather first placed
 * there (2 GPUs: 37.0 ms against 29.4 for every later step; 8 GPUs: 72.6
 * against 33.0), and the old default of one warm-up step folded that step
 * into the reported mean (8 GPUs: 46.1 ms).  A fixed count right for one
 * configuration is wrong for another, so the default runs at least
 * TG_SIM_WARMUP_MIN and stops at the first step within
 * TG_SIM_WARMUP_TOLERANCE of the one before (bench/results/
 * 2026-12-07-sim-8gpu-regression.md); TG_SIM_WARMUP_MAX bounds the host
 * time (a few seconds a step on 8 GPUs). */
static int settled(const double *ms, int k) { /* the last two steps agree */
  return k >= 2 && k <= TG_SIM_WARMUP_MAX &&
         fabs(ms[k - 1] - ms[k - 2]) <= TG_SIM_WARMUP_TOLERANCE * ms[k - 2];
}
static int warmup_done(const tg_sim_options *o, const double *ms, int k) {
  if (o->warmup != TG_SIM_WARMUP_AUTO) return k >= o->warmup;
  return k >= TG_SIM_WARMUP_MAX || (k >= TG_SIM_WARMUP_MIN && settled(ms, k));
}

/* Runs the warm-up, then steps steps of step(ctx), waiting for each; fills r. */
static void timed_steps(const tg_sim_options *o, int (*step)(void *), void *ctx,
                        tg_sim_result *r, tg_stats *st) {
  double ms[TG_SIM_WARMUP_MAX] = {0};
  int k = 0;
  while (!warmup_done(o, ms, k)) {
    double t = starpu_timing_now();
    if (step(ctx) < 0) tg_cli_die_last("warm-up step");
    starpu_task_wait_for_all();
    if (k < TG_SIM_WARMUP_MAX) ms[k] = (starpu_timing_now() - t) * 1e-3;
    k++;
  }
  r->warmup_steps = k;
  memcpy(r->warmup_ms, ms, sizeof ms);
  sample_memory(r->mem_peak);
  if (tg_stats_begin() < 0) tg_cli_die_last("statistics");
  double t0 = starpu_timing_now();
  for (int k = 0; k < o->steps; k++) {
    if (step(ctx) < 0) tg_cli_die_last("training step");
    starpu_task_wait_for_all();
    sample_memory(r->mem_peak);
  }
  r->step_ms = (starpu_timing_now() - t0) * 1e-3 / o->steps;
  if (tg_stats_end(st) < 0) tg_cli_die_last("statistics");
  r->window_us = r->step_ms * 1e3 * o->steps;
}

/* A batch of zeros partitioned into micro-batches by rows: x (rows, xcols)
 * of xtype, y (rows, 1) labels.  Not through tg_loader: its prefetch thread
 * is not a SimGrid actor, and StarPU's SimGrid mode serves only those. */
typedef struct sim_batch {
  tg_tensor x, y;
  starpu_data_handle_t xc[TG_SIM_MAX_MICRO], yc[TG_SIM_MAX_MICRO];
  tg_batch b;
} sim_batch;

static void batch_create(sim_batch *s, int rows, int xcols, tg_dtype xtype, int micro) {
  if (tg_tensor_alloc(&s->x, rows, xcols, xtype) < 0 || tg_tensor_alloc(&s->y, rows, 1, TG_I32) < 0)
    tg_cli_die_last("allocating the batch");
  memset(s->x.host, 0, tg_tensor_numel(&s->x) * (xtype == TG_F32 ? sizeof(float) : sizeof(int32_t)));
  memset(s->y.host, 0, tg_tensor_numel(&s->y) * sizeof(int32_t));
  struct starpu_data_filter f = {.filter_func = starpu_matrix_filter_vertical_block,
                                 .nchildren = (unsigned)micro};
  starpu_data_partition(s->x.handle, &f);
  starpu_data_partition(s->y.handle, &f);
  for (int i = 0; i < micro; i++) {
    s->xc[i] = starpu_data_get_sub_data(s->x.handle, 1, i);
    s->yc[i] = starpu_data_get_sub_data(s->y.handle, 1, i);
  }
  s->b = (tg_batch){.rows = rows, .nmicro = micro, .x = s->xc, .y = s->yc};
}

static void batch_destroy(sim_batch *s) {
  starpu_data_unpartition(s->x.handle, STARPU_MAIN_RAM);
  starpu_data_unpartition(s->y.handle, STARPU_MAIN_RAM);
  tg_tensor_free(&s->x);
  tg_tensor_free(&s->y);
}

typedef struct gpt_ctx {
  tg_gpt g;
  sim_batch s;
  float lr;
} gpt_ctx;
static int gpt_step(void *p) {
  gpt_ctx *c = p;
  return tg_gpt_step(&c->g, &c->s.b, c->lr);
}

static void run_gpt(const tg_sim_options *o, tg_sim_result *r, tg_stats *st) {
  tg_gpt_config cfg = o->run.model;
  /* simulate refuses loss scaling, so amp is the precision alone */
  tg_gpt_run_config run =
      tg_cli_gpt_run_config(&o->run, o->run.cfg.B, o->run.cfg.T, o->run.cfg.nmicro);
  tg_cli_gpt_fit(&cfg, &run, tg_ncpu_workers() + tg_ncuda_workers(), tg_cli_device_memory(),
                 tg_cli_is_root(), "this GPT model and batch");
  /* the host-backed tensors: the model's state and the attention buffers
   * (folded in simulation: no real RAM, src/tensor.c) */
  tg_gpt_run_config all = run; /* everything host-backed, offloaded or not */
  all.offload_optimizer = 0;
  double host = (double)(tg_gpt_device_bytes(&cfg, &all) - tg_gpt_managed_bytes(&cfg, &all, 1));
  if (o->host_mem > 0 && host > o->host_mem)
    tg_cli_die("this GPT model and batch need about %.1f GB of host memory for the model's "
               "state and attention buffers, more than the %.1f GB of platform %s's host "
               "(--host-memory)", host * 1e-9, o->host_mem * 1e-9, o->platform);
  r->host_bytes = host;
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  gpt_ctx c = {.lr = 1e-4f};
  /* no host copy: simulation runs no kernel, so values do not matter */
  if (tg_gpt_create(&c.g, &cfg, NULL, &run, &opt) < 0) tg_cli_die_last("building the model");
  /* packed activations are host-backed too (gpt.h, tg_gpt_attn) */
  host += (double)tg_gpt_packed_activation_bytes(&c.g);
  r->packed_activations = tg_gpt_packed_activation_bytes(&c.g) > 0;
  if (o->host_mem > 0 && host > o->host_mem)
    tg_cli_die("this GPT model and batch need about %.1f GB of host memory for the model's "
               "state, attention buffers and packed activations, more than the %.1f GB of "
               "platform %s's host (--host-memory)", host * 1e-9, o->host_mem * 1e-9,
               o->platform);
  r->host_bytes = host;
  /* under StarPU-MPI (taskgrad-sim-mpi): every replica starts from rank 0's
   * parameters, as in `train gpt`, so the simulation moves them too */
  if (tg_gpt_broadcast_params(&c.g) < 0) tg_cli_die_last("broadcasting the parameters");
  batch_create(&c.s, o->run.cfg.B * o->run.cfg.T, 1, TG_I32, o->run.cfg.nmicro); /* (B*T, 1) tokens, targets */
  timed_steps(o, gpt_step, &c, r, st);
  r->shard_devices = tg_gpt_shard_devices(&c.g);
  r->scatter_devices = tg_gpt_scatter_devices(&c.g);
  r->relay_devices = tg_gpt_relay_devices(&c.g);
  r->linear_tiles = c.g.run.linear_tiles;
  r->fused_blocks = c.g.run.fused_blocks > 0;
  r->packed_layers = c.g.run.packed_layers > 0;
  r->items = (double)o->run.cfg.B * o->run.cfg.T;
  r->flops = tg_gpt_flops_per_token(&cfg, o->run.cfg.T) * o->run.cfg.B * o->run.cfg.T;
  if (run.recompute)
    r->extra_flops =
        tg_gpt_recompute_flops_per_token(&cfg, o->run.cfg.T) * o->run.cfg.B * o->run.cfg.T;
  batch_destroy(&c.s);
  tg_gpt_destroy(&c.g);
}

typedef struct mlp_ctx {
  tg_mlp m;
  sim_batch s;
} mlp_ctx;
static int mlp_step(void *p) {
  mlp_ctx *c = p;
  return tg_mlp_step(&c->m, &c->s.b);
}

static void run_mlp(const tg_sim_options *o, tg_sim_result *r, tg_stats *st) {
  tg_mlp_config cfg = o->mlp;
  cfg.amp.precision = o->run.prec.precision;
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  mlp_ctx c;
  if (tg_mlp_create(&c.m, &cfg, &opt, 1) < 0) tg_cli_die_last("creating the model");
  batch_create(&c.s, o->run.cfg.B, cfg.widths[0], TG_F32, o->run.cfg.nmicro); /* (batch, in) inputs */
  timed_steps(o, mlp_step, &c, r, st);
  r->items = o->run.cfg.B;
  r->flops = tg_mlp_step_flops(&cfg, o->run.cfg.B);
  batch_destroy(&c.s);
  tg_mlp_destroy(&c.m);
}

/* The last step's tail: from the end of its last compute task (forward,
 * backward, classifier) to the end of its last task, which is then the
 * gradient exchange and the update (the sharded mode's tg_sum_tree,
 * tg_gather_rows, AdamW; STARPU_REDUX's merges run as tg_accumulate and
 * count as compute here, so redux runs show the update only). */
static void print_exposed(const tg_stats *st, double step_ms) {
  static const char *const tail[] = {"tg_sum_tree", "tg_gather_rows", "tg_adamw",
                                     "tg_adamw_amp", "tg_sgd", "tg_nonfinite", "tg_convert"};
  double last = 0, compute = 0;
  for (int i = 0; i < st->ncodelets; i++) {
    const tg_codelet_stats *c = &st->codelets[i];
    int is_tail = 0;
    for (size_t k = 0; k < sizeof tail / sizeof tail[0]; k++)
      if (!strcmp(c->name, tail[k])) is_tail = 1;
    if (c->last_end_us > last) last = c->last_end_us;
    if (!is_tail && c->last_end_us > compute) compute = c->last_end_us;
  }
  if (compute <= 0) return;
  double ms = (last - compute) * 1e-3;
  printf("exposed exchange and update (last step, after its last compute task): %.3f ms, "
         "%.1f%% of the step\n", ms, step_ms > 0 ? 100 * ms / step_ms : 0);
}

static void print_report(const tg_sim_options *o, const tg_sim_result *r, const tg_stats *st) {
  const char *unit = o->is_gpt ? "tokens/s" : "samples/s";
  printf("simulate %s: platform %s, %d GPU(s), %d CPU worker(s), scheduler %s, %s, "
         "batch %d, %d micro-batches, %d steps after %d warm-up\n",
         o->is_gpt ? "gpt" : "mlp", o->platform, o->gpus, o->ncpus,
         starpu_sched_ctx_get_sched_policy(0)->policy_name,
         tg_precision_name(o->run.prec.precision), o->run.cfg.B, o->run.cfg.nmicro, o->steps,
         r->warmup_steps);
  /* the warm-up's steps, so that a transient the mean leaves out is seen */
  printf("warm-up steps ms:");
  for (int k = 0; k < r->warmup_steps && k < TG_SIM_WARMUP_MAX; k++)
    printf(" %.3f", r->warmup_ms[k]);
  if (r->warmup_steps > TG_SIM_WARMUP_MAX) printf(" ...");
  if (o->warmup == TG_SIM_WARMUP_AUTO)
    printf(" (--warmup auto: %d to %d steps, until one is within %.0f%% of the one before%s)",
           TG_SIM_WARMUP_MIN, TG_SIM_WARMUP_MAX, 100 * TG_SIM_WARMUP_TOLERANCE,
           settled(r->warmup_ms, r->warmup_steps) ? "" : "; the last was not");
  printf("\n");
  if (r->shard_devices)
    printf("data parallel: sharded over %d devices\n", r->shard_devices);
  if (r->scatter_devices)
    printf("gradients reduce-scattered over %d devices, a block each to the host\n",
           r->scatter_devices);
  if (r->relay_devices)
    printf("weights relayed: each device reads 1/%d of a layer's from the host, the rest from "
           "the other devices\n", r->relay_devices);
  if (r->fused_blocks)
    printf("blocks fused: each block's forward one task, its backward one (--no-fused-blocks: "
           "a task per operation)\n");
  if (r->packed_layers)
    printf("layers packed: each layer's parameters, gradients, moments and 16-bit weights one "
           "buffer each%s (--no-packed-layers: a buffer per tensor)\n",
           r->packed_activations ? ", and each block's activations" : "");
  if (r->linear_tiles > 1)
    printf("linear layers in %d tiles (column tiles per layer and micro-batch)\n",
           r->linear_tiles);
  printf("simulated step ms: %.3f\n", r->step_ms);
  printf("simulated %s: %.0f\n", unit, r->items / (r->step_ms * 1e-3));
  printf("simulated TFLOP/s: %.1f (%s count)\n", r->flops / (r->step_ms * 1e9),
         o->is_gpt ? "llm.c" : "6 per weight per sample");
  if (r->extra_flops > 0)
    printf("recompute: %.1f%% more FLOPs executed than counted (%.2f TFLOP per step; "
           "neither TFLOP/s nor MFU counts them)\n",
           100 * r->extra_flops / r->flops, r->extra_flops * 1e-12);
  if (o->gpus > 0) { /* model FLOPs over the GEMMs' dense peak of the precision */
    int prec = o->run.prec.precision;
    double peak = prec == TG_PREC_FP32 ? o->roofline.gpu_fp32
                  : prec == TG_PREC_TF32 ? o->roofline.gpu_tf32
                                         : o->roofline.gpu_bf16;
    printf("simulated MFU: %.1f%% (of %d x %.1f TFLOP/s, the dense %s peak)\n",
           100 * r->flops / (r->step_ms * 1e-3) / (peak * o->gpus), o->gpus, peak * 1e-12,
           tg_precision_name(prec));
  }
  long on_cuda = 0, all = 0;
  for (int w = 0; w < st->nworkers; w++) {
    const tg_worker_stats *ws = &st->workers[w];
    double busy = ws->executing_us;
    double idle = r->window_us > busy ? r->window_us - busy : 0;
    printf("device %s: busy %.3f ms, idle %.3f ms per step (%.1f%% busy), %d tasks\n",
           ws->name, busy * 1e-3 / o->steps, idle * 1e-3 / o->steps,
           r->window_us > 0 ? 100 * busy / r->window_us : 0, ws->tasks);
    all += ws->tasks;
    if (!strncmp(ws->name, "CUDA", 4)) on_cuda += ws->tasks;
  }
  printf("tasks on simulated CUDA workers: %ld of %ld\n", on_cuda, all);
  print_exposed(st, r->step_ms);
  double gpu_gpu = 0;
  for (int b = 0; b < st->nbuses; b++) {
    const tg_bus_stats *bs = &st->buses[b];
    char src[32], dst[32];
    starpu_memory_node_get_name((unsigned)bs->src, src, sizeof src);
    starpu_memory_node_get_name((unsigned)bs->dst, dst, sizeof dst);
    printf("link %s -> %s: %.1f MB per step (%ld transfers in %d steps)\n", src, dst,
           bs->bytes * 1e-6 / o->steps, bs->transfers, o->steps);
    if (starpu_node_get_kind((unsigned)bs->src) == STARPU_CUDA_RAM &&
        starpu_node_get_kind((unsigned)bs->dst) == STARPU_CUDA_RAM)
      gpu_gpu += (double)bs->bytes;
  }
  printf("bytes between GPUs: %.0f per step\n", gpu_gpu / o->steps);
  unsigned n = starpu_memory_nodes_get_count();
  for (unsigned node = 0; node < n && node < TG_SIM_MAX_NODES; node++) {
    if (starpu_node_get_kind(node) != STARPU_CUDA_RAM) continue;
    char name[32];
    starpu_memory_node_get_name(node, name, sizeof name);
    printf("peak device memory %s: %.2f GB of %.2f GB\n", name, r->mem_peak[node] * 1e-9,
           starpu_memory_get_total(node) * 1e-9);
  }
  const char *what = r->packed_activations
                         ? "the model's state, attention buffers, packed activations"
                         : "the model's state, attention buffers";
  if (r->host_bytes > 0 && o->host_mem > 0)
    printf("host memory: about %.2f GB host-backed (%s) of %.0f GB\n", r->host_bytes * 1e-9,
           what, o->host_mem * 1e-9);
  else if (r->host_bytes > 0)
    printf("host memory: about %.2f GB host-backed (%s); the platform gives no host size\n",
           r->host_bytes * 1e-9, what);
  long hist, roof;
  tg_sim_counts(&hist, &roof);
  const tg_sim_roofline *rf = &o->roofline;
  /* where the histories came from (cli/simulate.c, prepare_history) */
  const char *from = getenv("TG_SIM_HISTORY");
  char label[600] = "";
  if (from && *from) snprintf(label, sizeof label, " (%.580s)", from);
  if (o->cost == TG_SIM_COST_EXPECTED || (o->cost == TG_SIM_COST_CALIBRATED && rf->gemm_fraction > 0))
    printf("cost model: %ld estimates from calibrated history%s, %ld from the expected model "
           "(GEMMs at %.1f%% of peak times their wave quantization, memory at %.0f%% of the "
           "bandwidth, other kernels at %.0f%% of the CUDA-core peak, flash attention at "
           "%.2f%% and cuDNN's at %.0f%% of the bf16 peak; predictions)\n",
           hist, label, roof, 100 * rf->gemm_fraction, 100 * rf->memory_fraction,
           100 * rf->core_fraction, 100 * rf->flash_fraction, 100 * rf->cudnn_fraction);
  else if (o->cost == TG_SIM_COST_CALIBRATED)
    printf("cost model: %ld estimates from calibrated history%s, %ld from the peak roofline "
           "(an upper bound)\n", hist, label, roof);
  else
    printf("cost model: %ld estimates from calibrated history, %ld from the peak roofline%s\n",
           hist, roof,
           roof ? " (an upper bound; predictions until calibrated on real hardware)" : "");
}

int tg_sim_run(const tg_sim_options *o, tg_runtime_config *rt) {
  rt->profiling = 1;
#if defined(TG_HAVE_MPI) && defined(TG_SIMGRID)
  /* taskgrad-sim-mpi (scripts/build-sim-mpi) runs under starpu_smpirun, one
   * rank per simulated node: data parallelism over the ranks as in `train` */
  rt->mpi = 1;
#endif
  if (tg_init(rt) < 0) tg_cli_die_last("starting StarPU's simulation");
  tg_cli_end_on_signals();
  if ((int)starpu_cuda_worker_get_count() != o->gpus) {
    int got = (int)starpu_cuda_worker_get_count();
    tg_shutdown();
    tg_cli_die("the simulation started %d CUDA workers, not the %d asked for", got, o->gpus);
  }
  tg_sim_roofline roof = o->roofline;
  roof.tensor_f32 = o->run.prec.precision != TG_PREC_FP32;
  /* calibrated: the expected model for the tasks the histories miss */
  roof.expected = o->cost == TG_SIM_COST_EXPECTED ||
                  (o->cost == TG_SIM_COST_CALIBRATED && roof.gemm_fraction > 0);
  if (tg_sim_set_roofline(&roof) < 0) tg_cli_die_last("--platform roofline");
  tg_cli_instrument_begin_bench(rt);
  /* --batch and --micro-batches are global; each rank takes its share */
  int ranks = tg_dist_size();
  if (o->run.cfg.B % ranks || o->run.cfg.nmicro % ranks)
    tg_cli_die("--batch %d and --micro-batches %d must be multiples of the %d MPI ranks",
               o->run.cfg.B, o->run.cfg.nmicro, ranks);
  tg_sim_options mine = *o;
  mine.run.cfg.B /= ranks;
  mine.run.cfg.nmicro /= ranks;
  tg_sim_result r = {0};
  tg_stats st;
  if (o->is_gpt) run_gpt(&mine, &r, &st);
  else run_mlp(&mine, &r, &st);
  r.items *= ranks;
  r.flops *= ranks;
  if (tg_dist_rank() == 0) print_report(o, &r, &st); /* rank 0's node: its devices and links */
  tg_cli_instrument_end(rt);
  tg_shutdown();
  return 0;
}
