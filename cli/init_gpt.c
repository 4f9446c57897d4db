/*
 * taskgrad init gpt: writes a randomly initialised GPT-2 checkpoint in
 * llm.c's format (version 3, fp32), e.g. the starting point of a training
 * run on the King James Bible.
 *
 * The padded vocabulary defaults to V rounded up to a multiple of 64: llm.c
 * pads GPT-2's 50257 tokens to 50304, which is both the next multiple of 64
 * and of 128, and 64 keeps small vocabularies small (256 bytes stays 256).
 * The configuration is checked (tg_gpt_config_check) before anything is
 * allocated or written, and the file is written atomically (temporary file,
 * fsync, rename), so a failed run never leaves a partial checkpoint.  No
 * StarPU here: the initialisation is a host loop.
 *
 * --safetensors FILE also writes the same parameters as a safetensors file
 * with Hugging Face's GPT-2 names and layouts (taskgrad/safetensors.h), and
 * config.json beside it, after the checkpoint; all writes are atomic.
 *
 * --init-from MODEL takes the parameters and shape from a model instead of
 * the random initialisation: an llm.c checkpoint or a Hugging Face GPT-2
 * (tg_llmc_model_read reads both), so that `init gpt --init-from gpt2/
 * --out gpt2.bin` converts a downloaded GPT-2 to llm.c's format.  The shape
 * flags and --seed then have nothing to say and are refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "taskgrad/llmc.h"
#include "taskgrad/safetensors.h"

typedef struct gpt_init {
  const tg_gpt_config *cfg;
  uint64_t seed;
} gpt_init;

static int gpt_init_fill(void *ctx, int param, size_t off, float *dst, size_t n) {
  const gpt_init *init = ctx;
  tg_gpt_init_param_range(init->cfg, init->seed, param, off, n, dst);
  return 0;
}

void tg_cli_gpt_create(tg_gpt *g, const tg_gpt_config *cfg, const float *params,
                       tg_llmc_model_reader *reader, uint64_t seed,
                       const tg_gpt_run_config *run, const tg_optimizer_config *opt) {
  gpt_init init = {.cfg = cfg, .seed = seed};
  int rc = params   ? tg_gpt_create(g, cfg, params, run, opt)
           : reader ? tg_gpt_create_from(g, cfg, tg_llmc_model_fill, reader, run, opt)
                    : tg_gpt_create_from(g, cfg, gpt_init_fill, &init, run, opt);
  if (rc < 0) tg_cli_die_last("building the model");
  if (reader && tg_llmc_model_close(reader) < 0) tg_cli_die_last("--init-from");
}

static void init_gpt_usage(void) {
  puts("usage: taskgrad init gpt --layers L --channels C --heads NH --max-seq T\n"
       "                         --vocab V --out FILE [flags]\n"
       "       taskgrad init gpt --init-from MODEL --out FILE [--safetensors FILE]\n"
       "\n"
       "Writes a GPT-2 checkpoint (llm.c format, fp32) with GPT-2's random\n"
       "initialisation: normal(0, 0.02) weights, the residual projections\n"
       "scaled by 1/sqrt(2L), LayerNorm weights 1, biases 0, padded rows of\n"
       "the token embedding 0.\n"
       "\n"
       "  --layers L           transformer blocks (required)\n"
       "  --channels C         embedding width, divisible by --heads (required)\n"
       "  --heads NH           attention heads (required)\n"
       "  --max-seq T          longest sequence, rows of the position\n"
       "                       embedding (required)\n"
       "  --vocab V            vocabulary size, at most 65536 (required)\n"
       "  --padded-vocab Vp    rows of the token embedding, >= V (default: V\n"
       "                       rounded up to a multiple of 64; GPT-2's 50257\n"
       "                       becomes 50304 as in llm.c)\n"
       "  --seed N             initialisation seed (default 1)\n"
       "  --init-from MODEL    no initialisation: the parameters and shape of an\n"
       "                       llm.c checkpoint or a Hugging Face GPT-2 (a\n"
       "                       .safetensors file with config.json beside it, or\n"
       "                       a folder holding model.safetensors and\n"
       "                       config.json), e.g. to convert one to llm.c's\n"
       "                       format; not with the shape flags or --seed\n"
       "  --out FILE           the checkpoint to write (required); replaced\n"
       "                       atomically if it exists\n"
       "  --safetensors FILE   also write the model as safetensors with Hugging\n"
       "                       Face's GPT-2 names (GPT2LMHeadModel: Conv1D\n"
       "                       weights transposed, wte's first V rows, lm_head\n"
       "                       tied so omitted) and config.json beside it\n"
       "                       (GPT2Config; one that taskgrad did not write is\n"
       "                       never replaced: refused); replaced atomically\n"
       "  -h, --help           this text\n"
       "\n"
       "Bad flags or an invalid model: one message on stderr, exit status 2.");
}

/* --init-from: the model read whole, written as --out (and --safetensors). */
static int init_gpt_from(const char *from, const char *out, const char *st_out) {
  tg_gpt_config c;
  float *params;
  if (tg_llmc_model_read(from, &c, &params) < 0) tg_cli_die_last("--init-from");
  if (tg_llmc_model_write(out, &c, params) < 0) tg_cli_die_last("init gpt");
  if (st_out && tg_safetensors_write_gpt2(st_out, &c, params) < 0) tg_cli_die_last("init gpt");
  free(params);
  printf("wrote %s: GPT-2 L=%d C=%d NH=%d maxT=%d V=%d Vp=%d from %s\n", out, c.num_layers,
         c.channels, c.num_heads, c.max_seq_len, c.vocab_size, c.padded_vocab_size, from);
  if (st_out) printf("wrote %s: the same model as safetensors (Hugging Face GPT-2 names)\n",
                     st_out);
  return 0;
}

