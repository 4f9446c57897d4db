/*
 * Crash-safe file writing, shared by every writer (llm.c models and tokens,
 * safetensors, training checkpoints, traces): the data goes to
 * <path>.tmp.<pid>, created exclusively next to the target; it is flushed,
 * fsync'd, closed and renamed over the target, and the directory is fsync'd
 * (best effort), so a crash at any moment leaves either the old file or the
 * new one, never a mixture.  A target that exists but is not a regular file
 * (a device, a directory) is refused rather than replaced.  Opening removes
 * the temporaries of the same target that killed writers left behind
 * (tg_atomic_remove_stale).  Every failure
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
/* Removes the temporaries <path>.tmp.<pid> that writers killed mid-write
 * left (SIGKILL, out of memory): regular files of exactly that name whose
 * pid is no live process (kill(pid, 0) fails with ESRCH), never this
 * process's; returns how many.  It assumes the writer ran on this host: a
 * live writer on another host sharing the directory is not seen (two runs
 * writing one file at once are not supported anyway), and a dead writer's
 * PID reused by a live process keeps its file (safe; a later call removes
 * it).  tg_atomic_open calls it for its target. */
int tg_atomic_remove_stale(const char *path);

#endif
