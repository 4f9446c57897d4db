/*
 * Hugging Face GPT-2 in and out (taskgrad/safetensors.h): a GPT2LMHeadModel
 * or GPT2Model safetensors file, alone or in a folder with config.json, read
 * into llm.c's layout; and the config.json that taskgrad writes beside its
 * own safetensors files.  Base layer: plain files, jansson, no StarPU.
 *
 * Design notes
 *
 * Untrusted input.  Everything a file says is checked before it is used:
 * the header length (at least 2, at most 100 MB as safetensors' own reader,
 * and within the file), the header's JSON (jansson, duplicate keys
 * refused), each tensor's dtype, rank (at most 8), shape (every product
 * overflow-checked and bounded by the data section's size) and data_offsets
 * (begin <= end <= the data section's size, end - begin = elements x dtype
 * size), every name (GPT-2's, with or without the "transformer." prefix;
 * the attention-mask buffers "h.N.attn.bias" / "h.N.attn.masked_bias" of
 * old checkpoints skipped; anything else refused, so that another
 * architecture never loads silently), each shape against the model's, and
 * config.json's fields against the shapes.  Only then is anything
 * allocated beyond the header.  Every failure is one message naming the
 * file, -EINVAL (or -errno, -ENOMEM).
 *
 * The configuration.  L is the number of blocks h.0 .. h.(L-1) (all of
 * them complete), C and V come from wte (V, C), maxT from wpe (maxT, C).
 * NH cannot be inferred from shapes: it comes from config.json ("n_head"),
 * the folder's or, for a file, the one beside it; without it the file is
 * refused with a message that says so (no default head size: a wrong one
 * would train a different model without a word).  config.json's n_layer,
 * n_embd, n_positions (or n_ctx), vocab_size and n_inner must agree with
 * the shapes, and settings taskgrad does not implement are refused:
 * activation_function other than gelu_new (or its alias
 * gelu_pytorch_tanh), layer_norm_epsilon other than 1e-5,
 * scale_attn_by_inverse_layer_idx, scale_attn_weights false, cross
 * attention, a model_type other than gpt2.  Vp is V rounded up to a
 * multiple of 64, as `init gpt` pads (50257 -> 50304 as in llm.c); the
 * padding rows of wte are zeros.
 *
 * lm_head.weight.  taskgrad ties the output layer to wte.  A file that
 * carries lm_head.weight is read only if it equals wte value for value
 * (compared at open, chunk by chunk, before any work); an untied model
 * (tie_word_embeddings false without an equal lm_head) is refused.
 *
 * Streaming.  open reads the header and config.json only; fill reads the
 * requested elements of one llm.c tensor straight from the file, F32 into
 * the destination, BF16 and F16 through a 64 KiB conversion buffer.  The
 * Conv1D weights (HF: (in, out), llm.c: (out, in)) are read a layer's
 * tensor at a time into a scratch buffer and transposed into a second one,
 * kept for the next request of the same slice: at most 2 x 4C x C floats
 * beside the model, never a second copy of it.
 *
 * config.json out.  The writer of taskgrad's own safetensors files writes
 * GPT2Config's fields beside them with "saved_by": "taskgrad", through the
 * atomic writer.  An existing config.json is replaced only when it is
 * taskgrad's (that field) — a folder's own config.json, e.g. the one a
 * user downloaded with a published GPT-2, is never overwritten: the save is
 * refused before anything is written.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "atomic_file.h"
#include "gpt_model_internal.h"
#include "taskgrad/widen16.h"
#include "taskgrad/runtime.h"
#include "taskgrad/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; this reader supports little-endian hosts only"
#endif

#define MAX_HEADER 100000000ULL /* safetensors' own limit */
#define MAX_CONFIG (1 << 20)
#define MAX_LAYERS (1 << 20)
#define NAME_LEN 128
#define CHUNK 16384 /* elements per conversion */
#define PER_LAYER 12

enum { DT_F32, DT_BF16, DT_F16 };

typedef struct hf_tensor {
  int present, dtype, rank;
  uint64_t shape[2], begin, count; /* begin: absolute file offset */
  char name[NAME_LEN];
} hf_tensor;

