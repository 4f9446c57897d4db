/*
 * The worker-ceiling note (src/env_check.c): said once when the machine has
 * more cores than StarPU's STARPU_MAXCPUS and the caller did not ask for
 * fewer workers; silent otherwise.  (The machines CI runs on have fewer
 * cores than Debian's ceiling of 4, so the decision is tested here rather
 * than through the CLI.)  The CPU workers started beside CUDA workers by
 * default (tg_cpus_beside_gpus; no GPU here either).  Also tg_check_env's
 * list of StarPU 1.4's own numeric variables.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "env_check.h"
#include "taskgrad/starpu_version.h"
#include "taskgrad/runtime.h"
#include "testutil.h"

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
    int rc = tg_check_env();
#if TG_STARPU_AT_LEAST(1, 4)
    CHECK(rc == -EINVAL && strstr(tg_last_error(), only14[i][0]), "%s=%s refused with 1.4: %d",
          only14[i][0], only14[i][1], rc);
#else
    CHECK(rc == 0, "%s=%s passed with 1.3: %d", only14[i][0], only14[i][1], rc);
#endif
    unsetenv(only14[i][0]);
  }
  CHECK(tg_check_env() == 0, "nothing set");
  return tg_test_finish("test_env_check");
}
