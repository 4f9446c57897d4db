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
 * is removed and the previous checkpoint is untouched.  A temporary that a
 * killed writer left is removed by the next save, and by
 * tg_checkpoint_remove_stale when a run opens the directory.
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

/* Record (p, kind): a header with a zero CRC, the pieces, then the CRC. */
static int save_record(tg_atomic_file *af, const tg_gpt_config *cfg, int p, int kind,
                       float *buf, tg_checkpoint_get get, void *ctx) {
  size_t n;
  int pieces = tg_gpt_param_slices(cfg, (tg_gpt_param)p, &n);
  long long at = tg_atomic_tell(af);
  if (at < 0) return (int)at;
  TG_TRY(tg_ck_write_record_header(af, (uint32_t)p, (uint32_t)kind, (uint64_t)n * pieces, 0));
  uint32_t crc = tg_ck_crc(NULL, 0);
  for (int i = 0; i < pieces; i++) {
    TG_TRY(get(ctx, p, kind, (size_t)i * n, buf, n));
    crc = tg_ck_crc_add(crc, buf, n * sizeof(float));
    TG_TRY(tg_atomic_write(af, buf, n * sizeof(float)));
  }
  return tg_atomic_patch(af, at + 16, &crc, sizeof crc);
}

int tg_checkpoint_save_from(const char *dir, const tg_checkpoint *c, tg_checkpoint_get get,
                            void *ctx) {
  if (!dir || !c || !get) return tg_fail(EINVAL, "tg_checkpoint_save_from: NULL argument");
  int rc = tg_gpt_config_check(&c->cfg);
  if (rc < 0) return rc;
  float *buf = malloc(tg_gpt_largest_slice(&c->cfg) * sizeof(float));
  char *path = tg_ck_join(dir, TG_CHECKPOINT_FILE);
  if (!buf || !path) {
    free(buf);
    free(path);
    return tg_fail(ENOMEM, "checkpoint: out of memory");
  }
  tg_atomic_file af;
  rc = tg_atomic_open(&af, path);
  unsigned char h[HDR];
  encode_header(h, c);
  if (rc == 0) rc = tg_atomic_write(&af, h, HDR);
  for (int p = 0; p < TG_GPT_NPARAMS && rc == 0; p++)
    for (int k = 0; k < 3 && rc == 0; k++) rc = save_record(&af, &c->cfg, p, k, buf, get, ctx);
  if (rc == 0) rc = tg_atomic_commit(&af);
  else tg_atomic_abort(&af);
  free(buf);
  free(path);
  return rc;
}

/* the in-memory checkpoint's arrays as a source */
static int get_arrays(void *ctx, int p, int kind, size_t offset, float *dst, size_t n) {
  const tg_checkpoint *c = ctx;
  const float *arrays[3] = {c->params, c->m, c->v};
  memcpy(dst, arrays[kind] + tg_gpt_param_offset(&c->cfg, (tg_gpt_param)p) + offset,
         n * sizeof(float));
  return 0;
}

int tg_checkpoint_save(const char *dir, const tg_checkpoint *c) {
  if (!dir || !c || !c->params || !c->m || !c->v)
    return tg_fail(EINVAL, "tg_checkpoint_save: NULL argument or array");
  return tg_checkpoint_save_from(dir, c, get_arrays, (void *)c);
}

/* ---- loading ------------------------------------------------------------ */

struct tg_checkpoint_reader {
  FILE *f;
  char *path;
  tg_gpt_config cfg;
  size_t sizes[TG_GPT_NPARAMS];
  int p, kind;          /* the record being read (-1: none) */
  uint64_t next;        /* its next offset */
  uint32_t crc, stored; /* of its values so far, and the one it stores */
};

/* the header's fields into c (no arrays), after checking them */
static int decode_header(const char *path, const unsigned char *h, long long fsize,
                         tg_checkpoint *c) {
  uint32_t u[4];
  get(h, 0, u, sizeof u);
  if (u[3] != NREC) return tg_fail(EINVAL, "%s: %u tensor records, expected %d", path, u[3], NREC);
  int32_t cf[6];
  get(h, 16, cf, sizeof cf);
  tg_gpt_config cfg = {.max_seq_len = cf[0], .vocab_size = cf[1], .num_layers = cf[2],
                       .num_heads = cf[3], .channels = cf[4], .padded_vocab_size = cf[5]};
  if (tg_gpt_config_check(&cfg) < 0)
    return tg_fail(EINVAL, "%s: bad model configuration: %s", path, tg_last_error());
  int64_t step, batches, clean, skipped;
  int32_t bt[3], window;
  get(h, 40, &step, 8);
  get(h, 48, &batches, 8);
  get(h, 56, bt, sizeof bt);
  get(h, 92, &window, 4);
  get(h, 96, &clean, 8);
  get(h, 104, &skipped, 8);
  if (step < 0 || step > INT_MAX || batches < 0 || bt[0] < 1 || bt[1] < 1 ||
      (bt[2] != 0 && bt[2] != 1) || window < 0 || clean < 0 || skipped < 0)
    return tg_fail(EINVAL, "%s: bad header values (step %lld, batches %lld, B %d, T %d, data "
                   "order %d, scaler window %d)", path, (long long)step, (long long)batches,
                   bt[0], bt[1], bt[2], window);
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(&cfg, sizes);
  long long want = HDR + (long long)NREC * TG_CK_RECORD + 12LL * (long long)n;
  if (fsize != want)
    return tg_fail(EINVAL, "%s: %lld bytes, but the configuration (L=%d C=%d Vp=%d maxT=%d) "
                   "needs %lld: %s", path, fsize, cfg.num_layers, cfg.channels,
                   cfg.padded_vocab_size, cfg.max_seq_len, want,
                   fsize < want ? "truncated" : "trailing data");
  memset(c, 0, sizeof *c);
  c->cfg = cfg;
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
  return 0;
}

