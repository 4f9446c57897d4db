/*
 * Training checkpoints (src/checkpoint.c) on a tiny configuration:
 *  - save then load gives back every field and the params, m and v arrays
 *    bitwise;
 *  - a flipped bit in any tensor's data (every one of the 48 records, at a
 *    random byte) is refused with -EINVAL and a message naming the file, the
 *    tensor and the CRC; flipped bits in the header and in a record header
 *    are refused too;
 *  - truncations (to 0, 3, 100, 127, 128 bytes, mid-tensor, one byte short),
 *    trailing data, a wrong magic and a wrong version are refused with
 *    messages naming the file;
 *  - a save that fails (its temporary path blocked by a directory of that
 *    name) returns an error and leaves the previous checkpoint byte for byte
 *    intact; a checkpoint.bin that is a directory is refused;
 *  - streaming: every record of a saved file carries the zlib CRC32 of its
 *    data (computed here, independently of the writer, which patches it in
 *    after streaming the data); tg_checkpoint_read gives back each record
 *    piece by piece (a layer's slice), records in any order, and refuses
 *    pieces out of order or past the end;
 *  - tg_gpt_write_state / tg_gpt_read_state round-trip params, m, v and the
 *    step through a GPT's tensors;
 *  - the token loader's start_batch: a loader started at batch k hands out
 *    exactly what a loader started at 0 hands out from its k-th batch on,
 *    sequential and shuffled (across epoch boundaries).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <starpu.h>

#include "taskgrad/checkpoint.h"
#include "taskgrad/data.h"
#include "taskgrad/gpt.h"
#include "taskgrad/runtime.h"
#include "testutil.h"

static char dir[256], path[300];

static unsigned char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *n = (size_t)len;
  return b;
}

static void spill(const char *p, const unsigned char *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(b, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", p);
    exit(1);
  }
  fclose(f);
}

/* load must fail with -EINVAL and a message holding the file name and the
 * given fragments */
static void expect_refused(const char *what, const char *frag1, const char *frag2) {
  tg_checkpoint c;
  int rc = tg_checkpoint_load(dir, &c);
  const char *msg = tg_last_error();
  CHECK(rc == -EINVAL, "%s: load returned %d (%s)", what, rc, msg);
  CHECK(strstr(msg, path) != NULL, "%s: message '%s' does not name the file", what, msg);
  if (frag1) CHECK(strstr(msg, frag1) != NULL, "%s: message '%s' lacks '%s'", what, msg, frag1);
  if (frag2) CHECK(strstr(msg, frag2) != NULL, "%s: message '%s' lacks '%s'", what, msg, frag2);
  CHECK(c.params == NULL && c.m == NULL && c.v == NULL, "%s: arrays left allocated", what);
  if (rc == 0) tg_checkpoint_free(&c);
}

/* a checkpoint of cfg with random parameters and moments */
static void random_checkpoint(tg_checkpoint *c, const tg_gpt_config *cfg, uint64_t seed) {
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(cfg, sizes);
  CHECK(tg_checkpoint_alloc(c, cfg) == 0, "alloc: %s", tg_last_error());
  tg_rng r = {seed};
  tg_rng_fill(&r, c->params, n, 1.0f);
  tg_rng_fill(&r, c->m, n, 0.1f);
  tg_rng_fill(&r, c->v, n, 0.01f);
}

