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

static inline void fuzz_cleanup(void) {
  if (fuzz_path[0]) unlink(fuzz_path);
}

/* The temporary file's path, created on the first call. */
static inline const char *fuzz_tmp_path(void) {
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
static inline const char *fuzz_write_input(const uint8_t *data, size_t size) {
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

/* The checkpoint readers take a directory and a fixed file name: the input
 * is written as <dir>/<name> in one temporary directory per process
 * (mkdtemp, removed at exit); returns the directory. */
static char fuzz_dir[4096], fuzz_dir_file[4400];

static inline void fuzz_dir_cleanup(void) {
  if (fuzz_dir_file[0]) unlink(fuzz_dir_file);
  if (fuzz_dir[0]) rmdir(fuzz_dir);
}

static inline const char *fuzz_write_dir_input(const char *name, const uint8_t *data, size_t size) {
  if (!fuzz_dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/tg-fuzz-dir-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fuzz_dir)) {
      perror("fuzz: mkdtemp");
      abort();
    }
    snprintf(fuzz_dir_file, sizeof fuzz_dir_file, "%s/%s", fuzz_dir, name);
    atexit(fuzz_dir_cleanup);
  }
  FILE *f = fopen(fuzz_dir_file, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror("fuzz: writing the input");
    abort();
  }
  return fuzz_dir;
}

#endif
