/*
 * Crash-safe file writing, shared by every writer (llm.c models and tokens,
 * safetensors, training checkpoints, traces): the data goes to
 * <path>.tmp.<pid>, created exclusively next to the target; it is flushed,
 * fsync'd, closed and renamed over the target, and the directory is fsync'd
 * (best effort), so a crash at any moment leaves either the old file or the
 * new one, never a mixture.  A target that exists but is not a regular file
 * (a device, a directory) is refused rather than replaced.  Every failure
 * removes the temporary file and sets a message naming the path and the step
 * that failed (tg_last_error()).
 */
#ifndef TASKGRAD_ATOMIC_FILE_H
#define TASKGRAD_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

typedef struct tg_atomic_file {
  const char *path; /* the target */
  char *tmp;        /* the temporary file */
  FILE *f;
  int failed;       /* a write failed: commit refuses */
} tg_atomic_file;

int tg_atomic_open(tg_atomic_file *af, const char *path);
/* fwrite of n bytes; after a failure later calls do nothing and return it */
int tg_atomic_write(tg_atomic_file *af, const void *buf, size_t n);
/* The temporary file's length so far (bytes written), or -EIO. */
long long tg_atomic_tell(tg_atomic_file *af);
/* Overwrites n bytes at offset `at` (< tg_atomic_tell) and goes back to the
 * end: a streamed record's header, once its data is written. */
int tg_atomic_patch(tg_atomic_file *af, long long at, const void *buf, size_t n);
/* flush, fsync, close, rename, directory fsync */
int tg_atomic_commit(tg_atomic_file *af);
/* gives up: closes and removes the temporary file */
void tg_atomic_abort(tg_atomic_file *af);

#endif
