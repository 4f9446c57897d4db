/*
 * IDX reader (the format of MNIST and Fashion-MNIST), gzip'd or plain.
 *
 * Design notes
 *  - Everything goes through zlib's gzopen/gzread, which reads plain files
 *    transparently, so "foo.gz" and "foo" need no separate code path.
 *  - The header is a big-endian magic number 0x000008NN (0x08: unsigned
 *    bytes, NN: number of dimensions) followed by NN big-endian uint32
 *    dimensions.  We accept only 1-D (labels) and 3-D (images) files.
 *  - The file must hold exactly the announced number of bytes: a short file
 *    (or a gzip stream that ends early) is "truncated", and anything after
 *    the data is an error too, since it means the header lies.
 *  - Dimensions are bounded (each <= 1e8, total <= 2 GiB) before anything is
 *    allocated, so a corrupt header cannot make us allocate absurd amounts.
 *  - Every message names the file; every error path closes the file and
 *    frees what it allocated.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "taskgrad/data.h"
#include "taskgrad/runtime.h"

/* Shared with dataset.c only (not part of the public API): like tg_idx_read
 * but requires expect_ndims dimensions (0: 1 or 3) and names the expected
 * magic number as "for <what>" in the message. */
__attribute__((visibility("hidden"))) int
tg_idx_read_expect(const char *path, int expect_ndims, const char *what,
                   tg_idx *out);

#define IDX_MAX_DIM 100000000u              /* 1e8 per dimension */
#define IDX_MAX_BYTES ((size_t)1 << 31)     /* 2 GiB of data in all */
#define IDX_CHUNK ((unsigned)1 << 30)       /* gzread takes an unsigned */

/* The message of the last zlib error on gz (falls back to strerror when
 * zlib reports a system error). */
static const char *gz_message(gzFile gz, int *errnum_out) {
  int errnum = Z_OK;
  const char *msg = gzerror(gz, &errnum);
  if (errnum_out) *errnum_out = errnum;
  if (errnum == Z_ERRNO) return strerror(errno ? errno : EIO);
  if (!msg || !*msg) return "unknown zlib error";
  return msg;
}

/* Reads up to len bytes; *got receives the count actually read.  Returns 0
 * on success (including a clean end of file) or a negative code after
 * tg_fail for read errors.  A gzip stream that ends in the middle is
 * reported as truncation by returning -EINVAL with the right message. */
static int read_full(gzFile gz, const char *path, void *buf, size_t len,
                     size_t *got, const char *what) {
  uint8_t *p = buf;
  size_t done = 0;
  *got = 0;
  while (done < len) {
    size_t want = len - done;
    unsigned chunk = want > IDX_CHUNK ? IDX_CHUNK : (unsigned)want;
    int n = gzread(gz, p + done, chunk);
    if (n < 0) {
      int errnum;
      const char *msg = gz_message(gz, &errnum);
      *got = done;
      return tg_fail(errnum == Z_ERRNO ? (errno ? errno : EIO) : EIO,
                     "%s: read error in %s: %s", path, what, msg);
    }
    if (n == 0) break;
    done += (size_t)n;
  }
  *got = done;
  if (done < len) {
    /* gzread returns a short count both at a clean end of file and when the
     * compressed stream ends early (then gzerror says Z_BUF_ERROR). */
    int errnum;
    const char *msg = gz_message(gz, &errnum);
    if (errnum != Z_OK && errnum != Z_BUF_ERROR)
      return tg_fail(EIO, "%s: read error in %s: %s", path, what, msg);
  }
  return 0;
}

static uint32_t be32(const uint8_t *b) {
  return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) |
         ((uint32_t)b[2] << 8) | (uint32_t)b[3];
}

