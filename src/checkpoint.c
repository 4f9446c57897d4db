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
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>

#include "atomic_file.h"
#include "taskgrad/checkpoint.h"
#include "taskgrad/runtime.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "taskgrad checkpoints are little-endian; this host is not"
#endif

enum { HDR = 128, REC = 24, NREC = 3 * TG_GPT_NPARAMS };
static const char *const kind_names[3] = {"parameters", "AdamW m", "AdamW v"};

static uint32_t crc_of(const void *data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const unsigned char *p = data;
  while (n > 0) {
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)crc;
}

static void put(unsigned char *h, size_t off, const void *v, size_t n) { memcpy(h + off, v, n); }
static void get(const unsigned char *h, size_t off, void *v, size_t n) { memcpy(v, h + off, n); }

int tg_checkpoint_alloc(tg_checkpoint *c, const tg_gpt_config *cfg) {
  memset(c, 0, sizeof *c);
  int rc = tg_gpt_config_check(cfg);
  if (rc < 0) return rc;
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(cfg, sizes);
  c->cfg = *cfg;
  c->scaler.scale = 1.0f;
  c->params = calloc(n, sizeof(float));
  c->m = calloc(n, sizeof(float));
  c->v = calloc(n, sizeof(float));
  if (!c->params || !c->m || !c->v) {
    tg_checkpoint_free(c);
    return tg_fail(ENOMEM, "checkpoint: out of memory for %zu parameters", n);
  }
  return 0;
}

void tg_checkpoint_free(tg_checkpoint *c) {
  if (!c) return;
  free(c->params);
  free(c->m);
  free(c->v);
  c->params = c->m = c->v = NULL;
}

static char *join(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (p) snprintf(p, len, "%s/%s", dir, name);
  return p;
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
  uint32_t crc = crc_of(h, HDR - 4);
  put(h, HDR - 4, &crc, 4);
}

/* ---- saving ------------------------------------------------------------- */

int tg_checkpoint_save(const char *dir, const tg_checkpoint *c) {
  if (!dir || !c || !c->params || !c->m || !c->v)
    return tg_fail(EINVAL, "tg_checkpoint_save: NULL argument or array");
  int rc = tg_gpt_config_check(&c->cfg);
  if (rc < 0) return rc;
  char *path = join(dir, TG_CHECKPOINT_FILE);
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
    for (int k = 0; k < 3 && rc == 0; k++) {
      const float *data = arrays[k] + off;
      size_t bytes = sizes[p] * sizeof(float);
      unsigned char r[REC] = {0};
      uint32_t idx[2] = {(uint32_t)p, (uint32_t)k};
      uint64_t count = sizes[p];
      uint32_t crc = crc_of(data, bytes);
      put(r, 0, idx, 8);
      put(r, 8, &count, 8);
      put(r, 16, &crc, 4);
      rc = tg_atomic_write(&af, r, REC);
      if (rc == 0) rc = tg_atomic_write(&af, data, bytes);
    }
    off += sizes[p];
  }
  if (rc == 0) rc = tg_atomic_commit(&af);
  else tg_atomic_abort(&af);
  free(path);
  return rc;
}

/* ---- loading ------------------------------------------------------------ */

static int read_exact(FILE *f, const char *path, void *buf, size_t n, const char *what) {
  if (n && fread(buf, 1, n, f) != n) {
    if (ferror(f)) return tg_fail(EIO, "%s: read error in %s: %s", path, what, strerror(errno));
    return tg_fail(EINVAL, "%s: truncated in %s", path, what);
  }
  return 0;
}

