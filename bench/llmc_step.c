/*
 * llm.c's CPU trainer (train_gpt2.c, compiled in with its TESTING switch so
 * that its own main is left out) timed on one model and one batch, for the
 * CPU comparison table (bench/cpu-frameworks.sh builds this against an
 * llm.c checkout, with llm.c's own flags: -Ofast -march=native -fopenmp):
 *   llmc_step MODEL B T STEPS WARMUP
 * MODEL is an llm.c v3 checkpoint (taskgrad init gpt writes one); the batch
 * is random tokens (seeded), the same each step.  One step is forward,
 * zero_grad, backward and update (AdamW lr 1e-4, weight decay 0.01), as in
 * llm.c's training loop.  Prints the median step time.
 */
#define TESTING
#include "train_gpt2.c"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: llmc_step MODEL B T STEPS WARMUP\n");
    return 2;
  }
  int B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]), warmup = atoi(argv[5]);
  if (B <= 0 || T <= 0 || steps <= 0 || steps > 1000 || warmup < 0) {
    fprintf(stderr, "llmc_step: bad B, T, STEPS or WARMUP\n");
    return 2;
  }
  GPT2 model;
  gpt2_build_from_checkpoint(&model, argv[1]);
  int *tokens = mallocCheck(sizeof(int) * ((size_t)B * T + 1));
  uint64_t rng = 7; /* xorshift64*, as llm.c's sampler (left out with its main) */
  for (int i = 0; i < B * T + 1; i++) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    tokens[i] = (int)(((rng * 0x2545F4914F6CDD1Dull) >> 32) % (uint64_t)model.config.vocab_size);
  }
  double ms[1000];
  for (int k = 0; k < warmup + steps; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gpt2_forward(&model, tokens, tokens + 1, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, k + 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (k >= warmup) ms[k - warmup] = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
  }
  qsort(ms, steps, sizeof ms[0], cmp_double);
  printf("llm.c loss %f\n", model.mean_loss);
  printf("llm.c median step ms: %.1f\n", ms[steps / 2]);
  gpt2_free(&model);
  free(tokens);
  return 0;
}
