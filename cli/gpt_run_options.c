/*
 * The GPT run options (gpt_run_options.h): one table, parsed and printed
 * for `train gpt`, `bench gpt` and `simulate gpt|mlp`.
 *
 * A row names the flag, its argument (help's metavariable), its kind, the
 * field of tg_cli_gpt_run it sets (an offset; most are fields of the
 * graph's tg_gpt_run_config), the range of an integer (part of the "out of
 * range [min, max]" message), a second field set to 1 when the flag is
 * given, the commands that accept it and its help text.
 * The help's "%d" is the command's default (tg_cli_gpt_run_default); a
 * "\n" in it starts a continuation line.  One flag may have one row per
 * range or help text (--batch: 1..65536 for train and bench, 1..2^20 and
 * "per GPU" for simulate).  The precision flags and the runtime flags are
 * rows too, parsed by their own shared parsers (precision_flags.c,
 * args.c), so that a command needs this one call for all of them.
 */
#include <stddef.h>
#include <string.h>

#include "gpt_run_options.h"
#include "taskgrad/precision_mode.h"
#include "taskgrad/runtime.h"
#include "micro_batches.h"
#include "simulate.h"

#define TRAIN TG_RUN_TRAIN_GPT
#define BENCH TG_RUN_BENCH_GPT
#define SIM TG_RUN_SIMULATE_GPT
#define SIM_MLP TG_RUN_SIMULATE_MLP
#define GPT (TRAIN | BENCH | SIM)

typedef enum { K_INT, K_FLAG, K_MICRO, K_ATTENTION, K_DATA_PARALLEL, K_GRAD_COMM, K_PRECISION, K_RUNTIME } opt_kind;

typedef struct run_option {
  const char *flag, *metavar;
  opt_kind kind;
  size_t field;   /* offset of the int (or tg_attention_kind) it sets */
  long min, max;  /* K_INT: the range; K_MICRO: max */
  long given;     /* offset of an int set to 1 when given, or -1 */
  unsigned cmds;
  const char *help;
} run_option;

#define F(name) offsetof(tg_cli_gpt_run, name)

