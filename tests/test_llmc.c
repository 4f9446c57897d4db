/*
 * llm.c formats and GPT-2 parameters (no StarPU needed), in a fresh
 * temporary directory:
 *  - configuration checks, parameter sizes and per-layer slice shapes;
 *  - GPT-2 init statistics (std of wte 0.02, attprojw and fcprojw
 *    0.02/sqrt(2L), LayerNorm weights 1, biases 0, padded wte rows 0),
 *    determinism for a seed, a different model for another seed;
 *  - the init piece by piece (tg_gpt_init_param_range) equal to the whole,
 *    bit for bit, for ranges of both parities;
 *  - checkpoint round trip (bitwise), also read piece by piece
 *    (tg_llmc_model_open/fill/close), and refusals, each with a message
 *    naming the file: missing file, wrong magic, wrong version, truncated,
 *    extra bytes, header values that disagree with the file size, invalid
 *    configurations in the header (C % NH != 0, V > Vp, zero, negative);
 *  - token files: round trip, wrong magic and version, truncated, count
 *    mismatch, a token >= V, vocabulary 0 meaning unchecked;
 *  - atomic writes: a missing directory fails cleanly, and an existing
 *    target survives a failed write (the temporary file cannot be created
 *    because a directory has its name, which stops root too), a target that
 *    is not a regular file (directory, /dev/null) is never replaced, a write
 *    failing half-way (RLIMIT_FSIZE) removes its temporary file, a stale
 *    temporary file is replaced, and no temporary file is left behind.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "taskgrad/llmc.h"
#include "taskgrad/runtime.h"
#include "testutil.h"

static char dir[256];

static char *tmp_path(const char *name) {
  static char buf[8][512];
  static int k = 0;
  char *p = buf[k++ % 8];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

/* Writes raw bytes (the test's own corrupt files). */
static void write_raw(const char *path, const void *a, size_t na,
                      const void *b, size_t nb) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) ||
      fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

static void *read_raw(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc((size_t)len + 1);
  if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  fclose(f);
  *n = (size_t)len;
  return p;
}

/* The message names the file and contains want. */
static void check_refusal(int rc, const char *path, const char *want,
                          const char *what) {
  CHECK(rc < 0, "%s: accepted", what);
  CHECK(strstr(tg_last_error(), path) != NULL, "%s: message '%s' does not "
        "name %s", what, tg_last_error(), path);
  CHECK(strstr(tg_last_error(), want) != NULL, "%s: message '%s' lacks '%s'",
        what, tg_last_error(), want);
}

