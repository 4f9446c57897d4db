/* libFuzzer target: tg_llmc_model_read (llm.c GPT-2 fp32 checkpoint). */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "taskgrad/llmc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_input(data, size);
  tg_gpt_config cfg;
  float *params = (float *)1; /* the reader must reset it */
  int rc = tg_llmc_model_read(path, &cfg, &params);
  if (rc == 0) {
    if (tg_gpt_config_check(&cfg) != 0) abort();
    size_t sizes[TG_GPT_NPARAMS];
    size_t n = tg_gpt_param_sizes(&cfg, sizes);
    /* the file holds exactly the header and n floats */
    if (n == 0 || 1024 + n * sizeof(float) != size) abort();
    volatile float sum = 0;
    for (size_t i = 0; i < n; i++) sum += params[i];
    (void)sum;
  } else if (params != NULL) {
    abort();
  }
  free(params);
  return 0;
}