static const run_option options[] = {
    {"--batch", "B", K_INT, F(cfg.B), 1, 1 << 16, F(batch_given), TRAIN | BENCH,
     "sequences per step (default %d)"},
    {"--batch", "B", K_INT, F(cfg.B), 1, 1 << 20, F(batch_given), SIM,
     "sequences per step (default 8 per GPU)"},
    {"--batch", "N", K_INT, F(cfg.B), 1, 1 << 20, F(batch_given), SIM_MLP,
     "samples per step (default 2048 per GPU)"},
    {"--seq", "T", K_INT, F(cfg.T), 1, 1 << 20, F(seq_given), GPT,
     "tokens per sequence (default %d, at most the\nmodel's maximum)"},
    {"--micro-batches", "M", K_MICRO, F(cfg.nmicro), 0, 1 << 16, -1, TRAIN | BENCH,
     "micro-batches per step, dividing B, or auto: one\nper worker, within what B allows; "
     "in fp32 on up\nto 4 CPU workers alone, at least 512 rows each\n(B / M x T), the layers "
     "then in tiles (default\nauto; the choice is printed)"},
    {"--micro-batches", "M", K_INT, F(cfg.nmicro), 1, TG_SIM_MAX_MICRO, -1, SIM | SIM_MLP,
     "micro-batches per step, dividing the batch\n(default 2 per GPU)"},
    {"--layers", "L", K_INT, F(model.num_layers), 1, TG_GPT_MAX_LAYERS, -1, BENCH | SIM,
     "transformer blocks of the random model (default %d)"},
    {"--channels", "C", K_INT, F(model.channels), 1, 1 << 16, -1, BENCH | SIM,
     "its channels (default %d)"},
    {"--heads", "NH", K_INT, F(model.num_heads), 1, 1 << 12, -1, BENCH | SIM,
     "its attention heads (default %d)"},
    {"--vocab", "V", K_INT, F(model.vocab_size), 1, 65536, -1, BENCH | SIM,
     "its vocabulary (default %d)"},
    {"--padded-vocab", "Vp", K_INT, F(model.padded_vocab_size), 1, 65536, F(vp_given),
     BENCH | SIM, "its classifier's rows (default: V rounded up to a\nmultiple of 64)"},
    {"--max-seq", "T", K_INT, F(model.max_seq_len), 1, 1 << 20, -1, BENCH | SIM,
     "its maximum sequence length (default %d)"},
    {"--attention", "NAME", K_ATTENTION, F(cfg.attention), 0, 0, -1, GPT,
     "naive, chunked, gemm (chunked with its products on\ncuBLAS on CUDA workers, O(T^2) memory there), flash\n(chunked; in bf16 on CUDA workers flash kernels on\nthe tensor cores, head sizes 16, 32, 64, 128), cudnn\n(chunked; in bf16 and fp16 on CUDA workers cuDNN's\nfused attention, else gemm's kernels) or auto: cudnn\nwith CUDA workers in 16-bit runs, gemm in f32 ones,\nelse chunked (default auto)"},
    {"--chunk", "K", K_INT, F(cfg.chunk), 1, 1 << 16, -1, GPT, "attention chunk (default %d)"},
    {"--attn-splits", "S", K_INT, F(cfg.attn_splits), 1, TG_MAX_SPLIT, -1, GPT,
     "attention tasks per micro-batch (default: one per\nCPU worker, dividing B/M; 1 with devices)"},
    {"--classifier-blocks", "R", K_INT, F(cfg.classifier_blocks), 1, TG_MAX_SPLIT, -1, GPT,
     "row blocks of dwte for the classifier's gradient\n(default: one per 4 workers, at most 16)"},
    {"--tiles", "N", K_INT, F(cfg.linear_tiles), 1, TG_MAX_SPLIT, -1, GPT,
     "tasks per linear layer: column tiles of its\noutput and of its input's gradient (default:\n"
     "the CPU workers per micro-batch, at most 16;\n1 with devices, or up to 4 workers where each\nhas a micro-batch)"},
    {"--tile-owner", NULL, K_FLAG, F(cfg.tile_owner), 1, 0, -1, GPT,
     "pin tile j of every tiled layer to device j mod\ndevices (a fixed tensor-parallel layout;\n"
     "default: the scheduler places the tiles);\nneeds --tiles N > 1 and devices, not\n--data-parallel shard"},
    {"--fused-backward", NULL, K_FLAG, F(cfg.fused_backward), 1, 0, -1, GPT,
     "each linear layer's backward as one task (its\ninput's gradient, weight and bias gradients,\n"
     "and the backward of the LayerNorm before it;\ndefault: with CUDA workers, untiled layers and\n"
     "the optimizer on the devices)"},
    {"--no-fused-backward", NULL, K_FLAG, F(cfg.fused_backward), -1, 0, -1, GPT,
     "the input's gradient and the weight gradients as\ntwo tasks per linear layer"},
    {"--fused-blocks", NULL, K_FLAG, F(cfg.fused_blocks), 1, 0, -1, GPT,
     "each transformer block's forward as one task and\nits backward as one (the same kernels in the\n"
     "same order; default: with CUDA workers, untiled\nlayers and the optimizer on the devices); needs\n"
     "--tiles 1 and --attn-splits 1"},
    {"--no-fused-blocks", NULL, K_FLAG, F(cfg.fused_blocks), -1, 0, -1, GPT,
     "a task per operation of each block"},
    {"--packed-layers", NULL, K_FLAG, F(cfg.packed_layers), 1, 0, -1, GPT,
     "each layer's parameters as one StarPU buffer, and\nso its gradients, moments and 16-bit weights,\n"
     "and without --recompute each block's saved\nactivations (the tensors are views of it;\n"
     "default: with fused blocks); needs the optimizer\non the devices, no sharding, one rank, and one\n"
     "device or --deterministic"},
    {"--no-packed-layers", NULL, K_FLAG, F(cfg.packed_layers), -1, 0, -1, GPT,
     "a StarPU buffer per parameter tensor"},
    {"--grad-scatter", NULL, K_FLAG, F(cfg.grad_scatter), 1, 0, -1, GPT,
     "with the optimizer offloaded and micro-batches\npinned to 2 or more devices: reduce-scatter the\n"
     "gradients over the devices (a leaf per device,\nblock j summed on device j and sent to\n"
     "the host from there) instead of passing one copy\nfrom device to device (default: on from 80 MiB\n"
     "of f32 gradients per layer: C >= 1322)"},
    {"--no-grad-scatter", NULL, K_FLAG, F(cfg.grad_scatter), TG_CLI_FORCED_OFF, 0, -1, GPT,
     "one copy of each gradient passed from device to\ndevice, whatever the model's size"},
    {"--weight-relay", NULL, K_FLAG, F(cfg.weight_relay), 1, 0, -1, GPT,
     "with the gradients reduce-scattered: each device\nreads 1/N of a layer's GEMM weights from the\n"
     "host and the rest from the other devices, a\nlayer ahead of its use (default: on from 128 MiB\n"
     "of a layer's GEMM weights: bf16 C >= 2365)"},
    {"--no-weight-relay", NULL, K_FLAG, F(cfg.weight_relay), TG_CLI_FORCED_OFF, 0, -1, GPT,
     "every device reads every weight from the host"},
    {"--classifier-chunk", "N", K_INT, F(cfg.classifier_chunk), 1, 1 << 20,
     F(classifier_chunk_given), GPT,
     "positions whose logits a classifier task holds at\nonce, a (chunk, V) block per worker (default %d;\n"
     "1024 with CUDA workers)"},
    {"--data-parallel", "MODE", K_DATA_PARALLEL, F(cfg.data_parallel), 0, 0, -1, GPT,
     "shard, redux or auto: on 2 or more devices, shard\n(micro-batches pinned to devices, "
     "gradients\nreduce-scattered, AdamW sharded, weights\nall-gathered) or redux "
     "(one copy, StarPU\nreductions); auto: shard when there are 2 or\nmore devices (default auto)"},
    {"--grad-comm", "TYPE", K_GRAD_COMM, F(cfg.grad_comm), 0, 0, -1, GPT,
     "f32 or bf16: the gradient messages between MPI\nranks when sharded (default f32; bf16 halves\nthem)"},
    {"--recompute", NULL, K_FLAG, F(cfg.recompute), 1, 0, -1, GPT,
     "keep only each transformer block's input and\nrecompute the block's forward before its\nbackward: "
     "activation memory from about 12 C\nper layer and token to C, for about a fifth\nmore FLOPs "
     "(default: when the step would not\nfit a device or STARPU_LIMIT_CPU_MEM)"},
    {"--no-recompute", NULL, K_FLAG, F(cfg.recompute), TG_CLI_FORCED_OFF, 0, -1, GPT,
     "never recompute, even when the step would not fit"},
    {"--offload-optimizer", NULL, K_FLAG, F(cfg.offload_optimizer), 1, 0, -1, GPT,
     "run AdamW on the CPU workers next to the\nhost-backed f32 weights and moments: a device\n"
     "holds the 16-bit weights and the gradients\nonly (needs devices and CPU workers; default:\n"
     "when the step would not fit a device even\nwith recompute)"},
    {"--no-offload-optimizer", NULL, K_FLAG, F(cfg.offload_optimizer), TG_CLI_FORCED_OFF, 0, -1,
     GPT, "never offload the optimizer"},
    {"--precision", NULL, K_PRECISION, 0, 0, 0, -1, GPT | SIM_MLP, TG_CLI_PRECISION_HELP},
    {"--sched", NULL, K_RUNTIME, 0, 0, 0, -1, TRAIN | BENCH, TG_CLI_RUNTIME_HELP},
};