static double mean_of(const float *x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += x[i];
  return s / (double)n;
}
static double std_of(const float *x, size_t n) {
  double m = mean_of(x, n), s = 0;
  for (size_t i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
  return sqrt(s / (double)n);
}
static int all_equal(const float *x, size_t n, float v) {
  for (size_t i = 0; i < n; i++)
    if (x[i] != v) return 0;
  return 1;
}

static const tg_gpt_config small = {.max_seq_len = 32, .vocab_size = 100,
                                    .num_layers = 2, .num_heads = 4,
                                    .channels = 64, .padded_vocab_size = 128};

static void test_config(void) {
  CHECK(tg_gpt_config_check(&small) == 0, "small config: %s", tg_last_error());
  static const char *names[TG_GPT_NPARAMS] = {
      "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
  for (int i = 0; i < TG_GPT_NPARAMS; i++)
    CHECK(strcmp(tg_gpt_param_names[i], names[i]) == 0, "name %d is %s", i,
          tg_gpt_param_names[i]);

  /* GPT-2 124M as llm.c: 124475904 parameters with Vp = 50304 */
  tg_gpt_config g = {1024, 50257, 12, 12, 768, 50304};
  size_t sz[TG_GPT_NPARAMS];
  CHECK(tg_gpt_param_sizes(&g, sz) == 124475904, "GPT-2 124M: %zu",
        tg_gpt_param_sizes(&g, sz));

  const size_t C = 64, L = 2;
  size_t total = tg_gpt_param_sizes(&small, sz);
  const size_t want[TG_GPT_NPARAMS] = {
      128 * C, 32 * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C,
      L * C,   L * C,  L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C,
      C,       C};
  size_t sum = 0;
  for (int i = 0; i < TG_GPT_NPARAMS; i++) {
    CHECK(sz[i] == want[i], "%s: %zu elements, expected %zu",
          tg_gpt_param_names[i], sz[i], want[i]);
    sum += want[i];
    int rows, cols;
    tg_gpt_param_shape(&small, (tg_gpt_param)i, &rows, &cols);
    size_t slices = tg_gpt_param_per_layer((tg_gpt_param)i) ? L : 1;
    CHECK((size_t)rows * (size_t)cols * slices == sz[i],
          "%s: shape (%d, %d) x %zu does not cover %zu elements",
          tg_gpt_param_names[i], rows, cols, slices, sz[i]);
  }
  CHECK(total == sum, "total %zu, expected %zu", total, sum);
  int r, c;
  tg_gpt_param_shape(&small, TG_QKVW, &r, &c);
  CHECK(r == 192 && c == 64, "qkvw (%d, %d)", r, c);
  tg_gpt_param_shape(&small, TG_QKVB, &r, &c);
  CHECK(r == 1 && c == 192, "qkvb (%d, %d)", r, c);
  tg_gpt_param_shape(&small, TG_FCPROJW, &r, &c);
  CHECK(r == 64 && c == 256, "fcprojw (%d, %d)", r, c);
  tg_gpt_param_shape(&small, TG_WTE, &r, &c);
  CHECK(r == 128 && c == 64, "wte (%d, %d)", r, c);
  tg_gpt_param_shape(&small, TG_LNFW, &r, &c);
  CHECK(r == 1 && c == 64, "lnfw (%d, %d)", r, c);
  CHECK(!tg_gpt_param_per_layer(TG_WTE) && !tg_gpt_param_per_layer(TG_WPE) &&
        tg_gpt_param_per_layer(TG_LN1W) && tg_gpt_param_per_layer(TG_FCPROJB) &&
        !tg_gpt_param_per_layer(TG_LNFW) && !tg_gpt_param_per_layer(TG_LNFB),
        "per-layer flags");

  struct {
    tg_gpt_config c;
    const char *want;
  } bad[] = {
      {{32, 100, 2, 3, 64, 128}, "divisible"},
      {{32, 130, 2, 4, 64, 128}, "vocab_size 130 is larger"},
      {{0, 100, 2, 4, 64, 128}, "max_seq_len"},
      {{32, 100, -1, 4, 64, 128}, "num_layers"},
      {{32, 100, 2, 0, 64, 128}, "num_heads"},
      {{32, 100, 2, 4, 64, 70000}, "padded_vocab_size"},
      {{32, 100, 2, 4, 1 << 21, 128}, "channels"},
      {{1024, 100, 2, 16, 1 << 16, 128}, "qkvw has 12884901888 elements per layer"},
      {{1024, 100, 1 << 20, 16, 8192, 128}, "2^40"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tg_fail(0, "%s", "");
    CHECK(tg_gpt_config_check(&bad[i].c) == -EINVAL, "bad config %zu accepted",
          i);
    CHECK(strstr(tg_last_error(), bad[i].want) != NULL, "config %zu: '%s' "
          "lacks '%s'", i, tg_last_error(), bad[i].want);
    CHECK(tg_gpt_param_sizes(&bad[i].c, sz) == 0 && sz[0] == 0,
          "sizes of bad config %zu", i);
  }
}

static void test_init(void) {
  size_t sz[TG_GPT_NPARAMS];
  const size_t n = tg_gpt_param_sizes(&small, sz);
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b),
        *c = malloc(n * sizeof *c);
  if (!a || !b || !c) exit(1);
  tg_gpt_init_params(&small, 7, a);
  tg_gpt_init_params(&small, 7, b);
  tg_gpt_init_params(&small, 8, c);
  CHECK(memcmp(a, b, n * sizeof *a) == 0, "seed 7 twice gives other params");
  CHECK(memcmp(a, c, n * sizeof *a) != 0, "seeds 7 and 8 give the same params");

  const double proj = 0.02 / sqrt(2.0 * small.num_layers);
  const float *p = a;
  for (int i = 0; i < TG_GPT_NPARAMS; i++) {
    const char *nm = tg_gpt_param_names[i];
    switch ((tg_gpt_param)i) {
    case TG_WTE: {
      size_t real = (size_t)small.vocab_size * small.channels;
      double s = std_of(p, real), m = mean_of(p, real);
      CHECK(fabs(s - 0.02) < 0.001, "wte std %g", s);
      CHECK(fabs(m) < 0.001, "wte mean %g", m);
      CHECK(all_equal(p + real, sz[i] - real, 0.0f), "padded wte rows not 0");
      break;
    }
    case TG_WPE: case TG_QKVW: case TG_FCW: {
      double s = std_of(p, sz[i]);
      CHECK(fabs(s - 0.02) < 0.05 * 0.02, "%s std %g, expected 0.02", nm, s);
      CHECK(fabs(mean_of(p, sz[i])) < 0.002, "%s mean %g", nm, mean_of(p, sz[i]));
      break;
    }
    case TG_ATTPROJW: case TG_FCPROJW: {
      double s = std_of(p, sz[i]);
      CHECK(fabs(s - proj) < 0.05 * proj, "%s std %g, expected %g", nm, s, proj);
      break;
    }
    case TG_LN1W: case TG_LN2W: case TG_LNFW:
      CHECK(all_equal(p, sz[i], 1.0f), "%s is not all ones", nm);
      break;
    default:
      CHECK(all_equal(p, sz[i], 0.0f), "%s is not all zeros", nm);
      break;
    }
    p += sz[i];
  }
  /* the normals are really Gaussian: ~4.55% beyond 2 std in fcw */
  const float *fcw = a;
  for (int i = 0; i < TG_FCW; i++) fcw += sz[i];
  size_t beyond = 0;
  for (size_t k = 0; k < sz[TG_FCW]; k++) beyond += fabsf(fcw[k]) > 0.04f;
  double frac = (double)beyond / (double)sz[TG_FCW];
  CHECK(frac > 0.040 && frac < 0.051, "fcw: %.4f beyond 2 std", frac);

  /* piece by piece (tg_gpt_init_param_range): the same bits for any
   * ranges, odd starts and lengths included (a Box-Muller pair split) */
  memset(c, 0xff, n * sizeof *c);
  const float *at = a;
  for (int i = 0; i < TG_GPT_NPARAMS; i++) {
    size_t off = 0, step = 1;
    while (off < sz[i]) {
      size_t len = off + step <= sz[i] ? step : sz[i] - off;
      tg_gpt_init_param_range(&small, 7, i, off, len, c + (at - a) + off);
      off += len;
      step = step * 3 + 2; /* 1, 5, 17, ...: odd and even, starts of both parities */
    }
    at += sz[i];
  }
  CHECK(memcmp(a, c, n * sizeof *a) == 0, "init by ranges differs from the whole init");
  float guard[3] = {1.0f, 2.0f, 3.0f};
  tg_gpt_init_param_range(&small, 7, TG_WTE, sz[TG_WTE] - 1, 2, guard);
  tg_gpt_init_param_range(&small, 7, TG_GPT_NPARAMS, 0, 1, guard);
  CHECK(guard[0] == 1.0f && guard[1] == 2.0f, "an out-of-range init range wrote");
  free(a);
  free(b);
  free(c);
}

static void make_header(int32_t h[256], int32_t magic, int32_t version) {
  memset(h, 0, 256 * sizeof *h);
  h[0] = magic;
  h[1] = version;
}

static void test_model_files(void) {
  size_t sz[TG_GPT_NPARAMS];
  const size_t n = tg_gpt_param_sizes(&small, sz);
  float *w = malloc(n * sizeof *w);
  if (!w) exit(1);
  tg_gpt_init_params(&small, 3, w);
  w[5] = -0.0f; /* bitwise, not just == */
  w[6] = NAN;
  const char *path = tmp_path("model.bin");
  CHECK(tg_llmc_model_write(path, &small, w) == 0, "write: %s", tg_last_error());
  size_t len;
  uint8_t *raw = read_raw(path, &len);
  CHECK(raw && len == 1024 + n * 4, "file has %zu bytes, expected %zu", len,
        1024 + n * 4);
  if (raw) {
    const int32_t *h = (const int32_t *)raw;
    CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 32 && h[3] == 100 &&
          h[4] == 2 && h[5] == 4 && h[6] == 64 && h[7] == 128 && h[8] == 0 &&
          h[255] == 0, "header %d %d %d %d %d %d %d %d", h[0], h[1], h[2],
          h[3], h[4], h[5], h[6], h[7]);
  }
  tg_gpt_config cfg;
  float *r = NULL;
  CHECK(tg_llmc_model_read(path, &cfg, &r) == 0, "read: %s", tg_last_error());
  CHECK(memcmp(&cfg, &small, sizeof cfg) == 0, "config differs after reading");
  CHECK(r && memcmp(r, w, n * sizeof *w) == 0, "params differ after reading");
  free(r);

  /* piece by piece: open checks the file and gives its configuration, fill
   * reads any range of a tensor, bit for bit */
  tg_llmc_model_reader *rd = NULL;
  CHECK(tg_llmc_model_open(path, &cfg, &rd) == 0, "open: %s", tg_last_error());
  CHECK(memcmp(&cfg, &small, sizeof cfg) == 0, "config differs after opening");
  float *part = malloc(n * sizeof *part);
  if (!part) exit(1);
  memset(part, 0xff, n * sizeof *part);
  for (int i = TG_GPT_NPARAMS - 1; rd && i >= 0; i--) { /* backwards: seeks */
    size_t base = 0;
    for (int k = 0; k < i; k++) base += sz[k];
    size_t half = sz[i] / 2 + 1;
    if (half > sz[i]) half = sz[i];
    CHECK(tg_llmc_model_fill(rd, i, half, part + base + half, sz[i] - half) == 0 &&
              tg_llmc_model_fill(rd, i, 0, part + base, half) == 0,
          "fill %s: %s", tg_gpt_param_names[i], tg_last_error());
  }
  CHECK(memcmp(part, w, n * sizeof *w) == 0, "params differ when read piece by piece");
  if (rd) {
    CHECK(tg_llmc_model_fill(rd, TG_QKVW, sz[TG_QKVW], part, 1) < 0,
          "fill past a tensor's end was accepted");
    CHECK(tg_llmc_model_close(rd) == 0, "close: %s", tg_last_error());
  }
  free(part);

  /* refusals */
  const float *params = (const float *)(raw + 1024);
  int32_t h[256];
  memcpy(h, raw, sizeof h);
  int32_t hb[256];
  const char *bad = tmp_path("bad.bin");

  memcpy(hb, h, sizeof hb);
  hb[0] = 1234;
  write_raw(bad, hb, sizeof hb, params, n * 4);
  r = (float *)1;
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad,
                "bad magic 1234 (expected 20240326)", "wrong magic");
  CHECK(r == NULL, "params not NULL after a refusal");

  memcpy(hb, h, sizeof hb);
  hb[1] = 2;
  write_raw(bad, hb, sizeof hb, params, n * 4);
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, "version 2 (expected 3)",
                "wrong version");

  char want[256];
  snprintf(want, sizeof want, "header says %zu parameters (%zu bytes) but the "
           "file has %zu bytes after the header", n, n * 4, n * 4 - 4);
  write_raw(bad, h, sizeof h, params, n * 4 - 4);
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, want, "truncated");
  rd = (tg_llmc_model_reader *)1;
  check_refusal(tg_llmc_model_open(bad, &cfg, &rd), bad, want, "truncated (open)");
  CHECK(rd == NULL, "reader not NULL after a refusal");

  snprintf(want, sizeof want, "the file has %zu bytes after", n * 4 + 8);
  uint8_t *more = calloc(1, n * 4 + 8);
  memcpy(more, params, n * 4);
  write_raw(bad, h, sizeof h, more, n * 4 + 8);
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, want, "extra bytes");
  free(more);

  write_raw(bad, h, 512, NULL, 0);
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, "truncated",
                "file shorter than the header");
  write_raw(bad, h, 0, NULL, 0);
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, "truncated",
                "empty file");

  /* header values that disagree with the size: one more layer */
  memcpy(hb, h, sizeof hb);
  hb[4] = 3;
  write_raw(bad, hb, sizeof hb, params, n * 4);
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, "header says",
                "layers disagree with the size");
  /* a header announcing a huge model in a small file: refused before any
   * allocation (checked by the message) */
  hb[2] = 1 << 20; /* wpe alone: 2^26 floats */
  hb[4] = 2;
  write_raw(bad, hb, sizeof hb, params, n * 4);
  check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, "header says",
                "huge header");

  struct {
    int idx;
    int32_t v;
    const char *want;
  } invalid[] = {
      {5, 3, "divisible"},        {3, 200, "vocab_size 200 is larger"},
      {4, 0, "num_layers = 0"},   {6, -64, "channels = -64"},
      {2, -1, "max_seq_len = -1"}, {7, 0, "padded_vocab_size = 0"},
  };
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    memcpy(hb, h, sizeof hb);
    hb[invalid[i].idx] = invalid[i].v;
    write_raw(bad, hb, sizeof hb, params, n * 4);
    check_refusal(tg_llmc_model_read(bad, &cfg, &r), bad, invalid[i].want,
                  "invalid config in the header");
  }

  const char *missing = tmp_path("no-such-model.bin");
  CHECK(tg_llmc_model_read(missing, &cfg, &r) == -ENOENT, "missing file");
  check_refusal(-ENOENT, missing, "cannot open", "missing file");
  check_refusal(tg_llmc_model_read(dir, &cfg, &r), dir, "not a regular file",
                "directory");

  /* the writer refuses an invalid config and writes nothing */
  tg_gpt_config badc = small;
  badc.num_heads = 3;
  const char *nw = tmp_path("never.bin");
  check_refusal(tg_llmc_model_write(nw, &badc, w), nw, "divisible",
                "writing an invalid config");
  CHECK(access(nw, F_OK) != 0, "invalid config written");
  free(raw);
  free(w);
}

