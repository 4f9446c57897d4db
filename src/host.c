/*
 * What the base knows of the host: the CPU's model name, taskgrad's cache
 * directory, and directory creation (mkdir -p).  Shared by the GEMM
 * choice's cache (codelets/gemm_choice.c), `taskgrad info` and the KJV
 * demonstration's token files, so that they agree on one cache directory
 * and one CPU name.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "taskgrad/runtime.h"

void tg_cpu_model_name(char *out, size_t n) {
  snprintf(out, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "model name", 10) == 0) {
      const char *v = strchr(line, ':');
      if (v) {
        v += 1 + strspn(v + 1, " \t");
        snprintf(out, n, "%.*s", (int)strcspn(v, "\n"), v);
      }
      break;
    }
  fclose(f);
}

int tg_cache_dir(char *out, size_t n) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int w;
  if (xdg && *xdg) /* empty means unset (XDG base directory specification) */
    w = snprintf(out, n, "%s/taskgrad", xdg);
  else if (home && *home)
    w = snprintf(out, n, "%s/.cache/taskgrad", home);
  else
    return tg_fail(ENOENT, "no cache directory: neither XDG_CACHE_HOME nor HOME is set");
  return w > 0 && (size_t)w < n ? 0 : tg_fail(ENAMETOOLONG, "cache directory: path too long");
}

int tg_make_dirs(const char *dir) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
    return tg_fail(ENAMETOOLONG, "cannot create directory '%s': path too long", dir);
  struct stat st;
  for (char *p = buf + 1;; p++) { /* the parents first, each checked */
    const int end = *p == '\0';
    if (*p != '/' && !end) continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return tg_fail(errno, "cannot create directory '%s': %s", buf, strerror(errno));
    if (stat(buf, &st) != 0)
      return tg_fail(errno, "cannot create directory '%s': '%s': %s", dir, buf,
                     strerror(errno));
    if (!S_ISDIR(st.st_mode))
      return tg_fail(ENOTDIR, "cannot create directory '%s': '%s' exists and is not a directory",
                     dir, buf);
    if (end) break;
    *p = '/';
  }
  return 0;
}
