/*
 * StarPU 1.4's STARPU_SCHED_LIB hook (plugins/sched_critpath.c): a program
 * that never calls tg_init, only starpu_init(NULL), runs on tg-critpath or
 * tg-memaware when STARPU_SCHED_LIB names libtaskgrad.so and STARPU_SCHED
 * names the policy.  With StarPU 1.3 (no such hook) the test is a SKIP.
 *
 * Each configuration runs in a fresh process (self_spawn.h): the child
 * starts StarPU on 2 CPU workers, reports the policy StarPU chose, and runs
 * NTASKS independent tasks of random priorities that each bump their own
 * counter; the parent wants the policy asked for and every counter at
 * exactly 1.  The control run without STARPU_SCHED_LIB must not get our
 * policy (StarPU then warns and falls back to its default), so a hook that
 * StarPU does not call fails the test.
 */
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "taskgrad/sched.h"
#include "self_spawn.h"
#include "testutil.h"

enum { NTASKS = 300 };

static int counts[NTASKS];

static void bump(void *buffers[], void *arg) {
  (void)buffers;
  int i;
  starpu_codelet_unpack_args(arg, &i);
  __atomic_add_fetch(&counts[i], 1, __ATOMIC_RELAXED);
}

static struct starpu_codelet bump_cl = {
    .cpu_funcs = {bump},
    .nbuffers = 0,
    .name = "test_sched_lib_bump",
};

#if TG_STARPU_AT_LEAST(1, 4)
/* dl_iterate_phdr callback: "STARPU_SCHED_LIB=<path of the libtaskgrad.so
 * this program loaded>" into data (dladdr on one of its symbols could name
 * the executable, which holds copies of the library's data) */
static int find_libtaskgrad(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  if (!info->dlpi_name || !strstr(info->dlpi_name, "/libtaskgrad.so")) return 0;
  snprintf(data, 4096, "STARPU_SCHED_LIB=%s", info->dlpi_name);
  return 1;
}
#endif

/* the child: one line "policy=NAME bad=N" (N counters not at 1) */
static int child(void) {
  if (starpu_init(NULL) != 0) {
    fprintf(stderr, "starpu_init failed\n");
    return 1;
  }
#if TG_STARPU_AT_LEAST(1, 4)
  struct starpu_sched_policy *p = starpu_sched_get_sched_policy();
  const char *name = p && p->policy_name ? p->policy_name : "?";
#else
  const char *name = "?";
#endif
  tg_rng rng = {.s = 42};
  /* 64-bit: a policy without a range of its own may span all of int */
  int64_t min = starpu_sched_get_min_priority(), max = starpu_sched_get_max_priority();
  for (int i = 0; i < NTASKS; i++) {
    int prio = (int)(min + (int64_t)(tg_rng_next(&rng) % (uint64_t)(max - min + 1)));
    int rc = starpu_task_insert(&bump_cl, STARPU_VALUE, &i, sizeof i, STARPU_PRIORITY, prio, 0);
    if (rc != 0) {
      fprintf(stderr, "starpu_task_insert: %d\n", rc);
      return 1;
    }
  }
  if (starpu_task_wait_for_all() != 0) return 1;
  starpu_shutdown();
  int bad = 0;
  for (int i = 0; i < NTASKS; i++) bad += counts[i] != 1;
  printf("policy=%s bad=%d\n", name, bad);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child();
#if !TG_STARPU_AT_LEAST(1, 4)
  (void)tg_test_run_self; /* the 1.4 path's */
  printf("SKIP: StarPU %d.%d has no STARPU_SCHED_LIB hook\n", STARPU_MAJOR_VERSION,
         STARPU_MINOR_VERSION);
  return TG_TEST_SKIP;
#else
  char lib[4096] = "";
  dl_iterate_phdr(find_libtaskgrad, lib);
  if (!lib[0]) {
    fprintf(stderr, "libtaskgrad.so is not among the loaded objects\n");
    return 1;
  }
  const char *const drop[] = {"STARPU_SCHED=", "STARPU_SCHED_LIB=", "STARPU_NCPU=",
                              "STARPU_NCUDA=", "STARPU_NOPENCL=", NULL};
  const char *const *names = tg_sched_policy_names();
  for (size_t k = 0; names[k]; k++) {
    char sched[64], want[128], out[256];
    snprintf(sched, sizeof sched, "STARPU_SCHED=%s", names[k]);
    const char *const add[] = {lib, sched, "STARPU_NCPU=2", "STARPU_NCUDA=0",
                               "STARPU_NOPENCL=0", NULL};
    CHECK(tg_test_run_self(NULL, drop, add, out, sizeof out, names[k]) == 0,
          "%s: child failed", names[k]);
    snprintf(want, sizeof want, "policy=%s bad=0\n", names[k]);
    CHECK(strcmp(out, want) == 0, "%s: child said '%s', want '%s'", names[k], out, want);
  }
  /* control: without the hook StarPU cannot know the name */
  char out[256];
  const char *const add[] = {"STARPU_SCHED=tg-critpath", "STARPU_NCPU=2", "STARPU_NCUDA=0",
                             "STARPU_NOPENCL=0", NULL};
  CHECK(tg_test_run_self(NULL, drop, add, out, sizeof out, "control") == 0, "control failed");
  CHECK(strncmp(out, "policy=tg-", 10) != 0 && strstr(out, " bad=0\n"),
        "control without STARPU_SCHED_LIB said '%s'", out);
  return tg_test_finish("test_sched_lib");
#endif
}
