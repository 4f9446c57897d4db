/*
 * taskgrad train gpt: preparing a run (train_gpt.h).  Every input is
 * checked before StarPU starts, so that a bad flag or file costs nothing
 * and exits 2 with one message: the model (demonstration, --resume's
 * checkpoint or --init-from), the outputs' places and the token files.
 * Then StarPU, the graph's model on every rank, and the batch loaders.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "micro_batches.h"
#include "taskgrad/llmc.h"
#include "taskgrad/parallel.h"
#include "taskgrad/safetensors.h"
#include "train_gpt.h"

/* An existing file we can read, checked before any work. */
static void need_file(const char *flag, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
    tg_cli_die("%s: '%s' is not a readable file", flag, path);
}

/* --init-from: an llm.c checkpoint or a Hugging Face GPT-2 (a .safetensors
 * file or a folder of model.safetensors and config.json: the reader tells
 * them apart, tg_llmc_model_open). */
static void need_model(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
    tg_cli_die("--init-from: '%s' is not a readable file or folder", path);
}

/* The demonstration: the KJV token files, prepared in the user's cache
 * directory when missing, as --data and --val. */
static void demo_prepare(gpt_opts *o, char *train, char *val, size_t len) {
  char cache[2048], dir[3000];
  if (tg_cache_dir(cache, sizeof cache) != 0) snprintf(cache, sizeof cache, "./.cache/taskgrad");
  snprintf(dir, sizeof dir, "%s/kjv", cache);
  snprintf(train, len, "%s/kjv_train.bin", dir);
  snprintf(val, len, "%s/kjv_val.bin", dir);
  struct stat st;
  if (stat(train, &st) != 0 || stat(val, &st) != 0) {
    fprintf(stderr, "taskgrad: preparing the KJV token files in %s\n", dir);
    char *argv[] = {"kjv", "--out", dir, NULL};
    if (tg_cmd_prepare_kjv(3, argv) != 0) exit(TG_EXIT_USAGE);
  }
  o->data = train;
  o->val = val;
}

/* --resume DIR: 1 when DIR holds a checkpoint to continue from; 0 when it
 * holds none yet and --init-from names the start (a requeued job's first
 * run); exits 2 otherwise. */
static int resume_from_checkpoint(const gpt_opts *o) {
  int have = tg_checkpoint_exists(o->resume);
  if (have < 0) tg_cli_die_last("--resume");
  if (!have && !o->init_from)
    tg_cli_die("--resume %s: no checkpoint there yet; give --init-from FILE too, to start "
               "the run from FILE when there is none", o->resume);
  return have;
}

/* A checkpoint continues the run that --init-from started: same model. */
static void check_same_model(const char *init_from, const tg_gpt_config *ck) {
  need_model(init_from);
  tg_gpt_config cfg;
  tg_llmc_model_reader *reader;
  if (tg_llmc_model_open(init_from, &cfg, &reader) < 0 || tg_llmc_model_close(reader) < 0)
    tg_cli_die_last("--init-from");
  if (memcmp(&cfg, ck, sizeof cfg))
    tg_cli_die("--init-from %s (L=%d C=%d NH=%d V=%d Vp=%d T=%d) is not the model of the "
               "checkpoint in the --resume directory (L=%d C=%d NH=%d V=%d Vp=%d T=%d)",
               init_from, cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size,
               cfg.padded_vocab_size, cfg.max_seq_len, ck->num_layers, ck->channels,
               ck->num_heads, ck->vocab_size, ck->padded_vocab_size, ck->max_seq_len);
}

/* --resume with a checkpoint: its model, and the data shape, order and
 * seed it was trained with (the flags may only repeat them). */