struct tg_safetensors_gpt2_reader {
  FILE *f;
  char *path;
  tg_gpt_config cfg;
  hf_tensor wte, wpe, lnfw, lnfb, lm_head;
  hf_tensor *layer;          /* L x PER_LAYER, llm.c's per-layer order */
  unsigned char *raw;        /* CHUNK elements of the file */
  float *hf, *scratch;       /* a Conv1D weight as in the file, transposed */
  int cached_param, cached_layer;
};

/* The per-layer tensors in llm.c's order (TG_LN1W .. TG_FCPROJB), with
 * Hugging Face's names; Conv1D weights are stored transposed. */
static const struct {
  const char *suffix;
  int transposed;
} kLayer[PER_LAYER] = {
    {"ln_1.weight", 0},        {"ln_1.bias", 0},   {"attn.c_attn.weight", 1},
    {"attn.c_attn.bias", 0},   {"attn.c_proj.weight", 1}, {"attn.c_proj.bias", 0},
    {"ln_2.weight", 0},        {"ln_2.bias", 0},   {"mlp.c_fc.weight", 1},
    {"mlp.c_fc.bias", 0},      {"mlp.c_proj.weight", 1},  {"mlp.c_proj.bias", 0},
};

/* ---- numbers ------------------------------------------------------------ */

static size_t dtype_size(int dt) { return dt == DT_F32 ? 4 : 2; }

/* a * b into *out unless it passes limit */
static int mul_within(uint64_t a, uint64_t b, uint64_t limit, uint64_t *out) {
  if (a && b > limit / a) return -1;
  *out = a * b;
  return 0;
}

/* ---- reading ------------------------------------------------------------ */

static int read_at(FILE *f, const char *path, uint64_t at, void *dst, size_t n) {
  if (at > (uint64_t)INT64_MAX || fseeko(f, (off_t)at, SEEK_SET) != 0) {
    int e = errno ? errno : EIO;
    return tg_fail(e, "%s: seek failed: %s", path, strerror(e));
  }
  errno = 0;
  size_t got = fread(dst, 1, n, f);
  if (got == n) return 0;
  if (ferror(f)) {
    int e = errno ? errno : EIO;
    return tg_fail(e, "%s: read error: %s", path, strerror(e));
  }
  return tg_fail(EINVAL, "%s: truncated: %zu of %zu bytes at offset %llu (did the file "
                 "change while it was read?)", path, got, n, (unsigned long long)at);
}

/* Elements [off, off + n) of t as floats. */
static int read_elems(tg_safetensors_gpt2_reader *r, const hf_tensor *t, uint64_t off,
                      float *dst, size_t n) {
  const size_t es = dtype_size(t->dtype);
  if (t->dtype == DT_F32) return read_at(r->f, r->path, t->begin + off * es, dst, n * es);
  for (size_t done = 0; done < n;) {
    size_t k = n - done < CHUNK ? n - done : CHUNK;
    int rc = read_at(r->f, r->path, t->begin + (off + done) * es, r->raw, k * es);
    if (rc < 0) return rc;
    for (size_t i = 0; i < k; i++) {
      uint16_t h;
      memcpy(&h, r->raw + 2 * i, 2);
      dst[done + i] = t->dtype == DT_BF16 ? tg_widen_bf16(h) : tg_widen_f16(h);
    }
    done += k;
  }
  return 0;
}

/* ---- the header --------------------------------------------------------- */

/* Reads a whole small file (config.json) as JSON; NULL after tg_fail. */
static json_t *load_json_file(const char *path, int *rc) {
  FILE *f = fopen(path, "rbe");
  struct stat st;
  if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_CONFIG) {
    int e = errno ? errno : EINVAL;
    *rc = !f ? tg_fail(e, "%s: cannot open: %s", path, strerror(e))
             : tg_fail(EINVAL, "%s: not a regular file of at most %d bytes", path, MAX_CONFIG);
    if (f) fclose(f);
    return NULL;
  }
  json_error_t err;
  json_t *j = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
  fclose(f);
  if (!j || !json_is_object(j)) {
    *rc = tg_fail(EINVAL, "%s: %s%s (line %d)", path, j ? "not a JSON object" : "bad JSON: ",
                  j ? "" : err.text, err.line);
    json_decref(j);
    return NULL;
  }
  return j;
}

/* The dtype's code, or -1 */
static int parse_dtype(const char *s) {
  return !strcmp(s, "F32") ? DT_F32 : !strcmp(s, "BF16") ? DT_BF16 : !strcmp(s, "F16") ? DT_F16 : -1;
}