int tg_checkpoint_open(const char *dir, tg_checkpoint *c, tg_checkpoint_reader **out) {
  if (!dir || !c || !out) return tg_fail(EINVAL, "tg_checkpoint_open: NULL argument");
  *out = NULL;
  tg_checkpoint_reader *r = calloc(1, sizeof *r);
  char *path = tg_ck_join(dir, TG_CHECKPOINT_FILE);
  if (!r || !path) {
    free(r);
    free(path);
    return tg_fail(ENOMEM, "checkpoint: out of memory");
  }
  r->path = path;
  r->p = -1;
  unsigned char h[HDR];
  long long fsize;
  int rc = tg_ck_open(path, "taskgrad checkpoint", TG_CHECKPOINT_MAGIC, TG_CHECKPOINT_VERSION,
                      h, HDR, &r->f, &fsize);
  if (rc == 0) rc = decode_header(path, h, fsize, c);
  if (rc < 0) {
    tg_checkpoint_close(r);
    return rc;
  }
  r->cfg = c->cfg;
  tg_gpt_param_sizes(&r->cfg, r->sizes);
  *out = r;
  return 0;
}

/* where record (p, kind) starts: the header, then 3 records per tensor */
static long long record_start(const tg_checkpoint_reader *r, int p, int kind) {
  long long before = (long long)tg_gpt_param_offset(&r->cfg, (tg_gpt_param)p);
  return HDR + 3LL * p * TG_CK_RECORD + 12 * before +
         kind * (TG_CK_RECORD + 4LL * (long long)r->sizes[p]);
}

int tg_checkpoint_read(tg_checkpoint_reader *r, int p, int kind, size_t offset, float *dst,
                       size_t n) {
  if (!r || p < 0 || p >= TG_GPT_NPARAMS || kind < 0 || kind > 2 || (n && !dst))
    return tg_fail(EINVAL, "tg_checkpoint_read: bad argument");
  char what[96];
  snprintf(what, sizeof what, "tensor %s (%s)", tg_gpt_param_names[p], kind_names[kind]);
  if (offset + n > r->sizes[p])
    return tg_fail(EINVAL, "%s: %s: %zu values at %zu, past its %zu", r->path, what, n, offset,
                   r->sizes[p]);
  if (offset == 0) {
    if (fseeko(r->f, (off_t)record_start(r, p, kind), SEEK_SET) != 0)
      return tg_fail(errno, "%s: seek: %s", r->path, strerror(errno));
    TG_TRY(tg_ck_read_record_header(r->f, r->path, what, (uint32_t)p, (uint32_t)kind,
                                    r->sizes[p], &r->stored));
    r->p = p;
    r->kind = kind;
    r->next = 0;
    r->crc = tg_ck_crc(NULL, 0);
  } else if (r->p != p || r->kind != kind || r->next != offset) {
    return tg_fail(EINVAL, "%s: %s read at %zu, not in order", r->path, what, offset);
  }
  TG_TRY(tg_ck_read_exact(r->f, r->path, dst, n * sizeof(float), what));
  r->crc = tg_ck_crc_add(r->crc, dst, n * sizeof(float));
  r->next += n;
  if (r->next < r->sizes[p]) return 0;
  r->p = -1;
  return r->crc == r->stored ? 0 : tg_ck_crc_mismatch(r->path, what, r->stored, r->crc);
}

void tg_checkpoint_close(tg_checkpoint_reader *r) {
  if (!r) return;
  if (r->f) fclose(r->f);
  free(r->path);
  free(r);
}

int tg_checkpoint_load(const char *dir, tg_checkpoint *c) {
  if (!dir || !c) return tg_fail(EINVAL, "tg_checkpoint_load: NULL argument");
  memset(c, 0, sizeof *c);
  tg_checkpoint_reader *r;
  TG_TRY(tg_checkpoint_open(dir, c, &r));
  tg_checkpoint header = *c;
  int rc = tg_checkpoint_alloc(c, &header.cfg);
  if (rc == 0) {
    float *arrays[3] = {c->params, c->m, c->v};
    header.params = c->params, header.m = c->m, header.v = c->v;
    *c = header;
    size_t off = 0;
    for (int p = 0; p < TG_GPT_NPARAMS && rc == 0; p++) {
      for (int k = 0; k < 3 && rc == 0; k++)
        rc = tg_checkpoint_read(r, p, k, 0, arrays[k] + off, r->sizes[p]);
      off += r->sizes[p];
    }
    if (rc < 0) tg_checkpoint_free(c);
  }
  tg_checkpoint_close(r);
  return rc;
}

int tg_checkpoint_exists(const char *dir) { return tg_ck_exists(dir, TG_CHECKPOINT_FILE); }

int tg_checkpoint_remove_stale(const char *dir) {
  int removed = 0;
  const char *names[] = {TG_CHECKPOINT_FILE, TG_MLP_CHECKPOINT_FILE};
  for (int i = 0; i < 2; i++) {
    char *path = tg_ck_join(dir, names[i]);
    if (!path) return tg_fail(ENOMEM, "%s: out of memory", dir);
    int rc = tg_atomic_remove_stale(path);
    free(path);
    if (rc < 0) return tg_fail(-rc, "%s: out of memory", dir);
    removed += rc;
  }
  return removed;
}
