/*
 * The weight relay of the GPT (run.weight_relay, gpt.h): with the optimizer
 * offloaded, the micro-batches pinned to N >= 2 devices and the gradients
 * reduce-scattered, each device's copy of a layer's GEMM weights (16-bit
 * in mixed precision) is built from 1/N of it read from the host by each
 * device and N - 1 pieces from the other devices, a layer ahead of its
 * use.
 *
 * Why: the offloaded AdamW leaves the weights the GEMMs read (the 16-bit
 * copies wl in mixed precision, else the f32 weights) in host memory,
 * and without the relay every device read every weight whole over its own
 * PCIe link, twice a step (the forward and the backward), and only once the
 * layer's first task was ready, since StarPU starts a task's transfers when
 * it pushes the task.  The 52B step on 8 simulated H100s spent 6.6 s of its
 * forward on 1.0 s of compute, and once the devices' memory held 40 layers'
 * weights every further allocation evicted (bench/results/
 * 2026-11-28-grad-scatter.md; with the relay, 2026-11-28-weight-relay.md).
 *
 * Per GEMM weight (p, l) and step:
 *  1. stage: a read-only plan cuts wl[p][l] into N row blocks, and block j
 *     is copied into shard (p, l, j), a temporary written on device j (one
 *     tg_gather_rows task of 1 input pinned to its worker): 1/N of the
 *     weight over each PCIe link;
 *  2. gather: device d's replica (p, l, d), a temporary, is the N shards
 *     stacked (tg_gather_rows on device d): N - 1 of them come over the
 *     device-to-device links;
 *  3. the layer's tasks on device d read the replica (tg_gpt_relay_weight);
 *  4. shards and replicas are released after the forward of layer l (so
 *     that no device holds more than a few layers' weights: kept to the
 *     backward, 64 layers of C 8192 filled the devices and StarPU wrote
 *     the shards back to the host to make room), staged and gathered again
 *     before its backward, and released after it.  The last layer's
 *     replicas stay from its forward to its backward.
 * The forward's gathers of layer l + 1 and stages of layer l + 2 wait for
 * the input of layer l (a gate: tg_gather_rows_after_insert), so that they
 * run under the compute of layer l rather than all at once at the step's
 * start; the backward's gathers of layer l - 1 and stages of layer l - 2
 * wait for the residual gradient that enters layer l (gpt.c:
 * tg_gpt_relay_forward, tg_gpt_relay_backward).  The copies move bytes:
 * the step's results are bitwise those without the relay.
 *
 * The plan on wl is joined after its stage tasks, before the optimizer's
 * own row blocks write wl at the step's end (StarPU 1.3 allows one
 * writable plan at a time).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpt_internal.h"
#include "graph_common.h"
#include "shard.h"

/* the per-layer GEMM weights, in relay order */
static const tg_gpt_param tg_relay_params[] = {TG_QKVW, TG_ATTPROJW, TG_FCW, TG_FCPROJW};
#define NRELAY ((int)(sizeof tg_relay_params / sizeof tg_relay_params[0]))

struct tg_gpt_relay {
  int ndev, L;
  tg_split *plan;   /* [q * L + l]: wl's N row blocks */
  tg_tensor *shard; /* [(q * L + l) * N + j]: block j, on device j */
  tg_tensor *rep;   /* [(q * L + l) * N + d]: device d's whole copy */
};

/* the tensor the GEMMs read: the 16-bit copy in mixed precision, else the
 * f32 weight itself */
static tg_tensor *tg_relay_source(tg_gpt *g, int q, int l) {
  tg_gpt_param p = tg_relay_params[q];
  return g->wl[p][l].handle ? &g->wl[p][l] : &g->w[p][l];
}

static int tg_relay_index(tg_gpt_param p) {
  for (int q = 0; q < NRELAY; q++)
    if (tg_relay_params[q] == p) return q;
  return -1;
}

int tg_gpt_relay_create(tg_gpt *g) {
  int N = g->dp->ndev, L = g->cfg.num_layers;
  tg_gpt_relay *r = calloc(1, sizeof *r);
  if (!r) return tg_fail(ENOMEM, "GPT: out of memory for the weight relay");
  g->relay = r;
  r->ndev = N;
  r->L = L;
  r->plan = calloc((size_t)NRELAY * L, sizeof *r->plan);
  r->shard = calloc((size_t)NRELAY * L * N, sizeof *r->shard);
  r->rep = calloc((size_t)NRELAY * L * N, sizeof *r->rep);
  if (!r->plan || !r->shard || !r->rep)
    return tg_fail(ENOMEM, "GPT: out of memory for the weight relay");
  for (int q = 0; q < NRELAY; q++)
    for (int l = 0; l < L; l++) TG_TRY(tg_split_plan(tg_relay_source(g, q, l), N, &r->plan[q * L + l]));
  return 0;
}