/* Which tensor of the model a name is: its slot, NULL for an ignored
 * buffer; *unknown set for a name that is not GPT-2's.  Layer indices must
 * be below nlayers (first pass: nlayers 0 records the largest in *maxl). */
static hf_tensor *slot_of(tg_safetensors_gpt2_reader *r, const char *name, int nlayers,
                          long *maxl, int *unknown) {
  *unknown = 0;
  if (!strcmp(name, "lm_head.weight")) return &r->lm_head;
  const char *n = !strncmp(name, "transformer.", 12) ? name + 12 : name;
  if (!strcmp(n, "wte.weight")) return &r->wte;
  if (!strcmp(n, "wpe.weight")) return &r->wpe;
  if (!strcmp(n, "ln_f.weight")) return &r->lnfw;
  if (!strcmp(n, "ln_f.bias")) return &r->lnfb;
  if (!strncmp(n, "h.", 2) && n[2] >= '0' && n[2] <= '9') {
    const char *p = n + 2;
    long l = 0;
    if (*p == '0' && p[1] != '.') goto unknown; /* no leading zeros */
    while (*p >= '0' && *p <= '9' && l < MAX_LAYERS) l = l * 10 + (*p++ - '0');
    if (*p != '.' || l >= MAX_LAYERS) goto unknown;
    p++;
    if (!strcmp(p, "attn.bias") || !strcmp(p, "attn.masked_bias")) return NULL;
    for (int k = 0; k < PER_LAYER; k++)
      if (!strcmp(p, kLayer[k].suffix)) {
        if (l > *maxl) *maxl = l;
        return nlayers ? &r->layer[l * PER_LAYER + k] : NULL;
      }
  }
unknown:
  *unknown = 1;
  return NULL;
}

/* One header entry into t (dtype, shape, offsets checked against the data
 * section of data_size bytes starting at data_start). */
static int parse_entry(const char *path, const char *name, json_t *e, uint64_t data_start,
                       uint64_t data_size, int need_dtype, hf_tensor *t) {
  json_t *dt = json_object_get(e, "dtype"), *shape = json_object_get(e, "shape");
  json_t *offs = json_object_get(e, "data_offsets");
  if (!json_is_object(e) || !json_is_string(dt) || !json_is_array(shape) ||
      !json_is_array(offs) || json_array_size(offs) != 2 ||
      !json_is_integer(json_array_get(offs, 0)) || !json_is_integer(json_array_get(offs, 1)))
    return tg_fail(EINVAL, "%s: tensor '%s': not an object with dtype, shape and two "
                   "data_offsets", path, name);
  json_int_t b = json_integer_value(json_array_get(offs, 0));
  json_int_t f = json_integer_value(json_array_get(offs, 1));
  if (b < 0 || f < b || (uint64_t)f > data_size)
    return tg_fail(EINVAL, "%s: tensor '%s': data_offsets [%lld, %lld] outside the %llu-byte "
                   "data section (a truncated file?)", path, name, (long long)b, (long long)f,
                   (unsigned long long)data_size);
  size_t rank = json_array_size(shape);
  if (rank > 8) return tg_fail(EINVAL, "%s: tensor '%s': rank %zu", path, name, rank);
  uint64_t count = 1;
  for (size_t d = 0; d < rank; d++) {
    json_t *v = json_array_get(shape, d);
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
    if (x < 0 || mul_within(count, (uint64_t)x, data_size + 1, &count) < 0)
      return tg_fail(EINVAL, "%s: tensor '%s': bad shape (dimension %zu)", path, name, d);
    if (t && d < 2) t->shape[d] = (uint64_t)x;
  }
  const char *ds = json_string_value(dt);
  int dtype = parse_dtype(ds);
  if (!need_dtype) return 0; /* an ignored buffer: only in range */
  if (dtype < 0)
    return tg_fail(EINVAL, "%s: tensor '%s' has dtype %s (F32, BF16 and F16 are read)", path,
                   name, ds);
  uint64_t bytes;
  if (mul_within(count, dtype_size(dtype), data_size, &bytes) < 0 || bytes != (uint64_t)(f - b))
    return tg_fail(EINVAL, "%s: tensor '%s': data_offsets span %lld bytes, its shape and "
                   "dtype need %llu", path, name, (long long)(f - b),
                   (unsigned long long)count * dtype_size(dtype));
  if (t->present)
    return tg_fail(EINVAL, "%s: tensor '%s' is there twice (with and without the "
                   "'transformer.' prefix)", path, name);
  t->present = 1;
  t->dtype = dtype;
  t->rank = (int)rank;
  t->begin = data_start + (uint64_t)b;
  t->count = count;
  snprintf(t->name, sizeof t->name, "%s", name);
  return 0;
}