static void setup_from_checkpoint(gpt_session *s) {
  gpt_opts *o = &s->o;
  tg_checkpoint *ck = &s->ck;
  need_file("--data", o->data);
  if (o->val) need_file("--val", o->val);
  /* the header now, the records while the model is built (gpt_build_model) */
  if (tg_checkpoint_open(o->resume, ck, &s->ck_reader) < 0) tg_cli_die_last("--resume");
  s->have_ck = 1;
  s->cfg = ck->cfg;
  if (o->init_from) check_same_model(o->init_from, &s->cfg);
  /* the data sequence continues only with the same shape, order and seed */
  if (o->run.batch_given && o->run.cfg.B != ck->B)
    tg_cli_die("--batch %d disagrees with the checkpoint's %d", o->run.cfg.B, ck->B);
  if (o->run.seq_given && o->run.cfg.T != ck->T)
    tg_cli_die("--seq %d disagrees with the checkpoint's %d", o->run.cfg.T, ck->T);
  if (o->order_given && o->shuffled != ck->data_order)
    tg_cli_die("--data-order %s disagrees with the checkpoint's %s",
               o->shuffled ? "shuffled" : "sequential",
               ck->data_order ? "shuffled" : "sequential");
  if (o->seed_given && o->seed != ck->data_seed)
    tg_cli_die("--seed %llu disagrees with the checkpoint's %llu", (unsigned long long)o->seed,
               (unsigned long long)ck->data_seed);
  if (ck->step > o->steps)
    tg_cli_die("--steps %d: the checkpoint is already at step %lld", o->steps, ck->step);
  o->run.cfg.B = ck->B;
  o->run.cfg.T = ck->T;
  o->shuffled = ck->data_order;
  o->seed = ck->data_seed;
  if (o->run.cfg.nmicro && o->run.cfg.B % o->run.cfg.nmicro)
    tg_cli_die("--micro-batches %d does not divide the checkpoint's batch %d", o->run.cfg.nmicro, o->run.cfg.B);
  s->params = NULL;
}

/* the checkpoint's parameter records as the model's source */
static int checkpoint_params(void *ctx, int param, size_t off, float *dst, size_t n) {
  return tg_checkpoint_read(ctx, param, 0, off, dst, n);
}

/* The checkpoint's AdamW moments into the model, slice by slice through one
 * slice-sized buffer, and its step. */
static void load_checkpoint_moments(gpt_session *s) {
  size_t most = tg_gpt_largest_slice(&s->cfg), n;
  float *buf = malloc(most * sizeof *buf);
  if (!buf) tg_cli_die("--resume: out of memory for a %zu-float slice", most);
  for (int p = 0; p < TG_GPT_NPARAMS; p++)
    for (int kind = TG_GPT_STATE_M; kind <= TG_GPT_STATE_V; kind++) {
      int pieces = tg_gpt_param_slices(&s->cfg, (tg_gpt_param)p, &n);
      for (int l = 0; l < pieces; l++)
        if (tg_checkpoint_read(s->ck_reader, p, kind, (size_t)l * n, buf, n) < 0 ||
            tg_gpt_write_slice(&s->g, kind, (tg_gpt_param)p, l, buf) < 0)
          tg_cli_die_last("--resume");
    }
  free(buf);
  tg_checkpoint *ck = &s->ck;
  if (tg_gpt_state_written(&s->g, 0, (int)(ck->step - ck->scaler.skipped_steps)) < 0)
    tg_cli_die_last("--resume");
  tg_checkpoint_close(s->ck_reader);
  s->ck_reader = NULL;
}

/* No output replaces another or an input (cli/output_paths.c), before any
 * work: --checkpoint DIR may replace only the checkpoint --resume reads. */
static void check_paths(const gpt_opts *o) {
  tg_cli_path_in("--init-from", o->init_from);
  tg_cli_path_in("--data", o->data);
  tg_cli_path_in("--val", o->val);
  tg_cli_path_in_dir("--resume", o->resume, TG_CHECKPOINT_FILE);
  tg_cli_path_out("--save", o->save);
  tg_cli_path_out_dir("--checkpoint", o->checkpoint, TG_CHECKPOINT_FILE);
  tg_cli_path_may_replace("--checkpoint", "--resume");
  tg_cli_paths_check(); /* with --trace, registered by tg_cli_instrument_check */
}

/* The model and its initial parameters: the demonstration's, a
 * checkpoint's, or --init-from's; everything checked before StarPU starts. */
void gpt_setup_model(gpt_session *s) {
  gpt_opts *o = &s->o;
  check_paths(o);
  if (o->resume && !resume_from_checkpoint(o)) {
    /* the first run of a requeued job: nothing saved yet */
    fprintf(stderr, "taskgrad: no checkpoint in %s yet: starting from %s\n", o->resume,
            o->init_from);
    o->resume = NULL;
  }
  if (o->demo) {
    demo_prepare(o, s->train_path, s->val_path, sizeof s->train_path);
    s->cfg = (tg_gpt_config){.max_seq_len = 256, .vocab_size = 256, .num_layers = 4,
                             .num_heads = 4, .channels = 128, .padded_vocab_size = 256};
    /* initialised straight into the graph's buffers (gpt_build_model) */
    s->params = NULL;
    fprintf(stderr, "taskgrad: demonstration: L=%d C=%d NH=%d, byte-level KJV, %d steps "
            "of %d x %d tokens\n", s->cfg.num_layers, s->cfg.channels, s->cfg.num_heads,
            o->steps, o->run.cfg.B, o->run.cfg.T);
  } else if (o->resume) {
    setup_from_checkpoint(s);
  } else {
    need_model(o->init_from);
    need_file("--data", o->data);
    if (o->val) need_file("--val", o->val);
    /* read while the model is built (gpt_build_model), into its buffers */
    if (tg_llmc_model_open(o->init_from, &s->cfg, &s->reader) < 0)
      tg_cli_die_last("--init-from");
  }
}