#define NOPTIONS (sizeof options / sizeof options[0])

static int *field(tg_cli_gpt_run *r, size_t off) { return (int *)((char *)r + off); }

void tg_cli_gpt_run_default(tg_cli_gpt_run *r, unsigned cmd) {
  memset(r, 0, sizeof *r);
  r->model = (tg_gpt_config){.max_seq_len = 256, .vocab_size = 256, .num_layers = 4,
                             .num_heads = 4, .channels = 256, .padded_vocab_size = 256};
  /* the graph's defaults (chunked attention, chunk 64, ...); simulate's B
   * is per GPU, set once they are known */
  r->cfg = tg_gpt_run_default(cmd & (TRAIN | BENCH) ? 8 : 0, cmd & TRAIN ? 64 : 256);
  r->cfg.nmicro = 0; /* auto, or simulate's per-GPU default */
  r->cfg.attention = TG_CLI_ATTN_AUTO;
  tg_cli_precision_default(&r->prec);
  r->rt = tg_runtime_config_default();
}

static int parse_one(const run_option *o, int argc, char **argv, int *i, tg_cli_gpt_run *r) {
  const char *a = argv[*i];
  switch (o->kind) {
  case K_PRECISION:
    return tg_cli_precision_flag(argc, argv, i, &r->prec);
  case K_RUNTIME:
    return tg_cli_runtime_flag(argc, argv, i, &r->rt);
  default:
    break;
  }
  if (strcmp(a, o->flag)) return 0;
  if (o->kind == K_FLAG) { /* min: the value set (1 on, TG_CLI_FORCED_OFF) */
    *field(r, o->field) = (int)o->min;
    return 1;
  }
  const char *v = tg_cli_value(argc, argv, i);
  if (o->kind == K_INT) {
    *field(r, o->field) = (int)tg_cli_int(a, v, o->min, o->max);
  } else if (o->kind == K_MICRO) {
    *field(r, o->field) = tg_cli_micro_batches_arg(a, v, (int)o->max);
  } else if (o->kind == K_GRAD_COMM) {
    if (!strcmp(v, "f32")) r->cfg.grad_comm = TG_F32;
    else if (!strcmp(v, "bf16")) r->cfg.grad_comm = TG_BF16;
    else tg_cli_die("%s: '%s' is not f32 or bf16", a, v);
  } else if (o->kind == K_DATA_PARALLEL) {
    static const char *const names[] = {"auto", "shard", "redux"};
    int k = 0;
    while (k < 3 && strcmp(v, names[k])) k++;
    if (k == 3) tg_cli_die("%s: '%s' is not shard, redux or auto", a, v);
    r->cfg.data_parallel = (tg_data_parallel)k;
  } else if (!strcmp(v, "naive")) {
    r->cfg.attention = TG_ATTN_NAIVE;
  } else if (!strcmp(v, "chunked")) {
    r->cfg.attention = TG_ATTN_CHUNKED;
  } else if (!strcmp(v, "gemm")) {
    r->cfg.attention = TG_ATTN_GEMM;
  } else if (!strcmp(v, "flash")) {
    r->cfg.attention = TG_ATTN_FLASH;
  } else if (!strcmp(v, "cudnn")) {
    r->cfg.attention = TG_ATTN_CUDNN;
  } else if (!strcmp(v, "auto")) {
    r->cfg.attention = TG_CLI_ATTN_AUTO;
  } else {
    tg_cli_die("%s: '%s' is not naive, chunked, gemm, flash, cudnn or auto", a, v);
  }
  if (o->given >= 0) *field(r, (size_t)o->given) = 1;
  return 1;
}

