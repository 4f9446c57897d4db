/*
 * llm.c's file formats (GPT-2 fp32 checkpoints, uint16 token files); the
 * model they hold, its limits and initialisation are in gpt_model.c.
 *
 * Design notes
 *
 * Validation before allocation.  A reader takes the file size from fstat,
 * reads the 1024-byte header, checks magic, version and the configuration
 * (tg_gpt_config_check), computes the payload size the header announces with
 * overflow-safe arithmetic, and compares it with the file size; only then
 * does it allocate and read.  So a corrupt header can neither make us
 * allocate absurd amounts nor read past a buffer, and both truncation and
 * trailing data are reported with the two sizes.  The reserved header words
 * (8..255 for models, 3..255 for tokens) are written as 0 but not checked,
 * like llm.c, so that files with extra header fields still load.
 *
 * Hugging Face models.  tg_llmc_model_open also opens a Hugging Face GPT-2
 * (a folder, a .safetensors name, or a safetensors header where llm.c's
 * magic would be) through src/hf_gpt2.c's reader, behind the same
 * interface, so that every --init-from reads both.
 *
 * Byte order.  The formats are little-endian; this code reads and writes the
 * host's order and refuses to compile on a big-endian host.
 *
 * Atomic writes.  A writer creates <path>.tmp.<pid> next to the target
 * (O_EXCL: never through a symlink or over someone else's file; a stale
 * regular file of that name, left by a crashed process that had our pid, is
 * replaced), writes it with checked fwrite, fflush, fsync, fclose, and
 * renames it over the target; then it fsyncs the directory (best effort:
 * the data is already safe, this only makes the rename itself durable).  On
 * any error the temporary file is removed, the target is untouched, and the
 * error is -errno with a message naming the target.  A target that exists
 * but is not a regular file (a device such as /dev/null, a FIFO, a
 * directory) is refused: the rename would silently replace it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"
#include "gpt_model_internal.h"
#include "taskgrad/llmc.h"
#include "taskgrad/runtime.h"
#include "taskgrad/safetensors.h" /* the Hugging Face GPT-2 reader it dispatches to */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llm.c files are little-endian; this reader supports little-endian hosts only"
#endif

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * sizeof(int32_t))

/* ---- reading ------------------------------------------------------------ */

/* Opens path for reading and returns its size (a regular file of at least
 * the header's size), or NULL after tg_fail (*rc). */
static FILE *open_for_read(const char *path, off_t *size, int *rc) {
  FILE *f = fopen(path, "rbe");
  if (!f) {
    int e = errno ? errno : EIO;
    *rc = tg_fail(e, "%s: cannot open: %s", path, strerror(e));
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    int e = errno ? errno : EIO;
    fclose(f);
    *rc = tg_fail(e, "%s: fstat failed: %s", path, strerror(e));
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    fclose(f);
    *rc = tg_fail(EINVAL, "%s: not a regular file", path);
    return NULL;
  }
  if ((uint64_t)st.st_size < HEADER_BYTES) {
    fclose(f);
    *rc = tg_fail(EINVAL, "%s: truncated: %lld bytes, less than the %zu-byte "
                  "header", path, (long long)st.st_size, HEADER_BYTES);
    return NULL;
  }
  *size = st.st_size;
  return f;
}

/* Reads exactly n bytes (the size was checked, so a short read means the
 * file changed under us or an I/O error). */
static int read_exact(FILE *f, const char *path, void *buf, size_t n,
                      const char *what) {
  errno = 0;
  size_t got = fread(buf, 1, n, f);
  if (got == n) return 0;
  if (ferror(f)) {
    int e = errno ? errno : EIO;
    return tg_fail(e, "%s: read error in the %s: %s", path, what, strerror(e));
  }
  return tg_fail(EINVAL, "%s: truncated: the %s ends after %zu of %zu bytes "
                 "(did the file change while it was read?)", path, what, got, n);
}

static int read_header(FILE *f, const char *path, int32_t h[HEADER_INTS],
                       int32_t magic, int32_t version) {
  int rc = read_exact(f, path, h, HEADER_BYTES, "header");
  if (rc < 0) return rc;
  if (h[0] != magic)
    return tg_fail(EINVAL, "%s: bad magic %d (expected %d)", path, (int)h[0],
                   (int)magic);
  if (h[1] != version)
    return tg_fail(EINVAL, "%s: version %d (expected %d)", path, (int)h[1],
                   (int)version);
  return 0;
}

