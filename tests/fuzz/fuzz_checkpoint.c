/* libFuzzer target: tg_checkpoint_load (training checkpoint,
 * <dir>/checkpoint.bin).  One temporary directory per process (mkdtemp);
 * each input is written as its checkpoint.bin. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "taskgrad/checkpoint.h"

static char dir[4096], file[4200];

static void cleanup(void) {
  if (file[0]) unlink(file);
  if (dir[0]) rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tg-fuzz-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { perror("fuzz: mkdtemp"); abort(); }
    snprintf(file, sizeof file, "%s/%s", dir, TG_CHECKPOINT_FILE);
    atexit(cleanup);
  }
  FILE *f = fopen(file, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror("fuzz: writing the input");
    abort();
  }
  tg_checkpoint c;
  int rc = tg_checkpoint_load(dir, &c);
  if (rc == 0) {
    if (tg_gpt_config_check(&c.cfg) != 0) abort();
    size_t sizes[TG_GPT_NPARAMS];
    size_t n = tg_gpt_param_sizes(&c.cfg, sizes);
    volatile float sum = 0;
    for (size_t i = 0; i < n; i++) sum += c.params[i] + c.m[i] + c.v[i];
    (void)sum;
    tg_checkpoint_free(&c);
  }
  return 0;
}
