/*
 * The worker-ceiling note (src/env_check.c): said once when the machine has
 * more cores than StarPU's STARPU_MAXCPUS and the caller did not ask for
 * fewer workers; silent otherwise.  (The machines CI runs on have fewer
 * cores than Debian's ceiling of 4, so the decision is tested here rather
 * than through the CLI.)
 */
#include <string.h>

#include "env_check.h"
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
  return tg_test_finish("test_env_check");
}