struct tg_llmc_model_reader {
  FILE *f;
  char *path;
  uint64_t base[TG_GPT_NPARAMS], size[TG_GPT_NPARAMS]; /* each tensor's floats */
  tg_safetensors_gpt2_reader *hf; /* or a Hugging Face GPT-2 */
};

/* A Hugging Face GPT-2 rather than an llm.c checkpoint: a folder, a name
 * ending in .safetensors, or a file without llm.c's magic whose ninth byte
 * opens a safetensors JSON header. */
static int is_hugging_face(const char *path) {
  struct stat st;
  size_t len = strlen(path);
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 1;
  if (len > 12 && !strcmp(path + len - 12, ".safetensors")) return 1;
  unsigned char head[9];
  FILE *f = fopen(path, "rbe");
  int hf = f && fread(head, 1, 9, f) == 9 && head[8] == '{';
  if (f) fclose(f);
  int32_t magic = TG_LLMC_MODEL_MAGIC;
  return hf && memcmp(head, &magic, 4) != 0;
}

/* The Hugging Face reader behind an llm.c reader's interface. */
static int open_hugging_face(const char *path, tg_gpt_config *cfg, tg_llmc_model_reader **out) {
  tg_llmc_model_reader *r = calloc(1, sizeof *r);
  if (!r) return tg_fail(ENOMEM, "%s: out of memory", path);
  int rc = tg_safetensors_gpt2_open(path, cfg, &r->hf);
  uint64_t sz[TG_GPT_NPARAMS];
  char msg[256];
  if (rc < 0 || !tg_gpt_config_sizes(cfg, sz, msg, sizeof msg)) {
    free(r);
    return rc < 0 ? rc : tg_fail(EINVAL, "%s: %s", path, msg);
  }
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    r->size[p] = sz[p];
    r->base[p] = p ? r->base[p - 1] + sz[p - 1] : 0;
  }
  *out = r;
  return 0;
}

int tg_llmc_model_open(const char *path, tg_gpt_config *cfg, tg_llmc_model_reader **out) {
  if (out) *out = NULL;
  if (!path || !cfg || !out) return tg_fail(EINVAL, "tg_llmc_model_open: NULL argument");
  if (is_hugging_face(path)) return open_hugging_face(path, cfg, out);
  off_t size;
  int rc = 0;
  FILE *f = open_for_read(path, &size, &rc);
  if (!f) return rc;
  int32_t h[HEADER_INTS] = {0};
  rc = read_header(f, path, h, TG_LLMC_MODEL_MAGIC, TG_LLMC_MODEL_VERSION);
  tg_gpt_config c = {.max_seq_len = h[2], .vocab_size = h[3], .num_layers = h[4],
                     .num_heads = h[5], .channels = h[6], .padded_vocab_size = h[7]};
  char msg[256];
  uint64_t sz[TG_GPT_NPARAMS];
  const uint64_t n = rc < 0 ? 0 : tg_gpt_config_sizes(&c, sz, msg, sizeof msg);
  if (rc == 0 && n == 0) rc = tg_fail(EINVAL, "%s: invalid header: %s", path, msg);
  const uint64_t bytes = n * sizeof(float), have = (uint64_t)size - HEADER_BYTES;
  if (rc == 0 && have != bytes)
    rc = tg_fail(EINVAL, "%s: header says %llu parameters (%llu bytes) but "
                 "the file has %llu bytes after the header", path,
                 (unsigned long long)n, (unsigned long long)bytes,
                 (unsigned long long)have);
  tg_llmc_model_reader *r = rc == 0 ? calloc(1, sizeof *r) : NULL;
  if (rc == 0 && (!r || !(r->path = strdup(path))))
    rc = tg_fail(ENOMEM, "%s: out of memory", path);
  if (rc < 0) {
    if (r) free(r);
    fclose(f); /* read-only: nothing to lose */
    return rc;
  }
  r->f = f;
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    r->size[p] = sz[p];
    r->base[p] = p ? r->base[p - 1] + sz[p - 1] : 0;
  }
  *cfg = c;
  *out = r;
  return 0;
}

