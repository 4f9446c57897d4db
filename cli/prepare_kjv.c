/*
 * taskgrad prepare kjv: the King James Bible as llm.c token files, for
 * training a small GPT on a text that every Debian machine can install
 * (package bible-kjv).
 *
 * The text is what `bible -f 'Gen1:1-Rev22:21'` prints: -f turns the
 * pretty-printing off, so there is one verse per line, each preceded by its
 * reference ("Ge1:1 In the beginning God created the heaven and the
 * earth.\n" ... "Rev22:21 The grace of our Lord Jesus Christ be with you
 * all. Amen.\n"; abbreviations Ge, Exo, ..., Psa, ..., Mat, ..., Rev):
 * 31102 lines, 4404412 bytes of plain ASCII with Debian's bible-kjv 4.38.  The text is kept exactly as printed, references included (a model
 * learns the format too).  Tokens are bytes (vocabulary 256): every byte of
 * the output is one token, so any UTF-8 would pass through unchanged.  The
 * last 10% of the tokens (n/10, rounded down; the tail of Revelation) are
 * the validation set, the rest the training set:
 *   DIR/kjv_train.bin, DIR/kjv_val.bin   (tg_llmc_tokens_write: atomic)
 *
 * The program runs through posix_spawnp with a pipe rather than popen: no
 * shell, so --bible PATH needs no quoting, and a missing program is an
 * error from the spawn itself instead of a shell's exit status 127.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "taskgrad/llmc.h"

extern char **environ;

#define KJV_RANGE "Gen1:1-Rev22:21"
#define KJV_MAX_BYTES ((size_t)64 << 20) /* the text is 4.4 MB */

static void prepare_kjv_usage(void) {
  puts("usage: taskgrad prepare kjv --out DIR [--bible PATH]\n"
       "\n"
       "Writes the King James Bible as byte-level llm.c token files\n"
       "(vocabulary 256): DIR/kjv_train.bin (the first 90% of the bytes) and\n"
       "DIR/kjv_val.bin (the last 10%).  The text is the output of\n"
       "`bible -f '" KJV_RANGE "'` (Debian's bible-kjv): one verse per\n"
       "line, preceded by its reference, kept as printed.\n"
       "\n"
       "  --out DIR            output directory, created if needed (required)\n"
       "  --bible PATH         the bible program (default: bible, from PATH)\n"
       "  -h, --help           this text\n"
       "\n"
       "Bad flags, a missing bible program or an unwritable directory: one\n"
       "message on stderr, exit status 2.");
}

/* mkdir -p: creates every missing directory of path. */
static void make_dirs(const char *path) {
  if (tg_make_dirs(path) != 0) tg_cli_die("--out: %s", tg_last_error());
}

/* Runs `bible -f RANGE` and returns everything it printed (*len bytes). */
static uint8_t *run_bible(const char *prog, size_t *len) {
  int fds[2];
  if (pipe(fds) != 0 || fcntl(fds[0], F_SETFD, FD_CLOEXEC) != 0 ||
      fcntl(fds[1], F_SETFD, FD_CLOEXEC) != 0)
    tg_cli_die("prepare kjv: pipe: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0 ||
      posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO) != 0 ||
      posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null",
                                       O_RDONLY, 0) != 0)
    tg_cli_die("prepare kjv: posix_spawn_file_actions: out of memory");
  char *args[] = {(char *)prog, "-f", KJV_RANGE, NULL};
  pid_t pid;
  int e = posix_spawnp(&pid, prog, &fa, NULL, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (e != 0) {
    close(fds[0]);
    if (e == ENOENT)
      tg_cli_die("prepare kjv: cannot run '%s': %s (install Debian's "
                 "bible-kjv: apt-get install bible-kjv, or pass --bible PATH)",
                 prog, strerror(e));
    tg_cli_die("prepare kjv: cannot run '%s': %s", prog, strerror(e));
  }

  size_t cap = (size_t)8 << 20, n = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) tg_cli_die("prepare kjv: out of memory");
  for (;;) {
    if (n == cap) {
      if (cap >= KJV_MAX_BYTES)
        tg_cli_die("prepare kjv: '%s' printed more than %zu MiB: not the "
                   "King James Bible", prog, KJV_MAX_BYTES >> 20);
      cap *= 2;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) tg_cli_die("prepare kjv: out of memory");
      buf = nb;
    }
    ssize_t got = read(fds[0], buf + n, cap - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) tg_cli_die("prepare kjv: reading from '%s': %s", prog, strerror(errno));
    if (got == 0) break;
    n += (size_t)got;
  }
  close(fds[0]);

  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) tg_cli_die("prepare kjv: waitpid: %s", strerror(errno));
  if (WIFSIGNALED(status))
    tg_cli_die("prepare kjv: '%s' was killed by signal %d", prog, WTERMSIG(status));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    tg_cli_die("prepare kjv: '%s' exited with status %d", prog,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (n < 10)
    tg_cli_die("prepare kjv: '%s -f %s' printed %zu bytes, too little text for "
               "a training and a validation set", prog, KJV_RANGE, n);
  *len = n;
  return buf;
}

/* DIR/name, malloc'd. */
static char *join(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (!p) tg_cli_die("prepare kjv: out of memory");
  snprintf(p, len, "%s/%s", dir, name);
  return p;
}

int tg_cmd_prepare_kjv(int argc, char **argv) {
  const char *out = NULL, *prog = "bible";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      prepare_kjv_usage();
      exit(0);
    } else if (!strcmp(a, "--out")) {
      out = tg_cli_value(argc, argv, &i);
      if (!*out) tg_cli_die("--out: empty directory name");
    } else if (!strcmp(a, "--bible")) {
      prog = tg_cli_value(argc, argv, &i);
      if (!*prog) tg_cli_die("--bible: empty program name");
    } else {
      tg_cli_die("unknown flag '%s' for 'prepare kjv' (see --help)", a);
    }
  }
  if (!out) tg_cli_die("'prepare kjv' needs --out DIR (see --help)");
  /* two outputs, two files: not hard links of one (cli/output_paths.c) */
  tg_cli_path_out_dir("--out", out, "kjv_train.bin");
  tg_cli_path_out_dir("--out", out, "kjv_val.bin");
  tg_cli_paths_check();
  make_dirs(out);

  size_t n;
  uint8_t *text = run_bible(prog, &n);
  uint16_t *tokens = malloc(n * sizeof *tokens);
  if (!tokens) tg_cli_die("prepare kjv: out of memory");
  for (size_t i = 0; i < n; i++) tokens[i] = text[i];
  free(text);

  const size_t nval = n / 10, ntrain = n - nval;
  char *train_path = join(out, "kjv_train.bin");
  char *val_path = join(out, "kjv_val.bin");
  if (tg_llmc_tokens_write(train_path, tokens, ntrain) < 0)
    tg_cli_die_last("prepare kjv");
  if (tg_llmc_tokens_write(val_path, tokens + ntrain, nval) < 0)
    tg_cli_die_last("prepare kjv");
  printf("kjv: %zu tokens (bytes, vocabulary 256): %s %zu tokens, %s %zu "
         "tokens\n", n, train_path, ntrain, val_path, nval);
  free(train_path);
  free(val_path);
  free(tokens);
  return 0;
}