int tg_idx_read_expect(const char *path, int expect_ndims, const char *what,
                       tg_idx *out) {
  if (!out) return tg_fail(EINVAL, "tg_idx_read: out is NULL");
  memset(out, 0, sizeof *out);
  if (!path) return tg_fail(EINVAL, "tg_idx_read: path is NULL");

  errno = 0;
  gzFile gz = gzopen(path, "rb");
  if (!gz) {
    int e = errno ? errno : ENOMEM;
    return tg_fail(e, "%s: cannot open: %s", path, strerror(e));
  }
  int rc = 0;
  uint8_t *data = NULL;
  int ndims = 0;
  int dims[3] = {1, 1, 1};

  if (gzbuffer(gz, 1u << 20) != 0) {
    rc = tg_fail(EIO, "%s: gzbuffer failed", path);
    goto done;
  }

  uint8_t head[16];
  size_t got = 0;
  rc = read_full(gz, path, head, 4, &got, "header");
  if (rc < 0) goto done;
  if (got < 4) {
    rc = tg_fail(EINVAL, "%s: truncated: file ends in the magic number "
                 "(%zu of 4 bytes)", path, got);
    goto done;
  }
  uint32_t magic = be32(head);
  ndims = (int)(magic & 0xffu);
  if ((magic & 0xffffff00u) != 0x00000800u || (ndims != 1 && ndims != 3) ||
      (expect_ndims && ndims != expect_ndims)) {
    if (expect_ndims)
      rc = tg_fail(EINVAL, "%s: bad magic number 0x%08x (expected 0x%08x "
                   "for %s)", path, magic, 0x800u | (unsigned)expect_ndims,
                   what ? what : (expect_ndims == 3 ? "images" : "labels"));
    else
      rc = tg_fail(EINVAL, "%s: bad magic number 0x%08x (expected 0x00000801 "
                   "for labels or 0x00000803 for images)", path, magic);
    goto done;
  }

  size_t hbytes = 4u * (size_t)ndims;
  rc = read_full(gz, path, head + 4, hbytes, &got, "header");
  if (rc < 0) goto done;
  if (got < hbytes) {
    rc = tg_fail(EINVAL, "%s: truncated: file ends in the header "
                 "(%zu of %zu dimension bytes)", path, got, hbytes);
    goto done;
  }
  size_t total = 1;
  for (int d = 0; d < ndims; d++) {
    uint32_t v = be32(head + 4 + 4 * d);
    if (v == 0 || v > IDX_MAX_DIM) {
      rc = tg_fail(EINVAL, "%s: dimension %d is %u (must be between 1 and "
                   "%u)", path, d, v, IDX_MAX_DIM);
      goto done;
    }
    if (total > SIZE_MAX / v || total * v > IDX_MAX_BYTES) {
      rc = tg_fail(EINVAL, "%s: dimensions too large (more than %zu bytes "
                   "of data)", path, IDX_MAX_BYTES);
      goto done;
    }
    total *= v;
    dims[d] = (int)v;
  }

  /* The buffer grows as data really arrives (doubling from 16 MiB), so a
   * short, corrupt file whose header announces gigabytes costs no more than
   * its own size. */
  size_t cap = 0;
  got = 0;
  for (;;) {
    size_t next = cap ? 2 * cap : ((size_t)16 << 20);
    if (next > total) next = total;
    uint8_t *grown = realloc(data, next ? next : 1);
    if (!grown) {
      rc = tg_fail(ENOMEM, "%s: cannot allocate %zu bytes", path, next);
      goto done;
    }
    data = grown;
    size_t chunk_got;
    rc = read_full(gz, path, data + cap, next - cap, &chunk_got, "data");
    if (rc < 0) goto done;
    got = cap + chunk_got;
    cap = next;
    if (got < cap || cap == total) break;
  }
  if (got < total) {
    rc = tg_fail(EINVAL, "%s: truncated: expected %zu bytes of data, got %zu",
                 path, total, got);
    goto done;
  }
  /* Nothing may follow the data. */
  uint8_t extra[64];
  rc = read_full(gz, path, extra, sizeof extra, &got, "data");
  if (rc < 0) goto done;
  if (got > 0) {
    rc = tg_fail(EINVAL, "%s: %s%zu bytes of trailing data after the %zu "
                 "announced by the header", path,
                 got == sizeof extra ? "at least " : "", got, total);
    goto done;
  }
  int errnum;
  const char *msg = gz_message(gz, &errnum);
  if (errnum == Z_BUF_ERROR) {
    /* Every announced byte arrived but the gzip stream itself is cut off
     * (missing trailer): the file is damaged. */
    rc = tg_fail(EINVAL, "%s: truncated gzip stream: %s", path, msg);
    goto done;
  }

done:;
  int zc = gzclose(gz);
  if (rc == 0 && zc != Z_OK) {
    if (zc == Z_BUF_ERROR)
      rc = tg_fail(EINVAL, "%s: truncated gzip stream", path);
    else if (zc == Z_ERRNO)
      rc = tg_fail(errno ? errno : EIO, "%s: close failed: %s", path,
                   strerror(errno ? errno : EIO));
    else
      rc = tg_fail(EIO, "%s: close failed (zlib error %d)", path, zc);
  }
  if (rc < 0) {
    free(data);
    return rc;
  }
  out->ndims = ndims;
  out->dims[0] = dims[0];
  out->dims[1] = dims[1];
  out->dims[2] = dims[2];
  out->data = data;
  return 0;
}

int tg_idx_read(const char *path, tg_idx *out) {
  return tg_idx_read_expect(path, 0, NULL, out);
}

void tg_idx_free(tg_idx *idx) {
  if (!idx) return;
  free(idx->data);
  memset(idx, 0, sizeof *idx);
}
