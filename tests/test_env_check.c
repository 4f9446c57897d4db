/*
 * The environment check (src/env_check.c).
 *
 * Every row of the table with the four values a user mistypes, `abc`, `-1`,
 * the empty string and a huge number: each is refused with one line naming
 * the variable, or accepted where the kind says the value is good (the
 * expectations below are written from the kinds' rules in
 * docs/reliability.md, not from the code).  Then each kind's syntax in
 * detail (StarPU's lists, ranges, commas; paths under a file; the
 * scheduler names the caller adds).
 *
 * The worker-ceiling note: said once when the machine has more cores than
 * StarPU's STARPU_MAXCPUS and the caller did not ask for fewer workers;
 * silent otherwise.  (The machines CI runs on have fewer cores than
 * Debian's ceiling of 4, so the decision is tested here rather than
 * through the CLI.)  The CPU workers started beside CUDA workers by
 * default (tg_cpus_beside_gpus; no GPU here either).
 */
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <starpu.h>

#include "env_check.h"
#include "taskgrad/starpu_version.h"
#include "taskgrad/runtime.h"
#include "testutil.h"

static const char *const kHuge = "99999999999999999999";

/* 1 when a value of these four is good for the row, from the kind's rule:
 * a number within range, a list of entries, a known name; a directory
 * StarPU creates (`abc` is one, relative to the current directory), a file
 * written there; empty as the row says (tg_env_empty_ok, checked below
 * against the documented kinds). */
static int expect_good(const tg_env_var *r, const char *v) {
  if (!*v) return tg_env_empty_ok(r);
  const int huge = v == kHuge, minus = !strcmp(v, "-1");
  switch (r->kind) {
    case TG_ENV_FLOAT: /* finite numbers only, within range */
      if (minus) return r->min <= -1;
      if (huge) return r->max >= 1e20;
      return 0;
    case TG_ENV_HOSTNAME: /* any name without '/' */
    case TG_ENV_MKDIR:    /* relative directories, here in a writable one */
    case TG_ENV_FILE_OUT: /* relative files, likewise */
      return 1;
    default: /* not numbers in range, not lists, names, directories, files */
      return 0;
  }
}

/* the empty string, by kind (docs/reliability.md): a number is 0, a name
 * is the default; a list, a directory StarPU writes in or a file it writes
 * cannot be empty.  Rows that differ, by name. */
static int empty_documented(const tg_env_var *r) {
  static const char *const bad[] = {"STARPU_WATCHDOG_TIMEOUT", "STARPU_DISK_SWAP_BACKEND"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (!strcmp(r->name, bad[i])) return 0;
  return r->kind != TG_ENV_CPU_LIST && r->kind != TG_ENV_ID_LIST && r->kind != TG_ENV_MKDIR &&
         r->kind != TG_ENV_DIR_OUT && r->kind != TG_ENV_FILE_OUT;
}

static const tg_env_var *row(const char *name) {
  size_t n;
  const tg_env_var *t = tg_env_table(&n);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(t[i].name, name)) return &t[i];
  return NULL;
}

/* the value accepted (good) or refused with one line naming the row */
static void try_value(const char *name, const char *v, int good) {
  const tg_env_var *r = row(name);
  CHECK(r, "%s is a row", name);
  if (!r) return;
  int rc = tg_check_value(r, v, NULL);
  if (good) {
    CHECK(rc == 0, "%s='%s' accepted: %s", name, v, rc ? tg_last_error() : "");
  } else {
    CHECK(rc == -EINVAL && strstr(tg_last_error(), name) && !strchr(tg_last_error(), '\n'),
          "%s='%s' refused naming it: %d %s", name, v, rc, rc ? tg_last_error() : "");
  }
}