int tg_cli_gpt_run_flag(int argc, char **argv, int *i, unsigned cmd, tg_cli_gpt_run *r) {
  for (size_t k = 0; k < NOPTIONS; k++)
    if ((options[k].cmds & cmd) && parse_one(&options[k], argc, argv, i, r)) return 1;
  return 0;
}

void tg_cli_gpt_run_finish(tg_cli_gpt_run *r, unsigned cmd) {
  tg_cli_precision_finish(&r->prec);
  /* tensor-core alignment: the tied classifier's rows a multiple of 64 */
  if ((cmd & (BENCH | SIM)) && !r->vp_given)
    r->model.padded_vocab_size = (r->model.vocab_size + 63) / 64 * 64;
  if ((cmd & (TRAIN | BENCH)) && r->cfg.nmicro) /* auto: once the workers are known */
    tg_cli_check_gpt_micro(r->cfg.B, r->cfg.nmicro, r->cfg.attn_splits);
}

static void print_help(FILE *f, const run_option *o, const tg_cli_gpt_run *def) {
  if (o->kind == K_PRECISION || o->kind == K_RUNTIME) {
    fputs(o->help, f);
    return;
  }
  char head[64], text[512];
  snprintf(head, sizeof head, "%s%s%s", o->flag, o->metavar ? " " : "",
           o->metavar ? o->metavar : "");
  if (strstr(o->help, "%d"))
    snprintf(text, sizeof text, o->help, *field((tg_cli_gpt_run *)def, o->field));
  else
    snprintf(text, sizeof text, "%s", o->help);
  /* "  --flag ARG           text", continuation lines under the text */
  fprintf(f, "  %-*s%s", strlen(head) < 19 ? 21 : (int)strlen(head) + 2, head, "");
  for (const char *p = text; *p; p++) {
    fputc(*p, f);
    if (*p == '\n') fprintf(f, "%23s", "");
  }
  fputc('\n', f);
}

