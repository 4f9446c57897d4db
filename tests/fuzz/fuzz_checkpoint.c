/* libFuzzer target: tg_checkpoint_load (training checkpoint,
 * <dir>/checkpoint.bin).  One temporary directory per process (mkdtemp);
 * each input is written as its checkpoint.bin. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "taskgrad/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *dir = fuzz_write_dir_input(TG_CHECKPOINT_FILE, data, size);
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
