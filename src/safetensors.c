/*
 * GPT-2 parameters as a safetensors file with Hugging Face's names and
 * layouts (see taskgrad/safetensors.h for the mapping).
 *
 * Design notes
 *
 * Header.  Built with jansson (one object per tensor, in llm.c's order:
 * wte, wpe, then layer by layer, then ln_f), serialised compactly with
 * insertion order preserved, then padded with spaces so that 8 + N is a
 * multiple of 8 (the data section starts aligned, as the safetensors
 * writers do).  The tensors are written in the header's order, back to
 * back, so the data_offsets cover the data section without holes or
 * overlaps, which safetensors' readers verify.
 *
 * Transposes.  Conv1D weights are written transposed (llm.c: (out, in);
 * Hugging Face: (in, out)) through a buffer of at most TBLOCK output rows:
 * for each source row the TBLOCK consecutive floats that belong to this
 * block are read, so both sides are walked in runs, and the extra memory
 * is TBLOCK * out floats whatever the model size.
 *
 * config.json.  The GPT writers write GPT2Config's fields beside the file
 * (src/hf_gpt2.c, which also reads Hugging Face's files), after checking
 * first that an existing config.json is taskgrad's own.
 *
 * Streaming.  The GPT writer takes the parameters one llm.c slice at a
 * time (a layer's slice of a per-layer tensor, or a whole global tensor)
 * from a callback, as tg_llmc_model_write_from does: a trained model is
 * written without a second copy of it in memory, only its largest slice
 * and the transpose block.
 *
 * Atomic write.  As src/llmc.c: <path>.tmp.<pid> created with O_EXCL (a
 * stale regular file of that name is replaced once), every fwrite checked,
 * fflush, fsync, fclose, rename over the target, best-effort fsync of the
 * directory; on any error the temporary file is removed and the message
 * names the target, the step and the temporary file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "taskgrad/gpt_model.h" /* the model a file holds: no llm.c format here */
#include "taskgrad/runtime.h"
#include "atomic_file.h"
#include "taskgrad/safetensors.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; this writer supports little-endian hosts only"
#endif

#define TBLOCK 64
#define NAME_LEN 96

typedef struct st_entry {
  char name[NAME_LEN];
  int rank;
  size_t shape[2];   /* Hugging Face's shape */
  const float *src;  /* llm.c data: shape, or (shape[1], shape[0]) if transposed */
  int transpose;
  int param, layer;  /* GPT: the llm.c slice it comes from */
} st_entry;

static size_t entry_count(const st_entry *e) {
  return e->rank == 1 ? e->shape[0] : e->shape[0] * e->shape[1];
}

/* ---- the header --------------------------------------------------------- */

/* The JSON header, padded; NULL (out of memory) or a malloc'd string of
 * *len bytes (a multiple of 8). */
static char *build_header(const st_entry *es, size_t n, size_t *len) {
  json_t *root = json_object();
  if (!root) return NULL;
  json_t *meta = json_pack("{s:s}", "format", "pt");
  if (!meta || json_object_set_new(root, "__metadata__", meta) != 0) goto fail;
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    const uint64_t bytes = (uint64_t)entry_count(&es[i]) * sizeof(float);
    json_t *shape = json_array();
    if (!shape) goto fail;
    for (int d = 0; d < es[i].rank; d++)
      if (json_array_append_new(shape, json_integer((json_int_t)es[i].shape[d])) != 0) {
        json_decref(shape);
        goto fail;
      }
    json_t *t = json_pack("{s:s, s:o, s:[I,I]}", "dtype", "F32", "shape", shape,
                          "data_offsets", (json_int_t)off,
                          (json_int_t)(off + bytes));
    /* json_pack's "o" steals shape, even on failure */
    if (!t || json_object_set_new(root, es[i].name, t) != 0) goto fail;
    off += bytes;
  }
  char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s) return NULL;
  const size_t raw = strlen(s), padded = (raw + 7) / 8 * 8;
  char *h = realloc(s, padded + 1);
  if (!h) {
    free(s);
    return NULL;
  }
  memset(h + raw, ' ', padded - raw);
  h[padded] = '\0';
  *len = padded;
  return h;

fail:
  json_decref(root);
  return NULL;
}

/* ---- the tensors -------------------------------------------------------- */