void tg_cli_gpt_run_help(FILE *f, unsigned cmd, unsigned skip) {
  tg_cli_gpt_run def;
  tg_cli_gpt_run_default(&def, cmd);
  for (size_t k = 0; k < NOPTIONS; k++)
    if ((options[k].cmds & cmd) == cmd && !(options[k].cmds & skip))
      print_help(f, &options[k], &def);
}

tg_gpt_run_config tg_cli_gpt_run_config(const tg_cli_gpt_run *r, int B, int T, int nmicro) {
  tg_gpt_run_config run = r->cfg;
  /* after tg_init: the workers are known (simulate's are the simulated) */
  /* CUDA workers: cuDNN's fused attention in 16-bit runs (the gemm kind's
   * kernels where cuDNN is missing or refuses), the gemm kind in f32; the
   * CPU's chunked kernels without them */
  if (run.attention == TG_CLI_ATTN_AUTO)
    run.attention = tg_ncuda_workers() == 0                       ? TG_ATTN_CHUNKED
                    : tg_precision_lowp(r->prec.precision) != TG_F32 ? TG_ATTN_CUDNN
                                                                     : TG_ATTN_GEMM;
  /* on a GPU, larger chunks: fewer passes over dwte and fuller GEMMs (124M
   * bf16 on an H100, bench/results/2026-11-27-h100-native-bf16.md) */
  if (!r->classifier_chunk_given && tg_ncuda_workers() > 0) run.classifier_chunk = 1024;
  run.B = B;
  run.T = T;
  run.nmicro = nmicro;
  run.amp = (tg_amp_config){.precision = r->prec.precision, .loss_scaling = r->prec.dynamic,
                            .loss_scale = (float)r->prec.scale,
                            .loss_scale_window = r->prec.window};
  return run;
}

const char *tg_cli_attention_name(tg_attention_kind kind) {
  switch (kind) {
  case TG_ATTN_NAIVE: return "naive";
  case TG_ATTN_CHUNKED: return "chunked";
  case TG_ATTN_GEMM: return "gemm";
  case TG_ATTN_FLASH: return "flash";
  case TG_ATTN_CUDNN: return "cudnn";
  }
  return "auto";
}
