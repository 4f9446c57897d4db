/*
 * Crash-safe file writing; see atomic_file.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"
#include "taskgrad/runtime.h"

/* fsyncs the directory holding path, so that a rename into it is durable.
 * Best effort: some file systems refuse fsync on directories. */
static void sync_parent_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir;
  if (!slash) dir = strdup(".");
  else if (slash == path) dir = strdup("/");
  else dir = strndup(path, (size_t)(slash - path));
  if (!dir) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

/* 1 when `name` is `base`.tmp.<digits> and the digits are the PID of no
 * live process on this host (a writer killed before it renamed or removed
 * its temporary: SIGKILL, out of memory, power loss). */
static int stale_temp(const char *name, const char *base, size_t blen) {
  if (strncmp(name, base, blen) || strncmp(name + blen, ".tmp.", 5)) return 0;
  const char *d = name + blen + 5;
  size_t nd = strspn(d, "0123456789");
  if (nd == 0 || nd > 9 || d[nd]) return 0;
  long pid = strtol(d, NULL, 10);
  if (pid <= 0 || pid == (long)getpid()) return 0;
  /* EPERM: alive (another user's); 0: alive, perhaps a reused PID: kept */
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int tg_atomic_remove_stale(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
                                   : strndup(path, (size_t)(slash - path));
  if (!dir) return -ENOMEM;
  DIR *d = *base ? opendir(dir) : NULL;
  int removed = 0;
  size_t blen = strlen(base), dlen = strlen(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!stale_temp(e->d_name, base, blen)) continue;
    size_t n = dlen + strlen(e->d_name) + 2;
    char *full = malloc(n);
    if (!full) break;
    snprintf(full, n, "%s/%s", dir, e->d_name);
    struct stat st;
    /* only regular files: never a directory or a link of that name */
    if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && unlink(full) == 0) removed++;
    free(full);
  }
  if (d) closedir(d);
  free(dir);
  return removed;
}

/* Creates the temporary file exclusively; a stale regular file of the same
 * name (a crashed writer that had our pid) is removed once. */
static int create_temp(const char *tmp) {
  for (int attempt = 0;; attempt++) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST || attempt > 0) return fd;
    struct stat st;
    if (lstat(tmp, &st) != 0 || !S_ISREG(st.st_mode) || unlink(tmp) != 0) {
      errno = EEXIST;
      return -1;
    }
  }
}

/* Records a failure of `step` (errno e), removes the temporary file. */
static int fail(tg_atomic_file *af, const char *step, int e) {
  if (!e) e = EIO;
  if (af->f) fclose(af->f);
  af->f = NULL;
  unlink(af->tmp);
  int rc = tg_fail(e, "%s: %s of the temporary file %s failed: %s", af->path, step,
                   af->tmp, strerror(e));
  free(af->tmp);
  af->tmp = NULL;
  af->failed = 1;
  return rc;
}

int tg_atomic_open(tg_atomic_file *af, const char *path) {
  memset(af, 0, sizeof *af);
  af->path = path;
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return tg_fail(EINVAL, "%s: exists and is not a regular file; not replacing it", path);
  size_t len = strlen(path) + 32;
  af->tmp = malloc(len);
  if (!af->tmp) return tg_fail(ENOMEM, "%s: out of memory", path);
  snprintf(af->tmp, len, "%s.tmp.%ld", path, (long)getpid());
  (void)tg_atomic_remove_stale(path); /* an earlier writer's, killed */
  int fd = create_temp(af->tmp);
  if (fd < 0) {
    int e = errno ? errno : EIO;
    int rc = tg_fail(e, "%s: cannot create the temporary file %s: %s", path, af->tmp,
                     strerror(e));
    free(af->tmp);
    af->tmp = NULL;
    return rc;
  }
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    int e = errno;
    close(fd);
    return fail(af, "fdopen", e);
  }
  return 0;
}

int tg_atomic_write(tg_atomic_file *af, const void *buf, size_t n) {
  if (af->failed || !af->f) return -EIO;
  if (n && fwrite(buf, 1, n, af->f) != n) return fail(af, "write", errno);
  return 0;
}

long long tg_atomic_tell(tg_atomic_file *af) {
  if (af->failed || !af->f) return -EIO;
  off_t at = ftello(af->f);
  if (at < 0) return fail(af, "tell", errno);
  return (long long)at;
}

int tg_atomic_patch(tg_atomic_file *af, long long at, const void *buf, size_t n) {
  if (af->failed || !af->f) return -EIO;
  if (fseeko(af->f, (off_t)at, SEEK_SET) != 0) return fail(af, "seek", errno);
  if (n && fwrite(buf, 1, n, af->f) != n) return fail(af, "write", errno);
  if (fseeko(af->f, 0, SEEK_END) != 0) return fail(af, "seek", errno);
  return 0;
}

int tg_atomic_commit(tg_atomic_file *af) {
  if (af->failed || !af->f) return -EIO;
  if (fflush(af->f) != 0) return fail(af, "flush", errno);
  if (fsync(fileno(af->f)) != 0) return fail(af, "fsync", errno);
  int c = fclose(af->f);
  af->f = NULL;
  if (c != 0) return fail(af, "close", errno);
  if (rename(af->tmp, af->path) != 0) return fail(af, "rename", errno);
  sync_parent_dir(af->path);
  free(af->tmp);
  af->tmp = NULL;
  return 0;
}

void tg_atomic_abort(tg_atomic_file *af) {
  if (af->f) fclose(af->f);
  af->f = NULL;
  if (af->tmp) unlink(af->tmp);
  free(af->tmp);
  af->tmp = NULL;
}
