/* Writes the seed corpus of fuzz_checkpoint (tests/fuzz/corpus/fuzz_checkpoint)
 * with the real writer, tg_checkpoint_save, plus broken variants:
 *   cc -Iinclude $(pkg-config --cflags starpu-1.3) tests/fuzz/make_checkpoint_seeds.c \
 *      src/checkpoint.c src/llmc.c src/error.c -lz -lm -o /tmp/seeds && /tmp/seeds DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "taskgrad/checkpoint.h"
#include "taskgrad/runtime.h"

static unsigned char *slurp(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END); *n = ftell(f); rewind(f);
  unsigned char *b = malloc((size_t)*n + 1);
  if (fread(b, 1, (size_t)*n, f) != (size_t)*n) { fclose(f); free(b); return NULL; }
  fclose(f);
  return b;
}

static void put(const char *dir, const char *name, const unsigned char *b, long n) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(b, 1, (size_t)n, f) != (size_t)n || fclose(f)) { perror(p); exit(1); }
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: %s OUTDIR\n", argv[0]); return 2; }
  const tg_gpt_config cfgs[2] = {{1, 1, 1, 1, 1, 1}, {4, 5, 1, 2, 4, 8}};
  for (int k = 0; k < 2; k++) {
    tg_checkpoint c;
    if (tg_checkpoint_alloc(&c, &cfgs[k]) != 0) { fprintf(stderr, "%s\n", tg_last_error()); return 1; }
    c.step = 7; c.batches = 3; c.B = 2; c.T = 4; c.data_order = k; c.data_seed = 11; c.rng_seed = 5;
    size_t sizes[TG_GPT_NPARAMS], n = tg_gpt_param_sizes(&cfgs[k], sizes);
    for (size_t i = 0; i < n; i++) { c.params[i] = 0.01f * (float)i; c.m[i] = 0.001f; c.v[i] = 1e-6f; }
    if (tg_checkpoint_save(argv[1], &c) != 0) { fprintf(stderr, "%s\n", tg_last_error()); return 1; }
    tg_checkpoint_free(&c);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", argv[1], TG_CHECKPOINT_FILE);
    long len;
    unsigned char *b = slurp(p, &len);
    if (!b) { perror(p); return 1; }
    unlink(p);
    const char *tag = k ? "small" : "tiny";
    char name[64];
    snprintf(name, sizeof name, "%s_ok", tag); put(argv[1], name, b, len);
    snprintf(name, sizeof name, "%s_truncated", tag); put(argv[1], name, b, len - 7);
    snprintf(name, sizeof name, "%s_header_only", tag); put(argv[1], name, b, len > 64 ? 64 : len);
    b[len / 2] ^= 0x5a; /* corrupt the payload (a checksum, if any, must catch it) */
    snprintf(name, sizeof name, "%s_flipped", tag); put(argv[1], name, b, len);
    b[len / 2] ^= 0x5a;
    b[0] ^= 0xff;
    snprintf(name, sizeof name, "%s_bad_magic", tag); put(argv[1], name, b, len);
    free(b);
  }
  return 0;
}
