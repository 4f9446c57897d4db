/*
 * taskgrad's one pseudo-random generator: splitmix64 (Steele, Lea and Flood),
 * small, well mixed and reproducible from a 64-bit state.  Data order
 * (src/loader.c), GPT initialisation (src/gpt_model.c) and MLP
 * initialisation (graphs/mlp.c) all draw from it, so that a seed means the
 * same thing everywhere.  Base layer, header only; public so that the CLI
 * and the tools draw the same sequences (cli/bench_gpt.c,
 * tests/tools/mlp_dump.c) without the library's private headers.
 */
#ifndef TASKGRAD_RNG_H
#define TASKGRAD_RNG_H

#include <stdint.h>

/* The next value of the sequence; advances *state. */
static inline uint64_t tg_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double tg_rng_unit(uint64_t *state) {
  return (double)(tg_splitmix64(state) >> 11) * 0x1.0p-53;
}

#endif
