/*
 * test_emulated_livelock: StarPU 1.3.10's allocation livelock on emulated
 * devices, and taskgrad's guards against it (src/device_memory.c,
 * src/runtime.c).
 *
 * The graph: 64 tasks, each adding one of 8 inputs (175 x 1024 floats, 700
 * KiB) into one accumulator in STARPU_REDUX mode, on 3 PoCL devices and no
 * CPU worker.  Each device keeps its contribution (700 KiB) until the
 * reduction, whose merge tasks need two more copies on a device: 2.1 MiB,
 * above a 2 MiB STARPU_LIMIT_OPENCL_MEM.  Every run is a child process of
 * this program, killed after 60 s; ctest's own limit is the second net.
 *  1. "guarded": submitted through tg_submit (the codelets' path) under the
 *     2 MiB limit: refused with -ENOSPC before StarPU sees a task;
 *  2. "raw": the same tasks through starpu_task_insert, which bypasses the
 *     guard, under eager: StarPU spins (reproduced 3 out of 3 times when
 *     this test was written); taskgrad's watchdog must end the child with
 *     exit status 2 and its message within the time limit.  A child that
 *     finishes (StarPU did not stall this time) is reported, not failed:
 *     what is tested is that the run never hangs;
 *  3. "roomy": through tg_submit with 4 MiB: accepted, finishes, and the
 *     accumulator holds the exact sum (small integers in floats).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codelet_common.h"
#include "taskgrad/parallel.h"
#include "taskgrad/runtime.h"
#include "taskgrad/tensor.h"
#include "testutil.h"

#define ROWS 175
#define COLS 1024 /* 175 x 1024 floats: 700 KiB */
#define NIN 8
#define NTASKS 64
#define LIMIT_S 60

static void add_cpu(void *buffers[], void *cl_arg) {
  (void)cl_arg;
  float *acc = TG_PTR(buffers[0]);
  const float *x = TG_PTR(buffers[1]);
  for (int r = 0; r < TG_ROWS(buffers[0]); r++)
    for (int c = 0; c < TG_COLS(buffers[0]); c++)
      acc[(size_t)r * TG_LD(buffers[0]) + c] += x[(size_t)r * TG_LD(buffers[1]) + c];
}
extern struct starpu_codelet tg_add_cl;
TG_OPENCL_ENTRY(add, add_cpu)
struct starpu_codelet tg_add_cl = {
    .cpu_funcs = {add_cpu},
    TG_OPENCL_IMPL(add)
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "test_add",
};

/* A reduction target created, used and freed again and again: the guard
 * counts live handles only (tg_device_memory_forget), so four rounds fit
 * in a budget that two accumulators at once would exceed. */
static int churn(void) {
  tg_tensor acc, in;
  float *buf = malloc(sizeof(float) * ROWS * COLS);
  if (!buf || tg_tensor_alloc(&in, ROWS, COLS, TG_F32) != 0) return 1;
  for (int i = 0; i < ROWS * COLS; i++) buf[i] = 1.0f;
  if (tg_tensor_write(&in, buf) != 0) return 1;
  uint32_t shape = 0;
  for (int round = 0; round < 4; round++) {
    memset(buf, 0, sizeof(float) * ROWS * COLS);
    if (tg_tensor_alloc(&acc, ROWS, COLS, TG_F32) != 0 || tg_tensor_write(&acc, buf) != 0)
      return 1;
    tg_tensor_enable_reduction(&acc);
    for (int t = 0; t < 4; t++) {
      starpu_data_handle_t h[2] = {acc.handle, in.handle};
      enum starpu_data_access_mode m[2] = {STARPU_REDUX, STARPU_R};
      if (tg_submit(&tg_add_cl, 2, h, m, &shape, sizeof shape, 0, NULL) != 0) {
        printf("round %d, submission %d refused: %s\n", round, t, tg_last_error());
        fflush(stdout);
        _exit(3);
      }
    }
    if (tg_tensor_read(&acc, buf) != 0 || buf[0] != 4.0f || buf[ROWS * COLS - 1] != 4.0f)
      return 1;
    tg_tensor_free(&acc);
  }
  printf("finished: 4 rounds of a freed and re-created reduction target\n");
  tg_tensor_free(&in);
  free(buf);
  tg_shutdown();
  return 0;
}