static void test_token_files(void) {
  enum { N = 1000 };
  uint16_t t[N];
  for (int i = 0; i < N; i++) t[i] = (uint16_t)((i * 37) % 256);
  t[10] = 65535;
  const char *path = tmp_path("tok.bin");
  CHECK(tg_llmc_tokens_write(path, t, N) == 0, "write: %s", tg_last_error());
  uint16_t *r = NULL;
  size_t n = 0;
  CHECK(tg_llmc_tokens_read(path, 0, &r, &n) == 0, "read: %s", tg_last_error());
  CHECK(n == N && r && memcmp(r, t, sizeof t) == 0, "round trip: %zu tokens", n);
  free(r);
  size_t len;
  uint8_t *raw = read_raw(path, &len);
  CHECK(raw && len == 1024 + 2 * N, "token file has %zu bytes", len);
  int32_t h[256];
  memcpy(h, raw, sizeof h);
  CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == N && h[3] == 0,
        "token header %d %d %d", h[0], h[1], h[2]);

  /* a token >= V, with its index and value */
  r = (uint16_t *)1;
  check_refusal(tg_llmc_tokens_read(path, 256, &r, &n), path,
                "token 10 is 65535", "token >= V");
  CHECK(r == NULL && n == 0, "outputs not cleared after a refusal");
  t[10] = 255;
  CHECK(tg_llmc_tokens_write(path, t, N) == 0, "write: %s", tg_last_error());
  CHECK(tg_llmc_tokens_read(path, 256, &r, &n) == 0, "V = 256: %s",
        tg_last_error());
  free(r);
  check_refusal(tg_llmc_tokens_read(path, 255, &r, &n), path, "is 255",
                "token == V");

  const char *bad = tmp_path("badtok.bin");
  int32_t hb[256];
  make_header(hb, 20240326, 1);
  hb[2] = N;
  write_raw(bad, hb, sizeof hb, t, sizeof t);
  check_refusal(tg_llmc_tokens_read(bad, 0, &r, &n), bad,
                "bad magic 20240326 (expected 20240520)", "token magic");
  make_header(hb, 20240520, 2);
  hb[2] = N;
  write_raw(bad, hb, sizeof hb, t, sizeof t);
  check_refusal(tg_llmc_tokens_read(bad, 0, &r, &n), bad,
                "version 2 (expected 1)", "token version");
  make_header(hb, 20240520, 1);
  hb[2] = N;
  write_raw(bad, hb, sizeof hb, t, sizeof t - 2);
  check_refusal(tg_llmc_tokens_read(bad, 0, &r, &n), bad,
                "header says 1000 tokens (2000 bytes) but the file has 1998",
                "truncated tokens");
  hb[2] = N - 1;
  write_raw(bad, hb, sizeof hb, t, sizeof t);
  check_refusal(tg_llmc_tokens_read(bad, 0, &r, &n), bad,
                "header says 999 tokens", "count mismatch");
  hb[2] = -5;
  write_raw(bad, hb, sizeof hb, t, sizeof t);
  check_refusal(tg_llmc_tokens_read(bad, 0, &r, &n), bad, "-5 tokens",
                "negative count");
  write_raw(bad, hb, 100, NULL, 0);
  check_refusal(tg_llmc_tokens_read(bad, 0, &r, &n), bad, "truncated",
                "short header");
  const char *missing = tmp_path("no-such-tokens.bin");
  check_refusal(tg_llmc_tokens_read(missing, 0, &r, &n), missing,
                "No such file", "missing token file");
  check_refusal(tg_llmc_tokens_write(tmp_path("empty.bin"), t, 0), "empty.bin",
                "0 tokens", "writing no tokens");
  free(raw);
}

