/*
 * IDX reader and Fashion-MNIST loader on synthetic files in a fresh temporary
 * directory: good 1-D and 3-D files (gzip'd and plain) read back exactly;
 * truncated, bad-magic, zero-dimension, trailing-data, cut-gzip and missing
 * files fail with a message naming the file; data set directories with
 * mismatched counts, a bad label, a missing file or no directory at all fail
 * with a message naming the problem; a good one loads and is normalised as
 * (p/255 - 0.2860)/0.3530.  No StarPU runtime is needed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "taskgrad/data.h"
#include "taskgrad/runtime.h"
#include "testutil.h"

static char tmpdir[64];
static char created[64][512]; /* files and subdirectories to remove */
static int ncreated = 0;

static const char *remember(const char *path) {
  if (ncreated < 64) {
    snprintf(created[ncreated], sizeof created[0], "%s", path);
    return created[ncreated++];
  }
  return path;
}

static void put32(uint8_t *b, uint32_t v) {
  b[0] = (uint8_t)(v >> 24);
  b[1] = (uint8_t)(v >> 16);
  b[2] = (uint8_t)(v >> 8);
  b[3] = (uint8_t)v;
}

/* Writes raw bytes, gzip'd when gz. */
static int write_bytes(const char *path, int gz, const uint8_t *buf,
                       size_t len) {
  remember(path);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (!f) return -1;
    if (len && gzwrite(f, buf, (unsigned)len) != (int)len) {
      gzclose(f);
      return -1;
    }
    return gzclose(f) == Z_OK ? 0 : -1;
  }
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = len ? fwrite(buf, 1, len, f) : 0;
  int rc = fclose(f);
  return (w == len && rc == 0) ? 0 : -1;
}

/* An IDX file: magic, ndims announced dimensions, then ndata bytes of data
 * (which may differ from the announced product, to test the checks). */
static int write_idx(const char *path, int gz, uint32_t magic, int ndims,
                     const uint32_t *dims, const uint8_t *data,
                     size_t ndata) {
  size_t len = 4 + 4 * (size_t)ndims + ndata;
  uint8_t *buf = malloc(len);
  if (!buf) return -1;
  put32(buf, magic);
  for (int d = 0; d < ndims; d++) put32(buf + 4 + 4 * d, dims[d]);
  if (ndata) memcpy(buf + 4 + 4 * ndims, data, ndata);
  int rc = write_bytes(path, gz, buf, len);
  free(buf);
  return rc;
}

static void path_in(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/%s", tmpdir, name);
}

static int contains(const char *hay, const char *needle) {
  return strstr(hay, needle) != NULL;
}

/* Expects tg_idx_read(path) to fail with a message naming the file and
 * containing what. */
static void expect_idx_fail(const char *path, const char *what) {
  tg_idx idx;
  int rc = tg_idx_read(path, &idx);
  const char *msg = tg_last_error();
  CHECK(rc < 0, "%s: expected failure, got %d", path, rc);
  CHECK(idx.data == NULL, "%s: data left allocated on failure", path);
  CHECK(contains(msg, path), "message does not name %s: '%s'", path, msg);
  CHECK(contains(msg, what), "message for %s lacks '%s': '%s'", path, what,
        msg);
  if (rc >= 0) tg_idx_free(&idx);
}