/* t is present with shape (d0) or (d0, d1) (d1 0: rank 1). */
static int need_shape(const char *path, const hf_tensor *t, const char *what, uint64_t d0,
                      uint64_t d1) {
  if (!t->present) return tg_fail(EINVAL, "%s: no tensor %s (not a GPT-2 model?)", path, what);
  int rank = d1 ? 2 : 1;
  if (t->rank == rank && t->shape[0] == d0 && (rank == 1 || t->shape[1] == d1)) return 0;
  char want[64], got[64];
  snprintf(want, sizeof want, d1 ? "[%llu, %llu]" : "[%llu]", (unsigned long long)d0,
           (unsigned long long)d1);
  snprintf(got, sizeof got, t->rank == 1 ? "[%llu]" : t->rank == 2 ? "[%llu, %llu]" : "rank %llu",
           (unsigned long long)(t->rank <= 2 ? t->shape[0] : (uint64_t)t->rank),
           (unsigned long long)t->shape[1]);
  return tg_fail(EINVAL, "%s: tensor '%s' has shape %s, the model needs %s", path, t->name,
                 got, want);
}

/* Reads the header into r's tensors and the layer count *L. */
static int parse_header(tg_safetensors_gpt2_reader *r, int *L) {
  const char *path = r->path;
  struct stat st;
  if (fstat(fileno(r->f), &st) != 0 || !S_ISREG(st.st_mode))
    return tg_fail(EINVAL, "%s: not a regular file", path);
  const uint64_t size = (uint64_t)st.st_size;
  uint8_t len8[8];
  if (size < 8) return tg_fail(EINVAL, "%s: truncated: %llu bytes, no safetensors header", path,
                               (unsigned long long)size);
  int rc = read_at(r->f, path, 0, len8, 8);
  if (rc < 0) return rc;
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | len8[k];
  if (n < 2 || n > MAX_HEADER || n > size - 8)
    return tg_fail(EINVAL, "%s: header length %llu is not between 2 and %llu and within the "
                   "%llu-byte file (not a safetensors file, or truncated)", path,
                   (unsigned long long)n, MAX_HEADER, (unsigned long long)size);
  char *text = malloc((size_t)n);
  if (!text) return tg_fail(ENOMEM, "%s: out of memory for a %llu-byte header", path,
                            (unsigned long long)n);
  rc = read_at(r->f, path, 8, text, (size_t)n);
  json_error_t err;
  json_t *root = rc < 0 ? NULL : json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &err);
  free(text);
  if (rc < 0) return rc;
  if (!root || !json_is_object(root)) {
    rc = tg_fail(EINVAL, "%s: bad safetensors header: %s", path,
                 root ? "not a JSON object" : err.text);
    json_decref(root);
    return rc;
  }
  const uint64_t data_start = 8 + n, data_size = size - data_start;
  const char *name;
  json_t *e;
  long maxl = -1;
  int unknown;
  /* first pass: names and the number of layers */
  json_object_foreach(root, name, e) {
    if (!strcmp(name, "__metadata__")) continue;
    slot_of(r, name, 0, &maxl, &unknown);
    if (unknown) {
      rc = tg_fail(EINVAL, "%s: tensor '%s' is not part of GPT-2 (GPT2LMHeadModel or "
                   "GPT2Model names)", path, name);
      break;
    }
  }
  if (rc == 0 && maxl < 0) rc = tg_fail(EINVAL, "%s: no transformer blocks (h.0 ...)", path);
  /* L blocks need 12 L entries: bounds the allocation by the header's size */
  if (rc == 0 && (uint64_t)(maxl + 1) * PER_LAYER > json_object_size(root))
    rc = tg_fail(EINVAL, "%s: tensors of block h.%ld but not all of blocks h.0 .. h.%ld", path,
                 maxl, maxl);
  if (rc == 0 && !(r->layer = calloc((size_t)(maxl + 1) * PER_LAYER, sizeof *r->layer)))
    rc = tg_fail(ENOMEM, "%s: out of memory", path);
  if (rc == 0) json_object_foreach(root, name, e) {
    if (!strcmp(name, "__metadata__")) continue;
    hf_tensor *t = slot_of(r, name, (int)maxl + 1, &maxl, &unknown);
    rc = parse_entry(path, name, e, data_start, data_size, t != NULL, t);
    if (rc < 0) break;
  }
  json_decref(root);
  *L = (int)maxl + 1;
  return rc;
}