static void add(st_entry *es, size_t *n, const float *src, int transpose,
               int rank, size_t d0, size_t d1, const char *fmt, int layer) {
  st_entry *e = &es[(*n)++];
  snprintf(e->name, sizeof e->name, fmt, layer);
  e->rank = rank;
  e->shape[0] = d0;
  e->shape[1] = rank == 2 ? d1 : 1;
  e->src = src;
  e->transpose = transpose;
  e->layer = layer;
}

/* a GPT entry: slice `layer` of llm.c tensor p */
static void add_gpt(st_entry *es, size_t *n, tg_gpt_param p, int transpose, int rank,
                    size_t d0, size_t d1, const char *fmt, int layer) {
  add(es, n, NULL, transpose, rank, d0, d1, fmt, layer);
  es[*n - 1].param = (int)p;
}

/* The 4 + 12 L entries in file order (src set when written). */
static st_entry *make_entries(const tg_gpt_config *c, size_t *count) {
  const size_t L = (size_t)c->num_layers, C = (size_t)c->channels;
  st_entry *es = calloc(4 + 12 * L, sizeof *es);
  if (!es) return NULL;
  size_t n = 0;
  add_gpt(es, &n, TG_WTE, 0, 2, (size_t)c->vocab_size, C, "transformer.wte.weight", 0);
  add_gpt(es, &n, TG_WPE, 0, 2, (size_t)c->max_seq_len, C, "transformer.wpe.weight", 0);
  for (int i = 0; i < (int)L; i++) {
    add_gpt(es, &n, TG_LN1W, 0, 1, C, 0, "transformer.h.%d.ln_1.weight", i);
    add_gpt(es, &n, TG_LN1B, 0, 1, C, 0, "transformer.h.%d.ln_1.bias", i);
    add_gpt(es, &n, TG_QKVW, 1, 2, C, 3 * C, "transformer.h.%d.attn.c_attn.weight", i);
    add_gpt(es, &n, TG_QKVB, 0, 1, 3 * C, 0, "transformer.h.%d.attn.c_attn.bias", i);
    add_gpt(es, &n, TG_ATTPROJW, 1, 2, C, C, "transformer.h.%d.attn.c_proj.weight", i);
    add_gpt(es, &n, TG_ATTPROJB, 0, 1, C, 0, "transformer.h.%d.attn.c_proj.bias", i);
    add_gpt(es, &n, TG_LN2W, 0, 1, C, 0, "transformer.h.%d.ln_2.weight", i);
    add_gpt(es, &n, TG_LN2B, 0, 1, C, 0, "transformer.h.%d.ln_2.bias", i);
    add_gpt(es, &n, TG_FCW, 1, 2, C, 4 * C, "transformer.h.%d.mlp.c_fc.weight", i);
    add_gpt(es, &n, TG_FCB, 0, 1, 4 * C, 0, "transformer.h.%d.mlp.c_fc.bias", i);
    add_gpt(es, &n, TG_FCPROJW, 1, 2, 4 * C, C, "transformer.h.%d.mlp.c_proj.weight", i);
    add_gpt(es, &n, TG_FCPROJB, 0, 1, C, 0, "transformer.h.%d.mlp.c_proj.bias", i);
  }
  add_gpt(es, &n, TG_LNFW, 0, 1, C, 0, "transformer.ln_f.weight", 0);
  add_gpt(es, &n, TG_LNFB, 0, 1, C, 0, "transformer.ln_f.bias", 0);
  *count = n;
  return es;
}