static void test_good_files(void) {
  const uint32_t d3[3] = {4, 3, 5};
  uint8_t img[60];
  for (int i = 0; i < 60; i++) img[i] = (uint8_t)(i * 7 + 3);
  const uint32_t d1[1] = {9};
  uint8_t lab[9] = {0, 9, 1, 8, 2, 7, 3, 6, 255};
  char p[512];
  for (int gz = 0; gz <= 1; gz++) {
    path_in(p, sizeof p, gz ? "good3.idx.gz" : "good3.idx");
    CHECK(write_idx(p, gz, 0x803, 3, d3, img, 60) == 0, "write %s", p);
    tg_idx idx;
    int rc = tg_idx_read(p, &idx);
    CHECK(rc == 0, "read %s: %s", p, tg_last_error());
    if (rc == 0) {
      CHECK(idx.ndims == 3 && idx.dims[0] == 4 && idx.dims[1] == 3 &&
                idx.dims[2] == 5,
            "%s: dims %d (%d, %d, %d)", p, idx.ndims, idx.dims[0],
            idx.dims[1], idx.dims[2]);
      CHECK(memcmp(idx.data, img, 60) == 0, "%s: bytes differ", p);
      tg_idx_free(&idx);
      CHECK(idx.data == NULL, "tg_idx_free leaves data");
    }

    path_in(p, sizeof p, gz ? "good1.idx.gz" : "good1.idx");
    CHECK(write_idx(p, gz, 0x801, 1, d1, lab, 9) == 0, "write %s", p);
    rc = tg_idx_read(p, &idx);
    CHECK(rc == 0, "read %s: %s", p, tg_last_error());
    if (rc == 0) {
      CHECK(idx.ndims == 1 && idx.dims[0] == 9, "%s: dims %d (%d)", p,
            idx.ndims, idx.dims[0]);
      CHECK(memcmp(idx.data, lab, 9) == 0, "%s: bytes differ", p);
      tg_idx_free(&idx);
    }
  }
  tg_idx_free(NULL); /* harmless */
}

static void test_bad_files(void) {
  const uint32_t d3[3] = {4, 3, 5};
  uint8_t img[64];
  for (int i = 0; i < 64; i++) img[i] = (uint8_t)i;
  char p[512];
  for (int gz = 0; gz <= 1; gz++) {
    const char *ext = gz ? ".gz" : "";
    char name[64];

    snprintf(name, sizeof name, "truncated.idx%s", ext);
    path_in(p, sizeof p, name);
    CHECK(write_idx(p, gz, 0x803, 3, d3, img, 59) == 0, "write %s", p);
    expect_idx_fail(p, "truncated: expected 60 bytes of data, got 59");

    snprintf(name, sizeof name, "magic.idx%s", ext);
    path_in(p, sizeof p, name);
    CHECK(write_idx(p, gz, 0x12345678, 3, d3, img, 60) == 0, "write %s", p);
    expect_idx_fail(p, "bad magic number 0x12345678");

    snprintf(name, sizeof name, "magic2d.idx%s", ext); /* 2-D: unsupported */
    path_in(p, sizeof p, name);
    CHECK(write_idx(p, gz, 0x802, 2, d3, img, 12) == 0, "write %s", p);
    expect_idx_fail(p, "bad magic number 0x00000802");

    snprintf(name, sizeof name, "zerodim.idx%s", ext);
    path_in(p, sizeof p, name);
    const uint32_t dz[3] = {4, 0, 5};
    CHECK(write_idx(p, gz, 0x803, 3, dz, img, 0) == 0, "write %s", p);
    expect_idx_fail(p, "dimension 1 is 0");

    snprintf(name, sizeof name, "hugedim.idx%s", ext);
    path_in(p, sizeof p, name);
    const uint32_t dh[3] = {100000000, 100000000, 100000000};
    CHECK(write_idx(p, gz, 0x803, 3, dh, img, 8) == 0, "write %s", p);
    expect_idx_fail(p, "too large");

    snprintf(name, sizeof name, "extra.idx%s", ext);
    path_in(p, sizeof p, name);
    CHECK(write_idx(p, gz, 0x803, 3, d3, img, 61) == 0, "write %s", p);
    expect_idx_fail(p, "trailing data");

    snprintf(name, sizeof name, "shorthdr.idx%s", ext);
    path_in(p, sizeof p, name);
    CHECK(write_idx(p, gz, 0x803, 1, d3, img, 0) == 0, "write %s", p);
    expect_idx_fail(p, "truncated");

    snprintf(name, sizeof name, "empty.idx%s", ext);
    path_in(p, sizeof p, name);
    CHECK(write_bytes(p, gz, img, 0) == 0, "write %s", p);
    expect_idx_fail(p, "truncated");
  }

  /* A gzip stream cut in the middle (the file itself is truncated). */
  {
    uint8_t big[4096];
    for (size_t i = 0; i < sizeof big; i++)
      big[i] = (uint8_t)((i * 2654435761u) >> 13); /* poorly compressible */
    const uint32_t db[3] = {4, 32, 32};
    char full[512];
    path_in(full, sizeof full, "cut-full.idx.gz");
    CHECK(write_idx(full, 1, 0x803, 3, db, big, sizeof big) == 0, "write %s",
          full);
    FILE *f = fopen(full, "rb");
    uint8_t raw[8192];
    size_t n = f ? fread(raw, 1, sizeof raw, f) : 0;
    if (f) fclose(f);
    CHECK(n > 100, "reading back %s", full);
    path_in(p, sizeof p, "cut.idx.gz");
    CHECK(write_bytes(p, 0, raw, n / 2) == 0, "write %s", p);
    expect_idx_fail(p, "truncated");
    /* ... and one missing only the 8-byte gzip trailer. */
    path_in(p, sizeof p, "notrailer.idx.gz");
    CHECK(write_bytes(p, 0, raw, n - 8) == 0, "write %s", p);
    expect_idx_fail(p, "truncated");
  }

  path_in(p, sizeof p, "does-not-exist.idx.gz");
  expect_idx_fail(p, "No such file or directory");

  tg_idx idx;
  CHECK(tg_idx_read(NULL, &idx) < 0, "NULL path accepted");
}

