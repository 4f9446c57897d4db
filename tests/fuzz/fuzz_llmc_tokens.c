/* libFuzzer target: tg_llmc_tokens_read (llm.c uint16 token file), without
 * a vocabulary check and with GPT-2's and a tiny vocabulary. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "taskgrad/llmc.h"

static void check(const char *path, int vocab, size_t size) {
  uint16_t *tokens = (uint16_t *)1; /* the reader must reset it */
  size_t n = 12345;
  int rc = tg_llmc_tokens_read(path, vocab, &tokens, &n);
  if (rc == 0) {
    if (n == 0 || 1024 + n * sizeof(uint16_t) != size) abort();
    for (size_t i = 0; i < n; i++)
      if (vocab > 0 && tokens[i] >= vocab) abort();
  } else if (tokens != NULL || n != 0) {
    abort();
  }
  free(tokens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_input(data, size);
  check(path, 0, size);
  check(path, 50257, size);
  check(path, 7, size);
  return 0;
}
