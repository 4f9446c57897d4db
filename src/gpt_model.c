/*
 * The GPT-2 model definition (include/taskgrad/gpt_model.h): validation,
 * sizes, shapes and initialisation.  Base layer: plain data.
 *
 * Limits.  maxT, L, NH and C are at most 2^20 each; V and Vp at most 65536
 * (tokens are uint16); each tensor of one layer (a StarPU matrix, whose
 * kernels index it with int) below 2^31 elements; the total parameter count
 * at most 2^40 floats (4 TiB, beyond any host: simulated models are folded,
 * src/tensor.c).  Each whole tensor is at most 2^62 elements, so the
 * running sum checked against 2^40 after every term never overflows a
 * uint64_t.
 *
 * Initialisation.  Like llm.c's gpt2_build_from_random: normal(0, 0.02) for
 * wte, wpe, qkvw and fcw; normal(0, 0.02/sqrt(2L)) for attprojw and fcprojw
 * (the projections back into the residual stream); LayerNorm weights 1;
 * biases 0.  Only the V real rows of wte are random: the padded rows
 * V..Vp-1 are 0, as in llm.c (its C init fills V*C values; its PyTorch
 * export pads wte with zeros), so the padding never contributes to the
 * logits that matter.  The normals come from Box-Muller on splitmix64, one
 * stream per tensor derived from (seed, tensor index): a seed gives the same
 * wte for every L, and the numbers differ from llm.c's (another generator).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "gpt_model_internal.h"
#include "taskgrad/rng.h"
#include "taskgrad/runtime.h"

#define MAX_DIM (1 << 20)
#define MAX_VOCAB 65536
#define MAX_PARAMS ((uint64_t)1 << 40)
#define MAX_SLICE (((uint64_t)1 << 31) - 1)

const char *const tg_gpt_param_names[TG_GPT_NPARAMS] = {
    "wte",  "wpe",     "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
    "ln2w", "ln2b",    "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};

/* ---- configuration ------------------------------------------------------ */

uint64_t tg_gpt_config_sizes(const tg_gpt_config *c, uint64_t sz[TG_GPT_NPARAMS],
                             char *msg, size_t msglen) {
  struct {
    const char *name;
    int v, max;
  } dims[] = {
      {"max_seq_len", c->max_seq_len, MAX_DIM},
      {"vocab_size", c->vocab_size, MAX_VOCAB},
      {"num_layers", c->num_layers, MAX_DIM},
      {"num_heads", c->num_heads, MAX_DIM},
      {"channels", c->channels, MAX_DIM},
      {"padded_vocab_size", c->padded_vocab_size, MAX_VOCAB},
  };
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (dims[i].v < 1 || dims[i].v > dims[i].max) {
      snprintf(msg, msglen, "%s = %d must be between 1 and %d", dims[i].name,
               dims[i].v, dims[i].max);
      return 0;
    }
  if (c->channels % c->num_heads != 0) {
    snprintf(msg, msglen, "channels %d is not divisible by num_heads %d",
             c->channels, c->num_heads);
    return 0;
  }
  if (c->vocab_size > c->padded_vocab_size) {
    snprintf(msg, msglen, "vocab_size %d is larger than padded_vocab_size %d",
             c->vocab_size, c->padded_vocab_size);
    return 0;
  }
  const uint64_t L = (uint64_t)c->num_layers, C = (uint64_t)c->channels;
  const uint64_t maxT = (uint64_t)c->max_seq_len;
  const uint64_t Vp = (uint64_t)c->padded_vocab_size;
  const uint64_t s[TG_GPT_NPARAMS] = {
      Vp * C,        maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
      L * C * C,     L * C,    L * C, L * C, L * 4 * C * C, L * 4 * C,
      L * C * 4 * C, L * C,    C,     C};
  uint64_t total = 0;
  for (int i = 0; i < TG_GPT_NPARAMS; i++) {
    uint64_t slice = tg_gpt_param_per_layer((tg_gpt_param)i) ? s[i] / L : s[i];
    if (slice > MAX_SLICE) {
      snprintf(msg, msglen, "%s has %llu elements per layer, more than 2^31 - 1 (limit of "
               "this implementation)", tg_gpt_param_names[i], (unsigned long long)slice);
      return 0;
    }
    total += s[i]; /* each term <= 2^62 and total <= 2^40 so far: no wrap */
    if (total > MAX_PARAMS) {
      snprintf(msg, msglen, "the model has more than 2^40 parameters "
               "(limit of this implementation)");
      return 0;
    }
    sz[i] = s[i];
  }
  if (total > SIZE_MAX / sizeof(float)) {
    snprintf(msg, msglen, "%llu parameters do not fit in memory here",
             (unsigned long long)total);
    return 0;
  }
  return total;
}

int tg_gpt_config_check(const tg_gpt_config *c) {
  if (!c) return tg_fail(EINVAL, "tg_gpt_config_check: config is NULL");
  char msg[256];
  uint64_t sz[TG_GPT_NPARAMS];
  if (tg_gpt_config_sizes(c, sz, msg, sizeof msg) == 0)
    return tg_fail(EINVAL, "invalid GPT-2 configuration: %s", msg);
  return 0;
}

/* For an invalid configuration every size is 0 (and so is the sum). */
size_t tg_gpt_param_sizes(const tg_gpt_config *c, size_t sizes[TG_GPT_NPARAMS]) {
  uint64_t sz[TG_GPT_NPARAMS];
  char msg[256];
  uint64_t total = c ? tg_gpt_config_sizes(c, sz, msg, sizeof msg) : 0;
  for (int i = 0; i < TG_GPT_NPARAMS; i++) sizes[i] = total ? (size_t)sz[i] : 0;
  return (size_t)total;
}

