/*
 * Training checkpoints (include/taskgrad/checkpoint.h).
 *
 * File format, version 1: <dir>/checkpoint.bin, little-endian (the host's
 * order; big-endian hosts are refused at compile time).
 *
 *   Header, 128 bytes:
 *     off  type  field
 *       0  u32   magic 0x4B434754 ("TGCK")
 *       4  u32   version (1)
 *       8  u32   header size in bytes (128)
 *      12  u32   number of tensor records (48 = 16 parameters x 3)
 *      16  i32   model configuration: maxT, V, L, NH, C, Vp (6 x i32)
 *      40  i64   optimizer steps taken (AdamW's bias-correction t)
 *      48  i64   data position: training batches consumed
 *      56  i32   batch B (sequences per batch) the position counts in
 *      60  i32   sequence length T
 *      64  i32   data order: 0 sequential, 1 shuffled
 *      68  u32   0
 *      72  u64   data (shuffling) seed
 *      80  u64   RNG (sampling) seed
 *      88  f32   loss scaler: scale (1.0: none)
 *      92  i32   loss scaler: window (steps between increases)
 *      96  i64   loss scaler: clean steps since the last change
 *     104  i64   loss scaler: skipped steps
 *     112  u8[12] 0
 *     124  u32   CRC32 (zlib) of bytes 0 .. 123
 *
 *   Then, for each of the 16 parameter tensors in llm.c's order (wte, wpe,
 *   ln1w, ..., lnfb; a per-layer tensor holds its L slices one after the
 *   other, as in llm.c's checkpoints), three records: the parameters, AdamW's
 *   m, AdamW's v.  A record is
 *       u32 parameter index (0..15), u32 kind (0 params, 1 m, 2 v),
 *       u64 element count, u32 CRC32 (zlib) of the data bytes, u32 0,
 *   followed by the element count float32 values.
 *
 * The file size is therefore 128 + 48 * 24 + 12 * N bytes for a model of N
 * parameters.  The loader checks, in order: magic, version, header size, the
 * header CRC, the configuration (tg_gpt_config_check), the other header
 * values, the file size against the configuration, then every record's
 * index, kind, count and CRC; any disagreement is -EINVAL with a message
 * naming the file and the problem (the tensor, for a record).
 *
 * Atomic saving: as src/llmc.c, a temporary <dir>/checkpoint.bin.tmp.<pid>
 * (O_EXCL; a stale regular file of that name is replaced, anything else
 * refused), checked writes, fflush, fsync, fclose, rename over
 * checkpoint.bin, fsync of the directory.  On any failure the temporary file
 * is removed and the previous checkpoint is untouched.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checkpoint_io.h"
#include "taskgrad/checkpoint.h"

enum { HDR = 128, NREC = 3 * TG_GPT_NPARAMS };
static const char *const kind_names[3] = {"parameters", "AdamW m", "AdamW v"};
#define put tg_ck_put
#define get tg_ck_get

int tg_checkpoint_alloc(tg_checkpoint *c, const tg_gpt_config *cfg) {
  memset(c, 0, sizeof *c);
  int rc = tg_gpt_config_check(cfg);
  if (rc < 0) return rc;
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(cfg, sizes);
  c->cfg = *cfg;
  c->scaler.scale = 1.0f;
  float **const arrays[3] = {&c->params, &c->m, &c->v};
  return tg_ck_calloc(arrays, 3, n);
}

void tg_checkpoint_free(tg_checkpoint *c) {
  if (!c) return;
  float **const arrays[3] = {&c->params, &c->m, &c->v};
  tg_ck_free(arrays, 3);
}

static void encode_header(unsigned char h[HDR], const tg_checkpoint *c) {
  memset(h, 0, HDR);
  uint32_t u[4] = {TG_CHECKPOINT_MAGIC, TG_CHECKPOINT_VERSION, HDR, NREC};
  put(h, 0, u, sizeof u);
  int32_t cf[6] = {c->cfg.max_seq_len, c->cfg.vocab_size, c->cfg.num_layers,
                   c->cfg.num_heads, c->cfg.channels, c->cfg.padded_vocab_size};
  put(h, 16, cf, sizeof cf);
  int64_t step = c->step, batches = c->batches;
  put(h, 40, &step, 8);
  put(h, 48, &batches, 8);
  int32_t bt[3] = {c->B, c->T, c->data_order};
  put(h, 56, bt, sizeof bt);
  put(h, 72, &c->data_seed, 8);
  put(h, 80, &c->rng_seed, 8);
  put(h, 88, &c->scaler.scale, 4);
  int32_t window = c->scaler.window;
  put(h, 92, &window, 4);
  int64_t clean = c->scaler.clean_steps, skipped = c->scaler.skipped_steps;
  put(h, 96, &clean, 8);
  put(h, 104, &skipped, 8);
  tg_ck_seal_header(h, HDR);
}

/* ---- saving ------------------------------------------------------------- */