static int child(const char *mode) {
  tg_runtime_config rc = tg_runtime_config_default();
  rc.emulated_devices = 3;
  rc.ncpus = 0;
  rc.sched = strcmp(mode, "raw") == 0 ? "eager" : "dmdar";
  if (tg_init(&rc) != 0) {
    printf("tg_init: %s\n", tg_last_error());
    return strstr(tg_last_error(), "pocl-opencl-icd") ? 77 : 1;
  }
  if (strcmp(mode, "churn") == 0) return churn();
  tg_tensor acc, in[NIN];
  float *ones = malloc(sizeof(float) * ROWS * COLS);
  float *out = calloc((size_t)ROWS * COLS, sizeof(float));
  if (!ones || !out || tg_tensor_alloc(&acc, ROWS, COLS, TG_F32) != 0 ||
      tg_tensor_write(&acc, out) != 0)
    return 1;
  for (int i = 0; i < ROWS * COLS; i++) ones[i] = 1.0f;
  for (int i = 0; i < NIN; i++)
    if (tg_tensor_alloc(&in[i], ROWS, COLS, TG_F32) != 0 || tg_tensor_write(&in[i], ones) != 0)
      return 1;
  tg_tensor_enable_reduction(&acc);
  uint32_t shape = 0;
  for (int t = 0; t < NTASKS; t++) {
    starpu_data_handle_t h[2] = {acc.handle, in[t % NIN].handle};
    enum starpu_data_access_mode m[2] = {STARPU_REDUX, STARPU_R};
    int r = strcmp(mode, "raw") == 0
                ? starpu_task_insert(&tg_add_cl, STARPU_REDUX, h[0], STARPU_R, h[1], 0)
                : tg_submit(&tg_add_cl, 2, h, m, &shape, sizeof shape, 0, NULL);
    if (r != 0) {
      printf("submission %d refused: %s\n", t, tg_last_error());
      fflush(stdout);
      _exit(r == -ENOSPC ? 3 : 1); /* tasks in flight: no orderly shutdown */
    }
  }
  if (tg_tensor_read(&acc, out) != 0) return 1;
  int bad = 0;
  for (int i = 0; i < ROWS * COLS; i++) bad += out[i] != (float)NTASKS;
  printf("finished: accumulator %s (first %g, expected %d)\n", bad ? "WRONG" : "exact",
         (double)out[0], NTASKS);
  for (int i = 0; i < NIN; i++) tg_tensor_free(&in[i]);
  tg_tensor_free(&acc);
  free(ones);
  free(out);
  tg_shutdown();
  return bad ? 1 : 0;
}

/* Runs "self child MODE" with STARPU_LIMIT_OPENCL_MEM=limit; its exit
 * status, or -1 when it had to be killed after LIMIT_S seconds. */
static int run(const char *mode, const char *limit, double *secs) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    setenv("STARPU_LIMIT_OPENCL_MEM", limit, 1);
    setenv("STARPU_WATCHDOG_TIMEOUT", "3000000", 1); /* 3 s */
    execl("/proc/self/exe", "test_emulated_livelock", "child", mode, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  for (int waited = 0;; waited++) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      perror("waitpid");
      exit(1);
    }
    if (waited >= LIMIT_S * 10) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(100000);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "child") == 0) return child(argv[2]);
  double s = 0;
  int rc = run("guarded", "2", &s);
  if (rc == 77) {
    printf("SKIP: no PoCL device\n");
    return TG_TEST_SKIP;
  }
  CHECK(rc == 3, "guarded, 2 MiB: exit status %d, expected 3 (refused at submission)", rc);
  printf("guarded, 2 MiB: exit status %d after %.1f s\n", rc, s);

  rc = run("raw", "2", &s);
  CHECK(rc == 0 || rc == 2, "raw, 2 MiB: exit status %d (-1: still running after %d s)", rc,
        LIMIT_S);
  printf("raw, 2 MiB, eager: %s (exit status %d after %.1f s)\n",
         rc == 2 ? "StarPU stalled, the watchdog ended the run"
                 : rc == 0 ? "finished without stalling" : "failed",
         rc, s);

  rc = run("roomy", "4", &s);
  CHECK(rc == 0, "roomy, 4 MiB: exit status %d, expected 0", rc);
  printf("roomy, 4 MiB: exit status %d after %.1f s\n", rc, s);

  rc = run("churn", "4", &s);
  CHECK(rc == 0, "churn, 4 MiB: exit status %d, expected 0 (a freed REDUX target still "
        "counted?)", rc);
  printf("churn, 4 MiB: exit status %d after %.1f s\n", rc, s);
  return tg_test_finish("test_emulated_livelock");
}