static void test_streaming(void) {
  tg_gpt_config cfg = {16, 50, 3, 2, 8, 64};
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(&cfg, sizes);
  tg_checkpoint c;
  random_checkpoint(&c, &cfg, 777);
  c.B = c.T = 1;
  CHECK(tg_checkpoint_save(dir, &c) == 0, "save: %s", tg_last_error());
  size_t len;
  unsigned char *file = slurp(path, &len);
  CHECK(file && len == 128 + 48 * 24 + 12 * n, "file size %zu", len);
  /* each record: index, kind, count, then the CRC of its data (zlib here) */
  size_t at = 128;
  for (int p = 0; file && p < TG_GPT_NPARAMS; p++)
    for (uint32_t k = 0; k < 3; k++) {
      uint32_t idx[2], crc;
      uint64_t cnt;
      memcpy(idx, file + at, 8);
      memcpy(&cnt, file + at + 8, 8);
      memcpy(&crc, file + at + 16, 4);
      uLong want = crc32(crc32(0L, Z_NULL, 0), file + at + 24, (uInt)(sizes[p] * 4));
      CHECK(idx[0] == (uint32_t)p && idx[1] == k && cnt == sizes[p] && crc == (uint32_t)want,
            "record %d/%u: header %u %u %llu crc 0x%08x, zlib 0x%08lx", p, k, idx[0], idx[1],
            (unsigned long long)cnt, crc, want);
      at += 24 + sizes[p] * 4;
    }
  free(file);
  /* piece by piece, the records from the last to the first */
  tg_checkpoint h;
  tg_checkpoint_reader *rd;
  CHECK(tg_checkpoint_open(dir, &h, &rd) == 0, "open: %s", tg_last_error());
  if (rd) {
    CHECK(!h.params && !memcmp(&h.cfg, &cfg, sizeof cfg), "open: header");
    float *buf = malloc(n * sizeof *buf);
    size_t start[TG_GPT_NPARAMS], off = 0;
    for (int p = 0; p < TG_GPT_NPARAMS; p++) start[p] = off, off += sizes[p];
    const float *arrays[3] = {c.params, c.m, c.v};
    for (int p = TG_GPT_NPARAMS - 1; buf && p >= 0; p--)
      for (int k = 2; k >= 0; k--) {
        size_t piece;
        int pieces = tg_gpt_param_slices(&cfg, (tg_gpt_param)p, &piece);
        CHECK(pieces == (tg_gpt_param_per_layer((tg_gpt_param)p) ? 3 : 1) &&
              piece * pieces == sizes[p], "tensor %d: %d pieces of %zu", p, pieces, piece);
        for (int i = 0; i < pieces; i++)
          CHECK(tg_checkpoint_read(rd, p, k, i * piece, buf + i * piece, piece) == 0,
                "read %d/%d piece %d: %s", p, k, i, tg_last_error());
        CHECK(!memcmp(buf, arrays[k] + start[p], sizes[p] * 4), "record %d/%d differs", p, k);
      }
    size_t piece;
    tg_gpt_param_slices(&cfg, TG_QKVW, &piece);
    CHECK(tg_checkpoint_read(rd, TG_QKVW, 1, 0, buf, piece) == 0, "first piece");
    CHECK(tg_checkpoint_read(rd, TG_QKVW, 1, 2 * piece, buf, piece) == -EINVAL &&
          strstr(tg_last_error(), "not in order"), "a piece skipped: %s", tg_last_error());
    CHECK(tg_checkpoint_read(rd, TG_QKVW, 1, 0, buf, sizes[TG_QKVW] + 1) == -EINVAL,
          "read past the record accepted");
    free(buf);
    tg_checkpoint_close(rd);
  }
  tg_checkpoint_free(&c);
  unlink(path);
}

