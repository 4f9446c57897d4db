/*
 * Tests that need a fresh StarPU per configuration (schedulers, worker
 * counts) re-run their own program as a child: "/proc/self/exe child [arg]",
 * with the environment minus the variables named in `drop` ("NAME="
 * prefixes) plus the NAME=value strings of `add`, stdout captured (all of it
 * read, so the child never blocks on a full pipe; the first outlen - 1 bytes
 * kept).
 */
#ifndef TASKGRAD_SELF_SPAWN_H
#define TASKGRAD_SELF_SPAWN_H

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* 0 when the child exited with status 0; -1 after printing why, prefixed by
 * label. */
static int tg_test_run_self(const char *arg, const char *const *drop,
                            const char *const *add, char *out, size_t outlen,
                            const char *label) {
  size_t n = 0, nadd = 0, k = 0;
  while (environ[n]) n++;
  while (add && add[nadd]) nadd++;
  char **env = calloc(n + nadd + 1, sizeof *env);
  if (!env) {
    fprintf(stderr, "%s: out of memory\n", label);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    int keep = 1;
    for (size_t d = 0; drop && drop[d]; d++)
      if (strncmp(environ[i], drop[d], strlen(drop[d])) == 0) keep = 0;
    if (keep) env[k++] = environ[i];
  }
  for (size_t i = 0; i < nadd; i++) env[k++] = (char *)add[i];
  env[k] = NULL;
  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    free(env);
    return -1;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  char *argv[] = {"/proc/self/exe", "child", (char *)arg, NULL};
  pid_t pid;
  int sp = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  free(env);
  if (sp != 0) {
    fprintf(stderr, "%s: posix_spawn: %s\n", label, strerror(sp));
    close(fds[0]);
    return -1;
  }
  char sink[4096];
  size_t len = 0;
  for (;;) {
    char *dst = len < outlen - 1 ? out + len : sink;
    size_t room = len < outlen - 1 ? outlen - 1 - len : sizeof sink;
    ssize_t r = read(fds[0], dst, room);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (dst == out + len) len += (size_t)r;
  }
  out[len] = '\0';
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      perror("waitpid");
      return -1;
    }
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "%s: the child was killed by signal %d (%s)\n", label, WTERMSIG(status),
            strsignal(WTERMSIG(status)));
    return -1;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "%s: the child exited with status %d\n", label,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return -1;
  }
  return 0;
}

/* Runs "/proc/self/exe child [arg]" with STARPU_NCPU=ncpu and no CUDA
 * worker, and prints its output under a "---- label ----" line.  Returns
 * the worker count the child printed ("workers=N"), or -1; *ok is 1 when
 * the child exited with status 0. */
static inline int tg_test_run_self_ncpu(const char *arg, int ncpu, const char *label, int *ok) {
  static const char *const drop[] = {"STARPU_NCPU=", "STARPU_NCPUS=", "STARPU_NCUDA=", NULL};
  static char out[1 << 16];
  char var[32];
  snprintf(var, sizeof var, "STARPU_NCPU=%d", ncpu);
  const char *const add[] = {var, "STARPU_NCUDA=0", NULL};
  *ok = tg_test_run_self(arg, drop, add, out, sizeof out, label) == 0;
  printf("---- %s ----\n%s", label, out);
  int workers = -1;
  const char *w = strstr(out, "workers=");
  if (w) sscanf(w, "workers=%d", &workers);
  return workers;
}

#endif