int tg_llmc_model_fill(void *reader, int param, size_t off, float *dst, size_t n) {
  tg_llmc_model_reader *r = reader;
  if (!r || !dst || param < 0 || param >= TG_GPT_NPARAMS || off > r->size[param] ||
      n > r->size[param] - off)
    return tg_fail(EINVAL, "tg_llmc_model_fill: bad argument");
  if (r->hf) return tg_safetensors_gpt2_fill(r->hf, param, off, dst, n);
  const uint64_t at = HEADER_BYTES + (r->base[param] + off) * sizeof(float);
  if (fseeko(r->f, (off_t)at, SEEK_SET) != 0) {
    int e = errno ? errno : EIO;
    return tg_fail(e, "%s: seek failed: %s", r->path, strerror(e));
  }
  return read_exact(r->f, r->path, dst, n * sizeof(float), "parameters");
}

int tg_llmc_model_close(tg_llmc_model_reader *r) {
  if (!r) return 0;
  int rc = 0;
  if (r->hf) {
    rc = tg_safetensors_gpt2_close(r->hf);
    free(r);
    return rc;
  }
  if (fclose(r->f) != 0) {
    int e = errno ? errno : EIO;
    rc = tg_fail(e, "%s: close failed: %s", r->path, strerror(e));
  }
  free(r->path);
  free(r);
  return rc;
}

int tg_llmc_model_read(const char *path, tg_gpt_config *cfg, float **params) {
  if (params) *params = NULL;
  if (!path || !cfg || !params)
    return tg_fail(EINVAL, "tg_llmc_model_read: NULL argument");
  tg_llmc_model_reader *r;
  tg_gpt_config c;
  int rc = tg_llmc_model_open(path, &c, &r);
  if (rc < 0) return rc;
  const uint64_t n = r->base[TG_GPT_NPARAMS - 1] + r->size[TG_GPT_NPARAMS - 1];
  float *p = malloc((size_t)n * sizeof(float));
  rc = p ? 0
         : tg_fail(ENOMEM, "%s: cannot allocate %llu bytes for the parameters", path,
                       (unsigned long long)(n * sizeof(float)));
  for (int i = 0; i < TG_GPT_NPARAMS && rc == 0; i++)
    rc = tg_llmc_model_fill(r, i, 0, p + r->base[i], (size_t)r->size[i]);
  int close_rc = tg_llmc_model_close(r);
  if (rc == 0) rc = close_rc;
  if (rc < 0) {
    free(p);
    return rc;
  }
  *cfg = c;
  *params = p;
  return 0;
}

int tg_llmc_tokens_read(const char *path, int vocab_size, uint16_t **tokens,
                        size_t *ntokens) {
  if (tokens) *tokens = NULL;
  if (ntokens) *ntokens = 0;
  if (!path || !tokens || !ntokens)
    return tg_fail(EINVAL, "tg_llmc_tokens_read: NULL argument");
  if (vocab_size < 0)
    return tg_fail(EINVAL, "%s: vocabulary size %d is negative", path,
                   vocab_size);
  off_t size;
  int rc = 0;
  FILE *f = open_for_read(path, &size, &rc);
  if (!f) return rc;
  int32_t h[HEADER_INTS];
  uint16_t *t = NULL;
  uint64_t n = 0;
  rc = read_header(f, path, h, TG_LLMC_TOKENS_MAGIC, TG_LLMC_TOKENS_VERSION);
  if (rc < 0) goto out;
  if (h[2] <= 0) {
    rc = tg_fail(EINVAL, "%s: header says %d tokens (must be at least 1)",
                 path, (int)h[2]);
    goto out;
  }
  n = (uint64_t)h[2];
  const uint64_t bytes = n * sizeof(uint16_t);
  const uint64_t have = (uint64_t)size - HEADER_BYTES;
  if (have != bytes) {
    rc = tg_fail(EINVAL, "%s: header says %llu tokens (%llu bytes) but the "
                 "file has %llu bytes after the header", path,
                 (unsigned long long)n, (unsigned long long)bytes,
                 (unsigned long long)have);
    goto out;
  }
  t = malloc((size_t)bytes);
  if (!t) {
    rc = tg_fail(ENOMEM, "%s: cannot allocate %llu bytes for the tokens", path,
                 (unsigned long long)bytes);
    goto out;
  }
  rc = read_exact(f, path, t, (size_t)bytes, "tokens");
  if (rc < 0) goto out;
  if (vocab_size > 0)
    for (size_t i = 0; i < (size_t)n; i++)
      if (t[i] >= vocab_size) {
        rc = tg_fail(EINVAL, "%s: token %zu is %u, not below the vocabulary "
                     "size %d", path, i, (unsigned)t[i], vocab_size);
        goto out;
      }
out:
  if (fclose(f) != 0 && rc == 0) {
    int e = errno ? errno : EIO;
    rc = tg_fail(e, "%s: close failed: %s", path, strerror(e));
  }
  if (rc < 0) {
    free(t);
    return rc;
  }
  *tokens = t;
  *ntokens = (size_t)n;
  return 0;
}

