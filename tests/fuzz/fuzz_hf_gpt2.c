/* libFuzzer target: tg_safetensors_gpt2_open / _fill (a Hugging Face GPT-2
 * safetensors file, src/hf_gpt2.c).  The input is written as
 * <dir>/model.safetensors beside a fixed config.json that gives only
 * n_head 1 (it divides any width), so that every input whose tensors make a
 * GPT-2 gets through to the reads; the folder is opened as a user's would
 * be. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "taskgrad/safetensors.h"

static char config_path[4500];

static void config_cleanup(void) {
  if (config_path[0]) unlink(config_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *dir = fuzz_write_dir_input("model.safetensors", data, size);
  if (!config_path[0]) {
    snprintf(config_path, sizeof config_path, "%s/config.json", dir);
    FILE *f = fopen(config_path, "w");
    if (!f || fputs("{\"n_head\": 1}", f) < 0 || fclose(f) != 0) abort();
    atexit(config_cleanup); /* runs before fuzz_common's rmdir */
  }
  tg_gpt_config cfg;
  tg_safetensors_gpt2_reader *r = (tg_safetensors_gpt2_reader *)1; /* must be reset */
  int rc = tg_safetensors_gpt2_open(dir, &cfg, &r);
  if (rc != 0) {
    if (r != NULL) abort();
    return 0;
  }
  if (tg_gpt_config_check(&cfg) != 0) abort();
  size_t sizes[TG_GPT_NPARAMS];
  size_t n = tg_gpt_param_sizes(&cfg, sizes);
  float *buf = malloc(tg_gpt_largest_slice(&cfg) * sizeof *buf);
  if (!buf) abort();
  /* every tensor, slice by slice as the graph reads them, and one range
   * across a layer boundary */
  volatile float sum = 0;
  for (int p = 0; p < TG_GPT_NPARAMS; p++) {
    size_t piece;
    int pieces = tg_gpt_param_slices(&cfg, (tg_gpt_param)p, &piece);
    for (int l = 0; l < pieces; l++)
      if (tg_safetensors_gpt2_fill(r, p, (size_t)l * piece, buf, piece) == 0)
        for (size_t i = 0; i < piece; i++) sum += buf[i];
  }
  if (cfg.num_layers > 1 && sizes[TG_QKVW] >= 2)
    (void)tg_safetensors_gpt2_fill(r, TG_QKVW, sizes[TG_QKVW] / 2 - 1, buf, 2);
  (void)n;
  (void)sum;
  free(buf);
  tg_safetensors_gpt2_close(r);
  return 0;
}