/* The outputs' places and the token files, checked against the model. */
void gpt_setup_data(gpt_session *s) {
  const gpt_opts *o = &s->o;
  if (o->save) tg_cli_check_output("--save", o->save);
  /* a .safetensors --save writes config.json beside it: never over a foreign one */
  size_t save_len = o->save ? strlen(o->save) : 0;
  if (save_len > 12 && !strcmp(o->save + save_len - 12, ".safetensors") &&
      tg_safetensors_gpt2_config_check(o->save) < 0)
    tg_cli_die_last("--save");
  if (o->checkpoint)
    tg_cli_checkpoint_dir(o->checkpoint, o->resume, TG_CHECKPOINT_FILE, tg_checkpoint_exists);
  if (o->run.cfg.T > s->cfg.max_seq_len)
    tg_cli_die("--seq %d exceeds the model's maximum sequence length %d", o->run.cfg.T,
               s->cfg.max_seq_len);
  if (tg_llmc_tokens_read(o->data, s->cfg.vocab_size, &s->tokens, &s->ntok) < 0)
    tg_cli_die_last("--data");
  if (o->val && tg_llmc_tokens_read(o->val, s->cfg.vocab_size, &s->vtokens, &s->nvtok) < 0)
    tg_cli_die_last("--val");
  size_t need = (size_t)o->run.cfg.B * o->run.cfg.T + 1;
  if (s->ntok < need)
    tg_cli_die("--data: %zu tokens, fewer than one batch needs (%zu)", s->ntok, need);
  if (o->val && s->nvtok < need)
    tg_cli_die("--val: %zu tokens, fewer than one batch needs (%zu)", s->nvtok, need);
}

/* Starts StarPU and builds the graph's model on every rank, from rank 0's
 * parameters, continuing the checkpoint's optimizer state when resuming. */
void gpt_build_model(gpt_session *s) {
  gpt_opts *o = &s->o;
  if (tg_init(&o->run.rt) < 0) tg_cli_die_last("starting StarPU");
  /* data parallelism: each rank B / R sequences and micro / R micro-batches
   * of every global batch */
  s->R = tg_dist_size();
  s->root = tg_cli_is_root();
  int R = s->R;
  if (!o->run.cfg.nmicro && o->run.cfg.B % R == 0) {
    o->run.cfg.nmicro = tg_cli_gpt_auto_micro_batches(o->run.cfg.B, o->run.cfg.T,
                                                      s->cfg.channels, o->run.prec.precision, R);
    tg_cli_check_gpt_micro(o->run.cfg.B, o->run.cfg.nmicro, o->run.cfg.attn_splits);
  }
  if (o->run.cfg.B % R || o->run.cfg.nmicro % R)
    tg_cli_die("--batch %d and --micro-batches %d must be multiples of the %d MPI ranks",
               o->run.cfg.B, o->run.cfg.nmicro, R);
  tg_cli_instrument_begin(&o->run.rt);
  tg_gpt_run_config run =
      tg_cli_gpt_run_config(&o->run, o->run.cfg.B / R, o->run.cfg.T, o->run.cfg.nmicro / R);
  tg_cli_precision_start(&o->run.prec);
  tg_cli_gpt_fit(&s->cfg, &run, tg_ncpu_workers() + tg_ncuda_workers(), tg_cli_device_memory(),
                 s->root, "this GPT model and batch");
  tg_gpt *g = &s->g;
  if (s->ck_reader) {
    if (tg_gpt_create_from(g, &s->cfg, checkpoint_params, s->ck_reader, &run, &o->opt) < 0)
      tg_cli_die_last("--resume");
  } else {
    tg_cli_gpt_create(g, &s->cfg, s->params, s->reader, o->seed, &run, &o->opt);
  }
  s->reader = NULL; /* closed */
  /* every replica starts from rank 0's parameters */
  if (tg_gpt_broadcast_params(g) < 0) tg_cli_die_last("broadcasting the parameters");
  if (s->have_ck) {
    tg_checkpoint *ck = &s->ck;
    load_checkpoint_moments(s);
    s->start = (int)ck->step;
    s->start_batch = ck->batches;
    tg_cli_scaler_restore(&g->optim.scaler, &ck->scaler);
    if (s->root)
      fprintf(stderr, "taskgrad: resuming %s at step %d (batch %lld)\n", o->resume, s->start,
              s->start_batch);
  } else {
    free(s->params);
  }
  s->params = NULL;
}