static void test_file_format(void) {
  tg_gpt_config cfg = {16, 50, 2, 2, 8, 64};
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(&cfg, sizes);
  tg_checkpoint c;
  random_checkpoint(&c, &cfg, 12345);
  c.params[3] = -0.0f; /* bitwise, not by value */
  c.step = 1234;
  c.batches = 98765432101LL;
  c.B = 4;
  c.T = 16;
  c.data_order = 1;
  c.data_seed = 0xFEDCBA9876543210ULL;
  c.rng_seed = 77;
  c.scaler = (tg_loss_scaler_state){65536.0f, 2000, 17, 3};
  CHECK(tg_checkpoint_save(dir, &c) == 0, "save: %s", tg_last_error());

  tg_checkpoint d;
  CHECK(tg_checkpoint_load(dir, &d) == 0, "load: %s", tg_last_error());
  if (d.params) {
    CHECK(!memcmp(&d.cfg, &c.cfg, sizeof cfg), "config differs");
    CHECK(d.step == c.step && d.batches == c.batches && d.B == 4 && d.T == 16 &&
          d.data_order == 1 && d.data_seed == c.data_seed && d.rng_seed == 77,
          "scalars differ: step %lld batches %lld", d.step, d.batches);
    CHECK(d.scaler.scale == 65536.0f && d.scaler.window == 2000 && d.scaler.clean_steps == 17 &&
          d.scaler.skipped_steps == 3, "loss scaler differs");
    CHECK(!memcmp(d.params, c.params, n * 4) && !memcmp(d.m, c.m, n * 4) &&
          !memcmp(d.v, c.v, n * 4), "tensors differ after a round trip");
    tg_checkpoint_free(&d);
  }
  tg_checkpoint fresh;
  CHECK(tg_checkpoint_alloc(&fresh, &cfg) == 0 && fresh.scaler.scale == 1.0f &&
        fresh.scaler.window == 0 && fresh.scaler.clean_steps == 0 &&
        fresh.scaler.skipped_steps == 0, "loss-scaler defaults are not 1/0/0/0");
  tg_checkpoint_free(&fresh);

  size_t len;
  unsigned char *good = slurp(path, &len);
  CHECK(good && len == 128 + 48 * 24 + 12 * n, "file size %zu", len);
  if (!good) return;

  /* a flipped bit in every tensor record's data */
  tg_rng r = {54321};
  size_t off = 128;
  int refused = 0;
  for (int p = 0; p < TG_GPT_NPARAMS; p++)
    for (int k = 0; k < 3; k++) {
      size_t data = off + 24, bytes = sizes[p] * 4;
      size_t at = data + (size_t)(tg_rng_next(&r) % bytes);
      unsigned char *bad = malloc(len);
      memcpy(bad, good, len);
      bad[at] ^= (unsigned char)(1u << (tg_rng_next(&r) % 8));
      spill(path, bad, len);
      free(bad);
      int before = tg_test_failures;
      char what[64];
      snprintf(what, sizeof what, "bit flip in %s record %d", tg_gpt_param_names[p], k);
      expect_refused(what, tg_gpt_param_names[p], "CRC");
      refused += tg_test_failures == before;
      off = data + bytes;
    }
  CHECK(refused == 48, "%d of 48 bit flips refused", refused);
  unsigned char *bad = malloc(len + 8);
  /* header bit flip (step field), record header bit flip (count) */
  memcpy(bad, good, len);
  bad[41] ^= 0x10;
  spill(path, bad, len);
  expect_refused("bit flip in the header", "header CRC", NULL);
  memcpy(bad, good, len);
  bad[128 + 8] ^= 0x01;
  spill(path, bad, len);
  expect_refused("bit flip in a record header", "wte", NULL);
  /* truncations */
  size_t cuts[] = {0, 3, 100, 127, 128, 128 + 24 + 5, len / 2, len - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
    char what[64];
    snprintf(what, sizeof what, "truncated to %zu bytes", cuts[i]);
    spill(path, good, cuts[i]);
    expect_refused(what, "truncated", NULL);
  }
  memcpy(bad, good, len);
  memset(bad + len, 0, 8);
  spill(path, bad, len + 8);
  expect_refused("trailing data", "trailing", NULL);
  memcpy(bad, good, len);
  bad[0] ^= 0x01;
  spill(path, bad, len);
  expect_refused("wrong magic", "magic", NULL);
  memcpy(bad, good, len);
  bad[4] = 2;
  spill(path, bad, len);
  expect_refused("wrong version", "version 2", NULL);
  free(bad);

  /* a failed save leaves the previous checkpoint intact */
  spill(path, good, len);
  char tmp[400];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  CHECK(mkdir(tmp, 0700) == 0, "mkdir %s", tmp);
  c.step = 99999;
  tg_rng_fill(&r, c.params, n, 1.0f);
  int rc = tg_checkpoint_save(dir, &c);
  CHECK(rc < 0, "save through a blocked temporary path succeeded");
  CHECK(strstr(tg_last_error(), path) != NULL, "save failure message '%s'", tg_last_error());
  size_t len2;
  unsigned char *after = slurp(path, &len2);
  CHECK(after && len2 == len && !memcmp(after, good, len),
        "the previous checkpoint changed after a failed save");
  free(after);
  rmdir(tmp);
  CHECK(tg_checkpoint_load(dir, &d) == 0 && d.step == 1234,
        "previous checkpoint does not load after a failed save: %s", tg_last_error());
  tg_checkpoint_free(&d);
  /* a stale regular temporary file is replaced, and the new save lands */
  spill(tmp, good, 10);
  CHECK(tg_checkpoint_save(dir, &c) == 0, "save over a stale temp: %s", tg_last_error());
  CHECK(access(tmp, F_OK) != 0, "temporary file left behind");
  CHECK(tg_checkpoint_load(dir, &d) == 0 && d.step == 99999 &&
        !memcmp(d.params, c.params, n * 4), "new checkpoint not loaded back");
  tg_checkpoint_free(&d);
  unlink(path);
  CHECK(mkdir(path, 0700) == 0, "mkdir %s", path);
  CHECK(tg_checkpoint_save(dir, &c) < 0, "saved over a directory named checkpoint.bin");
  rmdir(path);
  free(good);
  tg_checkpoint_free(&c);
}