/* A data set directory <tmp>/<name> with n images of r x c and the given
 * labels; gz selects gzip'd files. */
static void make_dataset(char *dir, size_t dirsize, const char *name,
                         const char *prefix, int gz, uint32_t nimg,
                         uint32_t r, uint32_t c, const uint8_t *pix,
                         uint32_t nlab, const uint8_t *labels) {
  snprintf(dir, dirsize, "%s/%s", tmpdir, name);
  CHECK(mkdir(dir, 0700) == 0, "mkdir %s: %s", dir, strerror(errno));
  remember(dir); /* before its files, which are removed first */
  char p[600];
  const uint32_t d3[3] = {nimg, r, c};
  snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte%s", dir, prefix,
           gz ? ".gz" : "");
  CHECK(write_idx(p, gz, 0x803, 3, d3, pix, (size_t)nimg * r * c) == 0,
        "write %s", p);
  snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte%s", dir, prefix,
           gz ? ".gz" : "");
  CHECK(write_idx(p, gz, 0x801, 1, &nlab, labels, nlab) == 0, "write %s", p);
}

static float expected_pixel(int p) {
  return (float)(((double)p / 255.0 - 0.2860) / 0.3530);
}

static void test_dataset(void) {
  enum { N = 7, R = 4, C = 3 };
  uint8_t pix[N * R * C];
  for (int i = 0; i < N * R * C; i++) pix[i] = (uint8_t)((i * 37) % 256);
  pix[0] = 0;
  pix[1] = 255;
  pix[2] = 73;
  uint8_t lab[N + 1] = {3, 0, 9, 1, 5, 5, 2, 4};
  char dir[512];

  /* good, gzip'd, training set */
  make_dataset(dir, sizeof dir, "good", "train", 1, N, R, C, pix, N, lab);
  tg_dataset ds;
  int rc = tg_fashion_mnist_load(dir, 1, &ds);
  CHECK(rc == 0, "load %s: %s", dir, tg_last_error());
  if (rc == 0) {
    CHECK(ds.n == N && ds.features == R * C && ds.classes == 10,
          "n %d features %d classes %d", ds.n, ds.features, ds.classes);
    CHECK(ds.x[0] == expected_pixel(0), "x[0] = %.9g", (double)ds.x[0]);
    CHECK(ds.x[1] == expected_pixel(255), "x[1] = %.9g", (double)ds.x[1]);
    CHECK(ds.x[2] == expected_pixel(73), "x[2] = %.9g", (double)ds.x[2]);
    CHECK(fabsf(ds.x[0] - (-0.810198300f)) < 1e-6f, "x[0] = %.9g",
          (double)ds.x[0]);
    CHECK(fabsf(ds.x[1] - 2.022662890f) < 1e-6f, "x[1] = %.9g",
          (double)ds.x[1]);
    int bad = 0;
    for (int i = 0; i < N * R * C; i++)
      if (ds.x[i] != expected_pixel(pix[i])) bad++;
    CHECK(bad == 0, "%d normalised pixels differ", bad);
    for (int i = 0; i < N; i++)
      CHECK(ds.y[i] == lab[i], "y[%d] = %d, expected %d", i, ds.y[i], lab[i]);
    tg_dataset_free(&ds);
    CHECK(ds.x == NULL && ds.y == NULL, "tg_dataset_free leaves pointers");
  }
  /* the same directory has no test set */
  rc = tg_fashion_mnist_load(dir, 0, &ds);
  CHECK(rc < 0 && contains(tg_last_error(), "t10k-images-idx3-ubyte"),
        "missing t10k files: rc %d, '%s'", rc, tg_last_error());

  /* good, plain files, test set */
  make_dataset(dir, sizeof dir, "plain", "t10k", 0, N, R, C, pix, N, lab);
  rc = tg_fashion_mnist_load(dir, 0, &ds);
  CHECK(rc == 0, "load %s: %s", dir, tg_last_error());
  if (rc == 0) {
    CHECK(ds.n == N && ds.features == R * C, "plain: n %d features %d",
          ds.n, ds.features);
    CHECK(ds.x[2] == expected_pixel(73), "plain: x[2] = %.9g",
          (double)ds.x[2]);
    tg_dataset_free(&ds);
  }

  /* mismatched counts */
  make_dataset(dir, sizeof dir, "mismatch", "train", 1, N, R, C, pix, N + 1,
               lab);
  rc = tg_fashion_mnist_load(dir, 1, &ds);
  CHECK(rc < 0, "mismatched counts accepted");
  CHECK(contains(tg_last_error(), "7 images") &&
            contains(tg_last_error(), "8 labels"),
        "mismatch message: '%s'", tg_last_error());
  CHECK(ds.x == NULL && ds.y == NULL, "dataset not empty after failure");

  /* a label >= 10 */
  uint8_t badlab[N] = {3, 0, 9, 1, 10, 5, 2};
  make_dataset(dir, sizeof dir, "badlabel", "train", 1, N, R, C, pix, N,
               badlab);
  rc = tg_fashion_mnist_load(dir, 1, &ds);
  CHECK(rc < 0, "label 10 accepted");
  CHECK(contains(tg_last_error(), "label 4 is 10"), "bad label message: '%s'",
        tg_last_error());

  /* labels file where images are expected */
  snprintf(dir, sizeof dir, "%s/swapped", tmpdir);
  CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
  remember(dir);
  {
    char p[600];
    uint32_t n = N;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    CHECK(write_idx(p, 1, 0x801, 1, &n, lab, N) == 0, "write %s", p);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    CHECK(write_idx(p, 1, 0x801, 1, &n, lab, N) == 0, "write %s", p);
    rc = tg_fashion_mnist_load(dir, 1, &ds);
    CHECK(rc < 0 && contains(tg_last_error(), "train-images-idx3-ubyte.gz") &&
              contains(tg_last_error(), "expected 0x00000803 for images"),
          "1-D images: rc %d, '%s'", rc, tg_last_error());
  }

  /* missing directory */
  snprintf(dir, sizeof dir, "%s/no-such-dir", tmpdir);
  rc = tg_fashion_mnist_load(dir, 1, &ds);
  CHECK(rc == -ENOENT, "missing directory: rc %d", rc);
  CHECK(contains(tg_last_error(), dir) &&
            contains(tg_last_error(), "does not exist") &&
            contains(tg_last_error(), "dataset-fashion-mnist"),
        "missing directory message: '%s'", tg_last_error());
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/tg-test-idx-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_good_files();
  test_bad_files();
  test_dataset();

  /* Remove in reverse order: files before the subdirectories holding them. */
  for (int i = ncreated - 1; i >= 0; i--) {
    struct stat st;
    if (stat(created[i], &st) != 0) continue;
    int rc = S_ISDIR(st.st_mode) ? rmdir(created[i]) : unlink(created[i]);
    CHECK(rc == 0, "removing %s: %s", created[i], strerror(errno));
  }
  CHECK(rmdir(tmpdir) == 0, "removing %s: %s", tmpdir, strerror(errno));
  return tg_test_finish("test_idx");
}