static int load_file(const char *path, tg_checkpoint *c) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno ? errno : EIO;
    return tg_fail(e, "%s: cannot open: %s", path, strerror(e));
  }
  int rc = 0;
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = tg_fail(EINVAL, "%s: not a regular file", path);
    goto out;
  }
  unsigned char h[HDR];
  long long fsize = (long long)st.st_size;
  size_t have = fsize < HDR ? (size_t)fsize : HDR;
  if ((rc = read_exact(f, path, h, have, "the header")) < 0) goto out;
  uint32_t u[4] = {0, 0, 0, 0};
  if (have < 4) {
    rc = tg_fail(EINVAL, "%s: truncated: %lld bytes, not even a magic number", path, fsize);
    goto out;
  }
  get(h, 0, u, have < 16 ? (have / 4) * 4 : 16);
  if (u[0] != TG_CHECKPOINT_MAGIC) {
    rc = tg_fail(EINVAL, "%s: bad magic 0x%08x (expected 0x%08x): not a taskgrad checkpoint",
                 path, u[0], TG_CHECKPOINT_MAGIC);
    goto out;
  }
  if (have < 16) {
    rc = tg_fail(EINVAL, "%s: truncated: %lld bytes, shorter than the header", path, fsize);
    goto out;
  }
  if (u[1] != TG_CHECKPOINT_VERSION) {
    rc = tg_fail(EINVAL, "%s: unsupported version %u (expected %d)", path, u[1],
                 TG_CHECKPOINT_VERSION);
    goto out;
  }
  if (u[2] != HDR) {
    rc = tg_fail(EINVAL, "%s: header size %u, expected %d for version %d", path, u[2], HDR,
                 TG_CHECKPOINT_VERSION);
    goto out;
  }
  if (have < HDR) {
    rc = tg_fail(EINVAL, "%s: truncated: %lld bytes, shorter than the %d-byte header", path,
                 fsize, HDR);
    goto out;
  }
  uint32_t hcrc;
  get(h, HDR - 4, &hcrc, 4);
  if (hcrc != crc_of(h, HDR - 4)) {
    rc = tg_fail(EINVAL, "%s: header CRC mismatch (stored 0x%08x, computed 0x%08x): corrupted",
                 path, hcrc, crc_of(h, HDR - 4));
    goto out;
  }
  if (u[3] != NREC) {
    rc = tg_fail(EINVAL, "%s: %u tensor records, expected %d", path, u[3], NREC);
    goto out;
  }
  int32_t cf[6];
  get(h, 16, cf, sizeof cf);
  tg_gpt_config cfg = {cf[0], cf[1], cf[2], cf[3], cf[4], cf[5]};
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
  long long want = HDR + (long long)NREC * REC + 12LL * (long long)n;
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
      unsigned char r[REC];
      if ((rc = read_exact(f, path, r, REC, what)) < 0) break;
      uint32_t idx[2], crc, zero;
      uint64_t count;
      get(r, 0, idx, 8);
      get(r, 8, &count, 8);
      get(r, 16, &crc, 4);
      get(r, 20, &zero, 4);
      if (idx[0] != (uint32_t)p || idx[1] != (uint32_t)k || count != sizes[p] || zero) {
        rc = tg_fail(EINVAL, "%s: %s: record header says parameter %u kind %u with %llu "
                     "elements, expected parameter %d kind %d with %zu: corrupted", path, what,
                     idx[0], idx[1], (unsigned long long)count, p, k, sizes[p]);
        break;
      }
      float *data = arrays[k] + off;
      if ((rc = read_exact(f, path, data, sizes[p] * sizeof(float), what)) < 0) break;
      uint32_t got = crc_of(data, sizes[p] * sizeof(float));
      if (got != crc) {
        rc = tg_fail(EINVAL, "%s: %s: CRC mismatch (stored 0x%08x, computed 0x%08x): "
                     "corrupted", path, what, crc, got);
        break;
      }
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
  char *path = join(dir, TG_CHECKPOINT_FILE);
  if (!path) return tg_fail(ENOMEM, "checkpoint: out of memory");
  int rc = load_file(path, c);
  free(path);
  return rc;
}

int tg_checkpoint_exists(const char *dir) {
  if (!dir) return tg_fail(EINVAL, "tg_checkpoint_exists: NULL argument");
  char *path = join(dir, TG_CHECKPOINT_FILE);
  if (!path) return tg_fail(ENOMEM, "checkpoint: out of memory");
  struct stat st;
  int rc = 0;
  if (stat(path, &st) == 0)
    rc = S_ISREG(st.st_mode) ? 1 : tg_fail(EINVAL, "%s: not a regular file", path);
  else if (errno != ENOENT && errno != ENOTDIR)
    rc = tg_fail(errno, "%s: %s", path, strerror(errno));
  free(path);
  return rc;
}