/* ---- config.json -------------------------------------------------------- */

/* config.json of the model at path: the folder's, or the one beside a file. */
static void config_path_of(const char *path, int is_dir, char *out, size_t len) {
  if (is_dir) {
    snprintf(out, len, "%s/config.json", path);
    return;
  }
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(out, len, "config.json");
  else snprintf(out, len, "%.*s/config.json", (int)(slash - path + 0), path);
}

/* An integer field of config.json that must equal `want` when present. */
static int config_int(const char *path, json_t *j, const char *key, long long want, int *given) {
  json_t *v = json_object_get(j, key);
  if (given) *given = v != NULL;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_integer(v))
    return tg_fail(EINVAL, "%s: \"%s\" is not an integer", path, key);
  if (want >= 0 && json_integer_value(v) != want)
    return tg_fail(EINVAL, "%s: \"%s\" is %lld but the tensors say %lld", path, key,
                   (long long)json_integer_value(v), want);
  return 0;
}

/* Checks config.json against the tensors' configuration c and sets NH. */
static int apply_config(const char *cpath, json_t *j, tg_gpt_config *c) {
  int rc = 0, given;
  rc = config_int(cpath, j, "n_layer", c->num_layers, NULL);
  if (rc == 0) rc = config_int(cpath, j, "n_embd", c->channels, NULL);
  if (rc == 0) rc = config_int(cpath, j, "vocab_size", c->vocab_size, NULL);
  if (rc == 0) rc = config_int(cpath, j, "n_positions", c->max_seq_len, &given);
  if (rc == 0 && !given) rc = config_int(cpath, j, "n_ctx", c->max_seq_len, NULL);
  if (rc == 0) rc = config_int(cpath, j, "n_inner", 4LL * c->channels, NULL);
  if (rc == 0) rc = config_int(cpath, j, "n_head", -1, &given);
  if (rc < 0) return rc;
  json_t *v;
  const char *act = json_string_value(json_object_get(j, "activation_function"));
  const char *type = json_string_value(json_object_get(j, "model_type"));
  if (type && strcmp(type, "gpt2"))
    return tg_fail(EINVAL, "%s: model_type \"%s\": only GPT-2 (\"gpt2\") is read", cpath, type);
  if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
    return tg_fail(EINVAL, "%s: activation_function \"%s\": taskgrad's GPT-2 uses gelu_new "
                   "(GELU's tanh approximation) only", cpath, act);
  if ((v = json_object_get(j, "layer_norm_epsilon")) &&
      (!json_is_number(v) || json_number_value(v) < 0.99e-5 || json_number_value(v) > 1.01e-5))
    return tg_fail(EINVAL, "%s: layer_norm_epsilon must be 1e-5 (taskgrad's LayerNorm)", cpath);
  const struct {
    const char *key;
    int ok; /* the only value taskgrad runs */
  } flags[] = {{"scale_attn_by_inverse_layer_idx", 0}, {"scale_attn_weights", 1},
               {"add_cross_attention", 0}};
  for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
    if ((v = json_object_get(j, flags[k].key)) && json_is_boolean(v) &&
        json_is_true(v) != flags[k].ok)
      return tg_fail(EINVAL, "%s: %s %s is not implemented by taskgrad", cpath, flags[k].key,
                     flags[k].ok ? "false" : "true");
  if (!given)
    return tg_fail(EINVAL, "%s has no \"n_head\": the number of attention heads cannot be "
                   "inferred from the tensors' shapes", cpath);
  json_int_t nh = json_integer_value(json_object_get(j, "n_head"));
  if (nh < 1 || nh > c->channels || c->channels % nh)
    return tg_fail(EINVAL, "%s: n_head %lld does not divide n_embd %d", cpath, (long long)nh,
                   c->channels);
  c->num_heads = (int)nh;
  return 0;
}