static void test_gpt_state(void) {
  tg_gpt_config cfg = {16, 50, 2, 2, 8, 64};
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(&cfg, sizes);
  float *a = malloc(n * 4 * 6);
  tg_rng r = {99};
  tg_rng_fill(&r, a, n * 3, 1.0f);
  tg_gpt_run_config run = tg_gpt_run_default(2, 8);
  tg_optimizer_config opt = tg_optimizer_default(TG_OPT_ADAMW);
  tg_gpt g;
  int rc = tg_gpt_create(&g, &cfg, a, &run, &opt);
  CHECK(rc == 0, "tg_gpt_create: %s", tg_last_error());
  if (rc) {
    free(a);
    return;
  }
  int step = -1;
  CHECK(tg_gpt_read_state(&g, a + 3 * n, a + 4 * n, a + 5 * n, &step) == 0, "read state");
  int zero = 1;
  for (size_t i = 0; i < 2 * n; i++) zero &= a[4 * n + i] == 0.0f;
  CHECK(step == 0 && zero && !memcmp(a, a + 3 * n, n * 4), "fresh state: step %d", step);
  CHECK(tg_gpt_write_state(&g, NULL, a + n, a + 2 * n, 41) == 0, "write state");
  CHECK(tg_gpt_read_state(&g, a + 3 * n, a + 4 * n, a + 5 * n, &step) == 0, "read state");
  CHECK(step == 41 && !memcmp(a, a + 3 * n, n * 4) && !memcmp(a + n, a + 4 * n, 2 * n * 4),
        "state does not round-trip (step %d)", step);
  CHECK(tg_gpt_write_state(&g, NULL, NULL, NULL, -1) < 0, "negative step accepted");
  tg_gpt_destroy(&g);
  free(a);
}

/* first token of every sequence of nb batches */
static int token_starts(const uint16_t *tok, size_t ntok, tg_token_loader_config *lc, int nb,
                        int *starts) {
  tg_loader *ld = tg_token_loader_create(tok, ntok, lc);
  CHECK(ld != NULL, "loader: %s", tg_last_error());
  if (!ld) return -1;
  for (int k = 0; k < nb; k++) {
    tg_batch b;
    if (tg_loader_next(ld, &b) < 0) {
      CHECK(0, "next: %s", tg_last_error());
      tg_loader_destroy(ld);
      return -1;
    }
    starpu_data_handle_t xh = b.x[0];
    starpu_data_acquire(xh, STARPU_R);
    const int32_t *x = (const int32_t *)starpu_matrix_get_local_ptr(xh);
    unsigned ldx = starpu_matrix_get_local_ld(xh);
    for (int i = 0; i < lc->B; i++) starts[k * lc->B + i] = x[(size_t)i * lc->T * ldx];
    starpu_data_release(xh);
  }
  tg_loader_destroy(ld);
  return 0;
}

static void test_loader_start(void) {
  enum { B = 2, T = 4, NTOK = 41, NB = 14, K = 6 }; /* bpe 5 (seq) / 5 (shuffled) */
  uint16_t tok[NTOK];
  for (int i = 0; i < NTOK; i++) tok[i] = (uint16_t)i;
  for (int shuffled = 0; shuffled <= 1; shuffled++) {
    tg_token_loader_config lc = {.B = B, .T = T, .nmicro = 1, .prefetch = 2,
                                 .shuffled = shuffled, .seed = 5};
    int all[NB * B], late[NB * B];
    if (token_starts(tok, NTOK, &lc, NB, all) < 0) continue;
    for (int k0 = 1; k0 <= K; k0 += K - 1) {
      lc.start_batch = k0;
      if (token_starts(tok, NTOK, &lc, NB - k0, late) < 0) continue;
      CHECK(!memcmp(late, all + k0 * B, sizeof(int) * (NB - k0) * B),
            "%s: a loader started at batch %d differs from batch %d on",
            shuffled ? "shuffled" : "sequential", k0, k0);
    }
    lc.start_batch = -1;
    CHECK(tg_token_loader_create(tok, NTOK, &lc) == NULL, "negative start accepted");
  }
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/tg_ckpt_test.%ld", (long)getpid());
  snprintf(path, sizeof path, "%s/%s", dir, TG_CHECKPOINT_FILE);
  if (mkdir(dir, 0700) != 0) {
    perror(dir);
    return 1;
  }
  test_streaming();
  test_file_format();
  rmdir(dir);
  tg_runtime_config rt = tg_runtime_config_default();
  if (tg_init(&rt) < 0) {
    fprintf(stderr, "tg_init: %s\n", tg_last_error());
    return 1;
  }
  test_gpt_state();
  test_loader_start();
  tg_shutdown();
  return tg_test_finish("test_checkpoint");
}
