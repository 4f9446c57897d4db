/*
 * Header check and tensor records shared by the training checkpoint formats
 * (src/checkpoint_io.h).  Messages name the file and the problem; a short
 * file is "truncated" wherever it ends, so that a cut-off copy is told apart
 * from a corrupted one.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include "checkpoint_io.h"
#include "check.h"

uint32_t tg_ck_crc(const void *data, size_t n) {
  return tg_ck_crc_add((uint32_t)crc32(0L, Z_NULL, 0), data, n);
}

uint32_t tg_ck_crc_add(uint32_t crc0, const void *data, size_t n) {
  uLong crc = crc0;
  const unsigned char *p = data;
  while (n > 0) { /* zlib's length is a uInt: 1 GiB pieces */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, p, k);
    p += k;
    n -= k;
  }
  return (uint32_t)crc;
}

char *tg_ck_join(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (p) snprintf(p, len, "%s/%s", dir, name);
  return p;
}

int tg_ck_calloc(float **const *arrays, int k, size_t n) {
  int ok = 1;
  for (int i = 0; i < k; i++) ok &= (*arrays[i] = calloc(n, sizeof(float))) != NULL;
  if (ok) return 0;
  tg_ck_free(arrays, k);
  return tg_fail(ENOMEM, "checkpoint: out of memory for %zu parameters", n);
}

void tg_ck_free(float **const *arrays, int k) {
  for (int i = 0; i < k; i++) {
    free(*arrays[i]);
    *arrays[i] = NULL;
  }
}

void tg_ck_seal_header(unsigned char *h, size_t hdr) {
  uint32_t crc = tg_ck_crc(h, hdr - 4);
  tg_ck_put(h, hdr - 4, &crc, 4);
}

int tg_ck_read_exact(FILE *f, const char *path, void *buf, size_t n, const char *what) {
  if (n && fread(buf, 1, n, f) != n) {
    if (ferror(f)) return tg_fail(EIO, "%s: read error in %s: %s", path, what, strerror(errno));
    return tg_fail(EINVAL, "%s: truncated in %s", path, what);
  }
  return 0;
}

/* The header checks of tg_ck_open on an open file. */
static int check_header(FILE *f, const char *path, const char *noun, uint32_t magic,
                        uint32_t version, unsigned char *h, size_t hdr, long long fsize) {
  size_t have = fsize < (long long)hdr ? (size_t)fsize : hdr;
  TG_TRY(tg_ck_read_exact(f, path, h, have, "the header"));
  uint32_t u[3] = {0, 0, 0};
  if (have < 4)
    return tg_fail(EINVAL, "%s: truncated: %lld bytes, not even a magic number", path, fsize);
  tg_ck_get(h, 0, u, have < 12 ? (have / 4) * 4 : 12);
  if (u[0] != magic)
    return tg_fail(EINVAL, "%s: bad magic 0x%08x (expected 0x%08x): not a %s", path, u[0],
                   magic, noun);
  if (have < 16)
    return tg_fail(EINVAL, "%s: truncated: %lld bytes, shorter than the header", path, fsize);
  if (u[1] != version)
    return tg_fail(EINVAL, "%s: unsupported version %u (expected %u)", path, u[1], version);
  if (u[2] != hdr)
    return tg_fail(EINVAL, "%s: header size %u, expected %zu for version %u", path, u[2], hdr,
                   version);
  if (have < hdr)
    return tg_fail(EINVAL, "%s: truncated: %lld bytes, shorter than the %zu-byte header", path,
                   fsize, hdr);
  uint32_t stored;
  tg_ck_get(h, hdr - 4, &stored, 4);
  if (stored != tg_ck_crc(h, hdr - 4))
    return tg_fail(EINVAL, "%s: header CRC mismatch (stored 0x%08x, computed 0x%08x): "
                   "corrupted", path, stored, tg_ck_crc(h, hdr - 4));
  return 0;
}

int tg_ck_open(const char *path, const char *noun, uint32_t magic, uint32_t version,
               unsigned char *h, size_t hdr, FILE **f, long long *fsize) {
  *f = fopen(path, "rb");
  if (!*f) {
    int e = errno ? errno : EIO;
    return tg_fail(e, "%s: cannot open: %s", path, strerror(e));
  }
  struct stat st;
  int rc = 0;
  if (fstat(fileno(*f), &st) != 0 || !S_ISREG(st.st_mode))
    rc = tg_fail(EINVAL, "%s: not a regular file", path);
  else {
    *fsize = (long long)st.st_size;
    rc = check_header(*f, path, noun, magic, version, h, hdr, *fsize);
  }
  if (rc < 0) {
    fclose(*f);
    *f = NULL;
  }
  return rc;
}

int tg_ck_write_record_header(tg_atomic_file *af, uint32_t index, uint32_t kind,
                              uint64_t count, uint32_t crc) {
  unsigned char r[TG_CK_RECORD] = {0};
  uint32_t idx[2] = {index, kind};
  tg_ck_put(r, 0, idx, 8);
  tg_ck_put(r, 8, &count, 8);
  tg_ck_put(r, 16, &crc, 4);
  return tg_atomic_write(af, r, TG_CK_RECORD);
}

int tg_ck_write_record(tg_atomic_file *af, uint32_t index, uint32_t kind, const float *data,
                       uint64_t count) {
  uint32_t crc = tg_ck_crc(data, count * sizeof(float));
  TG_TRY(tg_ck_write_record_header(af, index, kind, count, crc));
  return tg_atomic_write(af, data, count * sizeof(float));
}

int tg_ck_read_record_header(FILE *f, const char *path, const char *what, uint32_t index,
                             uint32_t kind, uint64_t count, uint32_t *crc) {
  unsigned char r[TG_CK_RECORD];
  TG_TRY(tg_ck_read_exact(f, path, r, TG_CK_RECORD, what));
  uint32_t idx[2], zero;
  uint64_t n;
  tg_ck_get(r, 0, idx, 8);
  tg_ck_get(r, 8, &n, 8);
  tg_ck_get(r, 16, crc, 4);
  tg_ck_get(r, 20, &zero, 4);
  if (idx[0] != index || idx[1] != kind || n != count || zero)
    return tg_fail(EINVAL, "%s: %s: record header says parameter %u kind %u with %llu "
                   "elements, expected parameter %u kind %u with %llu: corrupted", path, what,
                   idx[0], idx[1], (unsigned long long)n, index, kind,
                   (unsigned long long)count);
  return 0;
}

int tg_ck_crc_mismatch(const char *path, const char *what, uint32_t stored, uint32_t got) {
  return tg_fail(EINVAL, "%s: %s: CRC mismatch (stored 0x%08x, computed 0x%08x): corrupted",
                 path, what, stored, got);
}

int tg_ck_read_record(FILE *f, const char *path, const char *what, uint32_t index,
                      uint32_t kind, float *data, uint64_t count) {
  uint32_t crc;
  TG_TRY(tg_ck_read_record_header(f, path, what, index, kind, count, &crc));
  TG_TRY(tg_ck_read_exact(f, path, data, count * sizeof(float), what));
  uint32_t got = tg_ck_crc(data, count * sizeof(float));
  return got == crc ? 0 : tg_ck_crc_mismatch(path, what, crc, got);
}

int tg_ck_exists(const char *dir, const char *name) {
  if (!dir) return tg_fail(EINVAL, "checkpoint: NULL directory");
  char *path = tg_ck_join(dir, name);
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