/* ---- lm_head ------------------------------------------------------------ */

/* 1 when lm_head.weight equals wte value for value, 0 if not, < 0 error */
static int lm_head_tied(tg_safetensors_gpt2_reader *r) {
  float *a = malloc(2 * CHUNK * sizeof *a);
  if (!a) return tg_fail(ENOMEM, "%s: out of memory", r->path);
  int rc = 1;
  for (uint64_t off = 0; off < r->wte.count && rc == 1; off += CHUNK) {
    size_t k = r->wte.count - off < CHUNK ? (size_t)(r->wte.count - off) : CHUNK;
    int e = read_elems(r, &r->wte, off, a, k);
    if (e == 0) e = read_elems(r, &r->lm_head, off, a + CHUNK, k);
    if (e < 0) rc = e;
    else
      for (size_t i = 0; i < k && rc == 1; i++)
        if (a[i] != a[CHUNK + i]) rc = 0;
  }
  free(a);
  return rc;
}

/* ---- the reader --------------------------------------------------------- */

int tg_safetensors_gpt2_open(const char *path, tg_gpt_config *cfg,
                             tg_safetensors_gpt2_reader **out) {
  if (out) *out = NULL;
  if (!path || !cfg || !out) return tg_fail(EINVAL, "tg_safetensors_gpt2_open: NULL argument");
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno ? errno : EIO;
    return tg_fail(e, "%s: %s", path, strerror(e));
  }
  const int is_dir = S_ISDIR(st.st_mode);
  tg_safetensors_gpt2_reader *r = calloc(1, sizeof *r);
  size_t plen = strlen(path) + sizeof "/model.safetensors";
  char *cpath = malloc(plen + sizeof "/config.json");
  if (!r || !cpath || !(r->path = malloc(plen))) {
    free(cpath);
    if (r) free(r->path);
    free(r);
    return tg_fail(ENOMEM, "%s: out of memory", path);
  }
  snprintf(r->path, plen, is_dir ? "%s/model.safetensors" : "%s", path);
  config_path_of(path, is_dir, cpath, plen + sizeof "/config.json");
  r->cached_param = -1;
  int rc = 0, L = 0;
  if (!(r->f = fopen(r->path, "rbe"))) {
    int e = errno ? errno : EIO;
    rc = is_dir ? tg_fail(e, "%s: not a regular file, nor a Hugging Face GPT-2 folder "
                          "(model.safetensors and config.json): %s: %s", path, r->path,
                          strerror(e))
                : tg_fail(e, "%s: cannot open: %s", r->path, strerror(e));
  }
  if (rc == 0) rc = parse_header(r, &L);
  tg_gpt_config c = {0};
  if (rc == 0 && (!r->wte.present || r->wte.rank != 2 || !r->wpe.present || r->wpe.rank != 2))
    rc = tg_fail(EINVAL, "%s: no 2-D tensors wte.weight (V, C) and wpe.weight (maxT, C) "
                 "(not a GPT-2 model?)", r->path);
  /* the configuration as far as the tensors give it, checked before their
   * shapes (NH 1 until config.json) */
  char msg[256];
  uint64_t sz[TG_GPT_NPARAMS];
  const uint64_t C = rc ? 0 : r->wte.shape[1], V = rc ? 0 : r->wte.shape[0];
  if (rc == 0) {
    const uint64_t big = (uint64_t)INT_MAX, maxT = r->wpe.shape[0];
    c.num_layers = L;
    c.num_heads = 1;
    c.vocab_size = (int)(V < big ? V : big);
    c.channels = (int)(C < big ? C : big);
    c.max_seq_len = (int)(maxT < big ? maxT : big);
    c.padded_vocab_size = (int)((V + 63) / 64 * 64 < big ? (V + 63) / 64 * 64 : big);
    if (tg_gpt_config_sizes(&c, sz, msg, sizeof msg) == 0)
      rc = tg_fail(EINVAL, "%s: not a model taskgrad can run: %s", r->path, msg);
  }
  if (rc == 0) rc = need_shape(r->path, &r->wpe, "wpe.weight", r->wpe.shape[0], C);
  if (rc == 0) rc = need_shape(r->path, &r->lnfw, "ln_f.weight", C, 0);
  if (rc == 0) rc = need_shape(r->path, &r->lnfb, "ln_f.bias", C, 0);
  for (int l = 0; l < L && rc == 0; l++)
    for (int k = 0; k < PER_LAYER && rc == 0; k++) {
      static const uint64_t rows[PER_LAYER] = {1, 1, 1, 3, 1, 1, 1, 1, 1, 4, 4, 1};
      static const uint64_t cols[PER_LAYER] = {0, 0, 3, 0, 1, 0, 0, 0, 4, 0, 1, 0};
      char what[NAME_LEN];
      snprintf(what, sizeof what, "h.%d.%s", l, kLayer[k].suffix);
      rc = need_shape(r->path, &r->layer[l * PER_LAYER + k], what, rows[k] * C, cols[k] * C);
    }
  if (rc == 0 && r->lm_head.present) rc = need_shape(r->path, &r->lm_head, "lm_head.weight", V, C);
  json_t *j = NULL;
  if (rc == 0) {
    struct stat cst;
    if (stat(cpath, &cst) != 0)
      rc = tg_fail(EINVAL, "%s: no %s beside it: the number of attention heads (n_head) "
                   "cannot be inferred from the tensors' shapes; put the model's config.json "
                   "there (Hugging Face's GPT-2 folders have one)", r->path, cpath);
    else if ((j = load_json_file(cpath, &rc)))
      rc = apply_config(cpath, j, &c);
  }
  if (rc == 0) {
    json_t *tie = json_object_get(j, "tie_word_embeddings");
    int tied = r->lm_head.present ? lm_head_tied(r) : 1;
    if (tied < 0) rc = tied;
    else if (!tied)
      rc = tg_fail(EINVAL, "%s: lm_head.weight differs from the token embedding (wte): "
                   "taskgrad's GPT-2 ties its output layer to wte, so an untied model "
                   "cannot be read", r->path);
    else if (json_is_false(tie) && !r->lm_head.present)
      rc = tg_fail(EINVAL, "%s: tie_word_embeddings is false and the file has no "
                   "lm_head.weight: taskgrad's GPT-2 ties its output layer to wte", cpath);
  }
  json_decref(j);
  free(cpath);
  size_t most = 4 * C * C;
  if (rc == 0 && (!(r->raw = malloc(CHUNK * 2)) || !(r->hf = malloc(most * sizeof(float))) ||
                  !(r->scratch = malloc(most * sizeof(float)))))
    rc = tg_fail(ENOMEM, "%s: out of memory for the read buffers", r->path);
  if (rc < 0) {
    tg_safetensors_gpt2_close(r);
    return rc;
  }
  r->cfg = c;
  *cfg = c;
  *out = r;
  return 0;
}

