/*
 * Pieces shared by the training checkpoint formats (src/checkpoint.c for the
 * GPT, src/mlp_checkpoint.c for the MLP): both files are a fixed-size header
 * that starts with u32 magic, u32 version, u32 header size and ends with the
 * CRC32 (zlib) of the bytes before it, followed by tensor records
 *     u32 index, u32 kind, u64 element count, u32 CRC32 of the data, u32 0,
 * and the element count float32 values.  Keeping the header check and the
 * records here means a fix to the validation applies to both formats, and
 * both refuse bad files with the same messages.
 */
#ifndef TASKGRAD_CHECKPOINT_IO_H
#define TASKGRAD_CHECKPOINT_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "atomic_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "taskgrad checkpoints are little-endian; this host is not"
#endif

enum { TG_CK_RECORD = 24 }; /* bytes of a record's header */

/* the header's fields, in the host's (little-endian) order */
static inline void tg_ck_put(unsigned char *h, size_t off, const void *v, size_t n) {
  memcpy(h + off, v, n);
}
static inline void tg_ck_get(const unsigned char *h, size_t off, void *v, size_t n) {
  memcpy(v, h + off, n);
}

uint32_t tg_ck_crc(const void *data, size_t n);
/* "dir/name", malloc'd (NULL when out of memory) */
char *tg_ck_join(const char *dir, const char *name);
/* 1 when dir/name is a regular file, 0 when it (or dir) does not exist, a
 * negative errno otherwise (permissions, not a file). */
int tg_ck_exists(const char *dir, const char *name);
/* Sets *arrays[0 .. k-1] to zeroed arrays of n floats, or to NULL with
 * -ENOMEM (nothing left allocated); tg_ck_free frees and clears them. */
int tg_ck_calloc(float **const *arrays, int k, size_t n);
void tg_ck_free(float **const *arrays, int k);
/* Stores the CRC of the first hdr - 4 bytes in the last 4. */
void tg_ck_seal_header(unsigned char *h, size_t hdr);

/* Opens path and reads its hdr-byte header into h after checking, in order:
 * a regular file, the magic (else "not a <noun>"), the version, the header
 * size, a whole header, the header CRC.  On success *f is positioned after
 * the header and *fsize holds the file's size; on failure nothing is open
 * and tg_last_error() names the file and the problem. */
int tg_ck_open(const char *path, const char *noun, uint32_t magic, uint32_t version,
               unsigned char *h, size_t hdr, FILE **f, long long *fsize);

/* Reads n bytes or fails: "truncated in <what>" or a read error. */
int tg_ck_read_exact(FILE *f, const char *path, void *buf, size_t n, const char *what);

/* The CRC of n more bytes after those that gave crc (tg_ck_crc(a) then
 * tg_ck_crc_add(that, b) is the CRC of a and b one after the other). */
uint32_t tg_ck_crc_add(uint32_t crc, const void *data, size_t n);
/* A record's header alone (its data follows, written by the caller). */
int tg_ck_write_record_header(tg_atomic_file *af, uint32_t index, uint32_t kind,
                              uint64_t count, uint32_t crc);
/* Reads a record's header, requiring this index, kind and count; *crc is
 * the CRC it stores for the data that follows. */
int tg_ck_read_record_header(FILE *f, const char *path, const char *what, uint32_t index,
                             uint32_t kind, uint64_t count, uint32_t *crc);
/* The error for data whose CRC is not the stored one. */
int tg_ck_crc_mismatch(const char *path, const char *what, uint32_t stored, uint32_t got);
/* One record: header and data (checked writes through af). */
int tg_ck_write_record(tg_atomic_file *af, uint32_t index, uint32_t kind, const float *data,
                       uint64_t count);
/* Reads one record into data, requiring this index, kind and count and a
 * matching CRC; `what` names the tensor in messages. */
int tg_ck_read_record(FILE *f, const char *path, const char *what, uint32_t index,
                      uint32_t kind, float *data, uint64_t count);

#endif