void tg_gpt_relay_destroy(tg_gpt *g) {
  tg_gpt_relay *r = g->relay;
  if (!r) return;
  int N = r->ndev, L = r->L;
  for (int i = 0; r->shard && r->rep && i < NRELAY * L * N; i++) {
    tg_tensor_release(&r->shard[i]);
    tg_tensor_release(&r->rep[i]);
  }
  for (int q = 0; r->plan && q < NRELAY; q++)
    for (int l = 0; l < L; l++) tg_split_free(tg_relay_source(g, q, l), &r->plan[q * L + l]);
  free(r->plan);
  free(r->shard);
  free(r->rep);
  free(r);
  g->relay = NULL;
}

starpu_data_handle_t tg_gpt_relay_weight(const tg_gpt *g, tg_gpt_param p, int l, int dev) {
  const tg_gpt_relay *r = g->relay;
  int q = r ? tg_relay_index(p) : -1;
  if (q < 0 || l < 0 || l >= r->L || dev < 0 || dev >= r->ndev) return NULL;
  return r->rep[(q * r->L + l) * r->ndev + dev].handle;
}

/* options of a relay task on device d: its worker, at priority 0 (no
 * ranks) so that StarPU 1.3 puts it at the back of the worker's own
 * queue, behind the layer's ready tasks (a pinned task of priority > 0
 * goes to the front) */
static const tg_task_opts *tg_relay_opts(const tg_gpt *g, tg_gopts *go, int d, const char *what,
                                         int q, int l) {
  tg_gopt(go, 0, 0, "%s.L%d.%s", tg_gpt_param_names[tg_relay_params[q]], l, what);
  go->opts.worker = g->dp->worker[d];
  go->opts.device_only = 1;
  return &go->opts;
}

int tg_gpt_relay_stage(tg_gpt *g, int l, const starpu_data_handle_t *gate) {
  tg_gpt_relay *r = g->relay;
  if (!r || l < 0 || l >= r->L) return 0;
  int N = r->ndev, L = r->L;
  tg_gopts go;
  for (int q = 0; q < NRELAY; q++) {
    tg_tensor *w = tg_relay_source(g, q, l);
    tg_split *s = &r->plan[q * L + l];
    tg_split_readonly(w, s);
    int rc = 0;
    for (int j = 0; j < N && rc == 0; j++) {
      tg_tensor *sh = &r->shard[(q * L + l) * N + j];
      if (sh->handle) continue; /* staged and not yet dropped */
      int rows;
      tg_split_start(w->rows, N, j, &rows);
      rc = tg_tensor_temp(sh, rows, w->cols, w->dtype);
      if (rc == 0)
        rc = tg_gather_rows_after_insert(1, &s->parts[j], sh->handle, gate ? gate[j] : NULL,
                                         tg_relay_opts(g, &go, j, "stage", q, l));
    }
    tg_split_join(w, s); /* before the optimizer's blocks write wl */
    TG_TRY(rc);
  }
  return 0;
}

int tg_gpt_relay_gather(tg_gpt *g, int l, const starpu_data_handle_t *gate) {
  tg_gpt_relay *r = g->relay;
  if (!r || l < 0 || l >= r->L) return 0;
  int N = r->ndev, L = r->L;
  tg_gopts go;
  for (int q = 0; q < NRELAY; q++) {
    const tg_tensor *w = tg_relay_source(g, q, l);
    starpu_data_handle_t in[TG_DP_MAX_DEVICES];
    for (int j = 0; j < N; j++) in[j] = r->shard[(q * L + l) * N + j].handle;
    for (int d = 0; d < N; d++) {
      tg_tensor *rep = &r->rep[(q * L + l) * N + d];
      if (rep->handle) continue; /* still there (the last layer's, forward to backward) */
      TG_TRY(tg_tensor_temp(rep, w->rows, w->cols, w->dtype));
      TG_TRY(tg_gather_rows_after_insert(N, in, rep->handle, gate ? gate[d] : NULL,
                                         tg_relay_opts(g, &go, d, "gather", q, l)));
    }
  }
  return 0;
}

void tg_gpt_relay_drop(tg_gpt *g, int l, int replicas, int shards) {
  tg_gpt_relay *r = g->relay;
  if (!r || l < 0 || l >= r->L) return;
  int N = r->ndev, L = r->L;
  for (int q = 0; q < NRELAY; q++)
    for (int d = 0; d < N; d++) {
      if (replicas) tg_tensor_release(&r->rep[(q * L + l) * N + d]);
      if (shards) tg_tensor_release(&r->shard[(q * L + l) * N + d]);
    }
}