/* elements [off, off + n) of layer l's slice of per-layer tensor k */
static int fill_layer(tg_safetensors_gpt2_reader *r, int k, int l, size_t off, float *dst,
                      size_t n) {
  const hf_tensor *t = &r->layer[l * PER_LAYER + k];
  if (!kLayer[k].transposed) return read_elems(r, t, off, dst, n);
  if (r->cached_param != k || r->cached_layer != l) {
    const size_t in = (size_t)t->shape[0], o = (size_t)t->shape[1];
    r->cached_param = -1;
    int rc = read_elems(r, t, 0, r->hf, in * o);
    if (rc < 0) return rc;
    for (size_t i = 0; i < in; i++) /* (in, out) -> (out, in) */
      for (size_t j = 0; j < o; j++) r->scratch[j * in + i] = r->hf[i * o + j];
    r->cached_param = k;
    r->cached_layer = l;
  }
  memcpy(dst, r->scratch + off, n * sizeof *dst);
  return 0;
}

int tg_safetensors_gpt2_fill(void *reader, int param, size_t off, float *dst, size_t n) {
  tg_safetensors_gpt2_reader *r = reader;
  size_t sizes[TG_GPT_NPARAMS];
  if (!r || !dst || param < 0 || param >= TG_GPT_NPARAMS || !tg_gpt_param_sizes(&r->cfg, sizes) ||
      off > sizes[param] || n > sizes[param] - off)
    return tg_fail(EINVAL, "tg_safetensors_gpt2_fill: bad argument");
  const tg_gpt_param p = (tg_gpt_param)param;
  if (tg_gpt_param_per_layer(p)) {
    const size_t slice = sizes[p] / (size_t)r->cfg.num_layers;
    while (n) {
      const int l = (int)(off / slice);
      const size_t o = off % slice, m = n < slice - o ? n : slice - o;
      int rc = fill_layer(r, p - TG_LN1W, l, o, dst, m);
      if (rc < 0) return rc;
      off += m, dst += m, n -= m;
    }
    return 0;
  }
  const hf_tensor *t = p == TG_WTE ? &r->wte : p == TG_WPE ? &r->wpe : p == TG_LNFW ? &r->lnfw
                                                                                   : &r->lnfb;
  /* wte's rows beyond V (padding to Vp) are zeros */
  const size_t real = (size_t)t->count, m = off >= real ? 0 : (real - off < n ? real - off : n);
  int rc = m ? read_elems(r, t, off, dst, m) : 0;
  if (rc == 0) memset(dst + m, 0, (n - m) * sizeof *dst);
  return rc;
}

