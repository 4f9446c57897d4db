/*
 * tg_safetensors_dump: writes one randomly initialised GPT-2 model
 * (tg_gpt_init_params) both as an llm.c checkpoint and as a safetensors
 * file (tg_safetensors_write_gpt2), for tests/test_safetensors.py.
 *
 *   tg_safetensors_dump L C NH maxT V Vp SEED LLMC_OUT SAFETENSORS_OUT [perturb]
 *
 * "perturb" replaces GPT-2's LayerNorm weights 1 and biases 0 by
 * 1 + 0.1 sin(k) and 0.02 cos(k) (k the index in the tensor plus 1000 times
 * its number), so that a forward pass built from the files uses them all.
 *
 * Exit status: 0 ok, 1 a write failed (tg_last_error() on stderr), 2 bad
 * command line or configuration.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "taskgrad/llmc.h"
#include "taskgrad/runtime.h"
#include "taskgrad/safetensors.h"

int main(int argc, char **argv) {
  if (argc != 10 && !(argc == 11 && !strcmp(argv[10], "perturb"))) {
    fprintf(stderr, "usage: %s L C NH maxT V Vp SEED LLMC_OUT SAFETENSORS_OUT "
            "[perturb]\n",
            argv[0]);
    return 2;
  }
  tg_gpt_config c = {.num_layers = atoi(argv[1]), .channels = atoi(argv[2]),
                     .num_heads = atoi(argv[3]), .max_seq_len = atoi(argv[4]),
                     .vocab_size = atoi(argv[5]),
                     .padded_vocab_size = atoi(argv[6])};
  const uint64_t seed = strtoull(argv[7], NULL, 10);
  if (tg_gpt_config_check(&c) < 0) {
    fprintf(stderr, "%s\n", tg_last_error());
    return 2;
  }
  size_t sizes[TG_GPT_NPARAMS];
  const size_t n = tg_gpt_param_sizes(&c, sizes);
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  tg_gpt_init_params(&c, seed, p);
  if (argc == 11) {
    float *q = p;
    for (int t = 0; t < TG_GPT_NPARAMS; t++) {
      const int is_lnw = t == TG_LN1W || t == TG_LN2W || t == TG_LNFW;
      const int is_bias = t == TG_LN1B || t == TG_LN2B || t == TG_LNFB ||
                          t == TG_QKVB || t == TG_ATTPROJB || t == TG_FCB ||
                          t == TG_FCPROJB;
      for (size_t k = 0; k < sizes[t]; k++) {
        const double x = (double)k + 1000.0 * t;
        if (is_lnw) q[k] = (float)(1.0 + 0.1 * sin(x));
        else if (is_bias) q[k] = (float)(0.02 * cos(x));
      }
      q += sizes[t];
    }
  }
  int rc = 0;
  if (tg_llmc_model_write(argv[8], &c, p) < 0 ||
      tg_safetensors_write_gpt2(argv[9], &c, p) < 0) {
    fprintf(stderr, "%s\n", tg_last_error());
    rc = 1;
  }
  free(p);
  return rc;
}