int tg_cmd_init_gpt(int argc, char **argv) {
  tg_gpt_config c = {0};
  int padded = 0;
  uint64_t seed = 1;
  const char *out = NULL, *st_out = NULL, *init_from = NULL;
  const char *shape_flag = NULL; /* a flag that --init-from excludes */
  const long max_dim = 1L << 20;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      init_gpt_usage();
      exit(0);
    } else if (!strcmp(a, "--layers")) {
      c.num_layers = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, max_dim);
    } else if (!strcmp(a, "--channels")) {
      c.channels = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, max_dim);
    } else if (!strcmp(a, "--heads")) {
      c.num_heads = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, max_dim);
    } else if (!strcmp(a, "--max-seq")) {
      c.max_seq_len = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, max_dim);
    } else if (!strcmp(a, "--vocab")) {
      c.vocab_size = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 65536);
    } else if (!strcmp(a, "--padded-vocab")) {
      padded = (int)tg_cli_int(a, tg_cli_value(argc, argv, &i), 1, 65536);
    } else if (!strcmp(a, "--seed")) {
      seed = tg_cli_u64(a, tg_cli_value(argc, argv, &i));
    } else if (!strcmp(a, "--init-from")) {
      init_from = tg_cli_value(argc, argv, &i);
      if (!*init_from) tg_cli_die("--init-from: empty file name");
    } else if (!strcmp(a, "--out")) {
      out = tg_cli_value(argc, argv, &i);
      if (!*out) tg_cli_die("--out: empty file name");
    } else if (!strcmp(a, "--safetensors")) {
      st_out = tg_cli_value(argc, argv, &i);
      if (!*st_out) tg_cli_die("--safetensors: empty file name");
    } else {
      tg_cli_die("unknown flag '%s' for 'init gpt' (see --help)", a);
    }
    if (strcmp(a, "--init-from") && strcmp(a, "--out") && strcmp(a, "--safetensors"))
      shape_flag = a;
  }
  /* config.json beside --safetensors: refused before anything is written */
  if (st_out && tg_safetensors_gpt2_config_check(st_out) < 0) tg_cli_die_last("--safetensors");
  if (init_from) {
    if (shape_flag)
      tg_cli_die("'init gpt --init-from' takes the model's shape and parameters from %s: "
                 "%s does not go with it", init_from, shape_flag);
    if (!out) tg_cli_die("'init gpt' needs --out (see --help)");
    return init_gpt_from(init_from, out, st_out);
  }
  const struct {
    const char *flag;
    int given;
  } required[] = {
      {"--layers", c.num_layers > 0},  {"--channels", c.channels > 0},
      {"--heads", c.num_heads > 0},    {"--max-seq", c.max_seq_len > 0},
      {"--vocab", c.vocab_size > 0},   {"--out", out != NULL},
  };
  for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
    if (!required[k].given)
      tg_cli_die("'init gpt' needs %s (see --help)", required[k].flag);
  /* two outputs, two files (cli/output_paths.c) */
  tg_cli_path_out("--out", out);
  tg_cli_path_out("--safetensors", st_out);
  tg_cli_paths_check();
  c.padded_vocab_size = padded ? padded : (c.vocab_size + 63) / 64 * 64;
  if (tg_gpt_config_check(&c) < 0) tg_cli_die_last("init gpt");

  size_t sizes[TG_GPT_NPARAMS];
  const size_t n = tg_gpt_param_sizes(&c, sizes);
  float *params = malloc(n * sizeof *params);
  if (!params)
    tg_cli_die("init gpt: cannot allocate %zu parameters (%.1f MiB)", n,
               n * sizeof(float) / 1048576.0);
  tg_gpt_init_params(&c, seed, params);
  if (tg_llmc_model_write(out, &c, params) < 0) tg_cli_die_last("init gpt");
  if (st_out && tg_safetensors_write_gpt2(st_out, &c, params) < 0)
    tg_cli_die_last("init gpt");
  free(params);
  printf("wrote %s: GPT-2 L=%d C=%d NH=%d maxT=%d V=%d Vp=%d, %zu parameters "
         "(%.1f MiB), seed %llu\n", out, c.num_layers, c.channels, c.num_heads,
         c.max_seq_len, c.vocab_size, c.padded_vocab_size, n,
         n * sizeof(float) / 1048576.0, (unsigned long long)seed);
  if (st_out) printf("wrote %s: the same model as safetensors (Hugging Face "
                     "GPT-2 names)\n", st_out);
  return 0;
}