static void table_rows(void) {
  size_t n;
  const tg_env_var *t = tg_env_table(&n);
  CHECK(n > 100, "the table has %zu rows", n);
  const char *const values[] = {"abc", "-1", "", kHuge};
  for (size_t i = 0; i < n; i++) {
    for (size_t j = i + 1; j < n; j++)
      CHECK(strcmp(t[i].name, t[j].name), "%s is one row", t[i].name);
    CHECK(tg_env_empty_ok(&t[i]) == empty_documented(&t[i]), "%s: the empty string as documented",
          t[i].name);
    for (size_t k = 0; k < 4; k++) {
      const int good = expect_good(&t[i], values[k]);
      int rc = tg_check_value(&t[i], values[k], NULL);
      if (good) {
        CHECK(rc == 0, "%s='%s' accepted: %s", t[i].name, values[k], rc ? tg_last_error() : "");
        continue;
      }
      CHECK(rc == -EINVAL, "%s='%s' refused: %d", t[i].name, values[k], rc);
      if (rc == 0) continue;
      const char *m = tg_last_error();
      CHECK(strstr(m, t[i].name) && !strchr(m, '\n'), "one line naming %s: %s", t[i].name, m);
      /* the value quoted, unless empty (then "is set but empty") */
      CHECK(*values[k] ? strstr(m, values[k]) != NULL : strstr(m, "empty") != NULL,
            "the message quotes '%s': %s", values[k], m);
    }
  }
}

static void kinds_in_detail(void) {
  char cpus[32];
  /* numbers: the range's ends; StarPU's ceiling on CPU workers */
  snprintf(cpus, sizeof cpus, "%d", STARPU_MAXCPUS);
  try_value("STARPU_NCPU", cpus, 1);
  snprintf(cpus, sizeof cpus, "%d", STARPU_MAXCPUS + 1);
  try_value("STARPU_NCPU", cpus, 0);
  try_value("STARPU_NCPU", "0", 1);
  try_value("STARPU_NCPU", " 1", 0);
  try_value("STARPU_NCPU", "+1", 0);
  try_value("STARPU_CALIBRATE", "2147483647", 1);
  try_value("STARPU_CALIBRATE", "2147483648", 0);
  try_value("STARPU_LIMIT_CPU_MEM", "2G", 0);
  try_value("STARPU_WATCHDOG_TIMEOUT", "0", 0);
  try_value("STARPU_WATCHDOG_TIMEOUT", "10000000", 1);
  try_value("TG_EMULATED_DEVICES", "8", 1);
  try_value("TG_EMULATED_DEVICES", "9", 0);
  /* floats */
  try_value("STARPU_SCHED_ALPHA", "1.5", 1);
  try_value("STARPU_SCHED_ALPHA", "1e999", 0);
  try_value("STARPU_SCHED_ALPHA", "nan", 0);
  try_value("STARPU_SCHED_ALPHA", "1.5x", 0);
  try_value("TG_MEMAWARE_PRESSURE", "0.9", 1);
  try_value("TG_MEMAWARE_PRESSURE", "1.5", 0);
  /* StarPU's binding lists: numbers, ranges, spaces, one comma */
  const char *const cpu_good[] = {"0", "0 1", "0,1", "0, 1", "0-1", "1-", "1- 3", "0-1,3 5",
                                  " 0 ", "7"};
  for (size_t i = 0; i < sizeof cpu_good / sizeof cpu_good[0]; i++)
    try_value("STARPU_WORKERS_CPUID", cpu_good[i], 1);
  const char *const cpu_bad[] = {"0 abc", "1x", "0,,1", "-", " ", "0--1", "1-x", "2147483648",
                                 ",0", "0;1"};
  for (size_t i = 0; i < sizeof cpu_bad / sizeof cpu_bad[0]; i++)
    try_value("STARPU_WORKERS_COREID", cpu_bad[i], 0);
  /* device lists: numbers and spaces only (StarPU reads "0,1" as 0) */
  try_value("STARPU_WORKERS_OPENCLID", "0 1", 1);
  try_value("STARPU_WORKERS_OPENCLID", "0,1", 0);
  try_value("STARPU_WORKERS_OPENCLID", "0-1", 0);
  snprintf(cpus, sizeof cpus, "%d", STARPU_MAXOPENCLDEVS);
  try_value("STARPU_WORKERS_OPENCLID", cpus, 0);
  snprintf(cpus, sizeof cpus, "%d", STARPU_MAXCUDADEVS - 1);
  try_value("STARPU_WORKERS_CUDAID", cpus, 1);
  /* names */
  try_value("TG_GEMM_LIB", "openblas", 1);
  try_value("TG_GEMM_LIB", "openblas2", 0);
  try_value("TG_GEMM_LIB", "open", 0);
  try_value("TG_GEMM_BF16", "widen", 1);
  try_value("STARPU_DISK_SWAP_BACKEND", "unistd", 1);
  try_value("STARPU_HOSTNAME", "h100x8", 1);
  try_value("STARPU_HOSTNAME", "a/b", 0);
  /* schedulers: StarPU's, the caller's; "help" is refused with the list */
  const tg_env_var *sched = row("STARPU_SCHED");
  const char *const ours[] = {"tg-critpath", NULL};
  CHECK(tg_check_value(sched, "eager", NULL) == 0, "eager");
  CHECK(tg_check_value(sched, "dmdas", ours) == 0, "dmdas");
  CHECK(tg_check_value(sched, "tg-critpath", ours) == 0, "the caller's tg-critpath");
  CHECK(tg_check_value(sched, "tg-critpath", NULL) == -EINVAL &&
            strstr(tg_last_error(), "known:") && strstr(tg_last_error(), " eager"),
        "tg-critpath unknown without the caller: %s", tg_last_error());
  CHECK(tg_check_value(sched, "help", ours) == -EINVAL && strstr(tg_last_error(), " tg-critpath"),
        "help lists the policies: %s", tg_last_error());
  CHECK(tg_check_value(sched, "heft", NULL) == -EINVAL, "heft (StarPU's old name) refused");
  /* paths, in the scratch directory this runs in */
  FILE *f = fopen("file", "w");
  CHECK(f != NULL, "a file");
  if (f) fclose(f);
  CHECK(mkdir("dir", 0755) == 0, "a directory");
  try_value("STARPU_HOME", "dir", 1);
  try_value("STARPU_HOME", "dir/", 1);
  try_value("STARPU_HOME", "new/nested/dirs", 1);
  try_value("STARPU_HOME", "file", 0);
  try_value("STARPU_PERF_MODEL_DIR", "file/sampling", 0);
  try_value("XDG_CACHE_HOME", "/dev/null/cache", 0);
  try_value("STARPU_FXT_PREFIX", "dir", 1);
  try_value("STARPU_FXT_PREFIX", "file", 0);
  try_value("STARPU_IDLE_FILE", "dir/idle", 1);
  try_value("STARPU_IDLE_FILE", "dir", 0);
  try_value("STARPU_BUS_STATS_FILE", "nodir/stats", 0);
  try_value("STARPU_HWLOC_INPUT", "file", 1);
  try_value("STARPU_HWLOC_INPUT", "dir", 0);
  try_value("TG_PLATFORM_DIR", "dir", 1);
  try_value("TG_PLATFORM_DIR", "file", 0);
  if (geteuid() != 0) { /* root writes anywhere */
    CHECK(chmod("dir", 0555) == 0, "chmod");
    try_value("STARPU_HOME", "dir", 0);
    try_value("STARPU_HOME", "dir/sub", 0);
    try_value("STARPU_LOGFILENAME", "dir/log", 0);
    CHECK(chmod("dir", 0755) == 0, "chmod back");
  }
  remove("file");
  rmdir("dir");
}

