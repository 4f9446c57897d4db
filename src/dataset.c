/*
 * Fashion-MNIST in memory: <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte
 * (gzip'd ".gz" preferred, plain accepted), as read by tg_idx_read.
 *
 * Design notes
 *  - Images may have any rows x cols (features = rows * cols), so the same
 *    code loads MNIST-like sets of other sizes; what must hold is that the
 *    image and label files describe the same number of samples and that
 *    every label is a valid class (< 10).
 *  - Pixels are normalised once, here, with Fashion-MNIST's training-set
 *    statistics: x = (p / 255 - 0.2860) / 0.3530.  The 256 possible values
 *    are computed in double and rounded to float once (a lookup table), so
 *    the result is exactly reproducible.
 *  - x and y are plain malloc'd memory: the loader copies samples from here
 *    into its pinned, StarPU-registered batch buffers.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "taskgrad/data.h"
#include "taskgrad/runtime.h"

/* From idx.c (library-internal). */
__attribute__((visibility("hidden"))) int
tg_idx_read_expect(const char *path, int expect_ndims, const char *what,
                   tg_idx *out);

#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530
#define FMNIST_CLASSES 10

/* Finds <dir>/<base>.gz or <dir>/<base>; writes the path into buf. */
static int find_file(const char *dir, const char *base, char *buf,
                     size_t bufsize) {
  struct stat st;
  int n = snprintf(buf, bufsize, "%s/%s.gz", dir, base);
  if (n < 0 || (size_t)n >= bufsize)
    return tg_fail(ENAMETOOLONG, "data directory path %s is too long", dir);
  if (stat(buf, &st) == 0) return 0;
  n = snprintf(buf, bufsize, "%s/%s", dir, base);
  if (n < 0 || (size_t)n >= bufsize)
    return tg_fail(ENAMETOOLONG, "data directory path %s is too long", dir);
  if (stat(buf, &st) == 0) return 0;
  return tg_fail(ENOENT, "%s/%s(.gz) not found in data directory %s", dir,
                 base, dir);
}

int tg_fashion_mnist_load(const char *dir, int train, tg_dataset *out) {
  if (!out) return tg_fail(EINVAL, "tg_fashion_mnist_load: out is NULL");
  memset(out, 0, sizeof *out);
  if (!dir || !*dir) dir = TG_FASHION_MNIST_DIR;

  struct stat st;
  if (stat(dir, &st) != 0) {
    int e = errno;
    if (e == ENOENT)
      return tg_fail(ENOENT, "data directory %s does not exist (install "
                     "Debian's dataset-fashion-mnist or pass --data-dir)",
                     dir);
    return tg_fail(e, "data directory %s: %s", dir, strerror(e));
  }
  if (!S_ISDIR(st.st_mode))
    return tg_fail(ENOTDIR, "data directory %s is not a directory", dir);

  const char *prefix = train ? "train" : "t10k";
  char base[64], ipath[4096], lpath[4096];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
  int rc = find_file(dir, base, ipath, sizeof ipath);
  if (rc < 0) return rc;
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
  rc = find_file(dir, base, lpath, sizeof lpath);
  if (rc < 0) return rc;

  tg_idx img = {0}, lab = {0};
  float *x = NULL;
  int32_t *y = NULL;
  rc = tg_idx_read_expect(ipath, 3, "images", &img);
  if (rc < 0) goto fail;
  rc = tg_idx_read_expect(lpath, 1, "labels", &lab);
  if (rc < 0) goto fail;

  if (img.dims[0] != lab.dims[0]) {
    rc = tg_fail(EINVAL, "%s has %d images but %s has %d labels", ipath,
                 img.dims[0], lpath, lab.dims[0]);
    goto fail;
  }
  const size_t n = (size_t)img.dims[0];
  const size_t features = (size_t)img.dims[1] * (size_t)img.dims[2];
  /* tg_idx_read bounds the file to 2 GiB, so n * features fits size_t and
   * features fits int; the float copy is 4x that. */
  if (features > (size_t)INT32_MAX) {
    rc = tg_fail(EINVAL, "%s: %zu features per image is too many", ipath,
                 features);
    goto fail;
  }
  for (size_t i = 0; i < n; i++) {
    if (lab.data[i] >= FMNIST_CLASSES) {
      rc = tg_fail(EINVAL, "%s: label %zu is %u (must be < %d)", lpath, i,
                   (unsigned)lab.data[i], FMNIST_CLASSES);
      goto fail;
    }
  }

  x = malloc(n * features * sizeof *x);
  y = malloc(n * sizeof *y);
  if (!x || !y) {
    rc = tg_fail(ENOMEM, "cannot allocate %zu samples of %zu features", n,
                 features);
    goto fail;
  }
  float lut[256];
  for (int p = 0; p < 256; p++)
    lut[p] = (float)(((double)p / 255.0 - FMNIST_MEAN) / FMNIST_STD);
  const size_t total = n * features;
  for (size_t i = 0; i < total; i++) x[i] = lut[img.data[i]];
  for (size_t i = 0; i < n; i++) y[i] = (int32_t)lab.data[i];

  tg_idx_free(&img);
  tg_idx_free(&lab);
  out->n = (int)n;
  out->features = (int)features;
  out->classes = FMNIST_CLASSES;
  out->x = x;
  out->y = y;
  return 0;

fail:
  free(x);
  free(y);
  tg_idx_free(&img);
  tg_idx_free(&lab);
  return rc;
}

void tg_dataset_free(tg_dataset *ds) {
  if (!ds) return;
  free(ds->x);
  free(ds->y);
  memset(ds, 0, sizeof *ds);
}