int tg_checkpoint_save(const char *dir, const tg_checkpoint *c) {
  if (!dir || !c || !c->params || !c->m || !c->v)
    return tg_fail(EINVAL, "tg_checkpoint_save: NULL argument or array");
  int rc = tg_gpt_config_check(&c->cfg);
  if (rc < 0) return rc;
  char *path = tg_ck_join(dir, TG_CHECKPOINT_FILE);
  if (!path) return tg_fail(ENOMEM, "checkpoint: out of memory");
  tg_atomic_file af;
  rc = tg_atomic_open(&af, path);
  unsigned char h[HDR];
  encode_header(h, c);
  if (rc == 0) rc = tg_atomic_write(&af, h, HDR);
  size_t sizes[TG_GPT_NPARAMS];
  tg_gpt_param_sizes(&c->cfg, sizes);
  const float *arrays[3] = {c->params, c->m, c->v};
  size_t off = 0;
  for (int p = 0; p < TG_GPT_NPARAMS && rc == 0; p++) {
    for (int k = 0; k < 3 && rc == 0; k++)
      rc = tg_ck_write_record(&af, (uint32_t)p, (uint32_t)k, arrays[k] + off, sizes[p]);
    off += sizes[p];
  }
  if (rc == 0) rc = tg_atomic_commit(&af);
  else tg_atomic_abort(&af);
  free(path);
  return rc;
}

/* ---- loading ------------------------------------------------------------ */

static int load_file(const char *path, tg_checkpoint *c) {
  unsigned char h[HDR];
  FILE *f;
  long long fsize;
  TG_TRY(tg_ck_open(path, "taskgrad checkpoint", TG_CHECKPOINT_MAGIC, TG_CHECKPOINT_VERSION, h,
                    HDR, &f, &fsize));
  int rc = 0;
  uint32_t u[4];
  get(h, 0, u, sizeof u);
  if (u[3] != NREC) {
    rc = tg_fail(EINVAL, "%s: %u tensor records, expected %d", path, u[3], NREC);
    goto out;
  }
  int32_t cf[6];
  get(h, 16, cf, sizeof cf);
  tg_gpt_config cfg = {.max_seq_len = cf[0], .vocab_size = cf[1], .num_layers = cf[2],
                       .num_heads = cf[3], .channels = cf[4], .padded_vocab_size = cf[5]};
  if (tg_gpt_config_check(&cfg) < 0) {
    rc = tg_fail(EINVAL, "%s: bad model configuration: %s", path, tg_last_error());
    goto out;
  }
  int64_t step, batches, clean, skipped;
  int32_t bt[3], window;
  get(h, 40, &step, 8);
  get(h, 48, &batches, 8);
  get(h, 56, bt, sizeof bt);
  get(h, 92, &window, 4);
  get(h, 96, &clean, 8);
  get(h, 104, &skipped, 8);
  if (step < 0 || step > INT_MAX || batches < 0 || bt[0] < 1 || bt[1] < 1 ||
      (bt[2] != 0 && bt[2] != 1) || window < 0 || clean < 0 || skipped < 0) {
    rc = tg_fail(EINVAL, "%s: bad header values (step %lld, batches %lld, B %d, T %d, data "
                 "order %d, scaler window %d)", path, (long long)step, (long long)batches,
                 bt[0], bt[1], bt[2], window);
    goto out;
  }
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(&cfg, sizes);
  long long want = HDR + (long long)NREC * TG_CK_RECORD + 12LL * (long long)n;
  if (fsize != want) {
    rc = tg_fail(EINVAL, "%s: %lld bytes, but the configuration (L=%d C=%d Vp=%d maxT=%d) "
                 "needs %lld: %s", path, fsize, cfg.num_layers, cfg.channels,
                 cfg.padded_vocab_size, cfg.max_seq_len, want,
                 fsize < want ? "truncated" : "trailing data");
    goto out;
  }
  if ((rc = tg_checkpoint_alloc(c, &cfg)) < 0) goto out;
  c->step = step;
  c->batches = batches;
  c->B = bt[0];
  c->T = bt[1];
  c->data_order = bt[2];
  get(h, 72, &c->data_seed, 8);
  get(h, 80, &c->rng_seed, 8);
  get(h, 88, &c->scaler.scale, 4);
  c->scaler.window = window;
  c->scaler.clean_steps = clean;
  c->scaler.skipped_steps = skipped;
  float *arrays[3] = {c->params, c->m, c->v};
  size_t off = 0;
  for (int p = 0; p < TG_GPT_NPARAMS && rc == 0; p++) {
    for (int k = 0; k < 3 && rc == 0; k++) {
      char what[96];
      snprintf(what, sizeof what, "tensor %s (%s)", tg_gpt_param_names[p], kind_names[k]);
      rc = tg_ck_read_record(f, path, what, (uint32_t)p, (uint32_t)k, arrays[k] + off,
                             sizes[p]);
    }
    off += sizes[p];
  }
  if (rc < 0) tg_checkpoint_free(c);
out:
  fclose(f);
  return rc;
}

int tg_checkpoint_load(const char *dir, tg_checkpoint *c) {
  if (!dir || !c) return tg_fail(EINVAL, "tg_checkpoint_load: NULL argument");
  memset(c, 0, sizeof *c);
  char *path = tg_ck_join(dir, TG_CHECKPOINT_FILE);
  if (!path) return tg_fail(ENOMEM, "checkpoint: out of memory");
  int rc = load_file(path, c);
  free(path);
  return rc;
}

int tg_checkpoint_exists(const char *dir) { return tg_ck_exists(dir, TG_CHECKPOINT_FILE); }