/* The batch loaders (training sharded over the ranks, validation the same
 * batches on every rank: identical parameters), and the run's banner. */
void gpt_open_loaders(gpt_session *s) {
  const gpt_opts *o = &s->o;
  int R = s->R;
  tg_token_loader_config lc = {.B = o->run.cfg.B, .T = o->run.cfg.T, .nmicro = o->run.cfg.nmicro / R, .prefetch = 2,
                               .shuffled = o->shuffled, .seed = o->seed,
                               .start_batch = s->start_batch, .shard = tg_dist_rank(),
                               .nshards = R};
  s->ld = tg_token_loader_create(s->tokens, s->ntok, &lc);
  if (!s->ld) tg_cli_die_last("training data");
  tg_token_loader_config vc = {.B = o->run.cfg.B / R, .T = o->run.cfg.T, .nmicro = o->run.cfg.nmicro / R,
                               .prefetch = 2, .shuffled = 0, .seed = 0, .start_batch = 0,
                               .shard = 0, .nshards = 1};
  s->vl = o->val ? tg_token_loader_create(s->vtokens, s->nvtok, &vc) : NULL;
  if (o->val && !s->vl) tg_cli_die_last("validation data");
  const tg_gpt_config *cfg = &s->cfg;
  if (s->root)
    fprintf(stderr, "taskgrad: GPT L=%d C=%d NH=%d V=%d (Vp %d), %d CPU + %d CUDA + %d emulated workers%s, "
            "%s attention, %d attention tasks per micro-batch%s%s, %s%s\n", cfg->num_layers,
            cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size,
            tg_ncpu_workers(), tg_ncuda_workers(), tg_nopencl_workers(), R > 1 ? " per rank" : "",
            tg_cli_attention_name(s->g.run.attention), s->g.run.attn_splits,
            s->g.run.recompute ? ", activation recompute" : "",
            s->g.run.offload_optimizer ? ", optimizer on the CPU workers" : "", tg_precision_name(o->run.prec.precision),
            tg_deterministic() ? ", deterministic reductions" : "");
  if (s->root && tg_gpt_shard_devices(&s->g))
    fprintf(stderr, "taskgrad: data parallel: sharded over %d devices (micro-batches pinned to "
            "devices, gradients reduce-scattered, AdamW per block on its owner, weights "
            "all-gathered)\n", tg_gpt_shard_devices(&s->g));
  if (s->root && tg_gpt_scatter_devices(&s->g))
    fprintf(stderr, "taskgrad: micro-batches pinned to %d devices, the gradients "
            "reduce-scattered over them (a block each to the host)\n",
            tg_gpt_scatter_devices(&s->g));
  if (s->root && tg_gpt_relay_devices(&s->g))
    fprintf(stderr, "taskgrad: each device's weights relayed: 1/%d read from the host, the rest "
            "from the other devices, a layer ahead\n", tg_gpt_relay_devices(&s->g));
  if (s->root && s->g.run.fused_blocks > 0)
    fprintf(stderr, "taskgrad: blocks fused: each block's forward one task, its backward one\n");
  if (s->root && s->g.run.packed_layers > 0)
    fprintf(stderr, "taskgrad: layers packed: each layer's parameters, gradients and moments "
            "one buffer each\n");
  if (s->root && R > 1)
    fprintf(stderr, "taskgrad: %d MPI ranks, %d sequences and %d micro-batches each per step\n",
            R, o->run.cfg.B / R, o->run.cfg.nmicro / R);
}

/* Frees what the run holds and stops StarPU. */
void gpt_teardown(gpt_session *s) {
  tg_loader_destroy(s->ld);
  if (s->vl) tg_loader_destroy(s->vl);
  tg_gpt_destroy(&s->g);
  tg_cli_instrument_end(&s->o.run.rt);
  tg_shutdown();
  free(s->tokens);
  free(s->vtokens);
}
