/* libFuzzer target: tg_idx_read on arbitrary bytes (plain or gzip'd: the
 * reader goes through gzopen, which reads both). */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "taskgrad/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_input(data, size);
  tg_idx idx;
  int rc = tg_idx_read(path, &idx);
  if (rc == 0) {
    /* touch every byte so that ASan checks the announced size */
    size_t n = (size_t)idx.dims[0] * (size_t)idx.dims[1] * (size_t)idx.dims[2];
    volatile uint8_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += idx.data[i];
    (void)sum;
    if (idx.ndims != 1 && idx.ndims != 3) abort();
  } else if (idx.data != NULL) {
    abort(); /* a failed read must leave nothing allocated */
  }
  tg_idx_free(&idx);
  return 0;
}
