/*
 * Shared by the libFuzzer targets: the readers take a path, so every input is
 * written to one temporary file per process (created at start under $TMPDIR
 * or /tmp with mkstemp, rewritten for each input, removed at exit).
 */
#ifndef TG_FUZZ_COMMON_H
#define TG_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_path[4096];

static void fuzz_cleanup(void) {
  if (fuzz_path[0]) unlink(fuzz_path);
}

/* The temporary file's path, created on the first call. */
static const char *fuzz_tmp_path(void) {
  if (fuzz_path[0]) return fuzz_path;
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  snprintf(fuzz_path, sizeof fuzz_path, "%s/tg-fuzz-XXXXXX", dir);
  int fd = mkstemp(fuzz_path);
  if (fd < 0) {
    perror("fuzz: mkstemp");
    abort();
  }
  close(fd);
  atexit(fuzz_cleanup);
  return fuzz_path;
}

/* Replaces the temporary file's contents with data[0..size). */
static const char *fuzz_write_input(const uint8_t *data, size_t size) {
  const char *path = fuzz_tmp_path();
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror("fuzz: fopen");
    abort();
  }
  if (size && fwrite(data, 1, size, f) != size) {
    perror("fuzz: fwrite");
    abort();
  }
  if (fclose(f) != 0) {
    perror("fuzz: fclose");
    abort();
  }
  return path;
}

#endif