int tg_safetensors_gpt2_close(tg_safetensors_gpt2_reader *r) {
  if (!r) return 0;
  if (r->f) fclose(r->f); /* read-only: nothing to lose */
  free(r->layer);
  free(r->raw);
  free(r->hf);
  free(r->scratch);
  free(r->path);
  free(r);
  return 0;
}

/* ---- config.json out ---------------------------------------------------- */

#define SAVED_BY "taskgrad"

/* config.json's path beside st_path into a malloc'd string, or NULL */
static char *config_beside(const char *st_path) {
  size_t len = strlen(st_path) + sizeof "/config.json";
  char *c = malloc(len);
  if (c) config_path_of(st_path, 0, c, len);
  return c;
}

int tg_safetensors_gpt2_config_check(const char *st_path) {
  char *cpath = config_beside(st_path);
  if (!cpath) return tg_fail(ENOMEM, "%s: out of memory", st_path);
  struct stat st;
  int rc = 0;
  if (lstat(cpath, &st) == 0) {
    json_t *j = S_ISREG(st.st_mode) ? json_load_file(cpath, 0, NULL) : NULL;
    const char *by = json_string_value(json_object_get(j, "saved_by"));
    if (!by || strcmp(by, SAVED_BY))
      rc = tg_fail(EEXIST, "%s: not written: %s is there and was not written by taskgrad "
                   "(its GPT2Config, written beside a safetensors file, would replace it); "
                   "save into another folder or move it away", st_path, cpath);
    json_decref(j);
  }
  free(cpath);
  return rc;
}

int tg_safetensors_gpt2_write_config(const char *st_path, const tg_gpt_config *c) {
  int rc = tg_safetensors_gpt2_config_check(st_path);
  if (rc < 0) return rc;
  json_t *j = json_pack(
      "{s:[s], s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:s, s:f, s:f, s:f, s:f, s:f,"
      " s:b, s:b, s:b, s:b, s:b, s:s}",
      "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "saved_by", SAVED_BY,
      "vocab_size", c->vocab_size, "n_positions", c->max_seq_len, "n_ctx", c->max_seq_len,
      "n_embd", c->channels, "n_layer", c->num_layers, "n_head", c->num_heads, "n_inner",
      "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5, "initializer_range", 0.02,
      "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0, "tie_word_embeddings", 1,
      "scale_attn_weights", 1, "scale_attn_by_inverse_layer_idx", 0,
      "reorder_and_upcast_attn", 0, "use_cache", 1, "torch_dtype", "float32");
  /* GPT-2's tokenizer's <|endoftext|> only with GPT-2's vocabulary */
  if (j && c->vocab_size == 50257) {
    json_object_set_new(j, "bos_token_id", json_integer(50256));
    json_object_set_new(j, "eos_token_id", json_integer(50256));
  }
  char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10)) : NULL;
  json_decref(j);
  char *cpath = config_beside(st_path);
  if (!text || !cpath) {
    free(text);
    free(cpath);
    return tg_fail(ENOMEM, "%s: out of memory for config.json", st_path);
  }
  tg_atomic_file af;
  rc = tg_atomic_open(&af, cpath);
  if (rc == 0) rc = tg_atomic_write(&af, text, strlen(text));
  if (rc == 0) rc = tg_atomic_write(&af, "\n", 1);
  if (rc == 0) rc = tg_atomic_commit(&af);
  else tg_atomic_abort(&af);
  free(text);
  free(cpath);
  return rc;
}