/* Writes one tensor; 0 or -1 with errno set. */
static int write_entry(tg_atomic_file *af, const st_entry *e, float *buf) {
  if (!e->transpose) return tg_atomic_write(af, e->src, sizeof(float) * entry_count(e));
  /* output (R, K) = transpose of the source (K, R) */
  const size_t R = e->shape[0], K = e->shape[1];
  for (size_t r0 = 0; r0 < R; r0 += TBLOCK) {
    const size_t nr = R - r0 < TBLOCK ? R - r0 : TBLOCK;
    for (size_t k = 0; k < K; k++) {
      const float *s = e->src + k * R + r0;
      for (size_t r = 0; r < nr; r++) buf[r * K + k] = s[r];
    }
    int rc = tg_atomic_write(af, buf, sizeof(float) * nr * K);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Where a GPT entry's data comes from: get's slices into slice (NULL:
 * the entries' src) */
typedef struct st_source {
  const tg_gpt_config *cfg;
  tg_llmc_param_get get;
  void *ctx;
  float *slice;
} st_source;

/* Header and tensors of es[0 .. n) to path, atomically; buf holds a
 * transposed block (TBLOCK rows of the widest transposed tensor). */
static int write_file(const char *path, st_entry *es, size_t n, size_t buf_floats,
                      const st_source *from) {
  size_t hlen = 0;
  char *hdr = build_header(es, n, &hlen);
  float *buf = hdr ? malloc((buf_floats ? buf_floats : 1) * sizeof *buf) : NULL;
  if (!buf) {
    free(hdr);
    return tg_fail(ENOMEM, "%s: out of memory building the safetensors file", path);
  }
  tg_atomic_file af;
  int rc = tg_atomic_open(&af, path);
  uint8_t len8[8];
  for (int b8 = 0; b8 < 8; b8++) len8[b8] = (uint8_t)((uint64_t)hlen >> (8 * b8));
  if (rc == 0) rc = tg_atomic_write(&af, len8, 8);
  if (rc == 0) rc = tg_atomic_write(&af, hdr, hlen);
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (from) { /* the slice holds the entry (wte: its first V of Vp rows) */
      size_t piece;
      tg_gpt_param_slices(from->cfg, (tg_gpt_param)es[i].param, &piece);
      rc = from->get(from->ctx, es[i].param, (size_t)es[i].layer * piece, from->slice, piece);
      es[i].src = from->slice;
    }
    if (rc == 0) rc = write_entry(&af, &es[i], buf);
  }
  if (rc == 0) rc = tg_atomic_commit(&af);
  else tg_atomic_abort(&af);
  free(buf);
  free(hdr);
  return rc;
}

int tg_safetensors_write_gpt2_from(const char *path, const tg_gpt_config *cfg,
                                   tg_llmc_param_get get, void *ctx) {
  if (!path || !cfg || !get)
    return tg_fail(EINVAL, "tg_safetensors_write_gpt2_from: NULL argument");
  if (tg_gpt_config_check(cfg) < 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tg_last_error());
    return tg_fail(EINVAL, "%s: not written: %s", path, msg);
  }
  /* config.json beside it: refused before anything is written */
  int crc = tg_safetensors_gpt2_config_check(path);
  if (crc < 0) return crc;
  size_t n = 0;
  st_entry *es = make_entries(cfg, &n);
  st_source from = {.cfg = cfg, .get = get, .ctx = ctx,
                    .slice = malloc(tg_gpt_largest_slice(cfg) * sizeof(float))};
  int rc = es && from.slice
               ? write_file(path, es, n, TBLOCK * 4 * (size_t)cfg->channels, &from)
               : tg_fail(ENOMEM, "%s: out of memory building the safetensors file", path);
  if (rc == 0) rc = tg_safetensors_gpt2_write_config(path, cfg);
  free(from.slice);
  free(es);
  return rc;
}

int tg_safetensors_write_gpt2(const char *path, const tg_gpt_config *cfg,
                              const float *params) {
  if (!path || !cfg || !params)
    return tg_fail(EINVAL, "tg_safetensors_write_gpt2: NULL argument");
  const void *ctx[2] = {params, cfg};
  return tg_safetensors_write_gpt2_from(path, cfg, tg_llmc_array_get, (void *)ctx);
}

int tg_safetensors_write(const char *path, int n, const char *const *names,
                         const float *const *data, const int (*shapes)[2]) {
  if (!path || n < 1 || !names || !data || !shapes)
    return tg_fail(EINVAL, "tg_safetensors_write: bad arguments");
  st_entry *es = calloc((size_t)n, sizeof *es);
  if (!es) return tg_fail(ENOMEM, "%s: out of memory building the safetensors file", path);
  size_t k = 0;
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (strlen(names[i]) >= NAME_LEN || shapes[i][0] < 1 || shapes[i][1] < 1) {
      rc = tg_fail(EINVAL, "%s: tensor %d ('%s') has a bad name or shape", path, i, names[i]);
      break;
    }
    add(es, &k, data[i], 0, 2, (size_t)shapes[i][0], (size_t)shapes[i][1], "tensor", 0);
    snprintf(es[k - 1].name, NAME_LEN, "%s", names[i]);
  }
  if (rc == 0) rc = write_file(path, es, k, 0, NULL);
  free(es);
  return rc;
}