/* ---- atomic writing (atomic_file.h) ------------------------------------- */

/* Writes header + data crash-safely. */
static int atomic_write(const char *path, const void *hdr, size_t hdr_len,
                        const void *data, size_t data_len) {
  tg_atomic_file af;
  int rc = tg_atomic_open(&af, path);
  if (rc == 0) rc = tg_atomic_write(&af, hdr, hdr_len);
  if (rc == 0) rc = tg_atomic_write(&af, data, data_len);
  if (rc == 0) return tg_atomic_commit(&af);
  tg_atomic_abort(&af);
  return rc;
}

int tg_llmc_array_get(void *ctx, int param, size_t off, float *dst, size_t n) {
  const float *params = ((const float *const *)ctx)[0];
  const tg_gpt_config *cfg = ((const tg_gpt_config *const *)ctx)[1];
  memcpy(dst, params + tg_gpt_param_offset(cfg, (tg_gpt_param)param) + off, n * sizeof(float));
  return 0;
}

int tg_llmc_model_write_from(const char *path, const tg_gpt_config *cfg, tg_llmc_param_get get,
                             void *ctx) {
  if (!path || !cfg || !get) return tg_fail(EINVAL, "tg_llmc_model_write_from: NULL argument");
  char msg[256];
  uint64_t sz[TG_GPT_NPARAMS];
  if (tg_gpt_config_sizes(cfg, sz, msg, sizeof msg) == 0)
    return tg_fail(EINVAL, "%s: not written: invalid GPT-2 configuration: %s", path, msg);
  size_t most = tg_gpt_largest_slice(cfg);
  float *buf = malloc(most * sizeof *buf);
  if (!buf) return tg_fail(ENOMEM, "%s: out of memory for a %zu-float slice", path, most);
  int32_t h[HEADER_INTS] = {0};
  h[0] = TG_LLMC_MODEL_MAGIC;
  h[1] = TG_LLMC_MODEL_VERSION;
  h[2] = cfg->max_seq_len;
  h[3] = cfg->vocab_size;
  h[4] = cfg->num_layers;
  h[5] = cfg->num_heads;
  h[6] = cfg->channels;
  h[7] = cfg->padded_vocab_size;
  tg_atomic_file af;
  int rc = tg_atomic_open(&af, path);
  if (rc == 0) rc = tg_atomic_write(&af, h, sizeof h);
  for (int p = 0; p < TG_GPT_NPARAMS && rc == 0; p++) {
    size_t piece;
    int pieces = tg_gpt_param_slices(cfg, (tg_gpt_param)p, &piece);
    for (int i = 0; i < pieces && rc == 0; i++) {
      rc = get(ctx, p, (size_t)i * piece, buf, piece);
      if (rc == 0) rc = tg_atomic_write(&af, buf, piece * sizeof(float));
    }
  }
  free(buf);
  if (rc == 0) return tg_atomic_commit(&af);
  tg_atomic_abort(&af);
  return rc;
}

int tg_llmc_model_write(const char *path, const tg_gpt_config *cfg,
                        const float *params) {
  if (!path || !cfg || !params)
    return tg_fail(EINVAL, "tg_llmc_model_write: NULL argument");
  const void *ctx[2] = {params, cfg};
  return tg_llmc_model_write_from(path, cfg, tg_llmc_array_get, (void *)ctx);
}

int tg_llmc_tokens_write(const char *path, const uint16_t *tokens, size_t n) {
  if (!path || !tokens)
    return tg_fail(EINVAL, "tg_llmc_tokens_write: NULL argument");
  if (n == 0 || n > INT32_MAX)
    return tg_fail(EINVAL, "%s: not written: %zu tokens (a token file holds "
                   "1 to %d)", path, n, (int)INT32_MAX);
  int32_t h[HEADER_INTS] = {0};
  h[0] = TG_LLMC_TOKENS_MAGIC;
  h[1] = TG_LLMC_TOKENS_VERSION;
  h[2] = (int32_t)n;
  return atomic_write(path, h, sizeof h, tokens, n * sizeof(uint16_t));
}
