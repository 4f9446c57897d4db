/*
 * The files one command reads and writes, checked against each other before
 * any work (cli.h, tg_cli_path_in / _out / _check): an output must not be
 * another output of the same command, nor an input it reads, or the run
 * would destroy the file it started from (`--checkpoint ck --save
 * ck/checkpoint.bin` replaced the checkpoint with a model file; `init gpt
 * --out x --safetensors x` wrote x twice and kept the second).
 *
 * Paths are compared as the files they name, not as strings: each is
 * resolved with realpath (symbolic links, `./`, `a/../a`); a file that does
 * not exist yet is its nearest existing directory resolved, plus the rest
 * (`..` of a missing directory cancels it, as the kernel would once it
 * exists); and two existing files are the same when they share st_dev and
 * st_ino (hard links).  The one collision a command may declare allowed is
 * an output that continues an input (`--resume ck --checkpoint ck`: the
 * checkpoint read at the start is the one replaced later).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

enum { MAX_PATHS = 16 };

typedef struct path_entry {
  const char *flag;
  char *path, *real; /* as given, resolved (malloc'd) */
  int out, exists;
  dev_t dev;
  ino_t ino;
} path_entry;

static path_entry paths[MAX_PATHS];
static int npaths;
/* an output flag that may replace an input flag's file */
static const char *allowed_out, *allowed_in;

/* A malloc'd absolute path for `path`, resolving what exists of it. */
static char *resolve(const char *path) {
  char *r = realpath(path, NULL);
  if (r) return r;
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--; /* "a/b/" is "a/b" */
  const char *slash = NULL;
  for (size_t i = n; i-- > 0;)
    if (path[i] == '/') {
      slash = path + i;
      break;
    }
  char *dir;
  if (!slash) dir = realpath(".", NULL);
  else if (slash == path) dir = strdup("/");
  else {
    char *head = strndup(path, (size_t)(slash - path));
    dir = head ? resolve(head) : NULL;
    free(head);
  }
  if (!dir) return NULL;
  const char *base = slash ? slash + 1 : path;
  size_t blen = (size_t)(path + n - base);
  if (blen == 0 || (blen == 1 && base[0] == '.')) return dir;
  if (blen == 2 && base[0] == '.' && base[1] == '.') {
    char *up = strrchr(dir, '/');
    if (up && up != dir) *up = 0;
    else strcpy(dir, "/");
    return dir;
  }
  size_t dlen = strlen(dir);
  char *out = malloc(dlen + blen + 2);
  if (out) snprintf(out, dlen + blen + 2, "%s%s%.*s", dir,
                    dlen && dir[dlen - 1] == '/' ? "" : "/", (int)blen, base);
  free(dir);
  return out;
}

/* flag's file: dir/name, or dir alone when name is NULL */
static void add(const char *flag, const char *dir, const char *name, int out) {
  if (!dir || !*dir) return;
  if (npaths == MAX_PATHS) tg_cli_die("internal: more than %d paths to check", MAX_PATHS);
  path_entry *e = &paths[npaths++];
  *e = (path_entry){.flag = flag, .out = out};
  size_t n = strlen(dir) + (name ? strlen(name) + 2 : 1);
  e->path = malloc(n);
  if (!e->path) tg_cli_die("%s: out of memory", flag);
  snprintf(e->path, n, name ? "%s/%s" : "%s", dir, name);
  e->real = resolve(e->path);
  if (!e->real) tg_cli_die("%s: cannot resolve '%s': %s", flag, e->path, strerror(errno));
  struct stat st;
  if (stat(e->real, &st) == 0) {
    e->exists = 1;
    e->dev = st.st_dev;
    e->ino = st.st_ino;
  }
}

void tg_cli_path_in(const char *flag, const char *path) { add(flag, path, NULL, 0); }
void tg_cli_path_out(const char *flag, const char *path) { add(flag, path, NULL, 1); }
void tg_cli_path_in_dir(const char *flag, const char *dir, const char *name) {
  add(flag, dir, name, 0);
}
void tg_cli_path_out_dir(const char *flag, const char *dir, const char *name) {
  add(flag, dir, name, 1);
}

void tg_cli_path_may_replace(const char *out_flag, const char *in_flag) {
  allowed_out = out_flag;
  allowed_in = in_flag;
}

static int same_file(const path_entry *a, const path_entry *b) {
  if (!strcmp(a->real, b->real)) return 1;
  return a->exists && b->exists && a->dev == b->dev && a->ino == b->ino;
}

static void forget(void) {
  for (int i = 0; i < npaths; i++) {
    free(paths[i].path);
    free(paths[i].real);
  }
  npaths = 0;
  allowed_out = allowed_in = NULL;
}

void tg_cli_paths_check(void) {
  for (int i = 0; i < npaths; i++)
    for (int j = 0; j < npaths; j++) {
      const path_entry *o = &paths[i], *x = &paths[j];
      /* each pair once, with the output first */
      if (!o->out || i == j || (x->out && j < i) || !same_file(o, x)) continue;
      if (!x->out && allowed_out && !strcmp(o->flag, allowed_out) &&
          !strcmp(x->flag, allowed_in))
        continue;
      if (x->out)
        tg_cli_die("%s '%s' and %s '%s' are the same file (%s): each output needs its own "
                   "path", o->flag, o->path, x->flag, x->path, o->real);
      tg_cli_die("%s '%s' would replace the input %s '%s' (the same file, %s): choose "
                 "another path", o->flag, o->path, x->flag, x->path, o->real);
    }
  /* a command run inside another (the demonstration's prepare kjv) starts
   * its own list */
  forget();
}