/* the environment as tg_init and the CLI read it */
static void environment(void) {
  CHECK(tg_check_environment(NULL) == 0, "nothing set");
  setenv("STARPU_WORKERS_CPUID", "-1", 1);
  CHECK(tg_check_environment(NULL) == -EINVAL && strstr(tg_last_error(), "STARPU_WORKERS_CPUID"),
        "STARPU_WORKERS_CPUID=-1: %s", tg_last_error());
  unsetenv("STARPU_WORKERS_CPUID");
  setenv("STARPU_SCHED", "nosuch", 1);
  CHECK(tg_check_env(NULL, 0) == 0, "STARPU_SCHED left alone when the config names a policy");
  CHECK(tg_check_env(NULL, 1) == -EINVAL, "STARPU_SCHED=nosuch");
  unsetenv("STARPU_SCHED");
  /* device numbers against the emulated devices (StarPU asserts on one it
   * does not find) */
  setenv("STARPU_WORKERS_OPENCLID", "1 0", 1);
  CHECK(tg_check_opencl_ids(2) == 0, "devices 1 0 of 2");
  CHECK(tg_check_opencl_ids(0) == 0, "no emulated device: not read");
  CHECK(tg_check_opencl_ids(1) == -EINVAL && strstr(tg_last_error(), "from 0 to 0"),
        "device 1 of 1: %s", tg_last_error());
  unsetenv("STARPU_WORKERS_OPENCLID");
  CHECK(tg_check_opencl_ids(1) == 0, "unset");
}