static int count_temp_files(void) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int k = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) k++;
  closedir(d);
  return k;
}

static void test_atomic(void) {
  uint16_t t[64];
  for (int i = 0; i < 64; i++) t[i] = (uint16_t)i;
  const char *nodir = tmp_path("missing-dir/tok.bin");
  check_refusal(tg_llmc_tokens_write(nodir, t, 64), nodir, "No such file",
                "write into a missing directory");

  /* an existing target survives a failed write */
  const char *target = tmp_path("target.bin");
  CHECK(tg_llmc_tokens_write(target, t, 64) == 0, "write: %s", tg_last_error());
  size_t len0, len1;
  uint8_t *before = read_raw(target, &len0);
  char blocker[600];
  snprintf(blocker, sizeof blocker, "%s.tmp.%ld", target, (long)getpid());
  CHECK(mkdir(blocker, 0700) == 0, "mkdir %s", blocker);
  uint16_t other[10] = {1, 2, 3};
  check_refusal(tg_llmc_tokens_write(target, other, 10), target,
                "temporary file", "temporary file blocked");
  uint8_t *after = read_raw(target, &len1);
  CHECK(after && len0 == len1 && memcmp(before, after, len0) == 0,
        "target changed by a failed write");
  size_t sz[TG_GPT_NPARAMS];
  float *w = calloc(tg_gpt_param_sizes(&small, sz), sizeof *w);
  check_refusal(tg_llmc_model_write(target, &small, w), target,
                "temporary file", "model write blocked");
  free(after);
  after = read_raw(target, &len1);
  CHECK(after && len0 == len1 && memcmp(before, after, len0) == 0,
        "target changed by a failed model write");
  struct stat st;
  CHECK(stat(blocker, &st) == 0 && S_ISDIR(st.st_mode),
        "the writer removed a directory it did not create");
  rmdir(blocker);

  /* a target that is not a regular file is never replaced */
  const char *dtarget = tmp_path("dir-target");
  CHECK(mkdir(dtarget, 0700) == 0, "mkdir %s", dtarget);
  check_refusal(tg_llmc_tokens_write(dtarget, t, 64), dtarget,
                "not a regular file", "a directory as the target");
  CHECK(stat(dtarget, &st) == 0 && S_ISDIR(st.st_mode), "directory replaced");
  check_refusal(tg_llmc_tokens_write("/dev/null", t, 64), "/dev/null",
                "not a regular file", "a device as the target");
  CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode),
        "/dev/null replaced");
  CHECK(count_temp_files() == 0, "%d temporary files left", count_temp_files());
  rmdir(dtarget);

  /* a write that fails half-way (file size limit: EFBIG, root included):
   * the temporary file is removed and the target survives */
  struct rlimit old_lim, lim;
  if (getrlimit(RLIMIT_FSIZE, &old_lim) == 0) {
    lim = old_lim;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
      check_refusal(tg_llmc_model_write(target, &small, w), target, "File too large",
                    "write beyond the file size limit");
      setrlimit(RLIMIT_FSIZE, &old_lim);
      free(after);
      after = read_raw(target, &len1);
      CHECK(after && len0 == len1 && memcmp(before, after, len0) == 0,
            "target changed by a write that failed half-way");
      CHECK(count_temp_files() == 0, "a failed write left %d temporary files",
            count_temp_files());
    }
    signal(SIGXFSZ, SIG_DFL);
  }

  /* a stale temporary file (a crashed writer with our pid) is replaced */
  FILE *f = fopen(blocker, "wb");
  if (f) {
    fputs("stale", f);
    fclose(f);
  }
  CHECK(tg_llmc_tokens_write(target, other, 10) == 0, "stale temp: %s",
        tg_last_error());
  uint16_t *r = NULL;
  size_t n = 0;
  CHECK(tg_llmc_tokens_read(target, 0, &r, &n) == 0 && n == 10 && r[0] == 1,
        "rewrite after a stale temp: %s", tg_last_error());
  free(r);
  CHECK(count_temp_files() == 0, "%d temporary files left", count_temp_files());
  free(w);
  free(before);
  free(after);
}

static void remove_tree(void) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[600];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0) rmdir(p);
  }
  closedir(d);
  rmdir(dir);
}

int main(void) {
  const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(dir, sizeof dir, "%s/test_llmc.XXXXXX", base);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_config();
  test_init();
  test_model_files();
  test_token_files();
  test_atomic();
  remove_tree();
  return tg_test_finish("test_llmc");
}