int tg_gpt_param_per_layer(tg_gpt_param p) {
  return p >= TG_LN1W && p <= TG_FCPROJB;
}

int tg_gpt_param_slices(const tg_gpt_config *c, tg_gpt_param p, size_t *slice_floats) {
  size_t sizes[TG_GPT_NPARAMS];
  tg_gpt_param_sizes(c, sizes);
  int k = tg_gpt_param_per_layer(p) ? c->num_layers : 1;
  *slice_floats = sizes[p] / (size_t)k;
  return k;
}

size_t tg_gpt_largest_slice(const tg_gpt_config *c) {
  size_t most = 0, n;
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    tg_gpt_param_slices(c, (tg_gpt_param)p, &n);
    if (n > most) most = n;
  }
  return most;
}

size_t tg_gpt_param_offset(const tg_gpt_config *c, tg_gpt_param p) {
  size_t sizes[TG_GPT_NPARAMS], start = 0;
  tg_gpt_param_sizes(c, sizes);
  for (int q = 0; q < (int)p; q++) start += sizes[q];
  return start;
}

void tg_gpt_param_shape(const tg_gpt_config *c, tg_gpt_param p, int *rows,
                        int *cols) {
  const int C = c->channels;
  int r = 1, k = C;
  switch (p) {
  case TG_WTE: r = c->padded_vocab_size; break;
  case TG_WPE: r = c->max_seq_len; break;
  case TG_QKVW: r = 3 * C; break;
  case TG_QKVB: k = 3 * C; break;
  case TG_ATTPROJW: r = C; break;
  case TG_FCW: r = 4 * C; break;
  case TG_FCB: k = 4 * C; break;
  case TG_FCPROJW: r = C; k = 4 * C; break;
  case TG_LN1W: case TG_LN1B: case TG_ATTPROJB: case TG_LN2W: case TG_LN2B:
  case TG_FCPROJB: case TG_LNFW: case TG_LNFB: break;
  }
  if (rows) *rows = r;
  if (cols) *cols = k;
}

/* ---- initialisation ----------------------------------------------------- */

/* Elements [off, off + n) of a stream of normal(0, std) values drawn by
 * Box-Muller, both values of each pair used: element i is one of pair i / 2,
 * whose two uniforms are the stream's splitmix64 outputs 2 (i / 2) and
 * 2 (i / 2) + 1.  splitmix64's state only advances by its constant, so any
 * range starts in O(1), and a tensor filled range by range gets the bits of
 * one sweep. */
static void fill_normal_at(float *x, size_t off, size_t n, float std, uint64_t seed,
                           int stream) {
  uint64_t s = seed ^ (0xD1B54A32D192ED03ULL * (uint64_t)(stream + 1));
  (void)tg_splitmix64(&s);
  size_t i = off & ~(size_t)1; /* the first pair that the range touches */
  s += (uint64_t)i * 0x9E3779B97F4A7C15ULL;
  const double two_pi = 6.283185307179586476925286766559;
  for (; i < off + n; i += 2) {
    /* u1 in (0, 1] so that log(u1) is finite; u2 in [0, 1) */
    double u1 = (double)((tg_splitmix64(&s) >> 11) + 1) * 0x1.0p-53;
    double u2 = (double)(tg_splitmix64(&s) >> 11) * 0x1.0p-53;
    double r = sqrt(-2.0 * log(u1));
    if (i >= off) x[i - off] = (float)(std * r * cos(two_pi * u2));
    if (i + 1 >= off && i + 1 < off + n) x[i + 1 - off] = (float)(std * r * sin(two_pi * u2));
  }
}

static void fill_value(float *x, size_t n, float v) {
  for (size_t i = 0; i < n; i++) x[i] = v;
}

void tg_gpt_init_param_range(const tg_gpt_config *c, uint64_t seed, int param, size_t off,
                             size_t n, float *dst) {
  size_t sz[TG_GPT_NPARAMS];
  if (!c || !dst || param < 0 || param >= TG_GPT_NPARAMS || tg_gpt_param_sizes(c, sz) == 0 ||
      off > sz[param] || n > sz[param] - off)
    return;
  const float std = 0.02f;
  const float proj_std = (float)(0.02 / sqrt(2.0 * c->num_layers));
  switch ((tg_gpt_param)param) {
  case TG_WTE: { /* the padded rows (V .. Vp) are zeros */
    const size_t real = (size_t)c->vocab_size * (size_t)c->channels;
    const size_t nn = off >= real ? 0 : (real - off < n ? real - off : n);
    fill_normal_at(dst, off, nn, std, seed, param);
    fill_value(dst + nn, n - nn, 0.0f);
    break;
  }
  case TG_WPE: case TG_QKVW: case TG_FCW:
    fill_normal_at(dst, off, n, std, seed, param);
    break;
  case TG_ATTPROJW: case TG_FCPROJW:
    fill_normal_at(dst, off, n, proj_std, seed, param);
    break;
  case TG_LN1W: case TG_LN2W: case TG_LNFW:
    fill_value(dst, n, 1.0f);
    break;
  case TG_LN1B: case TG_QKVB: case TG_ATTPROJB: case TG_LN2B: case TG_FCB:
  case TG_FCPROJB: case TG_LNFB:
    fill_value(dst, n, 0.0f);
    break;
  }
}

void tg_gpt_init_params(const tg_gpt_config *c, uint64_t seed, float *params) {
  size_t sz[TG_GPT_NPARAMS];
  if (!c || !params || tg_gpt_param_sizes(c, sz) == 0) return;
  float *p = params;
  for (int i = 0; i < TG_GPT_NPARAMS; i++) {
    tg_gpt_init_param_range(c, seed, i, 0, sz[i], p);
    p += sz[i];
  }
}
