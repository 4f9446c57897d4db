/* libFuzzer target: tg_mlp_checkpoint_load (MLP training checkpoint,
 * <dir>/mlp-checkpoint.bin).  One temporary directory per process (mkdtemp);
 * each input is written as its mlp-checkpoint.bin.  An accepted file must
 * describe a valid shape and hold all its arrays. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "taskgrad/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *dir = fuzz_write_dir_input(TG_MLP_CHECKPOINT_FILE, data, size);
  tg_mlp_checkpoint c;
  if (tg_mlp_checkpoint_load(dir, &c) == 0) {
    if (c.nlayers < 1 || c.nlayers > TG_MLP_CHECKPOINT_MAX_LAYERS || !c.params || !c.state1 ||
        (c.optimizer == 0) != (c.state2 != NULL))
      abort();
    size_t n = tg_mlp_checkpoint_numel(&c);
    volatile float sum = 0; /* every element readable (ASan) */
    for (size_t i = 0; i < n; i++) sum += c.params[i] + c.state1[i] + (c.state2 ? c.state2[i] : 0);
    (void)sum;
    tg_mlp_checkpoint_free(&c);
  }
  return 0;
}
