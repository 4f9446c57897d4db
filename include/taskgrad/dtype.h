/*
 * taskgrad element types, in a header of their own so that the kernel
 * headers (no StarPU types, some compiled by nvcc) can name them without
 * pulling in starpu.h through tensor.h.
 */
#ifndef TASKGRAD_DTYPE_H
#define TASKGRAD_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tg_dtype {
  TG_F32 = 0,  /* float */
  TG_I32 = 1,  /* int32_t: labels */
  TG_BF16 = 2, /* bfloat16, uint16_t storage (see precision.h) */
  TG_F16 = 3,  /* IEEE binary16, uint16_t storage (see precision.h) */
} tg_dtype;

/* bytes per element (0 for an unknown value) and a short name ("bf16") */
size_t tg_dtype_size(tg_dtype dtype);
const char *tg_dtype_name(tg_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