int main(void) {
  char buf[256];
  CHECK(tg_maxcpus_note(64, 4, -1, buf, sizeof buf) == 1, "64 cores, ceiling 4");
  CHECK(strstr(buf, "64 cores") && strstr(buf, "at most 4 CPU workers") &&
            strstr(buf, "scripts/build-starpu"),
        "message: %s", buf);
  CHECK(!strchr(buf, '\n'), "one line: %s", buf);
  CHECK(tg_maxcpus_note(64, 4, 8, buf, sizeof buf) == 1, "asked for 8 of 64, ceiling 4");
  CHECK(tg_maxcpus_note(64, 4, 2, buf, sizeof buf) == 0 && !buf[0], "asked for 2");
  CHECK(tg_maxcpus_note(4, 4, -1, buf, sizeof buf) == 0 && !buf[0], "4 cores, ceiling 4");
  CHECK(tg_maxcpus_note(2, 4, -1, buf, sizeof buf) == 0, "2 cores");
  CHECK(tg_maxcpus_note(256, 256, -1, buf, sizeof buf) == 0, "a StarPU without the limit");

  /* CPU workers beside CUDA workers, when nobody chose: at most 4 */
  CHECK(tg_cpus_beside_gpus(-1, 0, -1, 1, 16) == 4, "1 GPU, 16 cores: 4 CPU workers");
  CHECK(tg_cpus_beside_gpus(-1, 0, 2, 8, 112) == 4, "2 of 8 GPUs, 112 cores");
  CHECK(tg_cpus_beside_gpus(-1, 0, -1, 8, 12) == -1, "8 GPUs, 12 cores: StarPU's 4");
  CHECK(tg_cpus_beside_gpus(-1, 0, -1, 1, 5) == -1, "1 GPU, 5 cores: StarPU's 4");
  CHECK(tg_cpus_beside_gpus(-1, 0, -1, 1, 6) == 4, "1 GPU, 6 cores");
  CHECK(tg_cpus_beside_gpus(14, 0, -1, 1, 16) == -1, "asked for 14");
  CHECK(tg_cpus_beside_gpus(-1, 1, -1, 1, 16) == -1, "a scheduler named");
  CHECK(tg_cpus_beside_gpus(-1, 0, 0, 1, 16) == -1, "no CUDA worker asked for");
  CHECK(tg_cpus_beside_gpus(-1, 0, -1, 0, 16) == -1, "no GPU");

  /* StarPU 1.4 reads more variables with its aborting helpers than 1.3:
   * refused (before starpu_init) with 1.4, left alone with 1.3, which never
   * reads them */
  const char *const only14[][2] = {{"STARPU_NHIP", "abc"},
                                   {"STARPU_HETEROPRIO_URT_URT_MULTIPLIER", "x"}};
  for (size_t i = 0; i < sizeof only14 / sizeof only14[0]; i++) {
    setenv(only14[i][0], only14[i][1], 1);
    int rc = tg_check_environment(NULL);
#if TG_STARPU_AT_LEAST(1, 4)
    CHECK(rc == -EINVAL && strstr(tg_last_error(), only14[i][0]), "%s=%s refused with 1.4: %d",
          only14[i][0], only14[i][1], rc);
#else
    CHECK(rc == 0, "%s=%s passed with 1.3: %d", only14[i][0], only14[i][1], rc);
#endif
    unsetenv(only14[i][0]);
  }
  /* the rows, in a scratch directory: relative paths land there */
  char tmpl[] = "/tmp/test_env_check.XXXXXX";
  char cwd[4096];
  CHECK(mkdtemp(tmpl) && getcwd(cwd, sizeof cwd) && chdir(tmpl) == 0, "scratch directory");
  table_rows();
  kinds_in_detail();
  CHECK(chdir(cwd) == 0 && rmdir(tmpl) == 0, "scratch directory removed");
  environment();
  return tg_test_finish("test_env_check");
}
